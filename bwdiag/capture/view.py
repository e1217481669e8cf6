"""``prof.diagnosis``: the diagnosis of a ``bwdiag.profile`` block, shaped for a notebook."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


class DiagnosisView:
    """A thin, read-only wrapper over a :class:`~bwdiag.diagnose.model.Diagnosis`.

    ``.kernels`` is a pandas DataFrame (one row per KernelRow), ``.findings`` the findings ranked by
    the time they would save, ``.summary()`` the terminal summary as text, ``.to_html()`` the
    report page, ``.raw`` the Diagnosis itself and ``.paths`` the files written. In Jupyter the
    view displays itself as the report (``_repr_html_``).
    """

    def __init__(self, diagnosis: Any, paths: dict[str, Path] | None = None) -> None:
        self.raw = diagnosis
        self.paths = dict(paths or {})

    @property
    def kernels(self):
        """One row per kernel group, columns as the KernelRow fields (empty frame if none)."""
        import pandas as pd

        from bwdiag.diagnose.model import KernelRow

        columns = [f.name for f in dataclasses.fields(KernelRow)]
        rows = [dataclasses.asdict(k) for k in self.raw.kernels]
        return pd.DataFrame(rows, columns=columns)

    @property
    def findings(self) -> list[Any]:
        """The findings (Finding dataclasses), largest saving first (``Finding.saving_us``: the dependency
        graph's where it re-timed them, else the rule's estimate)."""
        return list(self.raw.findings)

    def summary(self) -> str:
        """The terminal summary (what ``bwdiag analyze`` prints) as a string."""
        from bwdiag.capture.report import summary_text

        return summary_text(self.raw, self.paths or None)

    def to_html(self) -> str:
        """The self-contained HTML report, rendered by the same code as ``bwdiag analyze``."""
        from bwdiag.report.html import render_html

        return render_html(self.raw)

    def _repr_html_(self) -> str:
        """Jupyter's display: the report page (verdict card, findings, roofline, kernels) in an
        iframe whose ``srcdoc`` holds the whole self-contained page, so it renders offline, its
        styles and script stay inside the frame, and its Content-Security-Policy forbids fetching."""
        import html

        return (
            '<iframe title="bwdiag report" sandbox="allow-scripts" '
            'style="width:100%;height:760px;border:1px solid #d0d7de;border-radius:6px" '
            f'srcdoc="{html.escape(self.to_html(), quote=True)}"></iframe>'
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``diagnosis.json`` object."""
        return self.raw.to_dict()

    def __repr__(self) -> str:
        total = getattr(getattr(self.raw, "time", None), "total_us", None)
        where = f", report={self.paths['html']}" if "html" in self.paths else ""
        return (
            f"<bwdiag diagnosis: {len(self.raw.kernels)} kernel groups, "
            f"{len(self.raw.findings)} findings, step window {total} us{where}>"
        )
