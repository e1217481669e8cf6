"""``bwdiag analyze --hta``: HTA's own figures beside bwdiag's, and why they differ.

:func:`compare` turns what ``bwdiag.trace.hta_bridge.run_analyses`` returned and the
:class:`~bwdiag.diagnose.model.Diagnosis` into one plain, JSON-ready section (``diagnosis.json``'s
optional ``hta`` field). The terminal (:func:`print_terminal`) and the page (the ``#hta`` section of
``report.html.j2``) show that section; nothing here imports HTA or pandas.

Per rank, the same keys on both sides (``ROWS``), then sentences worked out from the figures: the
windows each tool measures, what HTA's last-ProfilerStep filter dropped, what its rounding of
ns-resolution events took off, and how idle follows from window and busy time in both.

The section::

    {version, error (None, or why HTA produced nothing), seconds, include_last_profiler_step,
     profiler_steps, notes: [str], errors: [str] (also in the diagnosis' warnings),
     ranks: [{rank, hta: {ROWS keys}, bwdiag: {ROWS keys}, notes: [str]}],
     kernel_types: [{type, us, pct}]  (HTA's kernel type breakdown, all ranks),
     top_kernels: [{rank, name, type, us, mean_us, max_us, bwdiag_us, bwdiag_count}],
     hta_said: [HTA's other warnings]}
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import IO, Any

from bwdiag.diagnose.model import Diagnosis
from bwdiag.units import fmt_count, fmt_pct, fmt_time

#: The compared figures: key, label, unit ("us" | "pct" | "count").
ROWS = (
    ("window_us", "Window", "us"),
    ("busy_us", "Busy (any GPU event running)", "us"),
    ("idle_us", "Idle", "us"),
    ("compute_us", "Compute", "us"),
    ("non_compute_us", "Non-compute", "us"),
    ("overlap_pct", "Comm. overlapped by compute", "pct"),
    ("gpu_events", "GPU events (kernels, copies)", "count"),
    ("gpu_us", "GPU event time, summed", "us"),
    ("computation_us", "  computation kernels", "us"),
    ("communication_us", "  communication kernels", "us"),
    ("memory_us", "  memcpy / memset", "us"),
)

#: bwdiag kernel categories in HTA's kernel types (everything else is COMPUTATION).
_HTA_TYPE = {"communication": "COMMUNICATION", "memcpy": "MEMORY", "memset": "MEMORY"}
_TYPE_KEY = {"COMPUTATION": "computation_us", "COMMUNICATION": "communication_us", "MEMORY": "memory_us"}

#: HTA log lines that only time its own parsing.
_CHATTER = ("Parsed ", "Overall parsing", "leaving ")
_ROUNDING = "Rounding down ns resolution"
_NO_RANK = "does not have the rank specified"
#: HTA warnings the notes already say in full (one step, no step).
_SAID_IN_NOTES = (_ROUNDING, _NO_RANK, "only one iteration in the trace", "ProfilerStep not found")

TERMINAL_RANKS = 4


def failed(error: str, version: str | None = None) -> dict[str, Any]:
    """The section when HTA could not load the traces at all."""
    return {"version": version, "error": error, "seconds": None, "include_last_profiler_step": False,
            "profiler_steps": [], "hta_said": [], "ranks": [], "kernel_types": [], "top_kernels": [],
            "notes": [], "errors": [error]}


def compare(diagnosis: Diagnosis, result: dict[str, Any]) -> dict[str, Any]:
    """The ``hta`` section: HTA's figures and bwdiag's per rank, the explanations, HTA's tables."""
    said = [m for m in result.get("said", ()) if not m.startswith(_CHATTER)]
    rounded = any(_ROUNDING in m for m in said)
    steps = list(result.get("profiler_steps") or ())
    notes: list[str] = []
    if diagnosis.source.trace_kind == "cpu":
        notes.append("This is a CPU-only trace: HTA analyses GPU events only, while bwdiag's figures here are "
                     "of CPU ops, so the two columns measure different things.")
    if any(_NO_RANK in m for m in said):
        notes.append("A trace names no rank (no distributedInfo.rank): HTA took it as rank 0.")
    if len(steps) >= 2:
        notes.append(f"HTA leaves out the last ProfilerStep (#{steps[-1]}) by default "
                     "(include_last_profiler_step=False): it keeps only the GPU events launched by CPU ops "
                     "that start before that step; bwdiag analyses the whole trace.")
    elif len(steps) == 1:
        notes.append(f"The trace has one ProfilerStep (#{steps[0]}): HTA's last-step filter does not apply "
                     "(HTA warns that its result may not be accurate), so both tools see every GPU event.")
    else:
        notes.append("The trace has no ProfilerStep: HTA's last-step filter does not apply.")
    if rounded:
        notes.append("HTA rounds each event of a ns-resolution trace inward to whole µs before any analysis "
                     "(start up, end down: pytorch/pytorch#122425); bwdiag keeps the fractions.")
    ranks = []
    for rank, h in sorted(result.get("ranks", {}).items(), key=lambda kv: int(kv[0])):
        rank = int(rank)
        hta_side = _hta_figures(h)
        bw_side = _bwdiag_figures(diagnosis, rank)
        ranks.append({"rank": rank, "hta": hta_side, "bwdiag": bw_side,
                      "notes": _rank_notes(h, hta_side, bw_side, rounded)})
    top = []
    for k in result.get("top_kernels", ()):
        us, count = _kernel_us(diagnosis, k["rank"], k["name"])
        top.append({**k, "bwdiag_us": us, "bwdiag_count": count})
    return _finite({
        "version": result.get("version"),
        "error": None,
        "seconds": result.get("seconds"),
        "include_last_profiler_step": result.get("include_last_profiler_step", False),
        "profiler_steps": steps,
        "ranks": ranks,
        "kernel_types": list(result.get("kernel_types", ())),
        "top_kernels": top,
        "notes": notes,
        "hta_said": [m for m in said if not any(known in m for known in _SAID_IN_NOTES)],
        "errors": list(result.get("errors", ())),
    })


