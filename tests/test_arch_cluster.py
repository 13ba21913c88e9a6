"""Cluster validation, link selection and TOML round trip."""

import tomllib

import pytest

from arch_space.accelerator import Cluster
from arch_space.config import cluster_from_mapping, cluster_from_toml, cluster_to_toml
from phaze_common.errors import ConfigError


def test_group_link_picks_intra_or_inter_node():
    c = Cluster(64, devices_per_node=8)
    assert c.nodes == 8
    assert c.group_link(8) == (c.intra_node_bandwidth_bytes_per_s, c.intra_node_latency_s)
    assert c.group_link(16) == (c.inter_node_bandwidth_bytes_per_s, c.inter_node_latency_s)
    assert Cluster(4).nodes == 1


def test_cluster_validation_lists_every_problem():
    with pytest.raises(ConfigError) as e:
        Cluster(2.5, 0, intra_node_bandwidth_bytes_per_s="fast", inter_node_latency_s=-1)
    msg = str(e.value)
    assert "cluster: devices = 2.5 must be a positive integer" in msg
    assert "cluster: devices_per_node = 0 must be a positive integer" in msg
    assert "intra_node_bandwidth_bytes_per_s = 'fast' must be a positive number" in msg
    assert "inter_node_latency_s = -1 must be a number >= 0" in msg
    with pytest.raises(
        ConfigError, match="devices = 12 must be a multiple of devices_per_node = 8"
    ):
        Cluster(12)


def test_cluster_toml_round_trip_and_errors(tmp_path):
    c = Cluster(1024, devices_per_node=4, inter_node_bandwidth_bytes_per_s=50e9)
    assert cluster_from_mapping(tomllib.loads(cluster_to_toml(c))) == c
    f = tmp_path / "cluster.toml"
    f.write_text("[cluster]\ndevice = 16\ndevices_per_node = 0\n")
    with pytest.raises(ConfigError) as e:
        cluster_from_toml(f)
    msg = str(e.value)
    assert "unknown key 'device'; did you mean 'devices'?" in msg
    assert (
        "missing key 'devices'" in msg and "devices_per_node = 0 must be a positive integer" in msg
    )
