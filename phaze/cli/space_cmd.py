"""``phaze space``: list the shipped design spaces; show one: its budget, area range and
designs per value."""

from __future__ import annotations

from typing import Any

import click

from arch_space.space import PARAMETERS, Space, load_space, space_names
from phaze.cli._render import echo_json, table
from phaze_common.units import fmt_quantity

__all__ = ["space"]

_MIB = 2**20
_GIB = 2**30

# How each parameter's values read in the text view (JSON keeps SI units).
_DISPLAY = {
    "glb_bytes": ("glb MiB", _MIB),
    "hbm_bytes": ("hbm GiB", _GIB),
    "hbm_bandwidth_bytes_per_s": ("hbm GB/s", 10**9),
}


@click.group()
def space() -> None:
    """Accelerator design spaces: the shipped ones (default, tiny, reticle) or a TOML file."""


def _space_doc(s: Space) -> dict[str, Any]:
    summ = s.summary()
    return {
        "name": s.name,
        "designs": summ.designs,
        "grid_points": summ.grid_points,
        "budget_mm2": summ.budget_mm2,
        "area_mm2_min": summ.area_mm2_min,
        "area_mm2_max": summ.area_mm2_max,
        "power_budget_w": summ.power_budget_w,
        "power_w_min": summ.power_w_min,
        "power_w_max": summ.power_w_max,
        "power_capped_designs": summ.capped_designs,
        "clock_hz_min": summ.clock_hz_min,
        "area_fraction_min": s.area_fraction_min,
        "area_fraction_max": s.area_fraction_max,
        "keep_single_core": s.keep_single_core,
        "vc_lanes_tied_to_tc_cols": not s.vc_lanes,
        "clock_hz": s.clock_hz,
        "node_nm": s.node_nm,
        "bytes_per_element": s.bytes_per_element,
        "counts": {p: dict(summ.counts[p]) for p in PARAMETERS},
        "format_sets": [
            {
                "formats": f.formats,
                "designs": f.designs,
                "lane_area_fraction": f.lane_area_fraction,
                "area_mm2_min": f.area_mm2_min,
                "area_mm2_max": f.area_mm2_max,
            }
            for f in summ.format_sets
        ],
    }


@space.command("show")
@click.argument("spec", metavar="[NAME|FILE.toml]", default="default")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def show(spec: str, as_json: bool) -> None:
    """Show a space (default: the reference's): designs, budget, areas, designs per value."""
    s = load_space(spec)
    s.check_not_empty()  # an empty space is an error naming the rules that emptied it
    doc = _space_doc(s)
    if as_json:
        echo_json(doc)
        return
    lines = [
        f"space {doc['name'] or spec}: {doc['designs']} designs of {doc['grid_points']} grid points",
        f"budget {doc['budget_mm2']:.1f} mm2; kept {doc['area_fraction_min']:.0%}.."
        f"{doc['area_fraction_max']:.0%} of it"
        + (" (single-core designs kept at any size)" if doc["keep_single_core"] else ""),
        f"areas {doc['area_mm2_min']:.1f}..{doc['area_mm2_max']:.1f} mm2; node {doc['node_nm']} nm, "
        f"clock {doc['clock_hz'] / 1e9:g} GHz"
        + ("; vector width = tensor-core width" if doc["vc_lanes_tied_to_tc_cols"] else ""),
        f"power under tensor load {fmt_quantity(doc['power_w_min'], 'W')}.."
        f"{fmt_quantity(doc['power_w_max'], 'W')} of a {fmt_quantity(doc['power_budget_w'], 'W')} "
        f"budget; {doc['power_capped_designs']} designs power-capped to fit it (clocks down to "
        f"{fmt_quantity(doc['clock_hz_min'], 'Hz')})",
        "",
    ]
    rows = []
    for p in PARAMETERS:
        label, scale = _DISPLAY.get(p, (p, 1))
        counts = doc["counts"][p]
        rows.append([label, "  ".join(f"{v / scale:g}:{n}" for v, n in counts.items())])
    lines.append(table(rows, ["parameter", "value:designs"]))
    # the tensor cores' format sets: lanes beyond bf16 add area per bf16 MAC of the arrays
    formats = [
        [
            f["formats"],
            f["designs"],
            f"+{f['lane_area_fraction']:.1%}",
            f"{f['area_mm2_min']:.1f}..{f['area_mm2_max']:.1f}" if f["designs"] else "-",
        ]
        for f in doc["format_sets"]
    ]
    lines += ["", table(formats, ["formats", "designs", "MAC area", "areas mm2"])]
    click.echo("\n".join(lines))


@space.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def list_cmd(as_json: bool) -> None:
    """List the shipped spaces: designs, area range, area and power budgets, node."""
    docs = [_space_doc(Space.named(n)) for n in space_names()]
    if as_json:
        echo_json({"spaces": docs})
        return
    rows = [
        [
            d["name"],
            d["designs"],
            f"{d['area_mm2_min']:.0f}..{d['area_mm2_max']:.0f}",
            f"{d['budget_mm2']:.0f}",
            fmt_quantity(d["power_budget_w"], "W"),
            f"{d['node_nm']} nm",
            fmt_quantity(d["clock_hz"], "Hz"),
        ]
        for d in docs
    ]
    headers = ["space", "designs", "area mm2", "budget mm2", "power budget", "node", "clock"]
    click.echo(table(rows, headers))
