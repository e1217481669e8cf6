"""Link each GPU activity (kernel, memcpy, memset) to the CPU op that launched it, and ops to modules.

The launch is found through the activity's ``correlation`` (the runtime/driver call with the same
correlation id: ``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``hipExtModuleLaunchKernel``,
``cudaGraphLaunch`` …), else the ``ac2g`` flow start, and the op is the innermost ``cpu_op`` that
encloses the launch on the launching thread. ``External id`` is used only when the launch is absent:
in older Kineto versions the kernel's External id is the correlation id, not the op's id, so it is
accepted only for an op that started before the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwdiag.trace.events import EventTables

GRAPH_LAUNCH_NAMES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


@dataclass(frozen=True)
class LinkStats:
    linked_pct: float  # share of GPU activity time linked to an op
    orphans_dropped: int  # activities from before the recorded window, dropped
    orphans_dropped_us: float


class _ThreadIndex:
    """Ops of one thread, sorted, with parent pointers, for innermost-enclosing queries."""

    def __init__(self, idx: np.ndarray, ts: np.ndarray, end: np.ndarray):
        order = np.lexsort((-(end - ts), ts))  # by start, longest first
        self.idx = idx[order]
        self.ts = ts[order]
        self.end = end[order]
        parent = [-1] * len(order)
        stack: list[int] = []
        ends = self.end.tolist()
        for i, t in enumerate(self.ts.tolist()):
            while stack and ends[stack[-1]] <= t:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
            stack.append(i)
        self.parent = np.array(parent, dtype=np.int64)

    def innermost(self, t: float) -> int:
        """Position (into the sorted arrays) of the innermost op enclosing time ``t``, or -1."""
        return int(self.innermost_many(np.array([t], dtype=float))[0])

    def innermost_many(self, t: np.ndarray) -> np.ndarray:
        """:meth:`innermost` for every time in ``t`` at once."""
        i = np.searchsorted(self.ts, t, side="right") - 1
        todo = np.flatnonzero(i >= 0)
        while len(todo):  # climb to the parent while the op ended before t
            todo = todo[self.end[i[todo]] < t[todo]]
            i[todo] = self.parent[i[todo]]
            todo = todo[i[todo] >= 0]
        return i


def thread_indexes(ops: pd.DataFrame) -> dict[tuple, _ThreadIndex]:
    out = {}
    if ops.empty:
        return out
    for key, grp in ops.groupby(["pid", "tid"], sort=False, dropna=False):
        out[key] = _ThreadIndex(grp.index.to_numpy(), grp["ts"].to_numpy(), grp["end"].to_numpy())
    return out


def _by_thread(pids, tids) -> dict[tuple, np.ndarray]:
    """Row positions grouped by (pid, tid)."""
    if len(pids) == 0:
        return {}
    keys = pd.DataFrame({"pid": pids, "tid": tids})
    return keys.groupby(["pid", "tid"], sort=False, dropna=False).indices


def _enclosing(threads: dict[tuple, _ThreadIndex], pids, tids, times: np.ndarray) -> np.ndarray:
    """Row label of the innermost op enclosing each (pid, tid, time), or -1."""
    out = np.full(len(times), -1, dtype=np.int64)
    for key, pos in _by_thread(pids, tids).items():
        th = threads.get(key)
        if th is None:
            continue
        j = th.innermost_many(times[pos])
        hit = j >= 0
        out[pos[hit]] = th.idx[j[hit]]
    return out


def link(tables: EventTables) -> LinkStats:
    """Add ``op`` (row label in ``tables.ops`` or -1), ``link``, ``graph``, launch columns to ``tables.gpu``.

    Also adds ``parent`` and ``module`` columns to ``tables.ops``. Activities with no recorded launch
    that ran before the first recorded launch are spill-over from before the profiling window: they
    are dropped (counted in the returned stats).
    """
    gpu, ops, rt = tables.gpu, tables.ops, tables.runtime
    cpu_ops = ops[ops["cat"] == "cpu_op"]
    threads = thread_indexes(cpu_ops)
    _add_parents(ops, threads)
    _add_modules(tables, threads)

    n = len(gpu)
    op_col = np.full(n, -1, dtype=np.int64)
    how = np.full(n, "none", dtype=object)
    launch_ts = np.full(n, np.nan)
    launch_dur = np.full(n, np.nan)
    launch_name = np.full(n, None, dtype=object)

    rt_by_corr = rt.dropna(subset=["correlation"]).drop_duplicates("correlation", keep="last")
    rt_by_corr = rt_by_corr.set_index("correlation")
    ext_to_op = (
        cpu_ops.dropna(subset=["ext_id"]).drop_duplicates("ext_id").reset_index().set_index("ext_id")["index"]
    )
    corr = gpu["correlation"].to_numpy(dtype="float64", na_value=np.nan)
    ext = gpu["ext_id"].to_numpy(dtype="float64", na_value=np.nan)
    gts = gpu["ts"].to_numpy()

    # 1. The launch: the runtime/driver call with the kernel's correlation id.
    rt_pos = rt_by_corr.index.get_indexer(pd.array(np.nan_to_num(corr, nan=-1).astype(np.int64), dtype="Int64"))
    has_rt = np.flatnonzero(rt_pos >= 0)
    p = rt_pos[has_rt]
    launch_ts[has_rt] = rt_by_corr["ts"].to_numpy()[p]
    launch_dur[has_rt] = rt_by_corr["dur"].to_numpy()[p]
    launch_name[has_rt] = rt_by_corr["name"].to_numpy(dtype=object)[p]
    graph = pd.Series(launch_name, dtype=object).isin(GRAPH_LAUNCH_NAMES).to_numpy()
    found = _enclosing(threads, rt_by_corr["pid"].to_numpy()[p], rt_by_corr["tid"].to_numpy()[p],
                       launch_ts[has_rt])
    op_col[has_rt] = found
    how[has_rt[found >= 0]] = "launch"

    # 2. No launch recorded: the ac2g flow start, when the trace has one for the correlation.
    if tables.flows:
        no_rt = np.flatnonzero((rt_pos < 0) & ~np.isnan(corr))
        flows = tables.flows
        with_flow = [i for i in no_rt if int(corr[i]) in flows]
        if with_flow:
            rows = np.array(with_flow, dtype=np.int64)
            starts = [flows[int(corr[i])] for i in with_flow]
            ftimes = np.array([f[2] for f in starts], dtype=float)
            launch_ts[rows] = ftimes
            found = _enclosing(threads, np.array([f[0] for f in starts], dtype=object),
                               np.array([f[1] for f in starts], dtype=object), ftimes)
            op_col[rows] = found
            how[rows[found >= 0]] = "flow"

    # 3. Still unlinked: the External id, for an op that started before the activity.
    ext_pos = ext_to_op.index.get_indexer(pd.array(np.nan_to_num(ext, nan=-1).astype(np.int64), dtype="Int64"))
    rest = np.flatnonzero((op_col < 0) & (ext_pos >= 0))
    if len(rest):
        cand = ext_to_op.to_numpy()[ext_pos[rest]]
        ok = ops["ts"].reindex(cand).to_numpy() <= gts[rest]
        op_col[rest[ok]] = cand[ok]
        how[rest[ok]] = "ext_id"

    gpu["op"] = op_col
    gpu["link"] = how
    gpu["graph"] = graph
    gpu["launch_ts"] = launch_ts
    gpu["launch_dur"] = launch_dur
    gpu["launch_name"] = launch_name

    # Spill-over: no launch recorded and it ran before the first recorded launch.
    dropped, dropped_us = 0, 0.0
    if n and not np.isnan(launch_ts).all():
        first_launch = np.nanmin(launch_ts)
        spill = (how == "none") & np.isnan(launch_ts) & (gts < first_launch)
        if spill.any():
            dropped, dropped_us = int(spill.sum()), float(gpu.loc[spill, "dur"].sum())
            tables.gpu = gpu = gpu.loc[~spill].reset_index(drop=True)
    total = float(gpu["dur"].sum())
    linked = float(gpu.loc[gpu["op"] >= 0, "dur"].sum())
    return LinkStats(100.0 * linked / total if total else 0.0, dropped, dropped_us)


def _add_parents(ops: pd.DataFrame, threads: dict[tuple, _ThreadIndex]) -> None:
    parent = np.full(len(ops), -1, dtype=np.int64)
    pos = pd.Series(np.arange(len(ops)), index=ops.index)
    for th in threads.values():
        has = th.parent >= 0
        parent[pos[th.idx[has]].to_numpy()] = th.idx[th.parent[has]]
    ops["parent"] = parent
    child_count = pd.Series(parent[parent >= 0]).value_counts()
    ops["children"] = child_count.reindex(ops.index, fill_value=0).to_numpy()


def _add_modules(tables: EventTables, threads: dict[tuple, _ThreadIndex]) -> None:
    """``module`` column on ops: the dotted path of nn.Module forwards enclosing the op, if recorded."""
    ops, mods = tables.ops, tables.modules
    ops["module"] = None
    if mods.empty or ops.empty:
        return
    module_col = np.full(len(ops), None, dtype=object)
    op_threads = _by_thread(ops["pid"].to_numpy(), ops["tid"].to_numpy())
    op_ts = ops["ts"].to_numpy()
    for key, grp in mods.groupby(["pid", "tid"], sort=False, dropna=False):
        pos = op_threads.get(key)
        if pos is None:
            continue
        th = _ThreadIndex(np.arange(len(grp)), grp["ts"].to_numpy(), grp["end"].to_numpy())
        names = grp["name"].to_numpy()[th.idx]
        paths: list[str | None] = [None] * len(th.idx)
        for i in range(len(th.idx)):  # parents come before children in start order
            p = th.parent[i]
            paths[i] = f"{paths[p]}.{names[i]}" if p >= 0 else names[i]
        j = th.innermost_many(op_ts[pos])
        hit = j >= 0
        paths_arr = np.array(paths + [None], dtype=object)
        module_col[pos[hit]] = paths_arr[j[hit]]
    ops["module"] = module_col
