"""A model whose weights (serving) or training state alone exceed all the devices' HBM
together is refused up front, saying so, rather than with one layout's shortfall."""

from __future__ import annotations

import pytest

import phaze
from arch_space import Cluster, preset
from phaze_common.errors import Infeasible


def test_serving_names_the_weights_against_all_the_devices_hbm():
    with pytest.raises(Infeasible) as e:
        phaze.serve(
            "llama3-405b", preset("h100"), Cluster(devices=8), input_tokens=1024, output_tokens=128
        )
    reason = e.value.reason
    assert "the weights of llama3-405b alone" in reason, reason
    assert "756 GiB" in reason and "8 x 80 GiB = 640 GiB" in reason, reason
    assert "whatever the layout" in reason and "at least 10 such devices" in reason, reason


def test_a_fixed_serving_layout_gets_the_same_reason():
    with pytest.raises(Infeasible, match="more than the HBM of all 8 devices together"):
        phaze.serve(
            "llama3-405b",
            preset("h100"),
            Cluster(devices=8),
            input_tokens=1024,
            output_tokens=128,
            strategy="t=8,batch=1",
        )


def test_fp8_weights_count_at_their_own_bytes():
    # 406B parameters at fp8's byte (and its scales), not bf16's two: ~380 GiB > 4 x 80 GiB
    with pytest.raises(Infeasible) as e:
        phaze.serve(
            "llama3-405b", preset("h100"), Cluster(devices=4), input_tokens=128,
            output_tokens=16, weight_format="fp8",
        )  # fmt: skip
    assert "(406B parameters, fp8): 382 GiB" in e.value.reason, e.value.reason


def test_training_names_the_state_against_all_the_devices_hbm():
    ev = phaze.evaluate("llama3-405b", preset("h100"), Cluster(devices=8), global_batch=8)
    assert not ev.feasible
    assert ev.reason.startswith("the training state of llama3-405b (406B parameters x 18 B"), (
        ev.reason
    )
    assert "8 x 80 GiB = 640 GiB" in ev.reason and "at least 86 such devices" in ev.reason


def test_the_cli_prints_it_as_one_line(cli_run):
    r = cli_run(
        "serve", "--workload", "llama3-405b", "--arch", "h100", "--devices", "8",
        "--input-tokens", "1024", "--output-tokens", "128",
    )  # fmt: skip
    assert r.exit_code == 3, r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and "whatever the layout" in lines[0], r.output
    assert "the device holds 0" not in r.output
