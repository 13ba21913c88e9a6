"""Sweep speed on the full default space: gpt3-175b on 1024 devices.

The sweep: every design of ``Space.named("default")`` x HBM {32, 64, 80} GiB x micro-batch
{1, 2, 4, 8} x recompute {none, full}, list scheduler, global batch 1536, sequence 2048,
8 devices per node, the default objectives (with exact pruning) and the default reference
presets (tpuv4, a100, h100). Target: the whole sweep in at most 30 minutes on this 2-core
machine.

The full run takes long, so ``--designs N`` sweeps a deterministic sample instead (every
k-th design of the enumeration, k = designs // N) and the full-space time is extrapolated
from the measured time per design (printed as EXTRAPOLATED). Pruning skips fewer designs in
a sparse sample than in the full space (fewer strong incumbents), so the extrapolation is
pessimistic where pruning is what saves the time.

Prints the load average (the machine is shared), points/s, the stage times of the store's
manifest (plan, bounds, evaluate = summed worker wall time, evaluate_cpu = summed worker CPU
time, which other processes on the cores do not inflate, aggregate, total), the full-space
time extrapolated from both, and a profile split
of one more, in-process run under cProfile on ``--profile-designs`` designs of the sample
(layer graphs, stage graphs, costed graphs, schedules, width lower bounds, op costs,
placement, scoring, records and store; cProfile inflates code of many small calls, such as
the placement search, more than the rest).

``--space NAME`` runs the same sweep on another shipped space (``reticle``: the designs of the
H100's size, whose target is about twice the default space's time). ``--precision``
(repeatable, default bf16) lists the precision recipes: with ``--precision bf16 --precision
fp8-te`` the default space's bf16+fp8 designs run fp8-te, its bf16 designs bf16
(:func:`phaze.sweep.planning.design_knobs`), the sweep choosing formats.

``--write-fingerprint FILE`` writes the sweep's fronts and best points
(:func:`results.fingerprint.fingerprint`), ``--check FILE`` compares them with such a file
and prints IDENTICAL or DIFFERENT (exit status 1): a speed change must leave a sampled sweep's
results as they were (``benchmarks/data/sweep_500_fingerprint.json``: ``--designs 500``;
``sweep_full_fingerprint.json``: the whole default space; both written by main before the
sweep's batched stores of pruned points).

Run: ``.venv/bin/python benchmarks/bench_sweep.py [--designs 50] [--jobs 2] [--search-nodes N]
[--profile-designs 4] [--no-prune] [--space default] [--precision P ...] [--out DIR]
[--write-fingerprint FILE | --check FILE]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from arch_space import Accelerator, Space
from phaze.config import SolverSettings, SweepConfig
from phaze.sweep import run_sweep
from phaze_common.errors import ConfigError
from results.fingerprint import fingerprint
from results.store import load

TARGET_S = 30 * 60.0  # the whole default space within half an hour on this machine

# (label, module path suffix, function name) whose cumulative times make up the profile
# split; none of them runs inside another, except op costs, shown apart as "of which".
_PROFILED = (
    ("layer graphs", "workloads/build.py", "build_layer_graph"),
    ("stage graphs", "placement/adapt.py", "stage_graph"),
    ("costed graphs (op costs, networkx)", "ilp/timing.py", "costed_graph"),
    ("schedules", "ilp/schedule.py", "solve_schedule"),
    ("width lower bounds (op costs)", "phaze/model/lower_bounds.py", "pass_bound_s"),
    ("placement", "placement/search.py", "place"),
    ("scoring", "phaze/model/scoring.py", "score_point"),
    ("batch energy", "placement/iteration.py", "iteration_energy"),
    ("records", "phaze/sweep/records.py", "record_of"),
    ("store writes", "results/store.py", "put_point"),
    ("store reads", "results/store.py", "points"),
    ("pruning bounds", "phaze/sweep/optimistic.py", "bound_columns"),
)
_OF_WHICH = ("op costs", "arch_space/perf/costs.py", "op_costs")


def config(
    *,
    prune: bool = True,
    search_nodes: int = 0,
    space: str = "default",
    precision: tuple[str, ...] = ("bf16",),
) -> SweepConfig:
    """The benchmark's sweep (see the module docstring)."""
    return SweepConfig.of(
        precision=precision,
        workloads=("gpt3-175b",),
        space=space,
        devices=1024,
        devices_per_node=8,
        seq_len=2048,
        global_batch=1536,
        micro_batches=(1, 2, 4, 8),
        hbm_gib=(32, 64, 80),
        recompute=("none", "full"),
        prune=prune,
        solver=SolverSettings(name="list", search_nodes=search_nodes),
    )


