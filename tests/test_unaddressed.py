"""Time no finding addresses gets a statement (issue 13: every class above 10 % of the step has a finding
or an explicit statement), in diagnosis.json, the terminal and the report."""

import pytest

from bwdiag.diagnose.unaddressed import unaddressed
from tests.conftest import shared_trace
from tests.rule_context import context, kernel, rank


def _ctx(idle_other_us: float):
    # 400 µs of memory-bound kernels in a 1000 µs window: 600 µs idle, of it `idle_other_us` waiting on
    # other streams/ranks (work already launched), the rest host wait.
    acts = [kernel("k", ts=100 * i, dur=100, category="elementwise", bound="memory") for i in range(4)]
    return context([rank([], acts)], total_us=1000,
                   extras={"idle": {"host_wait_us": 600 - idle_other_us, "other_us": idle_other_us, "gaps": 3,
                                    "causes": {"sync_us": 0.0, "data_loader_us": 0.0, "pageable_memcpy_us": 0.0}}})


def test_idle_waiting_on_other_streams_is_stated_when_no_finding_claims_it():
    d = _ctx(idle_other_us=500.0).diagnosis
    by = {u.bound: u for u in unaddressed(d, None)}
    assert set(by) == {"memory", "idle"}  # both over 10 % of the window, nothing claims them
    assert by["idle"].us == pytest.approx(600.0) and by["idle"].pct == pytest.approx(60.0)
    assert "already launched" in by["idle"].why
    host = {u.bound: u for u in unaddressed(_ctx(idle_other_us=0.0).diagnosis, None)}
    assert "waits for the host" in host["idle"].why


def test_claimed_time_needs_no_statement():
    d = _ctx(idle_other_us=500.0).diagnosis
    # findings claimed all but 50 µs of the memory time and 350 of the 600 idle µs (over half of it)
    left = {"memory": 50.0, "idle": 250.0, "compute": 0.0}
    assert unaddressed(d, left) == ()
    # ...and a class under 10 % of the window never gets one
    left = {"memory": 400.0, "idle": 600.0}
    assert {u.bound for u in unaddressed(d, left)} == {"memory", "idle"}


def test_pipeline_bubbles_on_a_shared_trace_are_stated():
    from bwdiag.pipeline import analyze

    d = analyze([shared_trace("hta/negative_queue_length_values_check/rank0.json.gz")])
    (idle,) = [u for u in d.unaddressed if u.bound == "idle"]
    # 791 ms idle of a 1.23 s window, 775 ms of it with the next work already queued: no finding claims it
    assert idle.us <= d.time.by_bound["idle"] and idle.pct > 50
    assert d.idle.other_us > 0.9 * d.idle.idle_us and "already launched" in idle.why
    assert d.to_dict()["unaddressed"][0]["bound"] == "idle"


def test_kernels_far_below_their_roof_are_named_as_overhead():
    from bwdiag.pipeline import analyze
    from tests.conftest import SAMPLE_TRACES

    # The bundled CPU transformer (recorded on a loaded 2-core VM): its compute-bound ops run far below
    # the CPU's ceiling, so per-op overhead, not the roof, is their time.
    d = analyze([SAMPLE_TRACES / "train_transformer_cpu" / "rank0.pt.trace.json.gz"])
    placed = [k for k in d.kernels if k.bound == "compute" and k.pct_of_ceiling is not None and k.total_us]
    weighted = sum(k.pct_of_ceiling * k.total_us for k in placed) / sum(k.total_us for k in placed)
    assert weighted < 5.0
    (compute,) = [u for u in d.unaddressed if u.bound == "compute"]
    assert "per-op overhead" in compute.why and f"{weighted:.1f}%" in compute.why


def test_time_the_graph_does_not_count_is_given_back_to_its_class():
    # The subtraction let a finding take 600 µs of memory time and 200 of idle; the graph counts 25 % of
    # it (the step waits elsewhere). What it leaves as unclaimed follows the graph: 300 of 400 memory µs
    # the findings did not take, plus 75 % of the 600 given back = 750; idle 100 + 150 = 250.
    from bwdiag.diagnose.findings.whatif import GraphProjection, with_graph
    from bwdiag.diagnose.model import AppliedFinding, WhatIf

    w = WhatIf((AppliedFinding("fusion", "F", 800.0, 800.0, False),), 2000.0, 800.0, 1200.0, 2000.0 / 1200.0,
               unclaimed_us={"memory": 300.0, "idle": 100.0, "compute": 50.0})
    object.__setattr__(w, "_class_takes", ({"memory": 600.0, "idle": 200.0},))
    g = with_graph(w, GraphProjection(base_us=2000.0, savings=(200.0,), applied=(200.0,), projected_us=1800.0,
                                      trace_us=2000.0))
    assert g.unclaimed_us == {"memory": 750.0, "idle": 250.0, "compute": 50.0}
    assert g.graph_projected_us == 1800.0
