"""HTA (holistictraceanalysis) behind one door: the only module that imports ``hta``.

bwdiag computes its timeline itself, vectorised over its own tables: on the 109k-event A100 trace
HTA's load alone takes ~4.7 s against ~1.5 s for bwdiag's whole load and link (measured on the CI
machine, see benchmarks/README.md), so HTA is not on the analyze path. It is an extra
(``pip install "bwdiag[hta]"``) that serves three callers:

- ``bwdiag analyze --hta``: :func:`run_analyses` runs HTA's own analyses on the same files and
  returns their figures as plain data (``bwdiag.report.hta_view`` puts them beside bwdiag's);
- the test suite, which uses HTA as an independent oracle (:func:`comm_comp_overlap`,
  :func:`temporal_breakdown`);
- ``benchmarks/analyze_speed.py``.

``hta`` (and with it pandas and plotly) is imported inside the functions, never at import time.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from bwdiag.errors import BwdiagError

INSTALL_HINT = 'pip install "bwdiag[hta]"'

#: HTA's kernel types (``hta.utils.utils.get_kernel_type``), in the order the comparison shows them.
KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")

TOP_KERNELS = 5


class HtaMissingError(BwdiagError):
    """``--hta`` asked for, HTA not installed."""


def available() -> bool:
    """Whether ``import hta`` can succeed (found on the path, not blocked), without importing it."""
    try:
        return importlib.util.find_spec("hta") is not None
    except (ImportError, ValueError):
        return False


def version() -> str | None:
    """The installed HTA's version, read from its metadata (HTA itself is not imported)."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("holistictraceanalysis")
    except PackageNotFoundError:
        return None


def require() -> None:
    """Raise :class:`HtaMissingError` (one line naming the fix) unless HTA is installed."""
    if not available():
        raise HtaMissingError(f"--hta needs HTA (holistictraceanalysis), which is not installed: {INSTALL_HINT}")


@contextmanager
def _rank_folder(paths: list[Path]) -> Iterator[str]:
    """A temporary folder holding a symlink per trace: HTA reads every file of one folder."""
    with tempfile.TemporaryDirectory(prefix="bwdiag-hta-") as folder:
        for i, p in enumerate(paths):
            (Path(folder) / f"{i}-{Path(p).name}").symlink_to(Path(p).resolve())
        yield folder


class _Heard(logging.Handler):
    """Keeps what HTA logs at WARNING and above (it reports its own filters and roundings there)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage().strip()
        if msg and msg not in self.messages:
            self.messages.append(msg)


@contextmanager
def _listen_to_hta() -> Iterator[_Heard]:
    """Collect HTA's warnings instead of printing them (they become notes in the comparison)."""
    log = logging.getLogger("hta")
    heard = _Heard()
    saved = log.level, log.propagate, log.handlers[:]
    log.handlers[:] = [heard]
    log.setLevel(logging.WARNING)
    log.propagate = False
    try:
        yield heard
    finally:
        log.setLevel(saved[0])
        log.propagate = saved[1]
        log.handlers[:] = saved[2]


def _run(paths: list[Path], analysis: str):
    """Run one TraceAnalysis method over ``paths`` (HTA wants a folder holding only the traces)."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with _rank_folder(paths) as folder:
        return getattr(TraceAnalysis(trace_dir=folder), analysis)(visualize=False)


def comm_comp_overlap(paths: list[Path]) -> dict[int, float]:
    """HTA's ``get_comm_comp_overlap``: rank → % of communication time overlapped by computation."""
    df = _run(paths, "get_comm_comp_overlap")
    return {int(r): float(p) for r, p in zip(df["rank"], df["comp_comm_overlap_pctg"])}


def temporal_breakdown(paths: list[Path]) -> dict[int, dict[str, float]]:
    """HTA's ``get_temporal_breakdown``: rank → idle / compute / non-compute time (µs)."""
    df = _run(paths, "get_temporal_breakdown")
    return {int(row["rank"]): {k: float(v) for k, v in row.items() if k != "rank"} for _, row in df.iterrows()}


# ------------------------------------------------------------------------------ bwdiag analyze --hta


