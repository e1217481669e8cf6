"""Views and aliases move no data: they are priced at zero work, and their time is overhead."""

from __future__ import annotations

from bwdiag.costs.estimate import estimate_op
from bwdiag.diagnose.model import Bound
from bwdiag.diagnose.roofline import place
from bwdiag.hardware.spec import fallback_spec
from tests.conftest import raw_events, shared_trace
from tests.findings_helpers import analysed

VIEWS = ("aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::slice", "aten::transpose",
         "aten::t", "aten::expand", "aten::detach", "detach", "aten::record_stream", "aten::unsqueeze")


def test_views_cost_nothing_whatever_their_shapes():
    for name in VIEWS:
        cost = estimate_op(name, [[1024, 1024], []], ["float", ""])
        assert (cost.flops, cost.bytes) == (0.0, 0.0), name
    # reshape/flatten copy when the input is not viewable: they stay unpriced, not zero
    assert estimate_op("aten::reshape", [[4, 8], []], ["float", ""]).bytes is None


def test_zero_work_is_latency_but_unknown_bytes_is_not():
    spec = fallback_spec("cpu")
    assert place(0.0, 0.0, 5e-6, spec, "fp32", tensor=False, mean_duration_s=5e-6).bound is Bound.LATENCY
    # a GPU layout kernel (no FLOPs, bytes not known) is not known to do nothing
    gpu = fallback_spec("gpu")
    assert place(0.0, None, 1e-3, gpu, "fp32", tensor=False, mean_duration_s=1e-4).bound is not Bound.LATENCY


def test_view_ops_of_a_real_cpu_trace_are_priced_as_overhead():
    path = shared_trace("hta/rank_non_gpu/rank_non_gpu.json.gz")
    diagnosis, _ = analysed(path)
    reasons = " ".join(u.reason for u in diagnosis.coverage.uncovered)
    for name in ("aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::slice", "detach",
                 "aten::record_stream"):
        assert f"for {name}" not in reasons
    views = [k for k in diagnosis.kernels if k.op in VIEWS]
    assert views and all(k.bound == Bound.LATENCY and k.flops == 0 and k.bytes == 0 for k in views)
    # every top-level view call of the raw trace is in the view groups, counted once
    raw = [e for e in raw_events(path)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") in VIEWS]
    assert sum(k.count for k in views) <= len(raw)
    assert diagnosis.coverage.estimated_pct >= 98.0
