"""``bwdiag diff BEFORE AFTER``: did the change (the fix) make the step faster, and did the savings
bwdiag predicted come true?

Sits between ``capture`` and ``pipeline`` in the layers: it reads a side's ``diagnosis.json`` (report)
or analyses its traces (pipeline), compares the two diagnoses (:mod:`bwdiag.diff.compare`, pure) and
writes ``diff.json`` + ``diff.html`` (:mod:`bwdiag.diff.render`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bwdiag.diff.compare import SCHEMA, compare, gate
from bwdiag.errors import BwdiagError, OutputError

OUTPUT_NAMES = {"json": "diff.json", "html": "diff.html"}

__all__ = ["SCHEMA", "OUTPUT_NAMES", "compare", "gate", "default_out", "check_inputs", "check_output_dir", "diff",
           "write_outputs"]


def default_out(after: str | os.PathLike) -> Path:
    """``./bwdiag-diff-<after name>``."""
    from bwdiag.diff.inputs import side_name

    return Path(f"bwdiag-diff-{side_name(after)}")


def check_inputs(before: str | os.PathLike, after: str | os.PathLike) -> None:
    """Refuse a side that does not exist, before anything else is checked or analysed."""
    for which, path in (("BEFORE", before), ("AFTER", after)):
        if not Path(path).exists():
            raise BwdiagError(f"{which} {path}: no such file or folder")


def check_output_dir(out_dir: Path, *, force: bool = False) -> None:
    """Refuse, before any analysis, an output folder that already holds a diff (without ``force``)
    or cannot be written (the same checks as ``bwdiag analyze``'s, for diff.json and diff.html)."""
    from bwdiag.pipeline import check_output_dir as check

    check(out_dir, force=force, names=OUTPUT_NAMES.values())


def diff(before: str | os.PathLike, after: str | os.PathLike, *, fail_if_slower: float | None = None,
         device_spec: Path | None = None, progress: bool = False) -> dict[str, Any]:
    """The diff.json document for two sides (each a trace file, a rank folder, a bwdiag output
    folder or a diagnosis.json), with the ``gate`` section when ``fail_if_slower`` is given."""
    from bwdiag.diff.inputs import load_side

    d_before, m_before = load_side(before, "BEFORE", device_spec=device_spec, progress=progress)
    d_after, m_after = load_side(after, "AFTER", device_spec=device_spec, progress=progress)
    doc = compare(d_before, d_after, before_meta=m_before, after_meta=m_after)
    if fail_if_slower is not None:
        doc["gate"] = gate(doc, fail_if_slower)
    return doc


def write_outputs(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write ``diff.json`` and ``diff.html`` into ``out_dir`` (each atomically)."""
    from bwdiag.diff.render import render_html, render_json
    from bwdiag.report.files import write_atomic

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{out_dir}: cannot create the output folder ({err.strerror or err})") from None
    paths = {k: out_dir / n for k, n in OUTPUT_NAMES.items()}
    write_atomic(paths["json"], render_json(doc))
    write_atomic(paths["html"], render_html(doc).encode("utf-8"))
    return paths
