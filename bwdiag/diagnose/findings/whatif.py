"""What-if: the projected window if the top findings were applied, with savings that cannot overlap.

Findings are taken largest first. Each finding's saving is scaled down by the share of its
activities an earlier finding already claimed (the same kernel is never saved twice), then split
over the bound classes its activities sit in (by their time) and capped by what each class has
left — idle time for findings that act on GPU idle. The projected window is the total minus what
survives: :func:`project` returns it with the per-finding detail as a ``model.WhatIf``
(:func:`~bwdiag.diagnose.findings.base.with_findings` stores it with the diagnosis).

That subtraction is the simple model. :func:`graph_project` re-times the trace's dependency graph
(:mod:`bwdiag.diagnose.depgraph`) instead: each finding's activities are shortened so that together
they lose its saving, its ``idle_us`` becomes host time removed (or sync waits dropped, see
:attr:`~bwdiag.diagnose.findings.base.RuleResult.effect`), and the window is solved again. So a
kernel saving while the device waits on the host projects to ~0, a saving on a stream that another
stream hides projects to what the other stream leaves, and removing host time helps only where the
device waited. Each finding gets its own graph saving; the top findings applied together (each
node changed once: the smallest scale; gap cuts add up, never past the gap) give
``WhatIf.graph_projected_us``.

The profiler slows the host it records (a CUPTI callback per launch, an event per op): on an H200
the medium transformer's recorded step took 35 ms with the GPU idle a third of it, against 23.6 ms
and a GPU busy nearly all of it unprofiled. Re-timing the recorded graph would then credit kernel
savings with nothing (the GPU "waits on the host") where unprofiled they are the step. So on a GPU
trace whose capture timed its steps without the profiler (``time.unprofiled_step_us``), the graph
first gets a *baseline* (:func:`profiler_baseline`): every host call and host gap scaled by one
factor, found by bisection, so that the re-timed step is the unprofiled one — the profiler's cost
taken out evenly — and every finding is re-timed from there (``WhatIf.graph_base_us`` is that
baseline window, the starting point of the projection).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bwdiag.diagnose import depgraph
from bwdiag.diagnose.depgraph import Change, Graph
from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import DISPATCH_GAP_US
from bwdiag.diagnose.model import TIME_KEYS, AppliedFinding, FindingKind, WhatIf

#: How many findings the projection applies (the report lists the top ones first).
PROJECTED_FINDINGS = 10
#: Bisection steps for the profiler baseline's host factor (2^-14 of the host time: well under 0.1 %).
BASELINE_STEPS = 14


def project(ctx: RuleContext, results: Sequence[RuleResult]) -> WhatIf:
    """The what-if of the top results (already sorted by saving), each drawing on the activities or
    idle time it acts on."""
    total = ctx.total_us
    left = {k: float(ctx.diagnosis.time.by_bound.get(k, 0.0)) for k in TIME_KEYS}
    claimed: dict[int, set[int]] = defaultdict(set)
    applied, saved = [], 0.0
    takes: list[dict[str, float]] = []  # per finding, what it took from each class
    for result in results[:PROJECTED_FINDINGS]:
        f = result.finding
        by_class = _by_class(ctx, result, claimed)
        want = f.est_saving_us * by_class.pop("_fresh_share", 1.0)
        weight = sum(by_class.values())
        take = 0.0
        takes.append({})
        for key, part in by_class.items():
            share = want * part / weight if weight > 0 else 0.0
            got = min(share, left.get(key, 0.0))
            left[key] = left.get(key, 0.0) - got
            takes[-1][key] = got
            take += got
        if weight <= 0:  # nothing known about where it acts: cap by the window only
            take = min(want, total - saved)
        take = min(take, max(0.0, total - saved))
        saved += take
        applied.append(AppliedFinding(f.kind, f.title, float(f.est_saving_us), float(take),
                                      bool(take < f.est_saving_us - 1e-6)))
    projected = float(max(0.0, total - saved))
    out = WhatIf(tuple(applied), total, float(saved), projected,
                 float(total / projected) if projected > 0 else None,
                 unclaimed_us={k: float(v) for k, v in left.items()})
    object.__setattr__(out, "_class_takes", tuple(takes))  # for with_graph; not part of the record
    return out


def _by_class(ctx: RuleContext, result: RuleResult, claimed: dict[int, set[int]]) -> dict[str, float]:
    """µs (mean per rank) of the finding's not-yet-claimed activities per bound class, plus idle;
    ``_fresh_share`` is the share of its activity time no earlier finding claimed."""
    out: dict[str, float] = defaultdict(float)
    fresh = whole = 0.0
    for pos, rows in result.acts.items():
        if not len(rows):
            continue
        a = ctx.analyses[pos]
        rows = np.unique(rows)
        dur = a.activities["dur"].to_numpy(float)[rows]
        bound = a.activities["bound"].to_numpy(dtype=object)[rows]
        new = np.array([r not in claimed[pos] for r in rows])
        whole += dur.sum()
        fresh += dur[new].sum()
        for b, d in zip(bound[new], dur[new]):
            out[b if b in TIME_KEYS else "unknown"] += d / ctx.ranks
        claimed[pos].update(rows.tolist())
    if result.idle_us:
        out["idle"] += result.idle_us
    shares = dict(out)
    if whole > 0:
        shares["_fresh_share"] = (fresh + result.idle_us * ctx.ranks) / (whole + result.idle_us * ctx.ranks)
    return shares


# -- the dependency-graph projection ---------------------------------------------------------------


@dataclass(frozen=True)
class GraphProjection:
    """What :func:`graph_project` found: the base window the graph reproduces, each result's own
    saving (same order as the results), the cumulative savings of the top ones, and the window with
    the top ones applied together."""

    base_us: float
    savings: tuple[float, ...]
    applied: tuple[float, ...]
    projected_us: float
    trace_us: float | None = None  # the window with nothing changed (base_us differs: profiler baseline)


@dataclass(frozen=True)
class GraphAlone:
    """Each result's saving on the dependency graph, applied alone (:func:`graph_alone`): the graph,
    the window it reproduces, and per result its change and its saving (same order as the results)."""

    graph: Graph
    base_us: float  # the window re-timed from: the trace's, or the profiler baseline's
    changes: tuple[Change, ...]
    savings: tuple[float, ...]
    baseline: Change | None = None  # the profiler baseline (:func:`profiler_baseline`), when there is one
    trace_us: float | None = None  # the window the graph reproduces with nothing changed

    def base_in(self, total_us: float) -> float:
        """The starting window in the diagnosis' terms: ``total_us`` (mean per rank) scaled by the
        baseline's share of the window the graph reproduces (1 without a profiler baseline)."""
        trace = self.trace_us or self.base_us
        return float(total_us * self.base_us / trace) if trace > 0 else float(total_us)

    def reordered(self, order: Sequence[int]) -> GraphAlone:
        """The same figures for the results taken in ``order`` (positions into the current order)."""
        return dataclasses.replace(self, changes=tuple(self.changes[i] for i in order),
                                   savings=tuple(self.savings[i] for i in order))


