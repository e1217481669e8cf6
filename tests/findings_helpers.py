"""Shared helpers for the findings tests: analyse a trace once per test session."""

from __future__ import annotations

import functools
from pathlib import Path

from bwdiag.diagnose.build import diagnose
from bwdiag.diagnose.findings import add_findings
from bwdiag.trace import find_trace_files, load_traces

DATA = Path(__file__).parent / "data"


@functools.lru_cache(maxsize=None)
def analysed(path: Path):
    """(diagnosis with findings, analyses) for a trace file."""
    traces, warnings = load_traces(find_trace_files([path]))
    diagnosis, analyses = diagnose(traces, load_warnings=warnings)
    return add_findings(diagnosis, analyses), analyses


def by_kind(diagnosis, kind: str) -> list:
    return [f for f in diagnosis.findings if f.kind == kind]


def raw_kernels(raw: dict) -> list[dict]:
    """GPU kernel events of a raw trace (``cat`` kernel / Kernel)."""
    return [e for e in raw["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"]
