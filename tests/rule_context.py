"""Build a findings :class:`RuleContext` by hand — a few ops, a few kernels — without loading a trace.

A rule reads three things per rank (what :class:`bwdiag.diagnose.build.RankAnalysis` holds):
``trace.ops`` (the CPU ops: name, parent, shapes, dtypes, strides, time range, thread), ``activities``
(one row per kernel / memcpy / CPU op, with its op, category, bound, bytes, FLOPs) and ``groups``
(activities grouped as the kernel table shows them, placed on the roofline). Write the ops and the
kernels; :func:`rank` groups them with the real grouping (``kernels.group_activities``) and takes
each group's bound from its kernels and its placement (``pct_of_ceiling``, ``best_time_s``) from
``placement``. :func:`context` wraps ranks in a diagnosis with the window, device and timeline facts.

    ops = [op("aten::mul", dims=[[1024], [1024]], types=["float", "float"])]
    acts = [kernel("mul_kernel", op=0, ts=0, dur=10, category="elementwise", bound="memory", bytes=12288)]
    ctx = context([rank(ops, acts)], total_us=100)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from bwdiag.diagnose.activities import ACTIVITY_COLUMNS
from bwdiag.diagnose.build import RankAnalysis
from bwdiag.diagnose.findings.base import RuleContext
from bwdiag.diagnose.kernels import group_activities
from bwdiag.diagnose.model import (
    TIME_KEYS,
    CollectiveRow,
    CommFit,
    Coverage,
    DeviceInfo,
    IdleBreakdown,
    LaunchStats,
    Diagnosis,
    RankSummary,
    Source,
    TimeBreakdown,
)

A100 = {"peak_flops": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        "vector_flops": {"fp32": 19.5e12}, "memory_bandwidth": 2.0e12}


def op(name: str, *, dims: list | None = None, types: list | None = None, strides: list | None = None,
       parent: int = -1, ts: float = 0.0, end: float | None = None, tid: int = 1, cat: str = "cpu_op",
       module: str | None = None) -> dict:
    """One CPU op (a row of ``trace.ops``); ``parent`` is the index of the enclosing op; ``cat``
    ``"user_annotation"`` for a range such as ``ProfilerStep#1`` or ``Optimizer.step#SGD.step``
    (ranges are no op's parent); ``module`` the path of the nn.Module forward it runs in."""
    return {"name": name, "parent": parent, "dims": dims if dims is not None else [], "types": types or [],
            "strides": strides if strides is not None else [], "ts": float(ts),
            "end": float(ts if end is None else end), "tid": tid, "cat": cat, "module": module}


def kernel(name: str, *, ts: float, dur: float, category: str, bound: str, op: int = -1, bytes: float = np.nan,
           flops: float = np.nan, stream: Any = 7, kind: str = "kernel", dtype: str | None = None,
           tensor: bool = False, module: str | None = None, graph: bool = False) -> dict:
    """One activity row (a GPU kernel unless ``kind`` says otherwise) launched by op ``op`` (-1: none)."""
    return {"name": name, "kind": kind, "ts": float(ts), "dur": float(dur), "end": float(ts + dur),
            "stream": stream, "blocks": np.nan, "op": op, "category": category, "dtype": dtype, "tensor": tensor,
            "flops": float(flops), "bytes": float(bytes), "graph": graph, "link": None, "args": None,
            "launch_ts": np.nan, "launch_dur": np.nan, "module": module, "bound": bound}


def rank(ops: list[dict], acts: list[dict], placement: dict[str, dict] | None = None) -> RankAnalysis:
    """A rank from hand-written ops and activities. ``placement``: kernel name -> roofline columns
    of its group (``pct_of_ceiling``, ``best_time_s``)."""
    ops_df = pd.DataFrame(ops, columns=["name", "parent", "dims", "types", "strides", "ts", "end", "tid", "cat",
                                        "module"])
    ops_df["sig"] = np.arange(len(ops_df))  # every op its own argument signature
    names = ops_df["name"].to_numpy(dtype=object)
    rows = []
    for a in acts:
        a = dict(a)
        a["op_name"] = names[a["op"]] if a["op"] >= 0 else None
        a["shapes"] = str(ops[a["op"]]["dims"]) if a["op"] >= 0 and ops[a["op"]]["dims"] else None
        rows.append(a)
    acts_df = pd.DataFrame(rows, columns=[*ACTIVITY_COLUMNS, "bound"])
    acts_df["op"] = acts_df["op"].astype(np.int64)
    acts_df["tensor"] = acts_df["tensor"].astype(bool)
    acts_df["graph"] = acts_df["graph"].astype(bool)
    groups = group_activities(acts_df) if len(acts_df) else pd.DataFrame(columns=["bound", "category"])
    if len(acts_df):
        groups["bound"] = acts_df.groupby("group")["bound"].first()
        placed = [(placement or {}).get(n, {}) for n in groups["name"]]
        groups["pct_of_ceiling"] = [p.get("pct_of_ceiling") for p in placed]
        groups["best_time_s"] = [p.get("best_time_s", np.nan) for p in placed]
    return RankAnalysis(SimpleNamespace(ops=ops_df), acts_df, groups, time=None)


def collective(name: str, kind: str, *, count: int, total_us: float, exposed_us: float,
               bytes: float | None = None, rank: int = 0) -> CollectiveRow:
    return CollectiveRow(name, rank, kind, count, total_us, exposed_us, bytes, None, None, None)


def _sections(facts: dict) -> dict:
    """``{"idle", "launch", "comm_fit"}`` plain dicts → the Diagnosis' per-rank record fields."""
    out: dict = {}
    if "idle" in facts:
        idle = {"kernel_wait_us": 0.0, "other_us": 0.0, **facts["idle"], "rank": 0}
        out["idle_by_rank"] = (IdleBreakdown.from_dict(idle),)
    if "launch" in facts:
        out["launch_by_rank"] = (LaunchStats.from_dict({**facts["launch"], "rank": 0}),)
    if "comm_fit" in facts:
        out["comm_fits"] = (CommFit.from_dict({"n": 0, "sizes": 1, **facts["comm_fit"]}),)
    return out


def context(ranks: list[RankAnalysis], *, total_us: float, trace_kind: str = "gpu", device: dict | None = None,
            extras: dict | None = None, collectives: tuple = (), step_us: float | None = None,
            busy_us: float | None = None) -> RuleContext:
    """A context over ``ranks``: a ``total_us`` window (mean per rank), the device's peaks
    (default: an A100's dense figures), and the timeline facts in ``extras`` (``idle``, ``launch``,
    ``comm_fit`` as plain dicts, as diagnosis.json writes them; built into the diagnosis' records). The bound-class split of the window
    (which caps the what-if) is each rank's activity time by bound, the rest idle."""
    dev = {**A100, **(device or {})}
    n = max(1, len(ranks))
    by_bound = {k: 0.0 for k in TIME_KEYS}
    for a in ranks:
        for b, d in zip(a.activities["bound"], a.activities["dur"]):
            by_bound[b if b in by_bound else "unknown"] += float(d) / n
    by_bound["idle"] = max(0.0, total_us - sum(by_bound.values()))
    summaries = () if busy_us is None else tuple(
        RankSummary(i, total_us, busy_us, busy_us, 0.0, 0.0, total_us - busy_us, len(a.activities))
        for i, a in enumerate(ranks))
    diagnosis = Diagnosis(
        source=Source(("hand-built",), tuple(range(n)), trace_kind),
        device=DeviceInfo("hand-built device", trace_kind, "user", dev["peak_flops"], dev["memory_bandwidth"], None,
                          vector_flops=dev["vector_flops"]),
        time=TimeBreakdown(total_us, by_bound, 0.0, None, steps=1 if step_us else None, step_us=step_us),
        kernels=(), collectives=tuple(collectives), findings=(), coverage=Coverage(100.0, 100.0),
        warnings=(), ranks=summaries, **_sections(extras or {}))
    return RuleContext(diagnosis, ranks)