def graph_alone(ctx: RuleContext, results: Sequence[RuleResult], graph: Graph | None = None) -> GraphAlone | None:
    """Each result's saving on the dependency graph, its fix applied alone; None without a graph
    (no activities) or where the graph cannot be re-timed here."""
    graph = graph if graph is not None else depgraph.build_graph(ctx.analyses)
    if graph is None or not results:
        return None
    timing = depgraph.retime(graph)
    if not timing.converged:  # a graph too deep to re-time here: no graph figures rather than wrong ones
        return None
    baseline, base = profiler_baseline(ctx, graph, float(timing.window_us))
    changes = tuple(change_for(ctx, graph, r) for r in results)
    runs = [depgraph.retime(graph, _with(baseline, [c], graph.size)) for c in changes]
    if not all(t.converged for t in runs):
        return None
    return GraphAlone(graph, base, changes, tuple(_saved(base, float(t.window_us)) for t in runs),
                      baseline, float(timing.window_us))


def _with(baseline: Change | None, changes: Sequence[Change], n: int) -> Change:
    """``changes`` together, on top of the profiler baseline when there is one."""
    return Change.combine(([baseline] if baseline is not None else []) + list(changes), n)


def profiler_baseline(ctx: RuleContext, graph: Graph, window_us: float) -> tuple[Change | None, float]:
    """The change that takes the profiler's cost out of the host side (module docstring), and the
    window it re-times to; ``(None, window_us)`` when the trace has no unprofiled step (or a CPU
    trace: there the profiler slows the ops themselves), or the recorded steps were no slower."""
    t = getattr(getattr(ctx, "diagnosis", None), "time", None)  # hand-built contexts may have no diagnosis
    if (t is None or getattr(ctx, "is_cpu", True) or not getattr(t, "unprofiled_step_us", None) or not t.step_us
            or t.unprofiled_step_us >= t.step_us):
        return None, window_us
    host = np.asarray(graph.host, dtype=bool)
    if not host.any():
        return None, window_us
    target = window_us * t.unprofiled_step_us / t.step_us
    gap = np.where(host, np.maximum(graph.gap, 0.0), 0.0)

    def at(f: float) -> tuple[Change, float]:
        change = Change(scale=np.where(host, f, 1.0), cut=gap * (1.0 - f))
        timing = depgraph.retime(graph, change)
        return change, float(timing.window_us) if timing.converged else np.inf

    lo, hi = 0.0, 1.0  # the window at hi stays above the target
    change, window = at(lo)
    if window >= target:  # the device alone takes longer than the unprofiled step: host time to 0
        return (change, window) if np.isfinite(window) else (None, window_us)
    for _ in range(BASELINE_STEPS):
        mid = (lo + hi) / 2
        if at(mid)[1] > target:
            hi = mid
        else:
            lo = mid
    change, window = at(hi)
    return (change, window) if np.isfinite(window) else (None, window_us)


