"""torch.compile on CPU: compiled regions count as busy, compilation does not, no tiny-tensor finding.

The traces are recorded once by ``tests/data/make_compiled_traces.py`` (torch 2.13 CPU, one
thread); ``compiled_timings.json`` holds the script's own ``perf_counter`` around each traced
compiled call. Every expected number here is worked out from the raw trace events (parsed again
in this file, independently of bwdiag's loader) or from those timings — never from bwdiag's output.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bwdiag.diagnose.build import diagnose
from bwdiag.diagnose.findings import add_findings
from bwdiag.diagnose.findings import chains
from bwdiag.trace import load_traces

DATA = Path(__file__).parent / "data"
TIMINGS = json.loads((DATA / "compiled_timings.json").read_text())["call_us"]
CONTAINERS = ("CompiledFunction", "CompiledFunctionBackward")


# ----------------------------------------------------------------------------- raw-trace helpers


def raw_events(name: str) -> list[dict]:
    with gzip.open(DATA / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]


def cpu_ops(events):
    return [e for e in events if e["cat"] == "cpu_op"]


def span(e) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def inside(inner, outer) -> bool:
    (a, b), (s, t) = span(inner), span(outer)
    return inner is not outer and inner["tid"] == outer["tid"] and s <= a and b <= t


def union(intervals) -> float:
    total, reach = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def outermost(events):
    """Events not enclosed by another of ``events`` on the same thread."""
    return [e for e in events if not any(inside(e, o) for o in events)]


def is_container(e) -> bool:
    return e["name"].startswith("Torch-Compiled Region") or e["name"] in CONTAINERS


def compiled_residual_us(events) -> float:
    """Σ over outermost compiled spans of (span − the outermost non-container ops recorded inside)."""
    ops = cpu_ops(events)
    total = 0.0
    for region in outermost([e for e in ops if is_container(e)]):
        work = outermost([e for e in ops if not is_container(e) and inside(e, region)])
        total += float(region["dur"]) - union([span(w) for w in work])
    return total


def analyse(name: str):
    traces, warnings = load_traces([DATA / name])
    diagnosis, analyses = diagnose(traces, load_warnings=warnings)
    return add_findings(diagnosis, analyses), analyses[0]


# ------------------------------------------------------------------------------------ the tests


def test_compiled_chain_idle_is_the_gaps_between_top_level_ops():
    """No-grad compiled pointwise chain: before the fix bwdiag read 96.1 % idle here (the fused
    loop records no op). Idle must be exactly the window minus the top-level ops' union."""
    events = raw_events("cpu_compiled_chain.json.gz")
    top = outermost(cpu_ops(events))
    first = min(span(e)[0] for e in top)
    last = max(span(e)[1] for e in top)
    expected_idle = (last - first) - union([span(e) for e in top])
    graph_calls = [e for e in events if e["name"].startswith("## Call CompiledFxGraph")]
    assert len(graph_calls) == 3 and not any(inside(o, g) for g in graph_calls for o in cpu_ops(events))

    diag, _ = analyse("cpu_compiled_chain.json.gz")
    assert diag.time.total_us == pytest.approx(last - first, abs=1e-3)
    assert diag.time.by_bound["idle"] == pytest.approx(expected_idle, abs=0.01)  # float µs at 1e12
    # The graph calls alone are most of the window, so idle is a small share.
    assert union([span(g) for g in graph_calls]) / (last - first) > 0.7
    assert 100 * diag.time.by_bound["idle"] / diag.time.total_us < 15


def test_busy_time_matches_the_scripts_own_clock():
    """perf_counter around each compiled call (in the generator) against the busy time bwdiag books
    for that call: the cache lookup plus the region, with nothing of it left idle. perf_counter also
    times the Python call around them: measured 1–4 % more, allowed up to 10 %."""
    for name in ("cpu_compiled_chain.json.gz", "cpu_compiled_chain_grad.json.gz"):
        events = raw_events(name)
        steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        diag, a = analyse(name)
        acts = a.activities
        base = min(float(e["ts"]) for e in events)  # bwdiag's times are relative to the first event
        for step, clock_us in zip(steps, TIMINGS[name]):
            calls = [e for e in cpu_ops(events) if inside(e, step)
                     and (e["name"] == "TorchDynamo Cache Lookup" or e["name"].startswith("Torch-Compiled Region"))]
            s = min(span(e)[0] for e in calls) - base
            t = max(span(e)[1] for e in calls) - base
            within = acts[(acts["ts"] >= s - 0.01) & (acts["end"] <= t + 0.01)]  # µs; float rounding of 1e12-µs stamps
            busy = union(zip(within["ts"], within["end"]))
            assert busy == pytest.approx(sum(float(e["dur"]) for e in calls), abs=0.05)
            assert 0.9 * clock_us <= busy <= clock_us


