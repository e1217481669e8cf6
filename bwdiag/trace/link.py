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
        parent = np.full(len(order), -1, dtype=np.int64)
        stack: list[int] = []
        ends = self.end
        for i in range(len(order)):
            t = self.ts[i]
            while stack and ends[stack[-1]] <= t:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
            stack.append(i)
        self.parent = parent

    def innermost(self, t: float) -> int:
        """Position (into the sorted arrays) of the innermost op enclosing time ``t``, or -1."""
        i = int(np.searchsorted(self.ts, t, side="right")) - 1
        while i >= 0 and self.end[i] < t:
            i = self.parent[i]
        return i


def thread_indexes(ops: pd.DataFrame) -> dict[tuple, _ThreadIndex]:
    out = {}
    if ops.empty:
        return out
    for key, grp in ops.groupby(["pid", "tid"], sort=False, dropna=False):
        out[key] = _ThreadIndex(grp.index.to_numpy(), grp["ts"].to_numpy(), grp["end"].to_numpy())
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
    graph = np.zeros(n, dtype=bool)
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
    rt_index = rt_by_corr.index
    rt_pos = rt_index.get_indexer(pd.array(np.nan_to_num(corr, nan=-1).astype(np.int64), dtype="Int64"))
    rt_pid = rt_by_corr["pid"].to_numpy()
    rt_tid = rt_by_corr["tid"].to_numpy()
    rt_ts = rt_by_corr["ts"].to_numpy()
    rt_dur = rt_by_corr["dur"].to_numpy()
    rt_name = rt_by_corr["name"].to_numpy()
    ext_pos = ext_to_op.index.get_indexer(pd.array(np.nan_to_num(ext, nan=-1).astype(np.int64), dtype="Int64"))
    ext_ops = ext_to_op.to_numpy()
    op_ts = ops["ts"]

    for i in range(n):
        p = rt_pos[i]
        if p >= 0:
            launch_ts[i], launch_dur[i], launch_name[i] = rt_ts[p], rt_dur[p], rt_name[p]
            graph[i] = rt_name[p] in GRAPH_LAUNCH_NAMES
            th = threads.get((rt_pid[p], rt_tid[p]))
            if th is not None:
                j = th.innermost(rt_ts[p])
                if j >= 0:
                    op_col[i], how[i] = th.idx[j], "launch"
                    continue
        elif not np.isnan(corr[i]) and int(corr[i]) in tables.flows:
            pid, tid, fts = tables.flows[int(corr[i])]
            launch_ts[i] = fts
            th = threads.get((pid, tid))
            if th is not None:
                j = th.innermost(fts)
                if j >= 0:
                    op_col[i], how[i] = th.idx[j], "flow"
                    continue
        q = ext_pos[i]
        if q >= 0 and op_ts.at[ext_ops[q]] <= gts[i]:
            op_col[i], how[i] = ext_ops[q], "ext_id"

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
    pos = pd.Series(np.arange(len(ops)), index=ops.index)
    for key, grp in mods.groupby(["pid", "tid"], sort=False, dropna=False):
        th = _ThreadIndex(np.arange(len(grp)), grp["ts"].to_numpy(), grp["end"].to_numpy())
        names = grp["name"].to_numpy()[th.idx]
        paths: list[str | None] = [None] * len(th.idx)
        for i in range(len(th.idx)):  # parents come before children in start order
            p = th.parent[i]
            paths[i] = f"{paths[p]}.{names[i]}" if p >= 0 else names[i]
        sel = (ops["pid"] == key[0]) & (ops["tid"] == key[1])
        for label, t in zip(ops.index[sel], ops.loc[sel, "ts"].to_numpy()):
            j = th.innermost(t)
            if j >= 0:
                module_col[pos[label]] = paths[j]
    ops["module"] = module_col
