"""Enumeration speed of the shipped design spaces and the presets' figures vs published ones.

Run by hand: ``.venv/bin/python benchmarks/bench_arch_space.py``.
"""

import time

from arch_space.area import area_mm2
from arch_space.cost import device_cost_usd, die_cost_usd
from arch_space.power import tdp_w
from arch_space.presets import PUBLISHED, preset, preset_names
from arch_space.space import Space


def main() -> None:
    for name in ("tiny", "default"):
        t0 = time.perf_counter()
        space = Space.named(name)
        designs = list(space.enumerate())
        dt = time.perf_counter() - t0
        summ = space.summary()
        print(
            f"space {name}: {len(designs)} designs of {summ.grid_points} grid points in {dt:.2f} s "
            f"({summ.grid_points / dt:,.0f} grid points/s); budget {summ.budget_mm2:.1f} mm2, "
            f"areas {summ.area_mm2_min:.1f}..{summ.area_mm2_max:.1f} mm2"
        )
    for name in preset_names():
        acc = preset(name)
        flops, die, watts = PUBLISHED.get(name, (None, None, None))
        line = f"{name:8s} peak {acc.peak_flops / 1e12:6.1f} TFLOP/s"
        if flops:
            line += f" ({(acc.peak_flops / flops - 1):+.1%})"
        line += f"  area {area_mm2(acc):6.1f} mm2"
        if die:
            line += f" ({area_mm2(acc) / die - 1:+.1%})"
        line += f"  TDP-like {tdp_w(acc):5.0f} W"
        if watts:
            line += f" ({tdp_w(acc) / watts - 1:+.1%})"
        line += f"  die ${die_cost_usd(acc):5.0f}  device ${device_cost_usd(acc):5.0f}"
        print(line)


if __name__ == "__main__":
    main()