@pytest.mark.parametrize("name", ["cpu_compiled_chain.json.gz", "cpu_compiled_chain_grad.json.gz",
                                  "cpu_compiled_mlp_train.json.gz"])
def test_residual_rows_are_region_time_without_recorded_ops(name):
    events = raw_events(name)
    expected = compiled_residual_us(events)
    assert expected > 0
    _, a = analyse(name)
    rows = a.activities[a.activities["link"] == "region"]
    assert float(rows["dur"].sum()) == pytest.approx(expected, rel=1e-9, abs=1e-3)
    assert (rows["kind"] == "compiled").all()


def test_no_finding_from_the_one_element_counter():
    """The eager step counter (add → mul on f32[1]) drew 'Fuse 2 ops (add → mul)' (1.2 % of the
    window) next to the compiled chain. The counter is in the trace; the finding must not be."""
    events = raw_events("cpu_compiled_chain.json.gz")
    tiny = [e for e in cpu_ops(events) if e["name"] in ("aten::add", "aten::mul")
            and e.get("args", {}).get("Input Dims", [None])[0] == [1]]
    assert len(tiny) == 6
    diag, _ = analyse("cpu_compiled_chain.json.gz")
    assert [f.title for f in diag.findings] == []


def test_tiny_tensor_guard_is_what_stops_that_finding(monkeypatch):
    monkeypatch.setattr(chains, "MIN_INTERMEDIATE_BYTES", 0)
    diag, _ = analyse("cpu_compiled_chain.json.gz")
    assert any(f.kind == "fusion" and "f32[1]" in " ".join(f.evidence) for f in diag.findings)


def test_graph_inputs_price_a_fully_fused_graph():
    """With autograd the graph inputs are on CompiledFunction / CompiledFunctionBackward: a graph that
    ran no op of its own gets those bytes (read once) per call, FLOPs unknown."""
    events = raw_events("cpu_compiled_chain_grad.json.gz")
    expected = {}
    for op in ("CompiledFunction", "CompiledFunctionBackward"):
        found = [e for e in cpu_ops(events) if e["name"] == op]
        per_call = {sum(4.0 * np.prod(x) for x in e["args"]["Input Dims"]) for e in found}
        assert len(found) == 3 and len(per_call) == 1
        assert all(t == "float" for e in found for t in e["args"]["Input type"])
        expected[op] = 3 * per_call.pop()
    assert expected["CompiledFunction"] == 3 * 3 * 512 * 512 * 4

    diag, _ = analyse("cpu_compiled_chain_grad.json.gz")
    graphs = sorted((k for k in diag.kernels if k.name.endswith("(Inductor code)")), key=lambda k: -k.total_us)
    assert len(graphs) == 2
    fwd, bwd = graphs  # the forward runs the pointwise chain, the backward its derivative
    assert fwd.bytes == pytest.approx(expected["CompiledFunction"])
    assert bwd.bytes == pytest.approx(expected["CompiledFunctionBackward"])
    for k in graphs:
        assert k.category == "elementwise" and k.flops is None and k.bound in ("memory", "latency")
        assert k.achieved_bytes_per_s == pytest.approx(k.bytes / (k.total_us / 1e6))
    assert any("a floor" in w for w in diag.warnings)


def test_without_shapes_the_estimate_is_missing_not_zero():
    diag, _ = analyse("cpu_compiled_chain.json.gz")
    (graph,) = [k for k in diag.kernels if k.name.endswith("(Inductor code)")]
    assert graph.category == "elementwise" and graph.flops is None and graph.bytes is None
    assert graph.bound == "unknown"
    assert diag.coverage.estimated_pct < 5  # the graph is nearly all the compute time, unestimated
    assert any("no cost estimate" in w for w in diag.warnings)