@dataclass(frozen=True, slots=True)
class _Sample:
    """Stands in for the space in ``plan``: enumerates the sampled designs only."""

    designs: tuple[Accelerator, ...]

    @property
    def format_sets(self) -> tuple[tuple[str, ...], ...]:
        """The format sets of the sampled designs, as the space lists them."""
        return tuple(dict.fromkeys(a.format_names for a in self.designs))

    def enumerate(self) -> Iterator[Accelerator]:
        return iter(self.designs)

    def check_not_empty(self) -> None:
        """As ``Space.check_not_empty``: a sample must hold a design."""
        if not self.designs:
            raise ConfigError("bench_sweep: the sample holds no design")


def sample(designs: Sequence[Accelerator], n: int | None) -> tuple[Accelerator, ...]:
    """Every k-th design (k = len // n), the first n of them; all designs for None."""
    if n is None or n >= len(designs):
        return tuple(designs)
    return tuple(designs[:: len(designs) // n][:n])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def sweep(
    designs: tuple[Accelerator, ...],
    out: Path,
    *,
    jobs: int | None,
    prune: bool,
    serial: bool,
    search_nodes: int,
    space: str = "default",
    precision: tuple[str, ...] = ("bf16",),
):
    """Run the sweep over ``designs`` into ``out``; returns (result, manifest)."""
    cfg = config(prune=prune, search_nodes=search_nodes, space=space, precision=precision)
    with mock.patch("phaze.sweep.planning.load_space", lambda spec: _Sample(designs)):
        result = run_sweep(
            cfg,
            out,
            executor="serial" if serial else "local",
            jobs=None if serial else jobs,
            progress=False,
        )
    with load(out) as store:
        manifest = store.manifest()
    return result, manifest


def _profile_split(stats: pstats.Stats, total_s: float) -> list[tuple[str, float]]:
    cum = {label: 0.0 for label, _, _ in (*_PROFILED, _OF_WHICH)}
    for (path, _, func), (_, _, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        for label, suffix, name in (*_PROFILED, _OF_WHICH):
            if func == name and path.replace(os.sep, "/").endswith(suffix):
                cum[label] += ct
    rows = [(label, cum[label]) for label, _, _ in _PROFILED]
    rows.append(("other", total_s - sum(s for _, s in rows)))
    rows.append((f"(of which {_OF_WHICH[0]})", cum[_OF_WHICH[0]]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=None, help="sample size (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: all)")
    parser.add_argument("--profile-designs", type=int, default=4, help="0 skips the profile")
    parser.add_argument("--no-prune", action="store_true", help="exhaustive evaluation")
    parser.add_argument(
        "--search-nodes",
        type=int,
        default=0,
        help="branch-and-bound nodes per graph part (default 0: the plain list schedule)",
    )
    parser.add_argument("--space", default="default", help="shipped space (default: default)")
    parser.add_argument("--out", type=Path, default=None, help="store directory (default: temp)")
    parser.add_argument(
        "--precision", action="append", default=None, help="precision recipe (repeatable)"
    )
    parser.add_argument("--write-fingerprint", type=Path, default=None, help="write fronts")
    parser.add_argument("--check", type=Path, default=None, help="compare fronts with a file")
    args = parser.parse_args()
    precision = tuple(args.precision or ("bf16",))

    cfg = config(
        prune=not args.no_prune,
        search_nodes=args.search_nodes,
        space=args.space,
        precision=precision,
    )
    every = tuple(Space.named(cfg.space).enumerate())
    designs = sample(every, args.designs)
    hbm = len(cfg.hbm_gib)
    knobs = len(cfg.training.micro_batches) * len(cfg.training.recompute)
    print(
        f"space {cfg.space!r}: {len(every)} designs x {hbm} HBM sizes x {knobs} knob settings "
        f"= {len(every) * hbm * knobs} points for {cfg.workloads[0]} on {cfg.devices} devices"
    )
    print(
        f"sample: {len(designs)} designs (every {max(1, len(every) // len(designs))}th), "
        f"{len(designs) * hbm} design x HBM tasks, {len(designs) * hbm * knobs} points; "
        f"jobs {args.jobs or 'all'}; prune {not args.no_prune}; "
        f"search budget {args.search_nodes} nodes; precision {list(precision)}"
    )
    print(f"before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        out = args.out or Path(tmp) / "sweep"
        start = time.perf_counter()
        result, manifest = sweep(
            designs,
            out,
            jobs=args.jobs,
            prune=not args.no_prune,
            serial=False,
            search_nodes=args.search_nodes,
            space=args.space,
            precision=precision,
        )
        wall_s = time.perf_counter() - start
        print(f"after:  {_load()}")
        stages = manifest["wall_times_s"]
        tasks = result.evaluated_designs + result.pruned_designs + result.skipped_designs
        print(
            f"points {result.points} (feasible {result.feasible}); design x HBM: evaluated "
            f"{result.evaluated_designs}, pruned {result.pruned_designs} "
            f"({100 * result.pruned_designs / max(tasks, 1):.1f} %), already stored "
            f"{result.skipped_designs}, evaluated speculatively then pruned "
            f"{manifest.get('discarded_designs', 0)}"
        )
        print(
            f"wall {wall_s:.1f} s: {result.points / wall_s:.1f} points/s, "
            f"{len(designs) / wall_s:.3f} designs/s"
        )
        print("manifest stage times (evaluate = summed worker wall time, evaluate_cpu = CPU):")
        for key, value in stages.items():
            print(f"  {key:<16} {value:9.2f} s")
        full_s = len(every) * wall_s / len(designs)
        how = (
            "MEASURED full space"
            if len(designs) == len(every)
            else f"EXTRAPOLATED full space ({len(every)} designs at {len(designs) / wall_s:.3f} "
            "designs/s, pruning as in this sample)"
        )
        print(
            f"{how}: {full_s:.0f} s = {full_s / 60:.1f} min "
            f"(target {TARGET_S / 60:.0f} min: {'met' if full_s <= TARGET_S else 'NOT met'})"
        )
        if "evaluate_cpu_s" in stages:
            jobs = args.jobs or len(os.sched_getaffinity(0))
            cpu_full_s = len(every) * stages["evaluate_cpu_s"] / len(designs) / jobs
            print(
                f"EXTRAPOLATED from worker CPU time alone (as if {jobs} cores were free, no "
                f"parent work): {cpu_full_s:.0f} s = {cpu_full_s / 60:.1f} min"
            )

        with load(out) as store:
            found = fingerprint(store, cfg.objectives)
        if args.write_fingerprint is not None:
            args.write_fingerprint.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
            print(f"fronts and best points written to {args.write_fingerprint}")
        if args.check is not None:
            same = found == json.loads(args.check.read_text())
            print(
                f"fronts and best points against {args.check}: {'IDENTICAL' if same else 'DIFFERENT'}"
            )
            if not same:
                sys.exit(1)

        if args.profile_designs > 0:
            few = designs[: args.profile_designs]
            profiler = cProfile.Profile()
            start = time.perf_counter()
            profiler.enable()
            sweep(
                few,
                Path(tmp) / "profile",
                jobs=1,
                prune=not args.no_prune,
                serial=True,
                search_nodes=args.search_nodes,
                space=args.space,
                precision=precision,
            )
            profiler.disable()
            total_s = time.perf_counter() - start
            print(
                f"profile split: in-process run of {len(few)} designs x {hbm} HBM, cold caches, "
                f"{total_s:.1f} s under cProfile ({_load()}):"
            )
            for label, s in _profile_split(pstats.Stats(profiler), total_s):
                print(f"  {label:<36} {s:8.2f} s  {100 * s / total_s:5.1f} %")


if __name__ == "__main__":
    main()
