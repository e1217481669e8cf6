"""The output folder of one capture: its default name, the checks made before the script starts,
one trace file per rank written atomically, and rank 0 waiting for the other ranks' files.

Layout::

    bwdiag-<script>-<YYYYmmdd-HHMMSS>/
        rank0.pt.trace.json.gz  rank1.pt.trace.json.gz ...   one trace per rank
        diagnosis.json  report.html                         from pipeline.write_outputs
        .rank0.done  .rank1.done ...                        small JSON markers: this rank finished

A rank writes its trace under a temporary name and renames it into place, then writes its
``.rank<k>.done`` marker the same way. The analysing process (the launching parent, or rank 0 under a
plain ``torchrun``) reads only files whose marker exists and is newer than the run's start, so it
never reads a half-written trace or a stale one from an earlier run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from bwdiag.errors import OutputError

#: Files the analysis writes into the folder (``pipeline.write_outputs``).
REPORT_FILES = ("diagnosis.json", "report.html")


def rank_trace_name(rank: int) -> str:
    """``rank<k>.pt.trace.json.gz``: the trace file of one rank."""
    return f"rank{rank}.pt.trace.json.gz"


def clock_file_name(rank: int) -> str:
    """``rank<k>.clock.json``: the steps a rank timed after its window (``capture/clock.py``)."""
    return f"rank{rank}.clock.json"


def write_clock_file(out: Path, rank: int, record: dict[str, object]) -> None:
    """Atomically write ``rank<k>.clock.json`` holding ``record``."""
    final = out / clock_file_name(rank)
    tmp = out / f".tmp-{os.getpid()}-{final.name}"
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, final)


def done_marker_name(rank: int) -> str:
    """``.rank<k>.done``: written by a rank after its trace (or after finding it had none)."""
    return f".rank{rank}.done"


def _slug(text: str) -> str:
    stem = Path(text).stem if text.endswith(".py") else text.rsplit(".", 1)[-1]
    if stem == "__main__":  # `bwdiag run pkg/` or `-m pkg.__main__`: name it after the package
        stem = Path(text).parent.name or "main"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "script"


def default_out_dir(target: str, started: float, *, base: Path | None = None) -> Path:
    """``bwdiag-<script>-<YYYYmmdd-HHMMSS>`` in the working directory (local time of ``started``)."""
    stamp = datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S")
    return (base or Path.cwd()) / f"bwdiag-{_slug(target)}-{stamp}"


def launch_time() -> float:
    """The start time every rank of one launch agrees on.

    Under ``torchrun`` the ranks of a node are children of one elastic agent, so its start time is
    shared (a default folder name is then the same on every rank); otherwise it is now.
    """
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        import psutil

        try:
            return psutil.Process(os.getppid()).create_time()
        except psutil.Error:
            pass  # parent gone or unreadable: fall back to our own clock below
    return time.time()


def unique_default(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``… when a folder of that name already exists."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


#: How the command line and the Python API name the two ways out of an occupied output folder.
CLI_WORDS = ("pass --force to overwrite", "choose another folder with -o/--out")
API_WORDS = ("pass force=True to overwrite", "choose another folder with out=")


def prepare_out_dir(out: Path, *, rank: int, analyses: bool, force: bool,
                    words: tuple[str, str] = CLI_WORDS) -> Path:
    """Create ``out`` and check, before the script starts, that this rank can write its files.

    Raises :class:`OutputError` when the folder cannot be created or written, or when it already
    holds this rank's trace (or, for the analysing process, a report) and ``force`` is false;
    ``words`` name the fixes as the caller's interface spells them.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; {words[1]}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create output folder {out}: {err.strerror or err}") from None
    mine = [rank_trace_name(rank)] + (list(REPORT_FILES) if analyses else [])
    existing = [name for name in mine if (out / name).exists()]
    if existing and not force:
        raise OutputError(
            f"{out} already holds {', '.join(existing)}; {words[0]}, or {words[1]}"
        )
    probe = out / f".bwdiag-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise OutputError(f"cannot write to output folder {out}: {err.strerror or err}") from None
    for name in (rank_trace_name(rank), done_marker_name(rank)):
        if force:
            (out / name).unlink(missing_ok=True)
    return out


def remove_if_empty(out: Path, created: bool, say: Callable[[str], None] | None = None) -> None:
    """Nothing was recorded: leave no empty folder behind (only one this run created), and say so."""
    (out / done_marker_name(0)).unlink(missing_ok=True)
    if created:
        try:
            out.rmdir()
        except OSError:
            return  # not empty: the script or the user put something there
        if say is not None:
            say("no output folder written")


def temp_trace_path(out: Path, rank: int) -> Path:
    """A temporary name in ``out`` ending in ``.json.gz`` (so torch writes gzip) for one export."""
    return out / f".tmp-{os.getpid()}-{rank_trace_name(rank)}"


def write_done_marker(out: Path, rank: int, info: dict[str, object]) -> None:
    """Atomically write ``.rank<k>.done`` holding ``info`` (trace file name or none, note)."""
    final = out / done_marker_name(rank)
    tmp = out / f".tmp-{os.getpid()}-{final.name}"
    tmp.write_text(json.dumps(info), encoding="utf-8")
    os.replace(tmp, final)


def read_done_marker(out: Path, rank: int) -> dict[str, object] | None:
    """The marker of ``rank``, or None when it has not been written."""
    try:
        return json.loads((out / done_marker_name(rank)).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def wait_for_ranks(
    out: Path,
    world_size: int,
    *,
    since: float,
    timeout_s: float,
    say: Callable[[str], None],
    poll_s: float = 0.2,
) -> tuple[list[Path], list[int]]:
    """Wait until every rank's done marker (newer than ``since``) exists, or ``timeout_s`` passes.

    Returns the trace files that exist for finished ranks, in rank order, and the ranks that did not
    finish in time.
    """
    deadline = time.monotonic() + timeout_s
    announced = False
    while True:
        pending = [r for r in range(world_size) if not _fresh(out / done_marker_name(r), since)]
        if not pending or time.monotonic() >= deadline:
            break
        if not announced:
            say(f"waiting for rank(s) {_ranges(pending)} to finish (up to {timeout_s:.0f} s)")
            announced = True
        time.sleep(poll_s)
    traces = [
        out / rank_trace_name(r)
        for r in range(world_size)
        if r not in pending and (out / rank_trace_name(r)).exists()
    ]
    return traces, pending


def _fresh(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since - 2.0  # 2 s slack for coarse file-system clocks
    except FileNotFoundError:
        return False


def _ranges(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 6 else f"{ranks[0]}..{ranks[-1]}"


#: What starts every line bwdiag writes to stderr under ``bwdiag run`` / ``bwdiag.profile``.
PREFIX = "bwdiag: "


def say_line(message: str) -> None:
    """bwdiag's own stderr line: always prefixed ``bwdiag: `` so it can be told from the script's."""
    sys.stderr.write(f"{PREFIX}{message}\n")
    sys.stderr.flush()
