"""Load trace files and folders of rank files into linked, normalised ``RankTrace`` objects."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from bwdiag.errors import TraceError
from bwdiag.trace.events import EventTables, Tabulator
from bwdiag.trace.read import read_trace_file
from bwdiag.trace.salvage import sanitize_args
from bwdiag.trace.sources import CAPTURE_DIR, Source, list_sources, open_source, source_size
from bwdiag.trace.stream import CutRejected, NotStreamable, paused_gc, stream_events
from bwdiag.trace.windows import one_window_per_process
from bwdiag.trace.workers import forkable
from bwdiag.trace.workers import start_pool as _pool

if TYPE_CHECKING:
    import pandas as pd

    from bwdiag.trace.link import LinkStats

# This module imports no pandas: a single big file's chunks are parsed by worker processes forked
# before the caller imports its analysis (``meanwhile``), so neither side waits for the other.

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class RankTrace:
    """One rank's trace: metadata, linked event tables and what loading had to salvage."""

    path: Path
    rank: int
    metadata: dict[str, Any]
    tables: EventTables
    link_stats: LinkStats
    warnings: list[str] = field(default_factory=list)

    @property
    def device_properties(self) -> dict[str, Any] | None:
        """The ``deviceProperties`` entry of the GPU the kernels ran on (first one if unclear)."""
        props = self.metadata.get("deviceProperties")
        if not isinstance(props, list) or not props:
            return None
        devices = self.tables.gpu["device"].dropna()
        if len(devices):
            dev = int(devices.mode().iloc[0])
            for p in props:
                if isinstance(p, dict) and p.get("id") == dev:
                    return p
        return props[0] if isinstance(props[0], dict) else None

    @property
    def is_gpu(self) -> bool:
        return not self.tables.gpu.empty

    @property
    def gpu(self) -> pd.DataFrame:
        return self.tables.gpu

    @property
    def ops(self) -> pd.DataFrame:
        return self.tables.ops


def find_trace_files(paths: Sequence[str | Path]) -> list[Source]:
    """Expand folders, glob patterns and fsspec URLs into their trace files (sorted); refuse paths that
    are missing or hold none. Graph-capture traces (a ``capture_traces/`` sub-folder) price replays:
    they are not ranks. Local files come back as ``Path``, remote ones as
    :class:`~bwdiag.trace.sources.UrlPath`; :func:`load_rank` takes either."""
    return list_sources(
        paths, missing="no such file or folder", skip_dir=CAPTURE_DIR,
        empty="folder holds no trace files (*.json or *.json.gz); "
              "point at the folder torch.profiler's tensorboard_trace_handler wrote")


def load_rank(path: Path, progress: Callable[[int, int], None] | None = None, jobs: int = 1,
              meanwhile: Callable[[], None] | None = None,
              graph_capture: Sequence[Path] | None = None) -> RankTrace:
    """Read, tabulate and link one trace file.

    Clean files are parsed in chunks (:mod:`bwdiag.trace.stream`), so the full list of event dicts
    never exists; a damaged file is read whole by :func:`~bwdiag.trace.read.read_trace_file`, which
    salvages what it can. Both give identical tables. ``progress(done, total)`` reports file bytes.
    With ``jobs`` > 1 a big file's chunks are parsed by that many processes (``jobs`` − 1 workers
    and this one), and ``meanwhile()`` (if given) is called once while the workers have chunks
    queued: the caller's own work runs in parallel with the parse.

    Kernels replayed from a CUDA/HIP graph are aligned with the capture-time trace
    (:mod:`bwdiag.trace.graphs`): ``graph_capture`` files if given, else those in a
    ``capture_traces/`` folder beside ``path``.
    """
    from bwdiag.trace.link import link

    tab = Tabulator()
    try:
        try:
            metadata = _stream(path, tab, progress, jobs, meanwhile)
        except CutRejected:
            tab = Tabulator()
            metadata = stream_events(path, tab.add, progress=progress)
        warnings: list[str] = []
    except NotStreamable:
        with paused_gc():
            raw = read_trace_file(path)
            metadata, warnings = raw.metadata, list(raw.warnings)
            tab = Tabulator()
            tab.add(raw.events)
            del raw.events
    n_events = tab.events
    tables = tab.finish()
    del tab
    _refuse_unusable(path, n_events, tables)
    _check_device_side(path, tables, metadata, warnings)
    _warn_skipped(path, tables, warnings)
    malformed_args = sanitize_args(tables)
    if malformed_args:
        warnings.append(
            f"{path.name}: {malformed_args:,} events have shape or collective args of the wrong form "
            "(e.g. an Input type that is not a string); those args were ignored"
        )
    stats = link(tables)
    if stats.orphans_dropped:
        warnings.append(
            f"{path.name}: {stats.orphans_dropped:,} GPU activities ({stats.orphans_dropped_us / 1e3:,.2f} ms) "
            "ran before the first recorded launch (spill-over from before the profiling window); excluded"
        )
    stats = _align_graph_replays(path, tables, stats, graph_capture, warnings)
    _warn_unlinked(path, tables, warnings)
    rank = _rank_of(path, metadata, warnings)
    clock = _clock_beside(path)
    if clock is not None:
        metadata = {**metadata, "bwdiag_clock": clock}
    capture = metadata.get("bwdiag")
    if isinstance(capture, dict) and isinstance(capture.get("note"), str):  # a short capture
        warnings.append(f"{path.name}: {capture['note']}")
    return RankTrace(path, rank, metadata, tables, stats, warnings)


