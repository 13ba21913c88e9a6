"""The list schedules against independent checks: serial and parallel schedule
generation, resumption and cutoffs, double justification, and the balanced modes."""

from __future__ import annotations

import math

from budget import budget
from hypothesis import assume, given
from hypothesis import strategies as st
from ilp_oracle import brute_force, check_schedule, cores, dags, graph

from ilp import Method, ScheduleStatus, solve_schedule
from ilp.balance import _heads, _ones, _tails, _union, balanced_modes
from ilp.listsched import (
    initial_schedule,
    justify,
    makespan,
    parallel_sgs,
    place,
    placing_order,
    serial_sgs,
    structure,
)
from ilp.problem import PARALLEL, SINGLE, build_problem


def _in_use(problem, modes, start, dur, t):
    """Units of each kind held at instant t by the ops running then."""
    used = [0] * len(problem.capacity)
    for i in range(problem.n):
        if dur[i] > 0 and start[i] <= t < start[i] + dur[i]:
            for k, u in enumerate(problem.need[modes[i]][i]):
                used[k] += u
    return used


def _check_problem_schedule(problem, modes, start):
    """Precedence and capacity of an index-space schedule, checked at every start."""
    dur = [problem.duration(i, modes[i]) for i in range(problem.n)]
    for i, j in problem.edges:
        assert start[i] + dur[i] <= start[j] * (1 + 1e-12) + 1e-15, (i, j)
    for t in start:
        used = _in_use(problem, modes, start, dur, t)
        assert all(u <= c for u, c in zip(used, problem.capacity, strict=True))


@st.composite
def moded_problems(draw):
    """A problem of up to 7 ops on 1-4 cores of each type and maybe a channel of 1-2 units,
    with random modes and a random priority per op."""
    channel = draw(st.integers(0, 2))
    g = draw(dags(max_ops=7, channel=channel))
    num_tc, num_vc = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    problem = build_problem(
        g,
        cores(num_tc, num_vc),
        parallel_blocks_all=draw(st.booleans()),
        resources={"channel": channel} if channel else None,
    ).problem
    rnd = draw(st.randoms(use_true_random=False))
    modes = tuple(
        PARALLEL if problem.can_parallel[i] and rnd.random() < 0.5 else SINGLE
        for i in range(problem.n)
    )
    return problem, modes, tuple(rnd.random() for _ in range(problem.n))


@budget(200, deadline=None)
@given(moded_problems())
def test_justification_keeps_schedules_feasible_and_never_longer(drawn):
    problem, modes, rank = drawn
    start = serial_sgs(problem, modes, rank)
    justified, span = justify(problem, modes, start)
    _check_problem_schedule(problem, modes, justified)
    assert span == makespan(problem, modes, justified)
    assert span <= makespan(problem, modes, start) * (1 + 1e-12)


def test_justification_closes_a_list_schedules_gap():
    """Ops of 1, 2 and 3 s on two cores, listed shortest first: 1 and 2 start at 0, 3 waits
    for the first core (makespan 4). Right-justified, 3 goes first; left again, the ops pack
    into 3 s."""
    g = graph([("a", "TC", 1.0, 1.0), ("b", "TC", 2.0, 2.0), ("c", "TC", 3.0, 3.0)])
    problem = build_problem(g, cores(2, 1)).problem
    modes = (SINGLE,) * 3
    start = serial_sgs(problem, modes, problem.single_s)
    assert makespan(problem, modes, start) == 4.0
    justified, span = justify(problem, modes, start)
    assert span == 3.0
    _check_problem_schedule(problem, modes, justified)