def _hta_figures(h: dict[str, Any]) -> dict[str, Any]:
    window, idle = h.get("window_us"), h.get("idle_us")
    by_type = h.get("kernel_us_by_type") or {}
    out = {
        "window_us": window,
        "busy_us": window - idle if window is not None and idle is not None else None,
        "idle_us": idle,
        "compute_us": h.get("compute_us"),
        "non_compute_us": h.get("non_compute_us"),
        "overlap_pct": h.get("overlap_pct"),
        "gpu_events": h.get("kernels"),
        "gpu_us": h.get("kernel_us"),
    }
    for kind, key in _TYPE_KEY.items():
        out[key] = by_type.get(kind, 0.0) if by_type else None
    return out


def _bwdiag_figures(diagnosis: Diagnosis, rank: int) -> dict[str, Any]:
    summary = next((r for r in diagnosis.ranks if r.rank == rank), None)
    if summary is None and len(diagnosis.ranks) == 1:
        summary = diagnosis.ranks[0]  # HTA numbers a rankless trace 0; bwdiag may say otherwise
    rows = [k for k in diagnosis.kernels if summary is not None and k.rank == summary.rank]
    by_type = dict.fromkeys(_TYPE_KEY.values(), 0.0)
    for k in rows:
        by_type[_TYPE_KEY[_HTA_TYPE.get(k.category, "COMPUTATION")]] += k.total_us
    if summary is None:
        return {key: None for key, _, _ in ROWS}
    comm = summary.communication_us
    return {
        "window_us": summary.total_us,
        "busy_us": summary.busy_us,
        "idle_us": summary.idle_us,
        "compute_us": summary.compute_us,
        "non_compute_us": summary.busy_us - summary.compute_us,
        "overlap_pct": 100.0 * (comm - summary.exposed_communication_us) / comm if comm > 0 else None,
        "gpu_events": sum(k.count for k in rows),
        "gpu_us": sum(k.total_us for k in rows),
        **by_type,
    }


def _kernel_us(diagnosis: Diagnosis, rank: int, name: str) -> tuple[float | None, int | None]:
    rows = [k for k in diagnosis.kernels if k.name == name and (k.rank == rank or len(diagnosis.ranks) <= 1)]
    if not rows:
        return None, None
    return sum(k.total_us for k in rows), sum(k.count for k in rows)


def _signed(d: float) -> str:
    return ("+" if d > 0 else "−" if d < 0 else "±") + fmt_time(abs(d))