# Files at least this big (on disk) are parsed by several processes when jobs allow.
PARALLEL_MIN_BYTES = {"gzip": 1 << 20, "plain": 16 << 20}


def _stream(path: Path, tab: Tabulator, progress, jobs: int, meanwhile=None) -> dict[str, Any]:
    try:
        size = source_size(path)
        with open_source(path) as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError:
        size, gz = 0, False
    if jobs <= 1 or size < PARALLEL_MIN_BYTES["gzip" if gz else "plain"] or not forkable():
        return stream_events(path, tab.add, progress=progress)
    with _pool(jobs - 1) as pool:  # this process parses chunks too (stream_events steals queued ones)
        return stream_events(path, tab.add, progress=progress, executor=pool, merge=tab.merge,
                             meanwhile=meanwhile)


#: Share of kernel time not linked to an op above which loading warns.
UNLINKED_WARN_PCT = 5.0


def _refuse_unusable(path: Path, n_events: int, tables: EventTables) -> None:
    """A trace with no kernel, CPU op or runtime call has nothing to diagnose: refuse it."""
    if not (tables.gpu.empty and tables.ops.empty and tables.runtime.empty):
        return
    if n_events == 0:
        raise TraceError(
            f"{path}: the trace holds no events; the profiler recorded nothing: check that the profiled "
            "code ran inside the profiler's active window (schedule and prof.step())"
        )
    detail = ", ".join(f"{n:,} {why}" for why, n in sorted(tables.skipped.items()))
    raise TraceError(
        f"{path}: none of its {n_events:,} events is a CPU op, GPU kernel or runtime call"
        + (f" ({detail})" if detail else "")
        + "; pass a file written by torch.profiler's export_chrome_trace or tensorboard_trace_handler"
    )


_BWDIAG_TRACE = re.compile(r"^(rank\d+)\.pt\.trace\.json(?:\.gz)?$")