@budget(200, deadline=None)
@given(moded_problems(), st.randoms(use_true_random=False))
def test_serial_sgs_resumed_midway_equals_a_full_run(drawn, rnd):
    """The local search re-schedules a trial from the state the incumbent's schedule had
    before the first op whose mode the trial flips; that must be the trial's whole schedule."""
    problem, modes, rank = drawn
    assume(problem.n > 0)
    order = placing_order(problem, rank)
    states = []
    place(problem, modes, order, record=states)
    flipped = list(modes)
    first = rnd.randrange(problem.n)
    for k in range(first, problem.n):
        i = order[k]
        if problem.can_parallel[i] and rnd.random() < 0.5:
            flipped[i] = 1 - flipped[i]
    whole = place(problem, flipped, order)
    assert whole[0] == serial_sgs(problem, flipped, rank)
    for _ in range(2):  # resuming leaves the recorded state as it was
        assert place(problem, flipped, order, first, states[first]) == whole
    # states kept before every third op only: resumed from the one before ``first``, with
    # the cutoff checked from ``first`` on, as the local search does
    sparse = []
    place(problem, modes, order, record=sparse, every=3)
    assert sparse == states[::3]
    at = first // 3 * 3
    for cutoff in (whole[1] * 0.5, whole[1] * (1 + 1e-9)):
        resumed = place(problem, flipped, order, first, states[first], cutoff=cutoff)
        assert resumed == place(
            problem, flipped, order, at, sparse[first // 3], cutoff=cutoff, checked=first
        )


@budget(200, deadline=None)
@given(moded_problems(), st.sampled_from((0.5, 1 - 1e-9, 1.0, 1 + 1e-9, 1.5)))
def test_serial_sgs_with_a_cutoff_stops_only_schedules_that_reach_it(drawn, share):
    """The local search passes its incumbent's makespan as a cutoff: a schedule shorter
    than the cutoff comes out whole, and one that reaches it comes out as ``((), inf)``."""
    problem, modes, rank = drawn
    assume(problem.n > 0)
    order = placing_order(problem, rank)
    whole = place(problem, modes, order)
    cutoff = whole[1] * share
    cut = place(problem, modes, order, cutoff=cutoff)
    # The check is shaded by rounding's worth: just at the cutoff either outcome is right.
    assume(whole[1] < cutoff or whole[1] * (1 - 1e-12) >= cutoff)
    if whole[1] < cutoff:
        assert cut == whole
    else:
        assert cut == ((), math.inf)


@budget(200, deadline=None)
@given(moded_problems())
def test_parallel_sgs_builds_feasible_non_delay_schedules(drawn):
    """Feasible, and no op waits while its predecessors are done and its cores are free: at
    its earliest start and at every start or finish before its own start, the cores in use
    then leave too few for it."""
    problem, modes, rank = drawn
    start, span = parallel_sgs(problem, modes, rank)
    _check_problem_schedule(problem, modes, start)
    assert span == makespan(problem, modes, start)
    dur = [problem.duration(i, modes[i]) for i in range(problem.n)]
    events = {t for i in range(problem.n) for t in (start[i], start[i] + dur[i])}
    for j in range(problem.n):
        ready = max((start[i] + dur[i] for i, k in problem.edges if k == j), default=0.0)
        need = problem.need[modes[j]][j]
        for t in {ready} | {t for t in events if ready < t < start[j]}:
            if t >= start[j]:
                continue
            used = _in_use(problem, modes, start, dur, t)
            assert any(u + n > c for u, n, c in zip(used, need, problem.capacity, strict=True)), (
                j,
                t,
            )


def test_parallel_sgs_keeps_the_bottleneck_busy():
    """One tensor and one vector core: a (VC, 1 s) feeds b (TC, 5 s); c (TC, 4 s) is free.
    Longest path first, the serial SGS places a, then b after it, and c (too long for the
    1 s gap before b) after b: 10 s. The parallel SGS starts c beside a at 0 and b when the
    tensor core frees: 9 s, the tensor core's work, so the list schedule is proven optimal
    without a search."""
    g = graph([("a", "VC", 1.0, 1.0), ("b", "TC", 5.0, 5.0), ("c", "TC", 4.0, 4.0)], [("a", "b")])
    problem = build_problem(g, cores(1, 1)).problem
    st_ = structure(problem)
    by_tail = tuple(-(problem.single_s[i] + st_.tail[i]) for i in range(problem.n))
    modes = (SINGLE,) * 3
    assert makespan(problem, modes, serial_sgs(problem, modes, by_tail)) == 10.0
    assert parallel_sgs(problem, modes, by_tail)[1] == 9.0
    assert initial_schedule(problem, 0.0)[2] == 9.0
    s = solve_schedule(g, cores(1, 1), solver="list", search_nodes=0)
    assert s.makespan_s == 9.0 and s.method == Method.BOUND
    assert s.status == ScheduleStatus.OPTIMAL
    check_schedule(g, s, cores(1, 1))


@budget(200, deadline=None)
@given(moded_problems())
def test_balanced_estimate_bounds_every_schedule_in_its_modes(drawn):
    """No schedule in the balanced modes (here: the serial SGS under a random priority) is
    shorter than their estimate: a collapsed-schedule bound, channels included."""
    problem, _, rank = drawn
    found = balanced_modes(problem, structure(problem))
    assume(found is not None)
    modes, estimate = found
    assert estimate <= makespan(problem, modes, serial_sgs(problem, modes, rank)) * (1 + 1e-9)


def test_list_schedule_leaves_the_all_split_optimum_for_the_balanced_modes():
    """Three tensor cores and one vector core: a chain c0 (VC) -> c1 (TC, split 3x) -> c2
    (VC, 4 s) -> c3 (TC, split 3x), an independent x (VC, 1 s), and three GEMMs w0..w2
    after c1 that a split barely speeds up. With every op split they run one after another,
    and no flip of one or two of them to a single core shortens that; the balanced modes
    run them single-core beside c2, as the brute force does."""
    g = graph(
        [
            ("c0", "VC", 2.0, 2.0),
            ("c1", "TC", 8.0, 8.0 / 3),
            ("c2", "VC", 4.0, 4.0),
            ("c3", "TC", 9.0, 3.0),
            ("w0", "TC", 5.0, 2.33),
            ("w1", "TC", 4.0, 1.9),
            ("w2", "TC", 5.0, 2.4),
            ("x", "VC", 1.0, 1.0),
        ],
        [("c0", "c1"), ("c1", "c2"), ("c2", "c3"), ("c1", "w0"), ("c1", "w1"), ("c1", "w2")],
    )
    s = solve_schedule(g, cores(3, 1), solver="list", search_nodes=0)
    check_schedule(g, s, cores(3, 1))
    assert math.isclose(s.makespan_s, brute_force(g, cores(3, 1)), rel_tol=1e-9)
    assert {"w0", "w1", "w2"}.isdisjoint(s.parallel)


def _plain_place(problem, modes, order):
    """The serial SGS scanning the resource profile segment by segment: the reference the
    bitset scan of :func:`ilp.serial.place` must match start for start."""
    st_ = structure(problem)
    times, use = [0.0], [0]
    start, finish = [0.0] * problem.n, [0.0] * problem.n
    for i in order:
        d = st_.duration[modes[i]][i]
        load, room = st_.load[modes[i]][i], st_.room[modes[i]][i]
        est = max((finish[p] for p in st_.preds[i]), default=0.0)
        c = est
        if load:
            k = max(j for j, t in enumerate(times) if t <= est)
            while True:
                c = max(times[k], est)
                m = k
                while m < len(times) and times[m] < c + d:
                    if (room - use[m]) & st_.guard != st_.guard:
                        break
                    m += 1
                else:
                    break
                k = m + 1
            if times[k] != c:
                k, m = k + 1, m + 1
                times.insert(k, c)
                use.insert(k, use[k - 1])
            if m == len(times) or times[m] != c + d:
                times.insert(m, c + d)
                use.insert(m, use[m - 1])
            for q in range(k, m):
                use[q] += load
        start[i], finish[i] = c, c + d
    return tuple(start), max(finish, default=0.0)


@st.composite
def _crowded_problems(draw):
    """Up to 40 ops on 1-3 units of each core type, most of them free to start at once
    (few edges), so many ops queue for the same units: long profiles with few gaps."""
    g = draw(dags(max_ops=40, channel=draw(st.integers(0, 2))))
    for a, b in list(g.edges):
        if draw(st.integers(0, 3)):
            g.remove_edge(a, b)
    channel = max((d.get("channel", 0) for _, d in g.nodes(data="demand") if d), default=0)
    problem = build_problem(
        g,
        cores(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        parallel_blocks_all=draw(st.booleans()),
        resources={"channel": max(channel, 1)} if channel else None,
    ).problem
    rnd = draw(st.randoms(use_true_random=False))
    modes = tuple(
        PARALLEL if problem.can_parallel[i] and rnd.random() < 0.6 else SINGLE
        for i in range(problem.n)
    )
    return problem, modes, tuple(rnd.random() for _ in range(problem.n))


@budget(200, deadline=None)
@given(st.one_of(moded_problems(), _crowded_problems()))
def test_serial_sgs_finds_the_starts_of_a_segment_by_segment_scan(drawn):
    """The serial SGS jumps over the profile's segments without room by bit operations;
    every start must be the one a scan of each segment in turn finds."""
    problem, modes, rank = drawn
    order = placing_order(problem, rank)
    assert place(problem, modes, order) == _plain_place(problem, modes, order)


def _plain_parallel_sgs(problem, modes, rank):
    """The parallel SGS scanning every eligible op in rank order at each instant: the
    reference the room-by-room merge of :func:`ilp.listsched.parallel_sgs` must match."""
    st_ = structure(problem)
    start = [0.0] * problem.n
    missing = [len(p) for p in st_.preds]
    eligible = [(rank[i], i) for i in range(problem.n) if not missing[i]]
    running, use, now = [], 0, 0.0
    while eligible or running:
        waiting = []
        for key in sorted(eligible):
            i = key[1]
            if (st_.room[modes[i]][i] - use) & st_.guard == st_.guard:
                use += st_.load[modes[i]][i]
                start[i] = now
                running.append((now + st_.duration[modes[i]][i], i))
            else:
                waiting.append(key)
        eligible = waiting
        now = min(running)[0]
        for f, i in sorted(running):
            if f <= now:
                running.remove((f, i))
                use -= st_.load[modes[i]][i]
                for j in st_.succs[i]:
                    missing[j] -= 1
                    if not missing[j]:
                        eligible.append((rank[j], j))
    return tuple(start), now


@budget(200, deadline=None)
@given(st.one_of(moded_problems(), _crowded_problems()), st.booleans())
def test_parallel_sgs_starts_what_a_scan_of_every_eligible_op_starts(drawn, tied):
    """The parallel SGS visits each room's eligible ops only up to the first that does not
    fit; its starts must be those of a scan of every eligible op in rank order, ties (whole
    ranks) broken by index alike."""
    problem, modes, rank = drawn
    if tied:
        rank = tuple(float(int(r * 3)) for r in rank)
    assert parallel_sgs(problem, modes, rank) == _plain_parallel_sgs(problem, modes, rank)


@budget(200, deadline=None)
@given(st.one_of(moded_problems(), _crowded_problems()), st.randoms(use_true_random=False))
def test_balanced_modes_heads_and_tails_recomputed_where_durations_changed(drawn, rnd):
    """The balanced modes recompute earliest starts only below the ops whose durations
    changed, and tails only above them: both must equal a recomputation of every op."""
    problem, _, _ = drawn
    st_ = structure(problem)
    n = problem.n
    d = [problem.single_s[i] for i in range(n)]
    head, _ = _heads(st_.preds, d, [0.0] * n, range(n))
    tail = _tails(st_.succs, d, [0.0] * n, range(n - 1, -1, -1))
    changed = [i for i in range(n) if rnd.random() < 0.3]
    for i in changed:
        d[i] = 0.0
    assert _heads(st_.preds, d, head, _ones(_union(st_.desc, changed))) == _heads(
        st_.preds, d, [0.0] * n, range(n)
    )
    assert _tails(st_.succs, d, tail, reversed(_ones(_union(st_.anc, changed)))) == _tails(
        st_.succs, d, [0.0] * n, range(n - 1, -1, -1)
    )
