"""The trace's dependency graph, and its re-timing with changed durations (the what-if's model).

Every piece of work is a node on a *lane* it shares with others, in order: a host thread (its
runtime calls on a GPU trace — launches and synchronisations — or, on a CPU-only trace, its leaf ops),
a GPU stream, a gloo thread. A node starts when the one before it on its lane has ended plus the
*gap* between them (host work between two calls: Python, the dispatcher; a stream's inter-kernel
gap), and not before every cross-lane edge into it allows:

* a kernel starts no earlier than its launch call (plus the launch latency it showed);
* a synchronising call (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, event syncs, a
  blocking ``cudaMemcpy`` — what ``aten::item`` waits in) returns after the device work it waited
  for, plus its own tail; on a CPU trace a ``wait`` op does the same for a gloo collective;
* a device node that started later than its stream and its launch explain waited on another lane:
  the latest node of another lane that ended inside that wait (an event wait across streams, a gloo
  collective waiting for the main thread);
* a collective matched across the ranks analysed together (the k-th of its name) ends the transfer
  time after the last rank arrived.

Re-timing (:func:`retime`) applies the changes a fix makes — durations scaled, host gaps cut, sync
waits dropped — and solves the schedule: each lane is a max-plus recurrence
``end_i = max(end_{i-1} + gap_i + dur_i, ready_i + dur_i)`` solved for all lanes at once with a
cumulative sum and a cumulative max, and the cross-lane readiness is iterated until nothing moves
(monotone from below, so it converges on the earliest schedule; each round costs O(nodes)). With
nothing changed the replay reproduces the trace's own times (this is how the gaps are measured),
except that matched collectives across ranks are re-synchronised. This is Daydream's approach (Zhu
et al., USENIX ATC 2020) on the tables bwdiag already holds; HTA's critical-path analysis builds a
similar graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from bwdiag.diagnose.idle import DATA_LOADER, SYNC_CALLS
from bwdiag.diagnose.names import name_matches
from bwdiag.diagnose.timeline import covered_within, merged_runs

#: A device node that starts more than this after what its stream and its launch explain waited on
#: something else (µs; the same threshold as idle's back-to-back kernel wait).
WAIT_TOL_US = 3.0
#: Launch-to-start latency assumed for kernels whose stream was busy when they were launched, when
#: the trace shows no launch-bound kernel to measure it from (µs).
DEFAULT_LAUNCH_LATENCY_US = 5.0
#: Re-timing gives up after this many rounds (a graph needs about one round per lane change on its
#: longest path); the last schedule is then kept and :attr:`Timing.converged` is False.
MAX_ROUNDS = 5_000

#: CPU-trace ops that block on a gloo collective.
_CPU_WAIT = re.compile(r"wait|barrier|synchron", re.I)

LAUNCH, WAIT, INFERRED, COLLECTIVE = 0, 1, 2, 3


@dataclass(frozen=True)
class Graph:
    """Nodes in lane order (lanes contiguous) and the cross-lane edges into them.

    Per node: ``lane``, ``rank`` (position in the analyses), ``act`` (activity row, -1 for a host
    call), ``host`` (on a host lane: its ``gap`` is host work), ``gap`` and ``dur`` (what the replay
    adds), ``start0``/``end0`` (the trace's times, relative to ``t0``), ``gap_start`` (where the
    gap began in the trace). Edges: ``src`` → ``dst`` with ``lag`` and ``kind``; ``dst`` may start
    at ``end[src] + lag`` (or ``start[src] + lag`` for a collective edge).
    """

    lane: np.ndarray
    rank: np.ndarray
    act: np.ndarray
    host: np.ndarray
    gap: np.ndarray
    dur: np.ndarray
    start0: np.ndarray
    end0: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray
    kind: np.ndarray
    t0: float
    ranks: int
    node_of_act: tuple[np.ndarray, ...]  # per rank: activity row -> node (-1 when not in the graph)
    loader_runs: tuple[tuple[np.ndarray, np.ndarray], ...]  # per rank: DataLoader spans (relative)
    gpu: tuple[bool, ...]  # per rank: a GPU trace (host lanes hold calls) or a CPU-only one

    @property
    def size(self) -> int:
        return len(self.lane)

    def gap_interval(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each node's gap lay in the trace (relative times): ``[start0 - gap, start0)``."""
        return self.start0 - np.maximum(self.gap, 0.0), self.start0