def _clock_beside(path) -> dict[str, Any] | None:
    """The steps a bwdiag capture timed after its window (``rank<k>.clock.json`` beside its
    ``rank<k>.pt.trace.json.gz``), or None (another tool's trace, a URL, an unreadable file: the
    analysis then falls back on the steps timed before the window)."""
    m = _BWDIAG_TRACE.match(getattr(path, "name", ""))
    if not m or not isinstance(path, Path):
        return None
    try:
        data = json.loads((path.parent / f"{m.group(1)}.clock.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: Runtime calls that launch device work: with none of their kernels in the trace, the device side is missing.
_LAUNCHES = re.compile(r"(?:cuda|hip|cu)(?:LaunchKernel|LaunchKernelExC|GraphLaunch)|hipExtModuleLaunchKernel|cuLaunchKernelEx")


#: c10's DeviceType of a CUDA (or HIP: ROCm builds report CUDA) device in ``[memory]`` events.
CUDA_DEVICE_TYPE = 1


def _check_device_side(path: Path, tables: EventTables, metadata: dict[str, Any], warnings: list[str]) -> None:
    """A GPU trace (kernel launches recorded, GPUs in ``deviceProperties``, or memory events on a GPU)
    with no device activity:
    refuse a damaged file — it was cut before Kineto's device events, which follow the host's, and
    analysing its host side as a CPU trace would mislead — and warn for an intact one with launches
    (CUPTI recorded nothing: only the host side is analysed)."""
    if not tables.gpu.empty:
        return
    launches = 0 if tables.runtime.empty else \
        int(tables.runtime["name"].astype(str).str.contains(_LAUNCHES).sum())
    gpus = [p for p in (metadata.get("deviceProperties") or []) if isinstance(p, dict)]
    on_gpu = tables.memory_devices.get(CUDA_DEVICE_TYPE, 0)
    if warnings and (launches or gpus or on_gpu):  # the reader salvaged a damaged file
        what = f"{launches:,} kernel launches are recorded but none of their kernels" if launches else \
            f"its deviceProperties list {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} but no GPU activity was recovered" \
            if gpus else f"{on_gpu:,} memory events on a GPU are recorded but no launch or GPU activity was recovered"
        raise TraceError(
            f"{path}: the file is cut or damaged before its GPU activity: {what} (Kineto writes the device "
            "events after the host's); copy the whole file again or re-export it"
        )
    if launches:
        warnings.append(f"{path.name}: {launches:,} kernel launches are recorded but no GPU activity (CUPTI "
                        "recorded no device events): only the host side is analysed, against CPU ceilings")
    elif on_gpu:
        warnings.append(f"{path.name}: {on_gpu:,} memory events on a GPU are recorded but no launch or GPU "
                        "activity (the profiler ran without ProfilerActivity.CUDA): the ops' times are host "
                        "times, analysed against CPU ceilings; record with activities=[CPU, CUDA] to see the GPU")


def _align_graph_replays(path: Path, tables: EventTables, stats: LinkStats,
                         graph_capture: Sequence[Path] | None, warnings: list[str]) -> LinkStats:
    """Price graph replays from the capture-time trace; warn (once) about the replays left unpriced."""
    from bwdiag.trace import graphs

    if not graphs.has_graph_replays(tables):
        return stats
    files = list(graph_capture) if graph_capture else graphs.captures_beside(path)
    captures = []
    for f in files:
        try:
            captures.append(graphs.load_capture(f))
        except TraceError as err:
            if graph_capture:
                raise
            warnings.append(f"{path.name}: capture trace {f} is unreadable, not used ({err})")
    align = graphs.align_replays(tables, captures)
    warnings.extend(graphs.replay_warnings(path, tables, align, files))
    warnings.extend(graphs.ambiguity_warning(path, align))
    if not align.aligned_kernels:
        return stats
    from dataclasses import replace

    gpu = tables.gpu
    total = float(gpu["dur"].sum())
    linked = float(gpu.loc[gpu["op"] >= 0, "dur"].sum())
    return replace(stats, linked_pct=100.0 * linked / total if total else 0.0)


def _warn_unlinked(path: Path, tables: EventTables, warnings: list[str]) -> None:
    """Warn about kernels with no launching op (graph replays have their own warning)."""
    from bwdiag.trace.link import GRAPH_LAUNCH_NAMES

    gpu = tables.gpu
    if gpu.empty or "op" not in gpu:
        return
    kernels = gpu[gpu["kind"] == "kernel"]
    total = float(kernels["dur"].sum())
    unlinked = kernels[(kernels["op"] < 0) & ~kernels["launch_name"].isin(GRAPH_LAUNCH_NAMES)]
    lost = float(unlinked["dur"].sum())
    if total <= 0 or 100.0 * lost / total <= UNLINKED_WARN_PCT:
        return
    amount = f"{lost / 1e3:,.2f} ms" if lost >= 1e3 else f"{lost:,.1f} µs"
    no_launch = int(unlinked["launch_ts"].isna().sum()) if "launch_ts" in unlinked else len(unlinked)
    why = []
    if no_launch:
        why.append(f"{no_launch:,} have no launch event in the trace")
    if len(unlinked) - no_launch:
        why.append(f"{len(unlinked) - no_launch:,} were launched outside any recorded CPU op")
    if no_launch and tables.runtime.empty:
        advice = (". The trace records no launch calls at all: record with "
                  "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to keep them")
    elif no_launch:
        advice = (". The trace records launches, but not these: the profiler dropped them (buffer full) "
                  "or the trace was filtered or cut")
    else:
        advice = ""
    warnings.append(
        f"{path.name}: {len(unlinked):,} kernels ({amount}, {100.0 * lost / total:.1f}% of kernel time) are not "
        f"linked to the op that launched them ({'; '.join(why)}); bwdiag prices a kernel from its op's "
        "shapes, so theirs are unknown" + advice
    )


def _warn_skipped(path: Path, tables: EventTables, warnings: list[str]) -> None:
    if tables.skipped:
        detail = ", ".join(f"{n:,} {why}" for why, n in sorted(tables.skipped.items()))
        warnings.append(f"{path.name}: skipped malformed events ({detail})")
    if tables.repaired.get("args"):
        warnings.append(
            f"{path.name}: {tables.repaired['args']:,} GPU activities or runtime calls have no args "
            "(no correlation, device or stream); kept, but they cannot be linked to their op"
        )
    unknown = {c: n for c, n in tables.unknown_categories.items() if c not in _KNOWN_IGNORED}
    if unknown:
        cats = ", ".join(f"{c} ({n:,})" for c, n in sorted(unknown.items()))
        warnings.append(f"{path.name}: ignored events of categories bwdiag does not use: {cats}")


# Categories we read past on purpose (not worth a warning).
_KNOWN_IGNORED = {"Trace", "fwdbwd", "cpu_instant_event", "overhead", "async_cpu_to_gpu", "cuda_sync",
                  "python_function", "gpu_user_annotation", "Python", "PyTorch Profiler", "user_annotation"}


def _rank_of(path: Path, metadata: dict[str, Any], warnings: list[str]) -> int:
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and info["rank"] >= 0:
        return info["rank"]
    meta = metadata.get("bwdiag")
    if isinstance(meta, dict) and isinstance(meta.get("rank"), int):
        return meta["rank"]
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1))
    return -1  # resolved by load_traces


