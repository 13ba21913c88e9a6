"""Fit the two calibrated area constants so the A100 and H100 dies come out at their sizes.

Run: ``.venv/bin/python benchmarks/fit_area.py``

A tensor core's area is its MACs (Horowitz's datapath scaled by logic density), a fixed part
per core (``core_fixed_area_mm2``: sequencer, instruction issue, DMA port) and the structures
that move operands into and results out of its array (``operand_port_area_um2`` per element
per cycle: ``rows`` inputs and ``cols`` outputs of a ``rows x cols`` array; on a GPU the
register-file and shared-memory ports, operand collectors and crossbars of the SM, on a
systolic array only its edge buffers). Neither has a published measurement, so both are
fitted at 7 nm on two dies (two equations, two unknowns; the made die is linear in each) and
scaled to the other nodes by tech.toml's logic area factors. The die a published size
measures is the made die (``cost.made_die``): every physical core, the spare ones of a
harvested chip included (A100 128 SMs, H100 144). The V100 and B200 dies and the TPU v4's
"<400 mm2" bound are held out. The values printed go into ``arch_space/data/tech.toml``.
"""

from __future__ import annotations

from arch_space import preset, tech_node
from arch_space.area import area_mm2
from arch_space.cost import made_die
from arch_space.linear_fit import fit_linear

__all__: list[str] = []

# Logic area factors relative to 45 nm (tech.toml header: 3.33 MTr/mm2 over each node's
# density; 12 nm is 16 nm less TSMC 12FFC's 20 %).
AREA_FACTOR = {28: 0.256, 16: 0.1153, 12: 0.1153 * 0.8, 7: 0.0365, 5: 0.0241, 3: 0.01545}
FIT = {"a100": 826.0, "h100": 814.0}
HELD_OUT = {"v100": 815.0, "b200": 800.0}
BOUND = {"tpuv4": 400.0}  # Jouppi et al.: "<400 mm2", a bound, not a figure


def _made_mm2(name: str, fixed_mm2: float, port_um2: float) -> float:
    acc = preset(name)
    r = AREA_FACTOR[acc.node_nm] / AREA_FACTOR[7]
    tech = tech_node(
        acc.node_nm,
        {"core_fixed_area_mm2": fixed_mm2 * r, "operand_port_area_um2": port_um2 * r},
    )
    return made_die(acc, tech=tech)[0]


def fit() -> tuple[float, float]:
    """(core_fixed_area_mm2, operand_port_area_um2) at 7 nm putting the FIT dies at size."""
    fixed, port = fit_linear(FIT, lambda name, x: _made_mm2(name, *x), 2)
    return fixed, port


def main() -> None:
    fixed, port = fit()
    print(f"7 nm: core_fixed_area_mm2 = {fixed:.4f}, operand_port_area_um2 = {port:.0f}")
    for node, factor in AREA_FACTOR.items():
        r = factor / AREA_FACTOR[7]
        print(f"  node {node:>2} nm: core fixed {fixed * r:.4f} mm2, port {port * r:.0f} um2")
    print("made die (every physical core) with the shipped tech.toml, published die:")
    for name, mm2 in {**FIT, **HELD_OUT}.items():
        role = "fit" if name in FIT else "held out"
        made = made_die(preset(name))[0]
        print(f"  {name:6} {role:8} {made:6.0f} mm2 vs {mm2:4.0f} ({made / mm2 - 1:+.1%})")
    for name, bound in BOUND.items():
        made = made_die(preset(name))[0]
        print(f"  {name:6} held out {made:6.0f} mm2 vs < {bound:.0f} (bound)")
    print(f"  ref-max (the default space's area budget) {area_mm2(preset('ref-max')):.0f} mm2")


if __name__ == "__main__":
    main()
