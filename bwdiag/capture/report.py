"""Hand the captured traces to the same pipeline as ``bwdiag analyze`` and tell the user."""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bwdiag.capture.folder import PREFIX, say_line


def analyze_traces(
    traces: Sequence[Path],
    out_dir: Path,
    *,
    force: bool,
    device_spec: Path | None = None,
) -> tuple[Any, dict[str, Path]]:
    """``pipeline.analyze`` then ``pipeline.write_outputs`` into ``out_dir``: exactly what
    ``bwdiag analyze OUT_DIR`` produces from the same folder."""
    from bwdiag import pipeline

    diagnosis = pipeline.analyze([str(p) for p in traces], device_spec=device_spec, progress=False)
    outputs = pipeline.write_outputs(diagnosis, Path(out_dir), force=force)
    return diagnosis, outputs


def summary_text(diagnosis: Any, outputs: dict[str, Path] | None = None, **style) -> str:
    """The terminal summary ``pipeline.print_summary`` writes, as a string (``style``: its
    ``width`` and ``brand``)."""
    from bwdiag import pipeline

    buffer = io.StringIO()
    pipeline.print_summary(diagnosis, outputs, file=buffer, **style)
    return buffer.getvalue()


def print_summary_prefixed(diagnosis: Any, outputs: dict[str, Path] | None = None) -> None:
    """The terminal summary on stderr, every line prefixed ``bwdiag: `` (the run contract): drawn
    that much narrower than the terminal, so no prefixed line wraps, and without a second
    ``bwdiag`` at the start of its first line."""
    width = max(40, shutil.get_terminal_size().columns - len(PREFIX))
    for line in summary_text(diagnosis, outputs, width=width, brand=False).rstrip("\n").splitlines():
        say_line(line)
