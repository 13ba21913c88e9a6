"""``phaze arch``: list the accelerator presets and show one design's modelled figures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from arch_space.accelerator import ACCELERATOR_FIELDS, Accelerator
from arch_space.carbon import CarbonParams
from arch_space.config import accelerator_to_toml, load_accelerator, preset_to_toml
from arch_space.cost import CostParams
from arch_space.perf import gemm_report
from arch_space.perf.device import device_profile
from arch_space.presets import NVLINK_BYTES_PER_S, preset, preset_names
from arch_space.summary import describe
from arch_space.tech import tech_node, tech_overrides_from_toml
from phaze.cli._render import echo_json, table, to_jsonable
from phaze_common.limits import MAX_WIDTH
from phaze_common.units import fmt_column, fmt_number, fmt_percent, fmt_quantity

__all__ = ["arch"]

_MIB = 2**20
_GIB = 2**30

_cost_option = click.option(
    "--cost-params",
    type=click.Path(path_type=Path),
    help="TOML overriding the cost constants (layout of arch_space/data/cost.toml).",
)
_tech_option = click.option(
    "--tech-params",
    type=click.Path(path_type=Path),
    help="TOML overriding technology constants ([node.N] tables as in arch_space/data/tech.toml).",
)
_carbon_option = click.option(
    "--carbon-params",
    type=click.Path(path_type=Path),
    help="TOML overriding the carbon constants (layout of arch_space/data/carbon.toml).",
)


def _describe(
    acc: Accelerator, tech_params: Path | None, cost_params: Path | None, carbon_params: Path | None
) -> dict[str, Any]:
    """:func:`describe` with the constants overridden by the user's TOML files, if any."""
    overrides = tech_overrides_from_toml(tech_params) if tech_params else {}
    return describe(
        acc,
        tech=tech_node(acc.node_nm, overrides.get(acc.node_nm)),
        cost=CostParams.from_toml(cost_params) if cost_params else CostParams.default(),
        carbon=CarbonParams.from_toml(carbon_params) if carbon_params else CarbonParams.default(),
    )


@click.group()
def arch() -> None:
    """Accelerators: presets, custom designs, and their area, power, cost and carbon."""


@arch.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@_tech_option
@_cost_option
@_carbon_option
def list_cmd(
    as_json: bool, tech_params: Path | None, cost_params: Path | None, carbon_params: Path | None
) -> None:
    """List the preset accelerators with their main figures."""
    docs = [_describe(preset(n), tech_params, cost_params, carbon_params) for n in preset_names()]
    runs = _published_runs()
    for d in docs:
        d["nvlink_bytes_per_s"] = NVLINK_BYTES_PER_S.get(d["name"])
        d["published_runs"] = runs.get(d["name"], 0)
    if as_json:
        echo_json({"accelerators": docs})
        return
    columns = {  # one unit per column: the one for its largest value
        key: fmt_column([d[key] for d in docs], unit)
        for key, unit in (
            ("hbm_bandwidth_bytes_per_s", "B/s"),
            ("clock_hz", "Hz"),
            ("peak_flops", "FLOP/s"),
        )
    }
    nvlink = [d["nvlink_bytes_per_s"] for d in docs]
    columns["nvlink"] = [
        t if v is not None else "-"
        for v, t in zip(nvlink, fmt_column([v or 0.0 for v in nvlink], "B/s"), strict=True)
    ]
    rows = [
        [
            d["name"],
            f"{d['num_tc']} x {d['tc_rows']}x{d['tc_cols']}",
            f"{d['num_vc']} x {d['vc_lanes']}",
            f"{d['glb_bytes'] / _MIB:g} MiB",
            f"{d['hbm_bytes'] / _GIB:g} GiB",
            columns["hbm_bandwidth_bytes_per_s"][i],
            columns["clock_hz"][i],
            f"{d['node_nm']} nm",
            columns["peak_flops"][i],
            round(d["area_mm2"]),
            round(d["load_power_w"]),
            "-" if d["tdp_w"] is None else round(d["tdp_w"]),
            round(d["device_cost_usd"]),
            round(d["build_cost_usd"]),
            round(d["price_usd"]),
            round(d["embodied_kgco2e"], 1),
            columns["nvlink"][i],
            d["published_runs"] or "none",
        ]
        for i, d in enumerate(docs)
    ]
    headers = [
        "name",
        "tensor cores",
        "vector cores",
        "GLB",
        "HBM",
        "HBM BW",
        "clock",
        "node",
        "peak bf16",
        "area mm2",
        "load W",
        "TDP W",
        "chip $",
        "build $",
        "buy $",
        "board kgCO2e",
        "NVLink",
        "runs",
    ]
    click.echo(table(rows, headers))
    click.echo(
        "NVLink: per device per direction (the cluster's links stay --intra-node-gbps); "
        "runs: published training runs of the validation registry on the preset"
    )