@dataclass(frozen=True)
class Change:
    """What a fix does to the graph: ``scale`` multiplies node durations, ``cut`` removes µs from
    node gaps (never below zero), ``drop_waits`` frees sync/wait nodes from what they waited on."""

    scale: np.ndarray | None = None
    cut: np.ndarray | None = None
    drop_waits: np.ndarray | None = None

    @staticmethod
    def combine(changes: Sequence[Change], n: int) -> Change:
        """Several fixes at once, each node changed once: the smallest scale (two findings on one
        kernel save it once, never the product), any drop, and the cuts added — the findings that
        cut gaps cut disjoint parts of them (inside DataLoader spans, or outside them while the device
        idled; host_bound and launch_overhead never both report) — never past the gap itself
        (:func:`retime` clips)."""
        scale, cut, drop = np.ones(n), np.zeros(n), np.zeros(n, dtype=bool)
        for c in changes:
            if c.scale is not None:
                scale = np.minimum(scale, c.scale)
            if c.cut is not None:
                cut = cut + c.cut
            if c.drop_waits is not None:
                drop |= c.drop_waits
        return Change(scale, cut, drop)


@dataclass(frozen=True)
class Timing:
    start: np.ndarray
    end: np.ndarray
    window_us: float  # mean over ranks of (last activity end - first activity start)
    rounds: int
    converged: bool


# -- building -------------------------------------------------------------------------------------


class _Nodes:
    """Accumulates node columns and edges while the lanes of each rank are laid out."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("lane", "rank", "act", "host", "gap", "dur",
                                                                  "start0", "end0")}
        self.edges: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
        self.n = 0
        self.lanes = 0

    def add(self, lane_key: np.ndarray, rank: int, act: np.ndarray, host: bool, start: np.ndarray,
            end: np.ndarray) -> np.ndarray:
        """Nodes sorted into lanes by ``lane_key`` then start; returns each input row's node id."""
        if not len(start):
            return np.zeros(0, dtype=int)
        codes, _ = pd.factorize(pd.Series(lane_key), sort=True)
        order = np.lexsort((np.arange(len(start)), start, codes))
        lane = codes[order] + self.lanes
        s, e = start[order], end[order]
        first = np.r_[True, lane[1:] != lane[:-1]]
        prev_end = np.r_[0.0, e[:-1]]
        gap = np.where(first, s, s - prev_end)
        ids = np.empty(len(start), dtype=int)
        ids[order] = self.n + np.arange(len(start))
        for k, v in (("lane", lane), ("rank", np.full(len(s), rank)), ("act", act[order]),
                     ("host", np.full(len(s), host)), ("gap", gap), ("dur", e - s), ("start0", s), ("end0", e)):
            self.cols[k].append(np.asarray(v))
        self.n += len(start)
        self.lanes = int(lane.max()) + 1
        return ids

    def edge(self, src, dst, lag, kind: int) -> None:
        if len(src):
            self.edges.append((np.asarray(src, int), np.asarray(dst, int), np.asarray(lag, float), kind))


