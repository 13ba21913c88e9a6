"""Fit the two per-MAC energies beside the arithmetic so GEMMs draw their boards' power.

Run: ``.venv/bin/python benchmarks/calibrate_energy.py``

A board's power limit is what it draws under dense tensor load (A100 SXM: 400 W, the
``nvidia-smi`` default power limit; TPU v4: 192 W, Google's measured maximum). The op model's
arithmetic, buffer, HBM and leakage energy reach about a third of that; the rest is what a
real chip spends per MAC beside the multiply: control and clocking (``control_pj_per_mac``)
and the delivery of operands into the array (``operand_pj_per_byte``, ``rows + cols``
elements per cycle of a ``rows x cols`` array, so small GPU tensor cores pay ~8x more per
MAC than TPU systolic arrays). Both are fitted at 7 nm on these two chips (two equations, two
unknowns; the GEMM probe's power without the board limiter is linear in each) and scaled to the other nodes by the
node energy factors of tech.toml's header. The H100 SXM (700 W) is the held-out check; the
values printed go into ``arch_space/data/tech.toml``.
"""

from __future__ import annotations

from arch_space import preset, tech_node
from arch_space.linear_fit import fit_linear
from arch_space.power import gemm_power_w, memory_bound_power_w, unlimited_gemm_power_w

__all__: list[str] = []

# Stillmaker & Baas node energy factors relative to 45 nm (tech.toml header); 12 nm is the
# 16 nm factor with TSMC's -25 % power of 12FFC against 16FFC.
NODE_FACTOR = {28: 0.50, 16: 0.30, 12: 0.225, 7: 0.16, 5: 0.12, 3: 0.09}
FIT = {"a100": 400.0, "tpuv4": 192.0}
HELD_OUT = {"h100": 700.0, "v100": 300.0}


def _power(name: str, control: float, operand: float) -> float:
    acc = preset(name)
    ratio = NODE_FACTOR[acc.node_nm] / NODE_FACTOR[7]
    over = {"control_pj_per_mac": control * ratio, "operand_pj_per_byte": operand * ratio}
    return unlimited_gemm_power_w(acc, tech_node(acc.node_nm, over))


def fit() -> tuple[float, float]:
    """(control pJ/MAC, operand pJ/byte) at 7 nm putting the FIT chips' GEMMs at their power."""
    control, operand = fit_linear(FIT, lambda name, x: _power(name, *x), 2)
    return control, operand


def main() -> None:
    control, operand = fit()
    print(f"7 nm: control_pj_per_mac = {control:.4f}, operand_pj_per_byte = {operand:.4f}")
    for node, factor in NODE_FACTOR.items():
        r = factor / NODE_FACTOR[7]
        print(
            f"  node {node:>2} nm: control {control * r:.3f} pJ/MAC, operand {operand * r:.3f} pJ/B"
        )
    print("GEMM probe power without the board limiter (shipped tech.toml), published board power:")
    for name, watts in {**FIT, **HELD_OUT}.items():
        acc = preset(name)
        role = "fit" if name in FIT else "held out"
        modelled = unlimited_gemm_power_w(acc)
        print(
            f"  {name:6} {role:8} GEMM {modelled:6.0f} W vs {watts:5.0f} W"
            f" ({modelled / watts - 1:+.1%}; limited to {gemm_power_w(acc):4.0f} W);"
            f" memory-bound {memory_bound_power_w(acc):5.0f} W"
        )


if __name__ == "__main__":
    main()