def _published_runs() -> dict[str, int]:
    """Runs of the validation registry per preset (``phaze validate runs``)."""
    from phaze.validation.published_runs import default_registry

    return dict(Counter(r.arch for r in default_registry().runs))


def _parse_gemm(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, int, int] | None:
    if value is None:
        return None
    try:
        dims = tuple(int(p) for p in value.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1 or max(dims) > MAX_WIDTH:
        raise click.BadParameter(
            f"{value!r} must be three positive integers M,K,N, each in [1, {MAX_WIDTH}] (a "
            "layer's width or a micro-batch's tokens; e.g. 8192,12288,12288)"
        )
    return dims


@arch.command("show")
@click.argument("spec", metavar="NAME|FILE.toml")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--gemm",
    metavar="M,K,N",
    callback=_parse_gemm,
    help="Instead, cost one (M x K) @ (K x N) GEMM on all tensor cores of the design.",
)
@click.option(
    "--toml",
    "as_toml",
    is_flag=True,
    help="Instead, print the design as one chip file for --arch (a preset's whole file: its "
    "fields and every table measured about it, with their sources).",
)
@_tech_option
@_cost_option
@_carbon_option
def show(
    spec: str,
    as_json: bool,
    gemm: tuple[int, int, int] | None,
    as_toml: bool,
    tech_params: Path | None,
    cost_params: Path | None,
    carbon_params: Path | None,
) -> None:
    """Show every parameter and modelled figure of a preset or an accelerator TOML file."""
    acc = load_accelerator(spec)
    if as_toml:
        if as_json or gemm is not None:
            raise click.UsageError("--toml prints the design alone; drop --json and --gemm")
        in_file = spec.endswith(".toml") or Path(spec).is_file()
        click.echo(accelerator_to_toml(acc) if in_file else preset_to_toml(spec), nl=False)
        return
    if gemm is not None:
        _show_gemm(acc, *gemm, as_json=as_json)
        return
    doc = _describe(acc, tech_params, cost_params, carbon_params)
    if as_json:
        echo_json(doc)
    else:
        click.echo(render_accelerator(doc))


def _show_gemm(acc: Accelerator, m: int, k: int, n: int, *, as_json: bool) -> None:
    """One GEMM's latency, achieved FLOP/s, bound and energy (:func:`gemm_report`), as a
    kernel benchmark runs it: one device, one kernel, at its benchmark clock. A training
    run's fitted clock (``sustained_clock_fraction``) is not a kernel's: it holds what the
    op model leaves out of a whole step, so it prices training, not this GEMM."""
    r = gemm_report(acc, m, k, n, device=device_profile(acc).alone())
    if as_json:
        echo_json({"accelerator": acc.name, **to_jsonable(r)})
        return
    click.echo(
        f"GEMM ({m} x {k}) @ ({k} x {n}) on {acc.num_tc} tensor cores of "
        f"{acc.name or '(unnamed)'}, one kernel alone at the benchmark clock"
    )
    rows = [
        ["latency", fmt_quantity(r.latency_s, "s", 4)],
        [
            "achieved",
            f"{fmt_quantity(r.flops_per_s, 'FLOP/s')} ({fmt_percent(r.flops_per_s / acc.peak_flops)} of peak)",
        ],
        ["bound", r.bound],
        ["energy", fmt_quantity(r.energy_j, "J")],
        ["compute time", fmt_quantity(r.compute_s, "s")],
        ["HBM time", f"{fmt_quantity(r.hbm_s, 's')} ({fmt_quantity(r.hbm_bytes, 'B')} moved)"],
        ["buffer time", fmt_quantity(r.buffer_s, "s")],
    ]
    click.echo(table(rows, ["quantity", "value"]))


