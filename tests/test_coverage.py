"""Coverage counts what it says: compute kernels, copies and collectives each apart.

Expected figures are summed here straight from the raw trace events (cat kernel / gpu_memcpy /
gpu_memset; collectives by their nccl names), independently of bwdiag's loader.
"""

from __future__ import annotations

import pytest

from bwdiag.pipeline import analyze
from bwdiag.report.context import build_context
from bwdiag.report.terminal import coverage_line
from conftest import A100_NCCL, raw_events, shared_trace

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _raw_times(path) -> dict[str, float]:
    sums = {"compute": 0.0, "copy": 0.0, "coll": 0.0}
    for e in raw_events(path)["traceEvents"]:
        cat = str(e.get("cat", "")).lower()
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        key = "copy" if cat != "kernel" else ("coll" if "nccl" in e["name"].lower() else "compute")
        sums[key] += e["dur"]
    return sums


@pytest.mark.parametrize("rel", [ALEXNET, A100_NCCL])
def test_coverage_splits_kernel_time_by_kind(rel):
    path = shared_trace(rel)
    raw = _raw_times(path)
    cov = analyze([path]).coverage
    assert cov.compute_us == pytest.approx(raw["compute"], rel=1e-9)
    assert cov.copy_us == pytest.approx(raw["copy"], rel=1e-9)
    assert cov.collective_us == pytest.approx(raw["coll"], rel=1e-9)


def test_trace_without_shapes_has_low_compute_coverage():
    """AlexNet was recorded without shapes: its memcpys carry bytes (55.5 of 66.2 ms of GPU time),
    which made the old single figure read 83.8 %; its compute kernels are almost all unpriced."""
    d = analyze([shared_trace(ALEXNET)])
    raw = raw_events(shared_trace(ALEXNET))["traceEvents"]
    assert not any("Input Dims" in (e.get("args") or {}) for e in raw if e.get("cat") == "cpu_op")
    assert d.coverage.estimated_pct < 5.0
    assert d.coverage.copy_estimated_pct == pytest.approx(100.0)
    assert d.coverage.collective_estimated_pct is None
    line = coverage_line(build_context(d)["coverage"])
    assert "compute-kernel time" in line and "copies 100.0% with byte counts" in line