def _saved(before: float, after: float) -> float:
    """``before - after``, with the re-timing's rounding (a few ulps of the window) read as 0."""
    d = before - after
    return 0.0 if abs(d) <= 1e-9 * max(1.0, abs(before)) else d


def graph_together(alone: GraphAlone) -> GraphProjection | None:
    """The top ``PROJECTED_FINDINGS`` of ``alone`` (in its order) applied one after another: what
    each adds to those above it, and the window with all of them (each node changed once)."""
    top = alone.changes[:PROJECTED_FINDINGS]
    runs = [depgraph.retime(alone.graph, _with(alone.baseline, top[: i + 1], alone.graph.size)) if i else None
            for i in range(len(top))]
    if not all(t.converged for t in runs if t is not None):
        return None
    applied, before = [], alone.base_us
    for i, t in enumerate(runs):
        after = alone.base_us - alone.savings[0] if t is None else float(t.window_us)
        applied.append(_saved(before, after))
        before = after
    return GraphProjection(alone.base_us, alone.savings, tuple(applied), float(before),
                           alone.trace_us if alone.trace_us is not None else alone.base_us)


def together_savings(ctx: RuleContext, results: Sequence[RuleResult], sets: Sequence[tuple[int, ...]],
                     alone: GraphAlone | None) -> list[tuple[float, float] | None]:
    """Per result, the saving (window µs, and as a share of the window in percent) of it and the
    results ``sets`` names for it applied together — one fix that resolves several findings
    (:mod:`.same_fix`); None where its set is empty. Re-timed on the dependency graph (``alone``,
    in the order of ``results``: each node changed once) when there is one, else the subtraction of
    :func:`project` over the set (no kernel saved twice). A set shared by several results is worked
    out once."""
    done: dict[tuple[int, ...], tuple[float, float] | None] = {}
    out: list[tuple[float, float] | None] = []
    for i, others in enumerate(sets):
        if not others:
            out.append(None)
            continue
        members = tuple(sorted({i, *others}))
        if members not in done:
            done[members] = _together(ctx, results, members, alone)
        out.append(done[members])
    return out


def _together(ctx: RuleContext, results: Sequence[RuleResult], members: tuple[int, ...],
              alone: GraphAlone | None) -> tuple[float, float] | None:
    if alone is not None:
        timing = depgraph.retime(alone.graph, _with(alone.baseline, [alone.changes[k] for k in members],
                                                    alone.graph.size))
        if timing.converged:  # as Finding.graph_saving_pct: a share of the window the graph starts from
            saved, base = _saved(alone.base_us, float(timing.window_us)), alone.base_in(ctx.total_us)
            return saved, (100.0 * saved / base if base > 0 else 0.0)
    total = ctx.total_us
    saved = project(ctx, [results[k] for k in members]).saved_us
    return saved, (100.0 * saved / total if total > 0 else 0.0)


def graph_project(ctx: RuleContext, results: Sequence[RuleResult], graph: Graph | None = None) -> GraphProjection | None:
    """Each result's saving on the dependency graph, and the top ``PROJECTED_FINDINGS`` together
    (in the order given)."""
    alone = graph_alone(ctx, results, graph)
    return graph_together(alone) if alone is not None else None