def render_accelerator(doc: Mapping[str, Any]) -> str:
    """Text view of :func:`arch_space.summary.describe`'s mapping; keys it does not know
    (sections other commands or options add) are printed after it as ``key: value`` lines."""
    d = doc
    base = d["formats"][0][0]  # the 16-bit format of the base rate: bf16, or fp16 (V100)
    lines = [
        f"{d['name'] or '(unnamed)'}  design {d['design_id']}",
        "",
        table(
            [
                ["tensor cores", f"{d['num_tc']} x {d['tc_rows']}x{d['tc_cols']} {base} MACs"],
                ["vector cores", f"{d['num_vc']} x {d['vc_lanes']} lanes"],
                *(
                    [
                        f"{u['kind']} units",
                        f"{u['count']} x {u['rows']}x{u['cols']} ops/cycle, "
                        f"{u['pj_per_op']:g} pJ/op, {u['area_mm2']:g} mm2 each; "
                        f"runs {', '.join(u['runs'])}",
                    ]
                    for u in d["extra_units"]
                ),
                ["global buffer", f"{d['glb_bytes'] / _MIB:g} MiB"],
                [
                    "HBM",
                    f"{d['hbm_bytes'] / _GIB:g} GiB in {d['hbm_stacks_effective']} stacks, "
                    f"{fmt_quantity(d['hbm_bandwidth_bytes_per_s'], 'B/s')}",
                ],
                ["clock", fmt_quantity(d["clock_hz"], "Hz")],
                ["process node", f"{d['node_nm']} nm"],
                ["bytes per element", d["bytes_per_element"]],
                [f"peak dense {base}", fmt_quantity(d["peak_flops"], "FLOP/s")],
                [
                    "tensor formats",
                    ", ".join(
                        f"{f} {fmt_quantity(d['peak_flops'] * rate, 'FLOP/s')}"
                        for f, rate in d["formats"]
                    ),
                ],
                *(
                    [["measured as", f"preset {d['measured_as']}'s shipped measurements"]]
                    if d.get("measured_as")
                    else []
                ),
            ],
            ["parameter", "value"],
        ),
        "",
        _breakdown("area", d["area_mm2"], d["area_breakdown_mm2"], "mm2", 1),
        "",
        _breakdown("peak power", d["peak_power_w"], d["power_breakdown_w"], "W", 1),
        f"power under tensor load (modelled, a large GEMM): {fmt_quantity(d['load_power_w'], 'W')}",
        _tdp_text(d),
        "",
        f"die: {d['dies_per_wafer']} dies per wafer, yield {fmt_percent(d['yield'])}",
        _breakdown("chip cost", d["device_cost_usd"], d["cost_breakdown_usd"], "USD", 0),
        f"build cost (chip, board, a new design's non-recurring cost): "
        f"{fmt_quantity(d['build_cost_usd'], 'USD')}; price (buy view): "
        f"{fmt_quantity(d['price_usd'], 'USD')}",
        "",
        _breakdown(
            "embodied carbon (board)",
            d["embodied_kgco2e"],
            d["embodied_breakdown_kgco2e"],
            "kgCO2e",
            2,
        ),
    ]
    extra = [k for k in d if k not in _KNOWN_KEYS]
    for key in extra:
        value = d[key]
        text = fmt_number(value) if isinstance(value, int | float) else value
        lines += ["", f"{key}: {text}"]
    return "\n".join(lines)


def _tdp_text(d: Mapping[str, Any]) -> str:
    """The data sheet's board power (TDP) with its source, or why there is none."""
    if d["tdp_w"] is None:
        return "TDP (data sheet board power): none shipped (not a preset in a host server)"
    return f"TDP (data sheet board power): {fmt_quantity(d['tdp_w'], 'W')} ({d['tdp_source']})"


def _breakdown(title: str, total: float, parts: Mapping[str, float], unit: str, digits: int) -> str:
    rows = [[k, round(v, digits), f"{v / total:.0%}" if total else "-"] for k, v in parts.items()]
    rows.append(["total", round(total, digits), "100%"])
    return table(rows, [title, unit, "share"])


# The keys the table above shows; any other key of ``describe`` is listed after it.
_KNOWN_KEYS = frozenset(
    {
        *ACCELERATOR_FIELDS,
        "design_id",
        "hbm_stacks_effective",
        "peak_flops",
        "area_mm2",
        "area_breakdown_mm2",
        "load_power_w",
        "tdp_w",
        "tdp_source",
        "peak_power_w",
        "power_breakdown_w",
        "static_power_w",
        "dies_per_wafer",
        "yield",
        "die_cost_usd",
        "device_cost_usd",
        "cost_breakdown_usd",
        "build_cost_usd",
        "price_usd",
        "embodied_kgco2e",
        "embodied_breakdown_kgco2e",
    }
)
