"""GPU idle time inside the window: how much, why (HTA's split), and what on the host caused it.

A gap is the time between two busy runs of the device (no kernel, memcpy or memset on any stream).
As in HTA's idle-time breakdown, a gap is *host wait* when the work that ends it was launched only
after the device went idle (the CPU was late), *kernel wait* when it is shorter than
``KERNEL_WAIT_US`` (back-to-back launch overhead), and *other* otherwise (e.g. waiting on an event).
Causes seen on the host are then measured inside the host-wait gaps: synchronisations that ended in
the gap, data-loader spans overlapping it; pageable host-to-device copies are counted on their own.
``sync_in_data_loader_us`` is the part of ``sync_us`` inside data-loader spans (both causes see it).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.diagnose.model import IdleBreakdown, IdleCauses, SyncSite
from bwdiag.diagnose.names import name_matches
from bwdiag.diagnose.timeline import covered_within, merged_runs
from bwdiag.trace import RankTrace

#: Gaps shorter than this between back-to-back kernels are launch overhead. HTA's default
#: ``consecutive_kernel_delay`` is 30 ns in its ns-based frames; Kineto µs traces show 1–3 µs
#: between dependent kernels even when the queue is full, so bwdiag uses 3 µs.
KERNEL_WAIT_US = 3.0

SYNC_CALLS = re.compile(
    r"(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize|cudaStreamWaitEvent|hipStreamWaitEvent|"
    r"cudaMemcpy$|hipMemcpy$|cudaMemcpyDtoH|cuMemcpyDtoH"
)
DATA_LOADER = re.compile(r"DataLoader|_DataLoaderIter|dataloader", re.I)


def device_gaps(acts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's idle gaps of one GPU rank (starts, ends) and, per gap, whether it is host wait:
    the work that ends it was launched after the device went idle (the earliest launch among the
    activities starting then)."""
    gpu = acts[acts["kind"].isin(("kernel", "memcpy", "memset"))] if len(acts) else acts
    if gpu.empty:
        empty = np.zeros(0)
        return empty, empty, np.zeros(0, dtype=bool)
    ts, end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
    run_s, run_e = merged_runs(ts, end)
    gap_s, gap_e = run_e[:-1], run_s[1:]
    keep = gap_e > gap_s
    gap_s, gap_e = gap_s[keep], gap_e[keep]
    first_at = pd.Series(gpu["launch_ts"].to_numpy(float)).groupby(ts).min()
    next_launch = first_at.reindex(gap_e).to_numpy(float)
    return gap_s, gap_e, np.nan_to_num(next_launch, nan=-np.inf) > gap_s


def sync_ended_in(starts: np.ndarray, ends: np.ndarray, runtime: pd.DataFrame | None) -> np.ndarray:
    """Per interval, whether a synchronising runtime call (``SYNC_CALLS``) returned inside it."""
    if runtime is None or not len(runtime) or not len(starts):
        return np.zeros(len(starts), dtype=bool)
    sync_end = np.sort(runtime.loc[name_matches(runtime["name"], SYNC_CALLS), "end"].to_numpy(float))
    if not len(sync_end):
        return np.zeros(len(starts), dtype=bool)
    k = np.searchsorted(sync_end, starts, side="left")
    return (k < len(sync_end)) & (sync_end[np.minimum(k, len(sync_end) - 1)] <= ends)


def idle_breakdown(trace: RankTrace, acts: pd.DataFrame) -> IdleBreakdown:
    """The idle facts of one GPU rank (all times in µs)."""
    gpu = acts[acts["kind"].isin(("kernel", "memcpy", "memset"))]
    if gpu.empty:
        return IdleBreakdown(0.0, 0.0, 0.0, 0, rank=trace.rank)
    gap_s, gap_e, host_wait = device_gaps(acts)
    gap = gap_e - gap_s
    kernel_wait = ~host_wait & (gap < KERNEL_WAIT_US)
    other = ~host_wait & ~kernel_wait

    sync_us = data_loader_us = 0.0
    top_syncs: tuple[SyncSite, ...] = ()
    ops = trace.ops
    loader = ops[name_matches(ops["name"], DATA_LOADER)]
    runs = merged_runs(loader["ts"].to_numpy(float), loader["end"].to_numpy(float)) if len(loader) else None
    sync_in_loader = 0.0
    rt = trace.tables.runtime
    syncs = rt[name_matches(rt["name"], SYNC_CALLS)]
    if len(syncs) and host_wait.any():
        # A host-wait gap is caused by a sync when a sync call returned inside it.
        hs, he = gap_s[host_wait], gap_e[host_wait]
        ended_inside = sync_ended_in(hs, he, rt)
        sync_us = float((he - hs)[ended_inside].sum())
        if runs is not None and ended_inside.any():
            # The same wait seen from both sides: syncs the DataLoader's __next__ made (pageable
            # copies, .item() in a collate). One cause: the data-loader finding reports it.
            sync_in_loader = float(covered_within(hs[ended_inside], he[ended_inside], runs).sum())
    if len(syncs):
        top = syncs.groupby("name")["dur"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(5)
        top_syncs = tuple(SyncSite(n, int(r["count"]), float(r["sum"])) for n, r in top.iterrows())

    if runs is not None and len(gap):
        data_loader_us = float(covered_within(gap_s, gap_e, runs).sum())

    pageable = gpu[(gpu["kind"] == "memcpy") & gpu["name"].str.contains("Pageable", na=False)]
    return IdleBreakdown(
        host_wait_us=float(gap[host_wait].sum()), kernel_wait_us=float(gap[kernel_wait].sum()),
        other_us=float(gap[other].sum()), gaps=int(len(gap)),
        causes=IdleCauses(sync_us, data_loader_us, float(pageable["dur"].sum()), sync_in_loader),
        pageable_memcpy_count=int(len(pageable)), top_syncs=top_syncs, rank=trace.rank)
