"""Several profiling windows of one process are not several ranks.

``torch.profiler.schedule(..., repeat=2)`` with ``tensorboard_trace_handler`` writes one file per
cycle into the same folder (``<host>_<pid>.<ns>.pt.trace.json``). Read as a folder of ranks they would
become "rank 0" and "rank 1" of a job that never existed, and the step, idle and straggler figures
would compare a process with itself. Files recorded by the same process (same host, same pid, same
rank from ``distributedInfo`` or the file name) are recognised as windows of one rank: the last window is analysed (it is
the furthest from start-up effects) and a warning names the others and how to analyse one of them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

RankTrace = Any  # bwdiag.trace.load.RankTrace (which imports this module)

# tensorboard_trace_handler's default name: f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}"
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<ns>\d{10,})\.pt\.trace\.json(?:\.gz)?$")


def process_key(trace: RankTrace) -> tuple | None:
    """(host, pid, rank-in-trace) of the process that recorded ``trace``; None when unknown."""
    ops = trace.tables.ops
    pid = None
    if len(ops) and "pid" in ops:
        cpu = ops["pid"][ops["cat"] == "cpu_op"] if "cat" in ops else ops["pid"]
        counts = cpu.value_counts()
        if len(counts):
            pid = counts.index[0]
    named = _HANDLER_NAME.match(trace.path.name)
    if pid is None and named:
        pid = int(named["pid"])
    if pid is None:
        return None
    host = trace.metadata.get("host_name") or (named["host"] if named else None)
    if host is None:
        return None  # an unnamed host: the same pid on two machines is two processes
    return (str(host), str(pid), trace.rank)  # the rank from distributedInfo or the file name, -1 if none


def start_ns(trace: RankTrace) -> float:
    """When the window of ``trace`` started (ns): from the handler's file name, else its first event."""
    named = _HANDLER_NAME.match(trace.path.name)
    if named:
        return float(named["ns"])
    return trace.tables.t0_us * 1e3


def one_window_per_process(traces: list[RankTrace], warnings: list[str], *, key=process_key,
                           start=start_ns) -> list[RankTrace]:
    """``traces`` with every process's earlier windows dropped (see module docstring).

    ``key(t)`` and ``start(t)`` default to :func:`process_key` and :func:`start_ns`; the reduce passes
    accessors of rank summaries (which carry both) instead of traces."""
    groups: dict[tuple, list[RankTrace]] = defaultdict(list)
    for t in traces:
        key_ = key(t)
        if key_ is not None:
            groups[key_].append(t)
    dropped: set[int] = set()
    for (host, pid, _), windows in groups.items():
        if len(windows) < 2:
            continue
        windows.sort(key=start)
        kept, earlier = windows[-1], windows[:-1]
        dropped.update(id(t) for t in earlier)
        warnings.append(
            f"{kept.path.name}: {len(windows)} profiling windows of one process (pid {pid} on {host}: "
            "torch.profiler's schedule repeated), not ranks; analysing the last one. Earlier windows "
            f"left out: {', '.join(t.path.name for t in earlier)} (pass one alone to analyse it)"
        )
    return [t for t in traces if id(t) not in dropped]
