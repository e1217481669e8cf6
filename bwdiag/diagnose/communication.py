"""Collectives: what each NCCL/RCCL kernel moves, at what bus bandwidth, and how much of it is exposed.

Bus bandwidth follows the nccl-tests convention (DESIGN.md): all_reduce busbw = algbw·2(n−1)/n;
all_gather, reduce_scatter and all_to_all = algbw·(n−1)/n; broadcast, reduce and send/recv = algbw.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.costs import collective_message
from bwdiag.diagnose.model import CollectiveRow
from bwdiag.diagnose.timeline import covered_within, merged_runs
from bwdiag.hardware import DeviceSpec

_NAME_PATTERNS = (
    (re.compile(r"all_?reduce", re.I), "all_reduce"),
    (re.compile(r"all_?gather", re.I), "all_gather"),
    (re.compile(r"reduce_?scatter", re.I), "reduce_scatter"),
    (re.compile(r"all_?to_?all|alltoall", re.I), "all_to_all"),
    (re.compile(r"send_?recv|sendrecv", re.I), "send_recv"),
    (re.compile(r"broadcast|bcast", re.I), "broadcast"),
    (re.compile(r"(?<!all)(?<!all_)reduce", re.I), "reduce"),
    (re.compile(r"\bsend\b|_send_|Send", re.I), "send"),
    (re.compile(r"\brecv\b|_recv_|Recv", re.I), "recv"),
)


def collective_kind(name: str, args: dict | None = None) -> str:
    """The collective a kernel performs: from ``Collective name`` when present, else its name."""
    if args and isinstance(args.get("Collective name"), str) and args["Collective name"]:
        text = args["Collective name"]
    else:
        text = name
    for pattern, kind in _NAME_PATTERNS:
        if pattern.search(text):
            return kind
    return "unknown"


def bus_factor(collective: str, group_size: int | None) -> float | None:
    if group_size is None or group_size < 1:
        return None
    n = group_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send_recv", "send", "recv"):
        return 1.0
    return None


def exposed_time(acts: pd.DataFrame, is_comm: np.ndarray) -> np.ndarray:
    """Per activity: the part of a collective's time that no compute kernel overlaps (0 for others)."""
    out = np.zeros(len(acts))
    if not is_comm.any():
        return out
    ts, end = acts["ts"].to_numpy(float), acts["end"].to_numpy(float)
    compute = ~is_comm & (acts["kind"].to_numpy() == "kernel")
    runs = merged_runs(ts[compute], end[compute])
    out[is_comm] = (end[is_comm] - ts[is_comm]) - covered_within(ts[is_comm], end[is_comm], runs)
    return out


def collective_rows(acts: pd.DataFrame, rank: int, spec: DeviceSpec, default_group: int | None) -> list[CollectiveRow]:
    """One row per (kernel name, collective, message size) on this rank."""
    is_comm = (acts["category"] == "communication").to_numpy()
    if not is_comm.any():
        return []
    exposed = exposed_time(acts, is_comm)
    comm = acts.loc[is_comm, ["name", "dur", "args"]].copy()
    comm["exposed"] = exposed[is_comm]
    info = [collective_message({**(a or {})}) for a in comm["args"]]
    comm["bytes"] = [i.bytes for i in info]
    comm["group"] = [i.group_size or default_group for i in info]
    comm["dtype"] = [i.dtype for i in info]
    comm["collective"] = [collective_kind(n, a) for n, a in zip(comm["name"], comm["args"])]
    # Missing values become sentinels for grouping (-1 / ""), and None again in the rows.
    comm["bytes"] = comm["bytes"].astype(float).fillna(-1.0)
    comm["group"] = comm["group"].astype(float).fillna(-1.0)
    comm["dtype"] = comm["dtype"].fillna("")
    key = ["name", "collective", "bytes", "group", "dtype"]
    link_bw = spec.interconnect_bandwidth
    rows = []
    for (name, coll, nbytes, group, dtype), grp in comm.groupby(key, sort=False):
        nbytes = None if nbytes < 0 else nbytes
        group = None if group < 0 else group
        dtype = dtype or None
        total = float(grp["dur"].sum())
        count = len(grp)
        algbw = busbw = pct = None
        if nbytes is not None and total > 0:
            algbw = float(nbytes) * count / (total / 1e6)
            factor = bus_factor(coll, None if group is None else int(group))
            if factor is not None:
                busbw = algbw * factor
                if link_bw:
                    pct = 100.0 * busbw / link_bw
        rows.append(
            CollectiveRow(
                name=name, rank=rank, collective=coll, count=count, total_us=total,
                exposed_us=float(grp["exposed"].sum()), bytes=None if nbytes is None else float(nbytes),
                algbw=algbw, busbw=busbw, pct_of_link=pct, group_size=None if group is None else int(group),
                dtype=dtype,
            )
        )
    return sorted(rows, key=lambda r: -r.total_us)
