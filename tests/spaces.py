"""Design spaces of the sweep tests, as TOML: small, and every design kept whatever its area."""

from __future__ import annotations

from collections.abc import Sequence


def space_toml(
    name: str,
    *,
    num_tc: Sequence[int],
    tc_rows: Sequence[int],
    tc_cols: Sequence[int] = (128,),
    glb_mib: Sequence[int] = (16,),
) -> str:
    """A [space] table varying the tensor cores and buffer; one vector core, 32 GiB HBM."""

    def toml_list(xs: Sequence[int]) -> str:
        return "[" + ", ".join(str(x) for x in xs) + "]"

    return f"""\
[space]
name = "{name}"
num_tc = {toml_list(num_tc)}
tc_rows = {toml_list(tc_rows)}
tc_cols = {toml_list(tc_cols)}
num_vc = [1]
glb_mib = {toml_list(glb_mib)}
hbm_gib = [32]
hbm_bandwidth_bytes_per_s = [1.2e12]
clock_hz = 1.05e9
node_nm = 7
area_fraction_min = 0.0
area_fraction_max = 1.0
keep_single_core = true
"""


# 48 designs built to hold dominated ones: 8-row arrays (a tenth of the FLOP/s) and 128 MiB
# buffers (dearer, no faster on a small model). With the four default objectives, 18 of them
# are pruned, in both pruning rounds.
PRUNABLE_SPACE = space_toml(
    "prunable", num_tc=(1, 2, 4, 8), tc_rows=(8, 32, 128), tc_cols=(32, 128), glb_mib=(16, 128)
)
