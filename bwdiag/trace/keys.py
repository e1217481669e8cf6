"""A key per raw trace event that names the table row the loader made of it.

The loader keeps no reference from a table row to the event it came from (the event dicts are freed
as soon as a chunk is tabulated, and the default path stays free of bookkeeping). Where the row has
to go back to its event — ``bwdiag analyze --annotated-trace`` writes the trace back with bwdiag's
classification in each event's ``args`` — the event is found by what the row kept of it, normalised
exactly as :class:`~bwdiag.trace.events.Tabulator` normalises it: its name, its start relative to the
trace's first timestamp (``EventTables.t0_us``; the same float subtraction gives the same bits), its
duration and its track (stream for device activities, pid/tid for CPU ops).

Two events with the same key are indistinguishable to the analysis too: they are paired with their
rows in order.
"""

from __future__ import annotations

from typing import Any

from bwdiag.trace.events import CATEGORY_ALIASES, GPU_KINDS, _id, _key, _num

#: Key tags: device activities (kernels, memcpys, memsets) and CPU ops (cpu_op, user annotations).
GPU, OP = "gpu", "op"


def gpu_key(name: str, ts: float, dur: float, stream: int) -> tuple:
    """The key of a GPU activity row (``ts`` relative, as in the tables)."""
    return (GPU, name, float(ts), float(dur), int(stream))


def op_key(name: str, ts: float, dur: float, pid: Any, tid: Any) -> tuple:
    """The key of a CPU op row (``ts`` relative, as in the tables)."""
    return (OP, name, float(ts), float(dur), pid, tid)


def event_key(ev: Any, t0_us: float) -> tuple | None:
    """The key of a raw event dict, or ``None`` for events that never become an activity row."""
    if type(ev) is not dict:
        return None
    cat = ev.get("cat")
    kind = CATEGORY_ALIASES.get(cat) if type(cat) is str else None
    if kind is None:
        return None
    ts, dur = _num(ev.get("ts")), _num(ev.get("dur"))
    if ts is None or dur is None:
        return None
    name = ev.get("name")
    if type(name) is not str:
        name = str(name)
    if kind in GPU_KINDS:
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        return gpu_key(name, ts - t0_us, dur, _id(args.get("stream", ev.get("tid"))))
    if kind in ("cpu_op", "user_annotation"):
        return op_key(name, ts - t0_us, dur, _key(ev.get("pid")), _key(ev.get("tid")))
    return None