def _num(value: Any) -> float | None:
    """A finite float, or None (HTA writes NaN where a figure does not exist)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _load(folder: str):
    """HTA's ``TraceAnalysis(trace_dir=folder)``, plus what its load filtered away.

    ``TraceAnalysis.__init__`` is ``Trace(...)`` then ``load_traces(include_last_profiler_step=False)``;
    the same two calls are made here with a ``Trace`` that counts each rank's GPU events between the
    parse (after HTA's rounding) and the filter, so the comparison can say what the filter dropped.
    The analyses are then TraceAnalysis's own methods.
    """
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    class _CountingTrace(Trace):
        parsed: dict[int, tuple[int, float]] = {}

        def align_and_filter_trace(self, include_last_profiler_step=False):
            self.parsed = {int(r): _gpu_events(df) for r, df in self.traces.items()}
            super().align_and_filter_trace(include_last_profiler_step)

    trace = _CountingTrace(trace_dir=folder)
    trace.load_traces(include_last_profiler_step=False)
    analysis = TraceAnalysis.__new__(TraceAnalysis)  # the object its __init__ would build, on our Trace
    analysis.t = trace
    return analysis


def _gpu_events(df) -> tuple[int, float]:
    """(count, summed duration µs) of a rank's GPU events: what HTA's analyses take as kernels."""
    gpu = df[df["stream"].ne(-1)]
    return int(len(gpu)), float(gpu["dur"].sum())


def _profiler_steps(trace) -> list[int]:
    """The ProfilerStep numbers named anywhere in the trace (HTA's filter looks at these names)."""
    steps = []
    for name in trace.symbol_table.get_sym_id_map():
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(name))
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def describe(err: BaseException) -> str:
    """``Type: message`` of an exception HTA raised (just the type when the message is empty)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def run_analyses(paths: list[Path]) -> dict[str, Any]:
    """HTA's temporal breakdown, comm/comp overlap and kernel breakdown on ``paths``, as plain data.

    Returns ``{version, seconds, include_last_profiler_step, profiler_steps, ranks: {rank: {...}},
    kernel_types: [...], top_kernels: [...], said: [HTA's warnings], errors: [...]}``. An analysis
    that raises is recorded in ``errors`` and the others still run; a load that raises propagates
    (the caller turns it into a warning).
    """
    import hta

    started = time.perf_counter()
    out: dict[str, Any] = {"version": getattr(hta, "__version__", None), "include_last_profiler_step": False,
                           "ranks": {}, "kernel_types": [], "top_kernels": [], "errors": []}
    with _listen_to_hta() as heard, _rank_folder(paths) as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy/pandas warnings from inside HTA (0/0 overlap without collectives)
        analysis = _load(folder)
        trace = analysis.t
        out["profiler_steps"] = _profiler_steps(trace)
        ranks: dict[int, dict[str, Any]] = out["ranks"]
        for rank, df in sorted(trace.traces.items()):
            rank = int(rank)
            kept, kept_us = _gpu_events(df)
            parsed, parsed_us = trace.parsed.get(rank, (kept, kept_us))
            gpu = df[df["stream"].ne(-1)]
            ranks[rank] = {
                "kernels_parsed": parsed, "kernel_us_parsed": parsed_us,
                "kernels": kept, "kernel_us": kept_us,
                "iterations": [int(i) for i in trace.get_iterations(rank)],
                "first_kernel_us": _num(gpu["ts"].min()) if len(gpu) else None,
                "last_kernel_end_us": _num((gpu["ts"] + gpu["dur"]).max()) if len(gpu) else None,
            }

        def attempt(name: str, fn) -> None:
            try:
                fn()
            except Exception as err:  # noqa: BLE001 - a failing HTA analysis is reported, the rest go on
                out["errors"].append(f"HTA's {name} failed on these traces ({describe(err)})")

        def temporal() -> None:
            df = analysis.get_temporal_breakdown(visualize=False)
            for row in df.to_dict("records"):
                r = ranks.setdefault(int(row["rank"]), {})
                r.update(window_us=_num(row["kernel_time(us)"]), idle_us=_num(row["idle_time(us)"]),
                         compute_us=_num(row["compute_time(us)"]),
                         non_compute_us=_num(row["non_compute_time(us)"]),
                         idle_pct=_num(row["idle_time_pctg"]), compute_pct=_num(row["compute_time_pctg"]),
                         non_compute_pct=_num(row["non_compute_time_pctg"]))

        def overlap() -> None:
            df = analysis.get_comm_comp_overlap(visualize=False)
            for rank, pct in zip(df["rank"], df["comp_comm_overlap_pctg"]):
                ranks.setdefault(int(rank), {})["overlap_pct"] = _num(pct)

        def kernels() -> None:
            by_type, by_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
            out["kernel_types"] = [{"type": str(t), "us": _num(s), "pct": _num(p)}
                                   for t, s, p in zip(by_type["kernel_type"], by_type["sum"], by_type["percentage"])]
            sums: dict[int, dict[str, float]] = {}
            top: list[dict[str, Any]] = []
            for row in by_kernel.to_dict("records"):
                rank, kind, total = int(row["rank"]), str(row["kernel_type"]), _num(row["sum (us)"]) or 0.0
                sums.setdefault(rank, {}).setdefault(kind, 0.0)
                sums[rank][kind] += total  # the "others" row holds the rest: the sum is every kernel's
                if row["name"] != "others":
                    top.append({"rank": rank, "name": str(row["name"]), "type": kind, "us": total,
                                "mean_us": _num(row["mean (us)"]), "max_us": _num(row["max (us)"])})
            for rank, by in sums.items():
                ranks.setdefault(rank, {})["kernel_us_by_type"] = by
            top.sort(key=lambda k: (k["rank"], -k["us"]))
            out["top_kernels"] = [k for rank in sorted(sums) for k in [t for t in top if t["rank"] == rank][:TOP_KERNELS]]

        attempt("temporal breakdown", temporal)
        attempt("comm/comp overlap", overlap)
        attempt("kernel breakdown", kernels)
    out["said"] = heard.messages
    out["seconds"] = time.perf_counter() - started
    return out
