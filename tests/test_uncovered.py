"""Why compute-kernel time has no estimate: reasons measured on real traces, with their warnings."""

from __future__ import annotations

import gzip
import json

import pytest

from bwdiag.diagnose.uncovered import NO_OP_GRAPH, NO_SHAPES
from tests.conftest import shared_trace
from tests.findings_helpers import analysed

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
VLLM_GRAPH = "tracelens/inference/vllm_decode_full/graph_execution.json.gz"


def _events(path):
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _reason(d, reason):
    return next(u for u in d.coverage.uncovered if u.reason == reason)


def test_record_shapes_off_is_the_reason_and_the_warning_says_how_to_fix_it():
    path = shared_trace(ALEXNET)
    ev = _events(path)
    assert not any((e.get("args") or {}).get("Input Dims") for e in ev if e.get("cat") == "cpu_op")
    d, _ = analysed(path)
    u = _reason(d, NO_SHAPES)
    # every compute kernel is linked (100%), so all that is not estimated lacks shapes
    assert d.coverage.linked_pct == pytest.approx(100.0)
    assert u.pct == pytest.approx(100.0 - d.coverage.estimated_pct, abs=1e-6)
    assert any("record_shapes=True" in w and f"{u.pct:.1f}%" in w for w in d.warnings)


def test_graph_replays_are_counted_from_the_raw_graph_launch():
    path = shared_trace(VLLM_GRAPH)
    ev = _events(path)
    launches = {e["args"]["correlation"] for e in ev
                if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaGraphLaunch", "hipGraphLaunch")}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    replayed = sum(e["dur"] for e in kernels if e["args"]["correlation"] in launches)
    total = sum(e["dur"] for e in kernels)  # no collectives in this trace: all kernels are compute
    d, _ = analysed(path)
    assert d.coverage.compute_us == pytest.approx(total, rel=1e-9)
    assert _reason(d, NO_OP_GRAPH).pct == pytest.approx(100.0 * replayed / total, rel=1e-9)
