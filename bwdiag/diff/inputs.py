"""One side of ``bwdiag diff``: a trace file, a folder of rank files, or a bwdiag output folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bwdiag.diagnose.model import Diagnosis
from bwdiag.errors import BwdiagError

DIAGNOSIS_NAME = "diagnosis.json"


def side_name(path: str | os.PathLike) -> str:
    """A short name for a side: the file's stem (``rank0.pt.trace.json.gz`` → ``rank0``) or the
    folder's name."""
    p = Path(path)
    name = p.name if p.name not in ("", ".", "..") else Path(os.path.abspath(p)).name
    if p.is_file() and name == DIAGNOSIS_NAME:
        name = Path(os.path.abspath(p)).parent.name
    for suffix in (".gz", ".json", ".pt.trace", ".trace"):
        name = name.removesuffix(suffix)
    return name or "trace"


def load_side(path: str | os.PathLike, which: str, *, device_spec: Path | None = None,
              progress: bool = False) -> tuple[Diagnosis, dict[str, Any]]:
    """The diagnosis of one side and how it was obtained.

    A folder holding ``diagnosis.json`` (what ``bwdiag analyze`` / ``bwdiag run`` write) and a
    ``diagnosis.json`` file are read, not re-analysed; anything else is analysed as traces.
    ``which`` (``BEFORE`` / ``AFTER``) names the side in errors.
    """
    from bwdiag.report.json_out import read_diagnosis

    p = Path(path)
    if not p.exists():
        raise BwdiagError(f"{which} {p}: no such file or folder")
    meta: dict[str, Any] = {"input": str(p), "name": side_name(p)}
    json_path = p / DIAGNOSIS_NAME if p.is_dir() else (p if p.name.endswith(DIAGNOSIS_NAME) else None)
    if json_path is not None and json_path.is_file():
        meta["read_from"] = "diagnosis.json"
        return read_diagnosis(json_path), meta
    from bwdiag import pipeline

    meta["read_from"] = "trace"
    return pipeline.analyze([p], device_spec=device_spec, progress=progress), meta
