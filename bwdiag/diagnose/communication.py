"""Collectives: what each NCCL/RCCL kernel moves, at what bus bandwidth, and how much of it is exposed.

Bus bandwidth follows the nccl-tests convention (DESIGN.md): all_reduce busbw = algbw·2(n−1)/n;
all_gather, reduce_scatter and all_to_all = algbw·(n−1)/n; broadcast, reduce and send/recv = algbw.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.costs import CollectiveMessage, bwdiag_dtype, collective_message, dtype_bytes
from bwdiag.diagnose.model import CollectiveRow, CommFit
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


def collective_kind(name: str | None, args: dict | None = None) -> str:
    """The collective a kernel performs: from ``Collective name`` when present, else its name."""
    if args and isinstance(args.get("Collective name"), str) and args["Collective name"]:
        text = args["Collective name"]
    else:
        text = name or ""
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


#: Below this message size a collective is treated as latency-dominated when no fit is possible.
SMALL_MESSAGE_BYTES = 1 << 20


def message_of(args: dict | None, op: pd.Series | None):
    """The collective's message: from the kernel's args, else its launching op's (record_param_comms),
    else the issuing c10d op's first input tensor (numel × element size)."""
    info = collective_message(args or {})
    if info.bytes is None and op is not None:
        from_op = collective_message(op["args"] or {})
        if from_op.bytes is not None:
            return from_op
        dims, types = op["dims"], op["types"]
        if isinstance(dims, list) and isinstance(types, list):
            for d, t in zip(dims, types):
                size = dtype_bytes(t)
                if isinstance(d, list) and d and size and all(isinstance(x, int) and x >= 0 for x in d):
                    return CollectiveMessage(float(np.prod(d)) * size, bwdiag_dtype(t), info.group_size,
                                             info.collective)
    return info


def annotate_messages(acts: pd.DataFrame, ops: pd.DataFrame) -> None:
    """Give each collective activity its message (``msg_bytes``, ``msg_dtype``, ``msg_group``,
    ``collective``); its ``bytes`` estimate is the message it moves."""
    is_comm = (acts["category"] == "communication").to_numpy()
    acts["msg_bytes"] = np.nan
    acts["msg_dtype"] = None
    acts["msg_group"] = np.nan
    acts["collective"] = None
    if not is_comm.any():
        return
    sub = acts.loc[is_comm]
    info = [message_of(a, ops.loc[o] if o >= 0 else None) for a, o in zip(sub["args"], sub["op"])]
    acts.loc[is_comm, "msg_bytes"] = [np.nan if i.bytes is None else i.bytes for i in info]
    acts.loc[is_comm, "msg_dtype"] = pd.Series([i.dtype for i in info], index=sub.index, dtype=object)
    acts.loc[is_comm, "msg_group"] = [np.nan if i.group_size is None else i.group_size for i in info]
    acts.loc[is_comm, "collective"] = pd.Series(
        [collective_kind(n, a) if i.collective is None else collective_kind(i.collective)
         for n, a, i in zip(sub["name"], sub["args"], info)], index=sub.index, dtype=object)
    acts.loc[is_comm, "bytes"] = acts.loc[is_comm, "msg_bytes"]


def collective_rows(acts: pd.DataFrame, rank: int, spec: DeviceSpec, default_group: int | None) -> list[CollectiveRow]:
    """One row per (kernel name, collective, message size) on this rank (after annotate_messages)."""
    is_comm = (acts["category"] == "communication").to_numpy()
    if not is_comm.any():
        return []
    exposed = exposed_time(acts, is_comm)
    comm = acts.loc[is_comm, ["name", "dur", "collective"]].copy()
    comm["exposed"] = exposed[is_comm]
    # Missing values become sentinels for grouping (-1 / ""), and None again in the rows.
    comm["bytes"] = acts.loc[is_comm, "msg_bytes"].astype(float).fillna(-1.0)
    comm["group"] = acts.loc[is_comm, "msg_group"].astype(float).fillna(-1.0 if default_group is None else default_group)
    comm["dtype"] = acts.loc[is_comm, "msg_dtype"].fillna("")
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


def fit_latency_bandwidth(rows: list[CollectiveRow], min_sizes: int = 3) -> dict[str, CommFit]:
    """Per collective kind, a least-squares fit of per-call time = α + bytes/β over the trace's own
    calls of different message sizes (needs ``min_sizes`` distinct sizes). Times in µs."""
    fits = {}
    by_kind: dict[str, list[CollectiveRow]] = {}
    for r in rows:
        if r.bytes and r.count:
            by_kind.setdefault(r.collective, []).append(r)
    for kind, rs in by_kind.items():
        sizes = np.array([r.bytes for r in rs], float)
        if len(np.unique(sizes)) < min_sizes:
            continue
        per_call = np.array([r.total_us / r.count for r in rs], float)
        weights = np.array([r.count for r in rs], float)
        design = np.stack([np.ones_like(sizes), sizes], axis=1) * np.sqrt(weights)[:, None]
        (alpha, inv_beta), *_ = np.linalg.lstsq(design, per_call * np.sqrt(weights), rcond=None)
        if inv_beta <= 0:
            continue
        fits[kind] = CommFit(collective=kind, alpha_us=float(max(alpha, 0.0)),
                             beta_bytes_per_s=float(1e6 / inv_beta), n=int(weights.sum()),
                             sizes=int(len(np.unique(sizes))))
    return fits


def with_regimes(rows: list[CollectiveRow], fits: dict[str, CommFit]) -> list[CollectiveRow]:
    """Say for each row whether per-call latency or bandwidth dominates its time."""
    import dataclasses

    out = []
    for r in rows:
        regime = None
        fit = fits.get(r.collective)
        if r.bytes is not None:
            if fit:
                transfer_us = r.bytes / fit.beta_bytes_per_s * 1e6
                regime = "latency" if fit.alpha_us >= transfer_us else "bandwidth"
            else:
                regime = "latency" if r.bytes < SMALL_MESSAGE_BYTES else "bandwidth"
        out.append(dataclasses.replace(r, regime=regime))
    return out
