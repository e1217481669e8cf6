"""``bwdiag report diagnosis.json``: the page again from the JSON alone (no trace, no analysis).

The report layer works from a :class:`~bwdiag.diagnose.model.Diagnosis` only, and
``Diagnosis.from_dict(d.to_dict()) == d``, so the page re-rendered from ``diagnosis.json`` is the page
``bwdiag analyze`` wrote (byte for byte, with the same bwdiag version and templates).
"""

from __future__ import annotations

from pathlib import Path

from bwdiag.diagnose.model import Diagnosis
from bwdiag.errors import OutputError
from bwdiag.report.files import write_atomic
from bwdiag.report.html import render_html
from bwdiag.report.json_out import read_diagnosis

REPORT_NAME = "report.html"


def rerender(json_path: str | Path, out_dir: str | Path | None = None, *,
             force: bool = False) -> tuple[Diagnosis, Path]:
    """Read ``json_path`` (a diagnosis.json, or the folder holding one) and write ``report.html``
    into ``out_dir`` (default: the JSON's folder).

    An existing ``report.html`` is replaced only with ``force``. Returns the diagnosis read and the
    page's path. Raises :class:`~bwdiag.errors.BwdiagError` for an unreadable or foreign JSON file
    and :class:`OutputError` for an output that cannot or may not be written.
    """
    json_path = Path(json_path)
    if json_path.is_dir():
        json_path = json_path / "diagnosis.json"
    out = Path(out_dir) if out_dir is not None else (json_path.parent if str(json_path.parent) else Path("."))
    target = out / REPORT_NAME
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; choose another -o/--out")
    if target.exists() and not force:
        raise OutputError(f"{target}: already exists; pass --force to overwrite or choose another -o/--out")
    diagnosis = read_diagnosis(json_path)
    page = render_html(diagnosis).encode("utf-8")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{out}: cannot create the output folder ({err.strerror or err})") from None
    write_atomic(target, page)
    return diagnosis, target