def test_profiled_inductor_kernels_keep_their_names_and_category():
    """With cpp.enable_kernel_profile the fused loops are graph_*_cpp_fused_* ops: each is its own
    row (elementwise, kind compiled); the graph's remaining time is wrapper code, not priced."""
    events = raw_events("cpu_compiled_mlp_train.json.gz")
    kernels = {e["name"] for e in cpu_ops(events) if "cpp_fused" in e["name"]}
    assert kernels == {"graph_0_cpp_fused_relu_0", "graph_0_cpp_fused_sum_threshold_backward_0", "graph_0_cpp_fused_sum_1"}
    diag, a = analyse("cpu_compiled_mlp_train.json.gz")
    acts = a.activities
    named = acts[acts["name"].isin(kernels)]
    assert len(named) == 9 and (named["kind"] == "compiled").all()
    assert set(named.loc[named["name"] != "graph_0_cpp_fused_sum_1", "category"]) == {"elementwise"}
    residual = acts[acts["name"].str.endswith("(Inductor code)")]
    assert set(residual["category"]) == {"other"} and residual["bytes"].isna().all()
    # GEMMs Inductor calls out to keep their own cost; no fusion finding touches compiled code.
    assert acts.loc[(acts["kind"] == "compiled") & acts["name"].isin(("aten::addmm", "aten::mm")), "flops"].notna().all()
    compiled_rows = set(np.flatnonzero((acts["kind"] == "compiled").to_numpy()).tolist())
    for run in chains.fusable_runs(acts, a.trace.ops):
        assert not compiled_rows.intersection(run.rows.tolist())


def test_compilation_in_the_window_is_not_work():
    """First call compiled inside step 0: 1.77 s of Dynamo/Inductor under a top-level 'dynamo' span,
    with fake-tensor aten ops under it. Before the fix the window was 1763 ms and 1610 ms of it busy."""
    events = raw_events("cpu_compile_in_window.json.gz")
    (compile_span,) = [e for e in outermost(cpu_ops(events)) if e["name"] == "dynamo"]
    fake = [e for e in cpu_ops(events) if e["name"].startswith("aten::") and inside(e, compile_span)]
    assert len(fake) > 5
    after = [e for e in outermost(cpu_ops(events)) if e is not compile_span]
    diag, a = analyse("cpu_compile_in_window.json.gz")
    base = min(float(e["ts"]) for e in events)
    cs, ce = span(compile_span)
    acts = a.activities
    assert not ((acts["ts"] < ce - base) & (acts["end"] > cs - base)).any()
    assert diag.sections_dict()["compiled"]["compile_us"] == pytest.approx(float(compile_span["dur"]))
    steady = union([span(e) for e in after])
    assert diag.time.total_us - diag.time.by_bound["idle"] == pytest.approx(steady, abs=1e-3)
    assert diag.time.total_us < 0.01 * float(compile_span["dur"])
    assert any("compiled during the trace" in w for w in diag.warnings)


def test_eager_traces_have_no_compiled_rows():
    diag, a = analyse("cpu_elementwise_chain.json.gz")
    assert not (a.activities["kind"] == "compiled").any()
    assert diag.compiled is None
    assert not any("torch.compile" in w for w in diag.warnings)


@pytest.mark.parametrize("name, inputs, why", [
    # training: CompiledFunction records its 5 inputs and the backward its 1, per step (3 steps); the
    # graphs call out to addmm/mm, so the inputs' bytes are not the fused loops' alone
    ("cpu_compiled_mlp_train.json.gz", 6, "the compiled graphs also run recorded ops"),
    ("cpu_compiled_chain.json.gz", 0, "without autograd no CompiledFunction op carries the graph inputs"),
    ("cpu_compiled_chain_grad.json.gz", 6, "is priced by the graph inputs' bytes"),
])
def test_the_unpriced_compiled_time_warning_gives_the_reason_the_trace_shows(name, inputs, why):
    diag, _ = analyse(name)
    assert diag.compiled.graph_inputs == inputs
    (line,) = [w for w in diag.warnings if "ran no recorded op" in w]
    assert why in line