def default_jobs(n_files: int) -> int:
    """Worker processes for ``n_files`` rank files: ``BWDIAG_JOBS`` if set, else one per core.

    One file gets them all (its chunks are parsed in parallel); several get at most one each.
    """
    env = os.environ.get("BWDIAG_JOBS", "").strip()
    if env:
        try:
            jobs = int(env)
        except ValueError:
            raise TraceError(f"BWDIAG_JOBS={env!r}: expected a whole number of worker processes") from None
    else:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs, n_files) if n_files > 1 else jobs)


def load_traces(paths: Iterable[str | Path], *, progress=None, file_progress=None,
                jobs: int | None = None, meanwhile: Callable[[], None] | None = None,
                graph_capture: Sequence[str | Path] | None = None,
                ) -> tuple[list[RankTrace], list[str]]:
    """Load every trace under ``paths``; one bad rank file among good ones is skipped with a warning.

    Several files are parsed in parallel by ``jobs`` worker processes (default :func:`default_jobs`),
    and so are the chunks of one big file; the result is identical to a serial load. ``progress()`` is called once per
    file done; ``file_progress(done, total)`` reports bytes read of a single file (serial loads only).
    ``meanwhile()``, if given, is called at most once, while worker processes parse a big file: work
    of the caller's that then runs in parallel with the parse (``bwdiag analyze`` imports pandas and
    its analysis modules there).
    """
    files = find_trace_files(list(paths))
    captures = None
    if graph_capture:
        from bwdiag.trace.graphs import capture_files

        captures = capture_files(list(graph_capture))
    jobs = default_jobs(len(files)) if jobs is None else max(1, min(jobs, len(files)) if len(files) > 1 else jobs)
    traces: list[RankTrace] = []
    warnings: list[str] = []
    errors: list[str] = []
    for f, result in zip(files, _load_all(files, jobs, file_progress, meanwhile, captures)):
        if isinstance(result, TraceError):
            if len(files) == 1:
                raise result
            errors.append(str(result))
        else:
            traces.append(result)
        if progress is not None:
            progress()
    if not traces:
        raise TraceError(errors[0] if len(errors) == 1 else "no readable trace: " + "; ".join(errors))
    warnings.extend(f"skipped unreadable rank file: {e}" for e in errors)
    traces = one_window_per_process(traces, warnings)
    assign_ranks(traces, warnings)
    for t in traces:
        warnings.extend(t.warnings)
    return sorted(traces, key=lambda t: t.rank), warnings