def _diff(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else _signed(a - b)


def _rank_notes(h: dict, hta: dict, bw: dict, rounded: bool) -> list[str]:
    """Why this rank's figures differ, each sentence computed from the two sides."""
    notes = []
    parsed, kept = h.get("kernels_parsed"), h.get("kernels")
    parsed_us, kept_us = h.get("kernel_us_parsed"), h.get("kernel_us")
    if parsed is not None and kept is not None and parsed > kept:
        notes.append(f"HTA's last-step filter dropped {fmt_count(parsed - kept)} of its {fmt_count(parsed)} GPU "
                     f"events ({fmt_time(parsed_us - kept_us)} of GPU time, of {fmt_time(parsed_us)}).")
    if parsed is not None and bw["gpu_events"] is not None:
        if parsed == bw["gpu_events"]:
            seen = f"the same {fmt_count(parsed)} GPU events as bwdiag"
            cause = ": HTA's rounding to whole µs" if rounded and parsed_us != bw["gpu_us"] else ""
        else:
            seen = f"{fmt_count(parsed)} GPU events, bwdiag {fmt_count(bw['gpu_events'])}"
            cause = ""
        if parsed_us == bw["gpu_us"]:
            notes.append(f"Before its filter HTA read {seen}, {fmt_time(parsed_us)} summed in both.")
        else:
            notes.append(f"Before its filter HTA read {seen}: {fmt_time(parsed_us)} summed against bwdiag's "
                         f"{fmt_time(bw['gpu_us'])} ({_diff(parsed_us, bw['gpu_us'])}{cause}).")
    if hta["window_us"] is not None and bw["window_us"] is not None:
        notes.append(f"HTA's window runs from its first to its last kept GPU event: {fmt_time(hta['window_us'])}, "
                     f"against bwdiag's {fmt_time(bw['window_us'])} ({_diff(hta['window_us'], bw['window_us'])}).")
    if None not in (hta["window_us"], bw["window_us"], hta["busy_us"], bw["busy_us"]):
        dw = hta["window_us"] - bw["window_us"]
        db = hta["busy_us"] - bw["busy_us"]
        notes.append(f"Both count idle as window minus busy time, all streams of the GPU merged: the windows differ "
                     f"by {_diff(hta['window_us'], bw['window_us'])} and busy time by "
                     f"{_diff(hta['busy_us'], bw['busy_us'])}, so idle by {_signed(dw - db)}.")
    notes.append("Compute: HTA counts the union of computation kernels (copies and collectives out); bwdiag the "
                 "busy time not given to exposed communication (copies in). Non-compute is the rest of busy time "
                 "in each: HTA's holds copies and collectives, bwdiag's only exposed communication.")
    if hta["overlap_pct"] is not None and bw["overlap_pct"] is not None:
        notes.append("Overlap has one definition in both (share of the communication time with a computation "
                     "kernel running), so it differs only by the events each side counts.")
    return notes


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def fmt_value(value: Any, unit: str) -> str:
    """One figure of ``ROWS`` as text."""
    if unit == "pct":
        return fmt_pct(value)
    if unit == "count":
        return fmt_count(value)
    return fmt_time(value)


def table_rows(rank: dict[str, Any]) -> list[dict[str, str]]:
    """The rows of one rank's comparison, formatted: label, hta, bwdiag, difference."""
    rows = []
    for key, label, unit in ROWS:
        a, b = rank["hta"].get(key), rank["bwdiag"].get(key)
        if a is None or b is None:
            diff = "—"
        elif unit == "us":
            diff = _diff(a, b)
        else:
            d = a - b
            sign = "+" if d > 0 else "−" if d < 0 else "±"
            diff = f"{sign}{abs(d):.2f} pt" if unit == "pct" else f"{sign}{fmt_count(abs(d))}"
        rows.append({"key": key, "label": label, "hta": fmt_value(a, unit), "bwdiag": fmt_value(b, unit), "diff": diff})
    return rows


def add_to_json(data: bytes, section: dict[str, Any]) -> bytes:
    """``diagnosis.json``'s bytes with the ``hta`` section added (the contract allows added fields)."""
    import orjson

    doc = orjson.loads(data)
    doc["hta"] = section
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"


def print_terminal(section: dict[str, Any], outputs: dict[str, Path] | None = None,
                   file: IO[str] | None = None) -> None:
    """HTA's figures beside bwdiag's, the reasons they differ, then the files written."""
    import sys

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=file if file is not None else sys.stderr, highlight=False)
    version = f" {section['version']}" if section.get("version") else ""
    if section.get("error"):
        console.print(Text(f"HTA{version}: no figures (see the warning above).", style="yellow"))
    for rank in section["ranks"][:TERMINAL_RANKS]:
        table = Table(title=f"HTA{version} beside bwdiag · rank {rank['rank']}", title_justify="left",
                      show_edge=False, pad_edge=False)
        table.add_column("figure")
        table.add_column("HTA", justify="right")
        table.add_column("bwdiag", justify="right")
        table.add_column("HTA − bwdiag", justify="right", style="dim")
        for row in table_rows(rank):
            table.add_row(row["label"], row["hta"], row["bwdiag"], row["diff"])
        console.print(table)
        for note in rank["notes"]:
            console.print(Text(f"· {note}", style="dim"), soft_wrap=True)
    if len(section["ranks"]) > TERMINAL_RANKS:
        console.print(Text(f"… {len(section['ranks']) - TERMINAL_RANKS} more rank(s) in the report.", style="dim"))
    for note in section["notes"]:
        console.print(Text(f"· {note}", style="dim"), soft_wrap=True)
    for label, path in (outputs or {}).items():
        line = Text(f"{label}: ", style="bold")
        line.append(str(path))
        console.print(line, soft_wrap=True)