def build_graph(analyses: Sequence) -> Graph | None:
    """The dependency graph of the analysed ranks (``build.RankAnalysis`` es), None without work."""
    if not analyses or all(a.activities.empty for a in analyses):
        return None
    t0 = min(float(a.activities["ts"].min()) for a in analyses if not a.activities.empty) - 1.0
    nodes = _Nodes()
    node_of_act, loaders, comm = [], [], []
    for pos, a in enumerate(analyses):
        acts = a.activities
        n_of = np.full(len(acts), -1, dtype=int)
        if not acts.empty:
            if a.trace.is_gpu:
                _gpu_rank(nodes, pos, a, t0, n_of)
            else:
                _cpu_rank(nodes, pos, a, t0, n_of)
        node_of_act.append(n_of)
        ops = a.trace.ops
        loader = ops[name_matches(ops["name"], DATA_LOADER)] if len(ops) else ops
        loaders.append(merged_runs(loader["ts"].to_numpy(float) - t0, loader["end"].to_numpy(float) - t0)
                       if len(loader) else (np.empty(0), np.empty(0)))
        is_comm = (acts["category"].to_numpy(dtype=object) == "communication") if len(acts) else np.zeros(0, bool)
        comm.append((n_of[is_comm], acts["name"].to_numpy(dtype=object)[is_comm]))
    cols = {k: np.concatenate(v) if v else np.zeros(0) for k, v in nodes.cols.items()}
    _match_collectives(nodes, comm, cols)
    if nodes.edges:
        src, dst, lag = (np.concatenate([e[i] for e in nodes.edges]) for i in range(3))
        kind = np.concatenate([np.full(len(e[0]), e[3]) for e in nodes.edges])
    else:
        src = dst = kind = np.zeros(0, dtype=int)
        lag = np.zeros(0)
    order = np.argsort(dst, kind="stable")
    return Graph(cols["lane"].astype(int), cols["rank"].astype(int), cols["act"].astype(int),
                 cols["host"].astype(bool), cols["gap"].astype(float), cols["dur"].astype(float),
                 cols["start0"].astype(float), cols["end0"].astype(float), src[order].astype(int),
                 dst[order].astype(int), lag[order].astype(float), kind[order].astype(int), t0, len(analyses),
                 tuple(node_of_act), tuple(loaders), tuple(bool(a.trace.is_gpu) for a in analyses))