def _load_or_error(path: Path, file_progress=None, jobs: int = 1, meanwhile=None,
                   captures=None) -> RankTrace | TraceError:
    try:
        return load_rank(path, file_progress, jobs, meanwhile, graph_capture=captures)
    except TraceError as err:
        return err


def _with(captures) -> dict:
    """``captures`` as a keyword argument only when given (the common call stays ``(path)``)."""
    return {"captures": captures} if captures else {}


def _load_all(files: list[Path], jobs: int, file_progress, meanwhile=None,
              captures=None) -> Iterable[RankTrace | TraceError]:
    """Each file's RankTrace (or its TraceError), in order; in worker processes when ``jobs`` > 1."""
    return map_files(files, _load_or_error, jobs, file_progress, meanwhile, **_with(captures))


def map_files(files: list[Path], work: Callable[..., Any], jobs: int, file_progress=None, meanwhile=None,
              **kwargs) -> Iterable[Any]:
    """``work(path, **kwargs)`` of each file, in order (a generator: each result as soon as it and
    those before it are done); in ``jobs`` forked worker processes when there are several files.

    One file is worked on here, as ``work(path, file_progress, jobs, meanwhile, **kwargs)``: its
    chunks may still be parsed in parallel. A worker that dies (killed for memory?) costs nothing:
    its file and the ones not yet started are worked on here, one by one. ``work`` must be a
    module-level function (or a ``functools.partial`` of one) that returns its errors, never raises them.
    """
    if len(files) == 1:  # one file: its chunks may still be parsed in parallel
        yield work(files[0], file_progress, jobs, meanwhile, **kwargs)
        return
    if jobs <= 1 or not forkable():
        for f in files:
            yield work(f, **kwargs)
        return
    # Whole ranks load in the workers, tables and linking included: import pandas (and whatever the
    # caller will need) before forking them, so they inherit it instead of importing it one by one.
    if meanwhile is not None:
        meanwhile()
    import pandas  # noqa: F401

    from concurrent.futures import BrokenExecutor

    with _pool(jobs) as pool:
        futures = []
        for f in files:  # all submitted before any wait
            try:
                futures.append(pool.submit(work, f, **kwargs))
            except BrokenExecutor:
                futures.append(None)
        for f, fut in zip(files, futures):
            try:
                if fut is not None:
                    yield fut.result()
                    continue
            except BrokenExecutor:  # a worker died (killed for memory?): work on the rest here, one by one
                pass
            yield work(f, **kwargs)


def assign_ranks(traces: list[RankTrace], warnings: list[str]) -> None:
    """Give every trace without a rank the lowest free one, and a rank two traces claim to the later
    one (by path) as a new number; each change is a warning. Works on anything with ``path`` and
    ``rank`` (the reduce passes rank summaries)."""
    used = {t.rank for t in traces if t.rank >= 0}
    for t in traces:
        if t.rank < 0:
            t.rank = next(r for r in range(len(traces) + len(used) + 1) if r not in used)
            used.add(t.rank)
            if len(traces) > 1:
                warnings.append(
                    f"{t.path.name}: no rank in distributedInfo or the file name; treated as rank {t.rank}"
                )
    seen: dict[int, RankTrace] = {}
    for t in sorted(traces, key=lambda t: str(t.path)):
        if t.rank in seen:
            new = max(x.rank for x in traces) + 1
            warnings.append(
                f"{t.path.name} and {seen[t.rank].path.name} both claim rank {t.rank}; "
                f"{t.path.name} is analysed as rank {new}"
            )
            t.rank = new
        seen[t.rank] = t
