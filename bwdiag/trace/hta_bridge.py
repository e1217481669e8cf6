"""HTA (holistictraceanalysis) behind one door: cross-checks of bwdiag's timeline figures.

bwdiag computes its timeline itself, vectorised over its own tables: on the 109k-event A100 trace
HTA's load alone takes ~4.7 s against ~1.5 s for bwdiag's whole load and link (measured on the CI
machine, see benchmarks/README.md), so HTA is not on the analyze path. These wrappers run HTA's own
analyses on the same files for tests, benchmarks and users who want HTA's numbers side by side.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path


def _run(paths: list[Path], analysis: str):
    """Run one TraceAnalysis method over ``paths`` (HTA wants a folder holding only the traces)."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="bwdiag-hta-") as folder:
        for i, p in enumerate(paths):
            (Path(folder) / f"{i}-{Path(p).name}").symlink_to(Path(p).resolve())
        return getattr(TraceAnalysis(trace_dir=folder), analysis)(visualize=False)


def comm_comp_overlap(paths: list[Path]) -> dict[int, float]:
    """HTA's ``get_comm_comp_overlap``: rank → % of communication time overlapped by computation."""
    df = _run(paths, "get_comm_comp_overlap")
    return {int(r): float(p) for r, p in zip(df["rank"], df["comp_comm_overlap_pctg"])}


def temporal_breakdown(paths: list[Path]) -> dict[int, dict[str, float]]:
    """HTA's ``get_temporal_breakdown``: rank → idle / compute / non-compute time (µs)."""
    df = _run(paths, "get_temporal_breakdown")
    return {int(row["rank"]): {k: float(v) for k, v in row.items() if k != "rank"} for _, row in df.iterrows()}