def _gpu_rank(nodes: _Nodes, pos: int, a, t0: float, n_of: np.ndarray) -> None:
    """Host lanes of launch and sync calls; device lanes of streams; launch, wait and inferred edges."""
    acts = a.activities
    dev = np.flatnonzero(acts["kind"].isin(("kernel", "memcpy", "memset")).to_numpy())
    gpu = a.trace.gpu
    corr = gpu["correlation"].to_numpy()[dev] if len(gpu) == len(acts) and "correlation" in gpu else None
    rt = a.trace.tables.runtime
    is_sync = name_matches(rt["name"], SYNC_CALLS) if len(rt) else np.zeros(0, bool)
    launcher = rt["correlation"].isin(pd.Series(corr).dropna()).to_numpy() if corr is not None and len(rt) \
        else np.zeros(len(rt), bool)
    calls = rt[launcher | is_sync] if len(rt) else rt
    if len(calls):  # a runtime call and its driver call share a correlation: keep the first
        calls = calls[~(calls["correlation"].duplicated() & calls["correlation"].notna())]
    # map(str), not astype(str): astype keeps a missing tid missing (NaN), and NaN + "@0" is a TypeError
    h_ids = nodes.add(calls["tid"].map(str).to_numpy(dtype=object) + f"@{pos}", pos, np.full(len(calls), -1), True,
                      calls["ts"].to_numpy(float) - t0, calls["end"].to_numpy(float) - t0)
    h_sync = name_matches(calls["name"], SYNC_CALLS) if len(calls) else np.zeros(0, bool)

    s0 = acts["ts"].to_numpy(float)[dev] - t0
    e0 = acts["end"].to_numpy(float)[dev] - t0
    streams = acts["stream"].to_numpy()[dev]
    d_ids = nodes.add(np.asarray([f"s{s}@{pos}" for s in streams], dtype=object), pos, dev, False, s0, e0)
    n_of[dev] = d_ids
    cols = {k: np.concatenate(v) for k, v in nodes.cols.items()}
    gap, lane = cols["gap"], cols["lane"]
    first = np.r_[True, lane[1:] != lane[:-1]]

    # Launch edges: the call that launched each device node (by correlation).
    call_of = np.full(len(dev), -1, dtype=int)
    if corr is not None and len(calls):
        by_corr = pd.Series(h_ids, index=calls["correlation"].to_numpy())
        by_corr = by_corr[~by_corr.index.duplicated()]
        call_of = by_corr.reindex(corr).fillna(-1).to_numpy(int)
    has_call = call_of >= 0
    launch_ts = np.where(has_call, cols["start0"][np.maximum(call_of, 0)], np.nan)
    lane_first = first[d_ids]
    prev_end = np.where(lane_first, -np.inf, cols["end0"][np.maximum(d_ids - 1, 0)])
    bound = has_call & (launch_ts >= prev_end)  # launched after its stream went idle
    lat = s0 - launch_ts
    typical = float(np.median(lat[bound])) if bound.any() else DEFAULT_LAUNCH_LATENCY_US
    typical = min(max(typical, 0.0), 50.0)
    b = np.where(bound, lat, np.minimum(typical, lat))
    # What the stream and the launch explain; a later start waited on another lane.
    explained = np.maximum(prev_end, np.where(has_call, launch_ts + np.minimum(lat, typical), -np.inf))
    gap[d_ids[has_call & lane_first]] = 0.0
    gap[d_ids[bound]] = np.minimum(gap[d_ids[bound]], 0.0)  # the launch explains the start
    late = s0 - explained > WAIT_TOL_US
    if late.any():
        src, lag = _inferred(streams, s0, e0, d_ids, late, explained)
        ok = src >= 0
        nodes.edge(src[ok], d_ids[late][ok], lag[ok], INFERRED)
        fixed = np.flatnonzero(late)[ok]
        gap[d_ids[fixed]] = np.minimum(gap[d_ids[fixed]], 0.0) * ~lane_first[fixed]
        b[fixed] = np.minimum(lat[fixed], typical)
    # Launch edges. A launch from a call that also waits (a blocking cudaMemcpy) is measured from
    # the call's lane predecessor, so the call's wait and its own launch make no cycle.
    is_sync_node = np.zeros(len(gap), dtype=bool)
    is_sync_node[h_ids[h_sync]] = True
    via_prev = has_call & is_sync_node[np.maximum(call_of, 0)]
    direct = has_call & ~via_prev
    nodes.edge(call_of[direct], d_ids[direct], b[direct] - cols["dur"][call_of[direct]], LAUNCH)
    pv = via_prev & ~first[np.maximum(call_of, 0)]
    nodes.edge(call_of[pv] - 1, d_ids[pv], gap[call_of[pv]] + b[pv], LAUNCH)

    # Sync calls: wait for the device node that ended last before the call returned.
    sy = np.flatnonzero(h_sync)
    if len(sy) and len(dev):
        order = np.argsort(e0, kind="stable")
        ends = e0[order]
        call_s, call_e = cols["start0"][h_ids[sy]], cols["end0"][h_ids[sy]]
        k = np.searchsorted(ends, call_e + 1.0, side="right") - 1
        has = k >= 0
        aw = np.where(has, d_ids[order][np.maximum(k, 0)], -1)
        aw_end = np.where(has, ends[np.maximum(k, 0)], -np.inf)
        waited = has & (aw_end > call_s)
        w_ids = h_ids[sy][waited]
        tail = call_e[waited] - aw_end[waited]  # under 0 when rounding put the awaited end after the return
        nodes.edge(aw[waited], w_ids, np.minimum(tail, 0.0), WAIT)
        cols["dur"][w_ids] = np.maximum(tail, 0.0)
    for k in ("gap", "dur"):
        _write_back(nodes, k, cols[k])


