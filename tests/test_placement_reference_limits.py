"""The Piper / Phaze-reference instance format refuses sizes above phaze_common.limits, as every
other entry point does: one ConfigError naming each field, the value and the limit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from phaze_common.errors import ConfigError
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH
from placement import parse_reference_instance, read_reference_instance, solve_reference

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "placement_gpt_small.json"


def test_oversize_instances_are_refused_by_the_parser_and_the_solver(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    at_limit = parse_reference_instance({**doc, "maxDevices": MAX_DEVICES})
    assert at_limit.max_devices == MAX_DEVICES
    doc.update(maxDevices=MAX_DEVICES + 1, mbsInBatch=MAX_GLOBAL_BATCH * 10)
    f = tmp_path / "big.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        read_reference_instance(f)
    msg = str(e.value)
    assert f"{f}: maxDevices = {MAX_DEVICES + 1} is above the limit of {MAX_DEVICES}" in msg
    assert f"mbsInBatch = {MAX_GLOBAL_BATCH * 10} is above the limit of {MAX_GLOBAL_BATCH}" in msg
    # an instance built by hand, past the parser, is refused by the solver
    big = dataclasses.replace(at_limit, mbs_in_batch=MAX_GLOBAL_BATCH + 1)
    with pytest.raises(ConfigError, match="mbsInBatch = 1000001 is above the limit"):
        solve_reference(big)