def with_graph(projection: WhatIf, graph: GraphProjection) -> WhatIf:
    """The subtraction's ``projection`` with the graph's figures beside it.

    The graph's saving is measured against the window the graph reproduces (``graph.base_us``,
    the trace's own window but for collectives re-synchronised across ranks), and the projected
    window is the diagnosis' window less that saving, so both models share one starting point."""
    applied = tuple(dataclasses.replace(a, graph_applied_us=g) for a, g in zip(projection.findings, graph.applied))
    saved = float(graph.base_us - graph.projected_us)
    trace = graph.trace_us or graph.base_us
    base = float(projection.total_us * graph.base_us / trace) if trace > 0 else float(projection.total_us)
    projected = float(max(0.0, base - saved))
    return dataclasses.replace(projection, findings=applied, graph_projected_us=projected, graph_saved_us=saved,
                               graph_speedup=float(base / projected) if projected > 0 else None,
                               graph_base_us=base, unclaimed_us=_graph_unclaimed(projection, applied))


def _graph_unclaimed(projection: WhatIf, applied: Sequence[AppliedFinding]) -> dict[str, float]:
    """Per time class, what the findings leave as the graph counts them: each finding's per-class take
    in the subtraction scaled by the share of it the graph counted (``graph_applied_us`` ÷ its take).
    A finding the graph re-times to nothing (the step waits elsewhere) then leaves its class unclaimed,
    and "Not addressed" says so, as the projection does."""
    takes = getattr(projection, "_class_takes", None)
    if takes is None or len(takes) != len(applied):
        return dict(projection.unclaimed_us)
    left = dict(projection.unclaimed_us)
    for take, a in zip(takes, applied):
        got = sum(take.values())
        if got <= 0 or a.graph_applied_us is None:
            continue
        counted = min(1.0, max(0.0, float(a.graph_applied_us) / got))
        for key, part in take.items():
            left[key] = left.get(key, 0.0) + part * (1.0 - counted)  # given back to its class
    return {k: float(v) for k, v in left.items()}


def change_for(ctx: RuleContext, graph: Graph, result: RuleResult) -> Change:
    """What ``result``'s fix does to the graph (see the module docstring)."""
    n = graph.size
    scale = np.ones(n)
    idle = max(0.0, float(result.idle_us))
    from_acts = max(0.0, float(result.est_saving_us) - idle) if idle else float(result.est_saving_us)
    nodes, durs = [], []
    for pos, rows in result.acts.items():
        rows = np.unique(np.asarray(rows, dtype=int))
        if not len(rows):
            continue
        ids = graph.node_of_act[pos][rows]
        dur = ctx.analyses[pos].activities["dur"].to_numpy(float)[rows]
        nodes.append(ids[ids >= 0])
        durs.append(dur[ids >= 0])
    if nodes:
        ids, dur = np.concatenate(nodes), np.concatenate(durs)
        total = float(dur.sum())
        if total > 0 and from_acts > 0:
            scale[ids] = 1.0 - min(1.0, from_acts * ctx.ranks / total)
    if idle <= 0:
        return Change(scale=scale)
    effect = result.effect or _EFFECT_OF_KIND.get(result.kind, "host_gaps")
    if effect == "syncs":
        drop = np.zeros(n, dtype=bool)
        drop[graph.dst[graph.kind == depgraph.WAIT]] = True
        return Change(scale=scale, drop_waits=drop)
    return Change(scale=scale, cut=idle_cut(graph, idle * ctx.ranks, loader=effect == "loader"))


_EFFECT_OF_KIND = {FindingKind.SYNC.value: "syncs", FindingKind.DATA_LOADER.value: "loader"}


def idle_cut(graph: Graph, total_us: float | None, loader: bool = False) -> np.ndarray:
    """µs to cut from each host node's gap: its time inside DataLoader spans (``loader``), else its
    time while the device idled outside them (on a CPU trace, where the host is the device: gaps
    shorter than ``DISPATCH_GAP_US`` while no thread ran an op). Scaled so the cuts sum to
    ``total_us`` (summed over ranks) when they hold more; ``None``: every such µs."""
    in_loader = depgraph.gap_overlap(graph, graph.loader_runs)
    if loader:
        cut = in_loader
    else:
        cut = np.maximum(depgraph.gap_overlap(graph, depgraph.device_idle_runs(graph)) - in_loader, 0.0)
        cpu = ~np.asarray(graph.gpu, dtype=bool)[graph.rank]
        cut[cpu & (graph.gap >= DISPATCH_GAP_US)] = 0.0
    held = float(cut.sum())
    if total_us is not None and held > total_us > 0:
        cut = cut * (total_us / held)
    return cut