def _cpu_rank(nodes: _Nodes, pos: int, a, t0: float, n_of: np.ndarray) -> None:
    """Host lanes of leaf ops per thread; gloo threads as device lanes; waits on their collectives."""
    acts = a.activities
    s0 = acts["ts"].to_numpy(float) - t0
    e0 = acts["end"].to_numpy(float) - t0
    tid = acts["stream"].astype(str).to_numpy()
    comm = acts["category"].to_numpy(dtype=object) == "communication"
    comm_tids = set(tid[comm]) - set(tid[~comm])
    on_comm = np.array([t in comm_tids for t in tid], dtype=bool)
    rows_h, rows_c = np.flatnonzero(~on_comm), np.flatnonzero(on_comm)
    h_ids = nodes.add(np.asarray([f"{t}@{pos}" for t in tid[rows_h]], dtype=object), pos, rows_h, True,
                      s0[rows_h], e0[rows_h])
    c_ids = nodes.add(np.asarray([f"{t}@{pos}" for t in tid[rows_c]], dtype=object), pos, rows_c, False,
                      s0[rows_c], e0[rows_c])
    n_of[rows_h], n_of[rows_c] = h_ids, c_ids
    if not len(rows_c) or not len(rows_h):
        return
    cols = {k: np.concatenate(v) for k, v in nodes.cols.items()}
    gap, dur = cols["gap"], cols["dur"]
    # A gloo collective waits for the main thread to enqueue it: the host node that ended last
    # before it started (when its thread's previous collective does not explain the start).
    cs = cols["start0"][c_ids]
    first = np.r_[True, cols["lane"][1:] != cols["lane"][:-1]]
    prev_end = np.where(first[c_ids], -np.inf, cols["end0"][np.maximum(c_ids - 1, 0)])
    late = cs - prev_end > WAIT_TOL_US
    if late.any():
        he = cols["end0"][h_ids]
        order = np.argsort(he, kind="stable")
        k = np.searchsorted(he[order], cs[late], side="right") - 1
        ok = k >= 0
        src = h_ids[order][np.maximum(k, 0)][ok]
        dst = c_ids[late][ok]
        nodes.edge(src, dst, cols["start0"][dst] - cols["end0"][src], INFERRED)
        gap[dst] = 0.0
    # Host wait ops: a ``wait`` op during which a collective ended waits for it.
    names = acts["name"].to_numpy(dtype=object)[rows_h]
    waits = np.flatnonzero(name_matches(pd.Series(names), _CPU_WAIT))
    if len(waits):
        ce = cols["end0"][c_ids]
        order = np.argsort(ce, kind="stable")
        ws, we = cols["start0"][h_ids[waits]], cols["end0"][h_ids[waits]]
        k = np.searchsorted(ce[order], we + 1.0, side="right") - 1
        ok = (k >= 0)
        aw_end = np.where(ok, ce[order][np.maximum(k, 0)], -np.inf)
        ok &= aw_end > ws
        w_ids = h_ids[waits][ok]
        tail = we[ok] - aw_end[ok]
        nodes.edge(c_ids[order][k[ok]], w_ids, np.minimum(tail, 0.0), WAIT)
        dur[w_ids] = np.maximum(tail, 0.0)
    for k in ("gap", "dur"):
        _write_back(nodes, k, cols[k])


def _write_back(nodes: _Nodes, key: str, values: np.ndarray) -> None:
    nodes.cols[key] = [values.copy()]
    for k in nodes.cols:  # keep every column as one array (the next rank appends to it)
        if len(nodes.cols[k]) > 1:
            nodes.cols[k] = [np.concatenate(nodes.cols[k])]


def _inferred(streams, s0, e0, ids, late, explained) -> tuple[np.ndarray, np.ndarray]:
    """For the late device nodes: the node of another stream that ended last at or before their
    start (and after what explains them), and the lag from its end to their start."""
    idx = np.flatnonzero(late)
    src = np.full(len(idx), -1, dtype=int)
    lag = np.zeros(len(idx))
    for s in np.unique(streams[idx]):
        mine = streams[idx] == s
        other = np.flatnonzero(streams != s)
        if not len(other):
            continue
        order = other[np.argsort(e0[other], kind="stable")]
        k = np.searchsorted(e0[order], s0[idx[mine]] + 1e-9, side="right") - 1
        cand = order[np.maximum(k, 0)]
        ok = (k >= 0) & (e0[cand] > explained[idx[mine]] - 1e-9)
        src[np.flatnonzero(mine)[ok]] = ids[cand[ok]]
        lag[np.flatnonzero(mine)[ok]] = s0[idx[mine]][ok] - e0[cand[ok]]
    return src, lag


def _match_collectives(nodes: _Nodes, comm: list, cols: dict) -> None:
    """Collectives of several ranks analysed together: the k-th of each name on every rank is one
    collective; it ends the transfer time (the shortest of its durations: that rank waited for no
    one) after the last rank started it."""
    have = [(ids, names) for ids, names in comm if len(ids)]
    if len(have) < 2 or len(have) != len(comm):
        return
    per_name: dict[str, list[np.ndarray]] = {}
    for ids, names in have:
        order = np.argsort(cols["start0"][ids], kind="stable")
        ids, names = ids[order], names[order]
        for name in np.unique(names.astype(str)):
            per_name.setdefault(name, []).append(ids[names.astype(str) == name])
    dur = cols["dur"]
    for name, lists in per_name.items():
        if len(lists) != len(have) or len({len(x) for x in lists}) != 1:
            continue
        group = np.vstack(lists)  # ranks × occurrences
        transfer = dur[group].min(axis=0)
        for i in range(len(group)):
            dur[group[i]] = transfer
            for j in range(len(group)):
                if i != j:
                    nodes.edge(group[j], group[i], np.zeros(group.shape[1]), COLLECTIVE)
    nodes.cols["dur"] = [dur]


