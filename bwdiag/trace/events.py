"""Split a trace's events into columnar tables, normalised across Kineto versions.

One pass over the events; only the fields bwdiag uses are kept, so the big per-event dicts can be
freed as soon as this returns. Categories are normalised (``Kernel`` → ``kernel``, ``Runtime`` →
``cuda_runtime``, ``Memcpy`` → ``gpu_memcpy`` …) and times are kept in float µs relative to the
trace's first timestamp, so 17-digit absolute timestamps do not lose precision in arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# Kineto category spellings over the versions → the names used here.
CATEGORY_ALIASES = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "Memset": "gpu_memset",
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_runtime",
    "Driver": "cuda_runtime",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",
    "ac2g": "ac2g",
}
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

# Args copied from GPU activities (kernels carry collective details in newer traces).
_GPU_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "bytes",
    "kind",
)


@dataclass
class EventTables:
    """The events of one trace, as tables. Times are µs relative to ``t0_us`` (absolute)."""

    gpu: pd.DataFrame  # kernels, memcpys, memsets
    ops: pd.DataFrame  # cpu_op events (and user annotations) with their shape args
    runtime: pd.DataFrame  # cuda/hip runtime and driver calls
    annotations: pd.DataFrame  # user_annotation / gpu_user_annotation (ProfilerStep#N …)
    modules: pd.DataFrame  # python_function events of nn.Module forwards
    flows: dict[int, tuple[int, int, float]]  # ac2g start: correlation → (pid, tid, ts)
    t0_us: float
    skipped: dict[str, int] = field(default_factory=dict)  # malformed events by reason
    unknown_categories: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)  # kept events with a field missing, by field


# Bounds beyond which a time is garbage, not a measurement: a year-long event, a timestamp past 5000 AD.
_MAX_US = 3.2e13
_MAX_TS_US = 1e17
_ID_TYPES = (int, str, float, type(None))
_INT64 = 2.0**63


def _id(value):
    """A pid/tid usable as a dict key: odd values (lists, dicts) become their text."""
    return value if value.__class__ in _ID_TYPES else repr(value)


def _num(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            return None
        return out if math.isfinite(out) else None
    return None


def _int(value) -> int | None:
    num = _num(value)
    return int(num) if num is not None and -_INT64 <= num < _INT64 else None  # ids outside int64 are garbage


def tabulate(events: list) -> EventTables:
    """Build the tables from a list of raw event dicts (anything malformed is counted and skipped)."""
    gpu_rows: list[tuple] = []
    op_rows: list[tuple] = []
    rt_rows: list[tuple] = []
    ann_rows: list[tuple] = []
    mod_rows: list[tuple] = []
    flows: dict[int, tuple[int, int, float]] = {}
    skipped: dict[str, int] = {}
    unknown: dict[str, int] = {}
    no_args = 0

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    t0 = math.inf
    aliases = CATEGORY_ALIASES
    for ev in events:
        if not isinstance(ev, dict):
            skip("not an object")
            continue
        cat = ev.get("cat")
        kind = aliases.get(cat) if isinstance(cat, str) else None
        if kind is None:
            if isinstance(cat, str) and ev.get("ph") == "X":
                unknown[cat] = unknown.get(cat, 0) + 1
            continue
        ts = _num(ev.get("ts"))
        if ts is None:
            skip("missing ts")
            continue
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
            no_args += kind in GPU_KINDS or kind == "cuda_runtime"
        if kind == "ac2g":
            if ev.get("ph") == "s":
                fid = _int(ev.get("id"))
                if fid is not None:
                    flows[fid] = (_id(ev.get("pid")), _id(ev.get("tid")), ts)
            continue
        dur = _num(ev.get("dur"))
        if dur is None:
            skip("missing dur")
            continue
        if dur < 0:
            skip("negative dur")
            continue
        if dur > _MAX_US or abs(ts) > _MAX_TS_US:
            skip("implausible ts or dur")
            continue
        t0 = ts if ts < t0 else t0
        name = ev.get("name")
        if not isinstance(name, str):
            name = str(name)
        pid, tid = ev.get("pid"), ev.get("tid")
        if pid.__class__ not in _ID_TYPES or tid.__class__ not in _ID_TYPES:  # lists/dicts: unhashable
            pid, tid = _id(pid), _id(tid)
        if kind in GPU_KINDS:
            grid = args.get("grid")
            blocks = None
            if isinstance(grid, list) and grid and all(isinstance(g, (int, float)) for g in grid):
                blocks = _int(math.prod(grid))
            gpu_rows.append(
                (
                    name,
                    GPU_KINDS[kind],
                    ts,
                    dur,
                    _int(args.get("device", pid)),
                    _int(args.get("stream", tid)),
                    _int(args.get("correlation")),
                    _int(args.get("External id")),
                    blocks,
                    {k: args[k] for k in _GPU_ARGS if k in args} or None,
                )
            )
        elif kind == "cpu_op" or kind == "user_annotation":
            op_rows.append(
                (
                    name,
                    kind,
                    ts,
                    dur,
                    pid,
                    tid,
                    _int(args.get("External id")),
                    args.get("Input Dims"),
                    args.get("Input type"),
                    args.get("Concrete Inputs"),
                    args.get("Input Strides"),
                    {k: args[k] for k in _GPU_ARGS if k in args} or None,
                )
            )
            if kind == "user_annotation":
                ann_rows.append((name, "cpu", ts, dur, pid, tid))
                if name.startswith("nn.Module: "):  # bwdiag run's module spans (capture/annotate.py)
                    mod_rows.append((name[len("nn.Module: ") :], ts, dur, pid, tid))
        elif kind == "cuda_runtime":
            rt_rows.append((name, ts, dur, pid, tid, _int(args.get("correlation")), _int(args.get("External id"))))
        elif kind == "gpu_user_annotation":
            ann_rows.append((name, "gpu", ts, dur, pid, tid))
        elif kind == "python_function":
            if name.startswith("nn.Module: "):
                mod_rows.append((name[len("nn.Module: ") :], ts, dur, pid, tid))

    if t0 is math.inf:
        t0 = 0.0
    gpu = pd.DataFrame(
        gpu_rows,
        columns=["name", "kind", "ts", "dur", "device", "stream", "correlation", "ext_id", "blocks", "args"],
    )
    ops = pd.DataFrame(
        op_rows,
        columns=["name", "cat", "ts", "dur", "pid", "tid", "ext_id", "dims", "types", "concrete", "strides", "args"],
    )
    runtime = pd.DataFrame(rt_rows, columns=["name", "ts", "dur", "pid", "tid", "correlation", "ext_id"])
    annotations = pd.DataFrame(ann_rows, columns=["name", "side", "ts", "dur", "pid", "tid"])
    modules = pd.DataFrame(mod_rows, columns=["name", "ts", "dur", "pid", "tid"])
    for df in (gpu, ops, runtime, annotations, modules):
        df["ts"] = df["ts"].astype("float64") - t0
        df["dur"] = df["dur"].astype("float64")
        df["end"] = df["ts"] + df["dur"]
    for df, cols in ((gpu, ["correlation", "ext_id", "blocks", "device", "stream"]), (ops, ["ext_id"]),
                     (runtime, ["correlation", "ext_id"])):
        for col in cols:
            df[col] = pd.array(df[col], dtype="Int64")
    flows = {k: (p, t, ts - t0) for k, (p, t, ts) in flows.items()}
    repaired = {"args": no_args} if no_args else {}
    return EventTables(gpu, ops, runtime, annotations, modules, flows, t0, skipped, unknown, repaired)
