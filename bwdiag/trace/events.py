"""Split a trace's events into columnar tables, normalised across Kineto versions.

One pass over the events; only the fields bwdiag uses are kept, so the big per-event dicts can be
freed as soon as this returns. Categories are normalised (``Kernel`` → ``kernel``, ``Runtime`` →
``cuda_runtime``, ``Memcpy`` → ``gpu_memcpy`` …) and times are kept in float µs relative to the
trace's first timestamp, so 17-digit absolute timestamps do not lose precision in arithmetic.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    import pandas as pd

# numpy and pandas are imported where tables are built, not at module import: the parallel loader's
# worker processes only tabulate (orjson, array), and they start before the analysis imports pandas.

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
    # Accelerators other than CUDA/HIP. Kineto files MTIA's on-device work as ``mtia_ccp_events``
    # (newer libkineto makes MTIA_CCP_EVENTS an alias of CONCURRENT_KERNEL) and its host calls as
    # ``mtia_runtime``; Intel XPU kernels and copies are ``kernel`` / ``gpu_memcpy`` launched from
    # ``xpu_runtime`` / ``xpu_driver``; PrivateUse1 backends likewise. Their device work is device
    # work: it lands in the kernel table, so timeline, idle and overlap count it.
    "mtia_ccp_events": "kernel",
    "mtia_runtime": "cuda_runtime",
    "xpu_runtime": "cuda_runtime",
    "xpu_driver": "cuda_runtime",
    "privateuse1_runtime": "cuda_runtime",
    "privateuse1_driver": "cuda_runtime",
}
#: Categories that say which non-CUDA accelerator a trace ran on (``EventTables.accelerators``).
ACCELERATOR_CATEGORIES = {
    "mtia_ccp_events": "mtia",
    "mtia_runtime": "mtia",
    "xpu_runtime": "xpu",
    "xpu_driver": "xpu",
    "privateuse1_runtime": "privateuse1",
    "privateuse1_driver": "privateuse1",
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
    accelerators: dict[str, int] = field(default_factory=dict)  # "mtia"/"xpu"/... → events seen
    #: ``[memory]`` instant events (profile_memory=True) by the c10 device type they name (0 CPU,
    #: 1 CUDA — HIP builds report 1 too): a trace whose device part is lost still shows the GPU here
    memory_devices: dict[int, int] = field(default_factory=dict)


# Bounds beyond which a time is garbage, not a measurement: a year-long event, a timestamp past 5000 AD.
_MAX_US = 3.2e13
_MAX_TS_US = 1e17
_KEY_TYPES = (int, str, float, type(None))


def _key(value):
    """A pid/tid usable as a dict key: odd values (lists, dicts) become their text."""
    return value if value.__class__ in _KEY_TYPES else repr(value)


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


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MISSING = _INT64_MIN  # sentinel for a missing id in the int64 columns (shown as <NA>)


def _int(value) -> int | None:
    num = _num(value)
    if num is None:
        return None
    out = int(num)
    return out if _INT64_MIN < out <= _INT64_MAX else None


def _id(value) -> int:
    """An id (correlation, External id, device, stream …) as int64, ``_MISSING`` when absent."""
    if type(value) is int and _INT64_MIN < value <= _INT64_MAX:
        return value
    out = _int(value)
    return _MISSING if out is None else out


class _Columns:
    """Column-wise rows of one table: float64 / nullable-int64 arrays and object lists, no row tuples."""

    def __init__(self, floats: tuple[str, ...], ints: tuple[str, ...], objects: tuple[str, ...], order: tuple[str, ...]):
        self.order = order
        self.cols: dict[str, object] = {}
        for c in floats:
            self.cols[c] = array("d")
        for c in ints:
            self.cols[c] = array("q")
        for c in objects:
            self.cols[c] = []
        self.ints = ints

    def frame(self, t0: float) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        data = {}
        for c in self.order:
            col = self.cols[c]
            # Views on the arrays, no copies; the lists are released as soon as the frame holds them.
            if c in self.ints:
                values = np.frombuffer(col, dtype=np.int64) if len(col) else np.empty(0, dtype=np.int64)
                data[c] = pd.arrays.IntegerArray(values, values == _MISSING)
            elif isinstance(col, array):
                data[c] = np.frombuffer(col, dtype=np.float64) if len(col) else np.empty(0)
            else:
                data[c] = col if col else np.empty(0, dtype=object)
        self.cols = {}
        df = pd.DataFrame(data, columns=list(self.order))
        del data
        df["ts"] = df["ts"].astype("float64") - t0
        df["dur"] = df["dur"].astype("float64")
        df["end"] = df["ts"] + df["dur"]
        return df


class Tabulator:
    """Builds :class:`EventTables` from events fed in any number of batches (a streamed file's chunks).

    Only the fields bwdiag uses are kept, as columns; repeated strings (names, ids) and op argument
    signatures (``Input Dims`` …) are shared between rows, so a batch's event dicts can be freed as
    soon as :meth:`add` returns. Feeding a list in one batch or in many gives identical tables.
    """

    def __init__(self) -> None:
        self.gpu = _Columns(("ts", "dur"), ("device", "stream", "correlation", "ext_id", "blocks"),
                            ("name", "kind", "args"),
                            ("name", "kind", "ts", "dur", "device", "stream", "correlation", "ext_id", "blocks", "args"))
        self.ops = _Columns(("ts", "dur"), ("ext_id", "sig"),
                            ("name", "cat", "pid", "tid", "dims", "types", "concrete", "strides", "args"),
                            ("name", "cat", "ts", "dur", "pid", "tid", "ext_id", "dims", "types", "concrete",
                             "strides", "args", "sig"))
        self.runtime = _Columns(("ts", "dur"), ("correlation", "ext_id"), ("name", "pid", "tid"),
                                ("name", "ts", "dur", "pid", "tid", "correlation", "ext_id"))
        self.annotations = _Columns(("ts", "dur"), (), ("name", "side", "pid", "tid"),
                                    ("name", "side", "ts", "dur", "pid", "tid"))
        self.modules = _Columns(("ts", "dur"), (), ("name", "pid", "tid"), ("name", "ts", "dur", "pid", "tid"))
        self.flows: dict[int, tuple[int, int, float]] = {}
        self.skipped: dict[str, int] = {}
        self.unknown: dict[str, int] = {}
        self.accelerators: dict[str, int] = {}
        self.memory_devices: dict[int, int] = {}
        self.no_args = 0  # GPU activities and runtime calls recorded without args
        self.t0 = math.inf
        self._strings: dict = {}  # one object per distinct name / pid / tid value
        self._sigs: dict[bytes, int] = {}  # op argument signature → id
        self._sig_values: list[tuple] = []
        self.events = 0

    def _skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _memory_event(self, args) -> None:
        device = _int(args.get("Device Type")) if type(args) is dict else None
        if device is not None:
            self.memory_devices[device] = self.memory_devices.get(device, 0) + 1

    def _sig(self, dims, types, concrete, strides) -> tuple[int, tuple]:
        """Id and shared objects of one op's argument signature (equal signatures share one copy)."""
        try:
            key = orjson.dumps((dims, types, concrete, strides))
        except (TypeError, orjson.JSONEncodeError):
            self._sig_values.append((dims, types, concrete, strides))
            return len(self._sig_values) - 1, self._sig_values[-1]
        sid = self._sigs.get(key)
        if sid is None:
            sid = self._sigs[key] = len(self._sig_values)
            self._sig_values.append((dims, types, concrete, strides))
        return sid, self._sig_values[sid]

    def add(self, events: list) -> None:
        """Tabulate one batch of raw event dicts (anything malformed is counted and skipped)."""
        # The hot loop of the loader: locals and bound methods only (this runs once per event).
        aliases = CATEGORY_ALIASES
        intern = self._strings.setdefault
        gpu, ops, rt = self.gpu.cols, self.ops.cols, self.runtime.cols
        rt_name, rt_ts, rt_dur, rt_pid, rt_tid, rt_corr, rt_ext = (
            rt[c].append for c in ("name", "ts", "dur", "pid", "tid", "correlation", "ext_id"))
        (op_name, op_cat, op_ts, op_dur, op_pid, op_tid, op_ext, op_dims, op_types, op_conc, op_strides,
         op_args, op_sig) = (ops[c].append for c in ("name", "cat", "ts", "dur", "pid", "tid", "ext_id", "dims",
                                                       "types", "concrete", "strides", "args", "sig"))
        gpu_args, gpu_set = _GPU_ARGS, _GPU_ARGS_SET
        accel_cats, accelerators = ACCELERATOR_CATEGORIES, self.accelerators
        flows = self.flows
        sig = self._sig
        t0 = self.t0
        isfinite = math.isfinite
        lo, hi = _INT64_MIN, _INT64_MAX
        self.events += len(events)
        for ev in events:
            if type(ev) is not dict:
                self._skip("not an object")
                continue
            cat = ev.get("cat")
            kind = aliases.get(cat) if type(cat) is str else None
            if kind is None:
                if isinstance(cat, str) and ev.get("ph") == "X":
                    self.unknown[cat] = self.unknown.get(cat, 0) + 1
                elif cat == "cpu_instant_event" and ev.get("name") == "[memory]":
                    self._memory_event(ev.get("args"))
                continue
            if kind == "ac2g" and ev.get("ph") != "s":
                continue  # flow ends: the start carries the launch thread and time
            ts = ev.get("ts")
            if type(ts) is int:
                ts = float(ts)
            elif type(ts) is not float or not isfinite(ts):
                ts = _num(ts)
                if ts is None:
                    self._skip("missing ts")
                    continue
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
                self.no_args += kind in GPU_KINDS or kind == "cuda_runtime"
            if kind == "ac2g":
                fid = _int(ev.get("id"))
                if fid is not None:
                    flows[fid] = (_key(ev.get("pid")), _key(ev.get("tid")), ts)
                continue
            dur = ev.get("dur")
            if type(dur) is int:
                dur = float(dur)
            elif type(dur) is not float or not isfinite(dur):
                dur = _num(dur)
                if dur is None:
                    self._skip("missing dur")
                    continue
            if dur < 0:
                self._skip("negative dur")
                continue
            if dur > _MAX_US or abs(ts) > _MAX_TS_US:
                self._skip("implausible ts or dur")
                continue
            if ts < t0:
                t0 = ts
            name = ev.get("name")
            if type(name) is not str:
                name = str(name)
            name = intern(name, name)
            pid, tid = ev.get("pid"), ev.get("tid")
            if type(pid) is int or type(pid) is str:
                pid = intern(pid, pid)
            elif pid.__class__ not in _KEY_TYPES:  # lists/dicts: unhashable
                pid = _key(pid)
            if type(tid) is int or type(tid) is str:
                tid = intern(tid, tid)
            elif tid.__class__ not in _KEY_TYPES:
                tid = _key(tid)
            if kind == "cuda_runtime":
                if cat in accel_cats:  # not CUDA/HIP: note which accelerator
                    accelerators[accel_cats[cat]] = accelerators.get(accel_cats[cat], 0) + 1
                rt_name(name)
                rt_ts(ts)
                rt_dur(dur)
                rt_pid(pid)
                rt_tid(tid)
                v = args.get("correlation")
                rt_corr(v if type(v) is int and lo < v <= hi else _id(v))
                v = args.get("External id")
                rt_ext(v if type(v) is int and lo < v <= hi else _id(v))
            elif kind == "cpu_op" or kind == "user_annotation":
                sid, (dims, types, concrete, strides) = sig(
                    args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs"),
                    args.get("Input Strides"))
                op_name(name)
                op_cat(kind)
                op_ts(ts)
                op_dur(dur)
                op_pid(pid)
                op_tid(tid)
                v = args.get("External id")
                op_ext(v if type(v) is int and lo < v <= hi else _id(v))
                op_dims(dims)
                op_types(types)
                op_conc(concrete)
                op_strides(strides)
                op_args({k: args[k] for k in gpu_args if k in args} if args.keys() & gpu_set else None)
                op_sig(sid)
                if kind == "user_annotation":
                    self._annotation(name, "cpu", ts, dur, pid, tid)
                    if name.startswith("nn.Module: "):  # bwdiag run's module spans (capture/annotate.py)
                        self._module(intern(name[11:], name[11:]), ts, dur, pid, tid)
            elif kind in GPU_KINDS:
                if cat in accel_cats:
                    accelerators[accel_cats[cat]] = accelerators.get(accel_cats[cat], 0) + 1
                grid = args.get("grid")
                blocks = _MISSING
                if isinstance(grid, list) and grid and all(isinstance(g, (int, float)) for g in grid):
                    blocks = _id(math.prod(grid))
                gpu["name"].append(name)
                gpu["kind"].append(GPU_KINDS[kind])
                gpu["ts"].append(ts)
                gpu["dur"].append(dur)
                gpu["device"].append(_id(args.get("device", pid)))
                gpu["stream"].append(_id(args.get("stream", tid)))
                gpu["correlation"].append(_id(args.get("correlation")))
                gpu["ext_id"].append(_id(args.get("External id")))
                gpu["blocks"].append(blocks)
                gpu["args"].append({k: args[k] for k in gpu_args if k in args} if args.keys() & gpu_set else None)
            elif kind == "gpu_user_annotation":
                self._annotation(name, "gpu", ts, dur, pid, tid)
            elif kind == "python_function":
                if name.startswith("nn.Module: "):
                    self._module(intern(name[11:], name[11:]), ts, dur, pid, tid)
        self.t0 = t0

    def _module(self, name, ts, dur, pid, tid) -> None:
        mods = self.modules.cols
        mods["name"].append(name)
        mods["ts"].append(ts)
        mods["dur"].append(dur)
        mods["pid"].append(pid)
        mods["tid"].append(tid)

    def _annotation(self, name, side, ts, dur, pid, tid) -> None:
        ann = self.annotations.cols
        ann["name"].append(name)
        ann["side"].append(side)
        ann["ts"].append(ts)
        ann["dur"].append(dur)
        ann["pid"].append(pid)
        ann["tid"].append(tid)

    def detach(self) -> Tabulator:
        """Drop the lookup dicts (not needed once tabulated), to send a worker's part cheaply."""
        self._strings = {}
        self._sigs = {}
        return self

    def merge(self, part: Tabulator) -> None:
        """Append another Tabulator's rows (the next chunk of the same file, tabulated elsewhere)."""
        import numpy as np

        remap = np.array([self._sig(*v)[0] for v in part._sig_values], dtype=np.int64)
        sig = part.ops.cols["sig"]
        if len(sig):
            part.ops.cols["sig"] = array("q", remap[np.frombuffer(sig, dtype=np.int64)].tobytes())
        for mine, theirs in ((self.gpu, part.gpu), (self.ops, part.ops), (self.runtime, part.runtime),
                             (self.annotations, part.annotations), (self.modules, part.modules)):
            for c, col in mine.cols.items():
                col.extend(theirs.cols[c])
        self.flows.update(part.flows)
        for mine, theirs in ((self.skipped, part.skipped), (self.unknown, part.unknown),
                             (self.accelerators, part.accelerators), (self.memory_devices, part.memory_devices)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.t0 = min(self.t0, part.t0)
        self.events += part.events
        self.no_args += part.no_args

    def finish(self) -> EventTables:
        """The tables, with times relative to the earliest timed event."""
        t0 = 0.0 if self.t0 is math.inf else self.t0
        gpu, ops, runtime, annotations, modules = (c.frame(t0) for c in (self.gpu, self.ops, self.runtime,
                                                                          self.annotations, self.modules))
        ops["sig"] = ops["sig"].astype("int64")
        ops = ops[[c for c in ops.columns if c != "sig"] + ["sig"]]
        flows = {k: (p, t, ts - t0) for k, (p, t, ts) in self.flows.items()}
        repaired = {"args": self.no_args} if self.no_args else {}
        return EventTables(gpu, ops, runtime, annotations, modules, flows, t0, self.skipped, self.unknown, repaired,
                           dict(self.accelerators), dict(self.memory_devices))


_HASHABLE = (int, str)
_GPU_ARGS_SET = frozenset(_GPU_ARGS)


def tabulate(events: list) -> EventTables:
    """Build the tables from a list of raw event dicts (anything malformed is counted and skipped)."""
    tab = Tabulator()
    tab.add(events)
    return tab.finish()