# -- re-timing ------------------------------------------------------------------------------------


def retime(g: Graph, change: Change | None = None) -> Timing:
    """The schedule of ``g`` with ``change`` applied (the trace's own schedule without one)."""
    change = change or Change()
    n = g.size
    d = g.dur * (change.scale if change.scale is not None else 1.0)
    a = g.gap - (np.minimum(change.cut, np.maximum(g.gap, 0.0)) if change.cut is not None else 0.0)
    c = a + d
    lane_first = np.r_[True, g.lane[1:] != g.lane[:-1]] if n else np.zeros(0, bool)
    seg = np.cumsum(lane_first) - 1
    csum = np.cumsum(c)
    base = (csum - c)[lane_first][seg]
    C = csum - base  # per-lane cumulative sum
    keep = np.ones(len(g.src), dtype=bool)
    if change.drop_waits is not None and len(g.src):
        keep = ~((g.kind == WAIT) & change.drop_waits[g.dst])
    src, dst, lag, s2s = g.src[keep], g.dst[keep], g.lag[keep], g.kind[keep] == COLLECTIVE
    starts_at = np.r_[0, np.flatnonzero(dst[1:] != dst[:-1]) + 1] if len(dst) else np.zeros(0, int)
    targets = dst[starts_at] if len(dst) else np.zeros(0, int)
    span = float(np.abs(C).max() + np.abs(g.start0).max() + np.abs(g.lag).max(initial=0.0) + 1.0) * 4 if n else 1.0
    offset = seg * span

    ready = np.full(n, -np.inf)
    end = start = np.zeros(n)
    rounds, converged = 0, False
    while rounds < MAX_ROUNDS:
        rounds += 1
        q = np.where(np.isfinite(ready), ready + d - C, -span / 2)
        end = C + np.maximum(0.0, np.maximum.accumulate(q + offset) - offset)
        start = end - d
        if not len(dst):
            converged = True
            break
        val = np.where(s2s, start[src], end[src]) + lag
        new = np.full(n, -np.inf)
        new[targets] = np.maximum.reduceat(val, starts_at)
        if np.all((new <= ready + 1e-9) | ~np.isfinite(new)):
            converged = True
            break
        ready = np.maximum(ready, new)
    window = _window(g, start, end)
    return Timing(start, end, window, rounds, converged)


def _window(g: Graph, start: np.ndarray, end: np.ndarray) -> float:
    """Mean over ranks of the span of the activities (what the diagnosis calls the window)."""
    total = 0.0
    for pos, ids in enumerate(g.node_of_act):
        ids = ids[ids >= 0]
        if len(ids):
            total += float(end[ids].max() - start[ids].min())
    return total / max(1, g.ranks)


def gap_overlap(g: Graph, runs: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """µs of each host node's gap that lies inside ``runs`` (per rank, relative times)."""
    out = np.zeros(g.size)
    gs, ge = g.gap_interval()
    for pos, (rs, re_) in enumerate(runs):
        sel = np.flatnonzero(g.host & (g.rank == pos) & (ge > gs))
        if len(sel) and len(rs):
            out[sel] = covered_within(gs[sel], ge[sel], (rs, re_))
    return out


def device_idle_runs(g: Graph) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per rank, the stretches inside the window where no device node ran (GPU ranks) or no node at
    all ran (CPU ranks: the host is the device), in the trace's own times."""
    out = []
    for pos in range(g.ranks):
        mine = (g.rank == pos) & (g.act >= 0)
        if g.gpu[pos]:
            mine &= ~g.host
        s, e = merged_runs(g.start0[mine], g.end0[mine])
        out.append((e[:-1], s[1:]) if len(s) > 1 else (np.empty(0), np.empty(0)))
    return out

