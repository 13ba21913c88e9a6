"""Print the design residual and the stored fits it comes from (arch_space.perf.residual).

Run: ``.venv/bin/python benchmarks/design_residual.py``
"""

from __future__ import annotations

from arch_space.perf.residual import clock_residuals, design_clock_residual

__all__: list[str] = []


def main() -> None:
    print("preset  fitted clock  power-capped clock  residual")
    for r in clock_residuals():
        print(
            f"{r.preset:6}  {r.fitted_clock_fraction:12.3f}"
            f"  {r.power_clock_fraction:18.3f}  {r.residual:8.3f}"
        )
    print(f"design residual (mean, at most 1): {design_clock_residual():.3f}")


if __name__ == "__main__":
    main()
