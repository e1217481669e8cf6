"""The dependency-graph what-if on hand-built timelines whose answers are worked out by hand.

Each timeline is a few launch calls, kernels and syncs (or CPU ops) laid out in µs; the comment
above each test walks through the schedule the fix leaves. ``depgraph.retime`` with no change must
give back the trace's own times, and the findings' changes must move the window by the worked-out
amount — not by the simple subtraction of the saving.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bwdiag.diagnose import depgraph
from bwdiag.diagnose.depgraph import Change
from bwdiag.diagnose.findings.base import RuleResult
from bwdiag.diagnose.findings.whatif import graph_project
from bwdiag.diagnose.model import Finding
from tests.conftest import A100_TRAIN, CPU_OPS, H100_BERT, shared_trace
from tests.findings_helpers import analysed


def gpu_rank(kernels, calls, ops=()):
    """A GPU rank: ``kernels`` as (stream, start, end, correlation), ``calls`` as (name, start, end,
    correlation) on one host thread; ``ops`` (name, start, end) for DataLoader spans."""
    acts = pd.DataFrame({
        "name": [f"k{i}" for i in range(len(kernels))], "kind": "kernel",
        "ts": [float(k[1]) for k in kernels], "end": [float(k[2]) for k in kernels],
        "dur": [float(k[2] - k[1]) for k in kernels], "stream": [k[0] for k in kernels],
        "category": "elementwise", "bound": "memory"})
    gpu = pd.DataFrame({"correlation": [k[3] for k in kernels]})
    rt = pd.DataFrame({"name": [c[0] for c in calls], "ts": [float(c[1]) for c in calls],
                       "end": [float(c[2]) for c in calls], "dur": [float(c[2] - c[1]) for c in calls],
                       "tid": 1, "correlation": [c[3] for c in calls]})
    ops = pd.DataFrame({"name": [o[0] for o in ops], "ts": [float(o[1]) for o in ops],
                        "end": [float(o[2]) for o in ops]}, columns=["name", "ts", "end"])
    trace = SimpleNamespace(is_gpu=True, gpu=gpu, ops=ops, tables=SimpleNamespace(runtime=rt))
    return SimpleNamespace(activities=acts, trace=trace)


def cpu_rank(op_list, spans=()):
    """A CPU-only rank: leaf ops (name, start, end, tid, category) — the host is the device — and
    ``spans`` (name, start, end) among the trace's ops (DataLoader ``__next__``)."""
    acts = pd.DataFrame({
        "name": [o[0] for o in op_list], "kind": "cpu_op", "ts": [float(o[1]) for o in op_list],
        "end": [float(o[2]) for o in op_list], "dur": [float(o[2] - o[1]) for o in op_list],
        "stream": [o[3] for o in op_list], "category": [o[4] for o in op_list], "bound": "memory"})
    ops = pd.DataFrame({"name": [o[0] for o in spans], "ts": [float(o[1]) for o in spans],
                        "end": [float(o[2]) for o in spans]}, columns=["name", "ts", "end"])
    trace = SimpleNamespace(is_gpu=False, gpu=pd.DataFrame(), ops=ops,
                            tables=SimpleNamespace(runtime=pd.DataFrame()))
    return SimpleNamespace(activities=acts, trace=trace)


def window(g, change=None) -> float:
    return depgraph.retime(g, change).window_us


def halve(g, rank_rows: dict[int, list[int]]) -> Change:
    scale = np.ones(g.size)
    for pos, rows in rank_rows.items():
        scale[g.node_of_act[pos][rows]] = 0.5
    return Change(scale=scale)


def result(saving, acts=None, idle_us=0.0, kind="fusion", effect=None) -> RuleResult:
    f = Finding(kind, "t", float(saving), 0.0, (), "fix")
    return RuleResult(f, {p: np.asarray(r) for p, r in (acts or {}).items()}, float(idle_us), effect)


def test_replay_without_change_gives_the_trace_back():
    a = gpu_rank([(7, 15, 35, 1), (7, 40, 70, 2), (8, 50, 60, 3)],
                 [("cudaLaunchKernel", 0, 10, 1), ("cudaLaunchKernel", 12, 20, 2), ("cudaLaunchKernel", 30, 40, 3)])
    g = depgraph.build_graph([a])
    t = depgraph.retime(g)
    assert t.converged
    np.testing.assert_allclose(t.end, g.end0)
    assert t.window_us == pytest.approx(70 - 15)


# GPU waiting on the host: a call every 100 µs (10 µs call + 90 µs of Python), each kernel starts
# 15 µs after its call began and runs 20 µs, so the GPU idles 80 µs of every 100. The window runs from
# the first kernel's start (15) to the last one's end (415 + 20 = 435): 420 µs. Halving every kernel
# saves 5 × 10 = 50 µs by subtraction, but each kernel still starts when its launch arrives: only the
# last kernel's end moves, by 10 µs.
def test_kernel_saving_while_the_gpu_waits_on_the_host_is_near_zero():
    kernels = [(7, 100 * i + 15, 100 * i + 35, i) for i in range(5)]
    calls = [("cudaLaunchKernel", 100 * i, 100 * i + 10, i) for i in range(5)]
    g = depgraph.build_graph([gpu_rank(kernels, calls)])
    assert window(g) == pytest.approx(420.0)
    assert window(g) - window(g, halve(g, {0: list(range(5))})) == pytest.approx(10.0)
    # Removing the host time while the GPU idled (the 90 µs gaps after the first call) instead
    # packs the kernels: calls every 10 µs, kernels start 15 µs after theirs but queue behind each
    # other on the stream: 15 + 5 × 20 = 115 at the end, a window of 100 µs, 320 µs saved.
    cut = Change(cut=np.where(g.host, np.maximum(g.gap, 0.0), 0.0) * (np.arange(g.size) % 5 != 0))
    assert window(g) - window(g, cut) == pytest.approx(320.0)


# Two streams overlapping: A runs 10–110 and B 10–70, launched by two calls at 0 and 2 (latency 10
# and 8). The window is 100 µs. Halving B saves nothing (A covers it); halving A ends it at 60,
# and B (still 60 µs, ending at 70) becomes the last: 60 µs window, 40 µs saved (subtraction: 50).
def test_a_saving_on_one_stream_hides_behind_the_other():
    a = gpu_rank([(7, 10, 110, 1), (8, 10, 70, 2)],
                 [("cudaLaunchKernel", 0, 2, 1), ("cudaLaunchKernel", 2, 4, 2)])
    g = depgraph.build_graph([a])
    assert window(g) == pytest.approx(100.0)
    assert window(g) - window(g, halve(g, {0: [1]})) == pytest.approx(0.0)
    assert window(g) - window(g, halve(g, {0: [0]})) == pytest.approx(40.0)
    # Both halved: A ends at 60, B at 40 → 50 µs window.
    assert window(g) - window(g, halve(g, {0: [0, 1]})) == pytest.approx(50.0)


# A blocking sync. k1 is launched by a call at 0–5 and runs 10–110; the host calls
# cudaDeviceSynchronize at 20, which returns at 112 (2 µs after k1); 8 µs of Python, then k2's
# launch at 120–125, k2 runs 130–180 on the same stream. Window 10–180 = 170 µs.
#   halving k1 (50 µs): the sync returns at 62, k2's launch at 70, k2 runs 80–130: 50 µs saved —
#   the host waited for k1, so its saving reaches k2;
#   halving k2 (25 µs) saves 25 µs; dropping the sync: it returns after its 2 µs tail at 22, k2's
#   call at 30, but k2 still queues behind k1 on its stream: 110–160, 20 µs saved.
def test_a_blocking_sync_carries_savings_and_its_removal_is_bounded_by_stream_order():
    a = gpu_rank([(7, 10, 110, 1), (7, 130, 180, 3)],
                 [("cudaLaunchKernel", 0, 5, 1), ("cudaDeviceSynchronize", 20, 112, 2),
                  ("cudaLaunchKernel", 120, 125, 3)])
    g = depgraph.build_graph([a])
    assert window(g) == pytest.approx(170.0)
    assert window(g) - window(g, halve(g, {0: [0]})) == pytest.approx(50.0)
    assert window(g) - window(g, halve(g, {0: [1]})) == pytest.approx(25.0)
    drop = np.zeros(g.size, dtype=bool)
    drop[g.dst[g.kind == depgraph.WAIT]] = True
    assert window(g) - window(g, Change(drop_waits=drop)) == pytest.approx(20.0)
    # The same through a sync finding (effect from its kind), and a fusion of k1 that claims
    # 50 µs: together k1 halves and the sync no longer waits: 10–60, call at 30, k2 60–110: 70 µs.
    ctx = SimpleNamespace(analyses=[a], ranks=1)
    gp = graph_project(ctx, [result(50.0, {0: [0]}), result(30.0, idle_us=30.0, kind="sync")], g)
    assert gp.savings == pytest.approx((50.0, 20.0))
    assert gp.applied == pytest.approx((50.0, 20.0))
    assert gp.base_us - gp.projected_us == pytest.approx(70.0)


# Cross-stream event wait: k2 on stream 8 is launched at 0–2 but starts only at 110, when k1 on
# stream 7 (10–110) ends (a cudaStreamWaitEvent). Halving k1 (10–60) lets k2 start at 60: its
# 40 µs end at 100 instead of 150: 50 µs saved. Without the inferred edge it would stay at 110.
def test_a_kernel_waiting_on_another_stream_follows_it():
    a = gpu_rank([(7, 10, 110, 1), (8, 110, 150, 2)],
                 [("cudaLaunchKernel", 0, 2, 1), ("cudaLaunchKernel", 2, 4, 2)])
    g = depgraph.build_graph([a])
    assert (g.kind == depgraph.INFERRED).sum() == 1
    assert window(g) - window(g, halve(g, {0: [0]})) == pytest.approx(50.0)


# CPU-only trace: the host is the device. Ops 0–10, 30–40, 60–70 on one thread (two 20 µs gaps of
# Python). A host-overhead finding claiming 30 µs of idle cuts the gaps by 30 of their 40 µs (15
# each): the window falls from 70 to 40. A fusion halving the second op saves its 5 µs exactly.
def test_cpu_host_gaps_re_time_exactly():
    a = cpu_rank([("aten::mul", 0, 10, 1, "elementwise"), ("aten::add", 30, 40, 1, "elementwise"),
                  ("aten::relu", 60, 70, 1, "elementwise")])
    g = depgraph.build_graph([a])
    assert window(g) == pytest.approx(70.0)
    ctx = SimpleNamespace(analyses=[a], ranks=1)
    gp = graph_project(ctx, [result(30.0, idle_us=30.0, kind="host_bound"), result(5.0, {0: [1]})], g)
    assert gp.savings == pytest.approx((30.0, 5.0))
    assert gp.projected_us == pytest.approx(35.0)


# A CPU step whose 40 µs gap (10–50) is half DataLoader __next__ (10–30), half Python: the data-loader
# finding (20 µs) cuts the part inside the span, the host-overhead finding (20 µs) the rest; each
# alone saves 20 µs, together they cut the whole gap: window 60 → 20, 40 µs saved (not 20: the two
# cuts are disjoint parts of one gap and add up).
def test_loader_and_host_gap_cuts_add_on_one_gap():
    a = cpu_rank([("aten::mm", 0, 10, 1, "gemm"), ("aten::mm", 50, 60, 1, "gemm")],
                 spans=[("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 30)])
    g = depgraph.build_graph([a])
    ctx = SimpleNamespace(analyses=[a], ranks=1)
    gp = graph_project(ctx, [result(20.0, idle_us=20.0, kind="data_loader"),
                             result(20.0, idle_us=20.0, kind="host_bound")], g)
    assert gp.savings == pytest.approx((20.0, 20.0))
    assert gp.base_us - gp.projected_us == pytest.approx(40.0)


# CPU gloo: the main thread enqueues an all-reduce (op 0–10), gloo runs it on its own thread 12–112,
# the main thread's wait op 20–115 returns 3 µs after it, then an op 120–130. Halving the collective
# (12–62) makes the wait return at 65 and the last op run 70–80: 50 µs saved.
def test_cpu_wait_on_a_gloo_collective():
    a = cpu_rank([("c10d::allreduce_", 0, 10, 1, "other"), ("gloo:all_reduce", 12, 112, 2, "communication"),
                  ("c10d::wait", 20, 115, 1, "other"), ("aten::add", 120, 130, 1, "elementwise")])
    g = depgraph.build_graph([a])
    assert window(g) == pytest.approx(130.0)
    assert window(g) - window(g, halve(g, {0: [1]})) == pytest.approx(50.0)


# Two ranks, one all-reduce each: rank 0 computes 0–100 then all-reduces 100–120; rank 1 computes
# 0–40 and its all-reduce 40–120 waits 60 µs for rank 0 (transfer 20 µs). Halving rank 0's compute
# makes both ranks' all-reduce run 50–70: each window shrinks by 50 µs (the mean too).
def test_collectives_across_ranks_wait_for_the_last_rank():
    r0 = gpu_rank([(7, 0, 100, 1), (9, 100, 120, 2)], [("cudaLaunchKernel", -5, -2, 1), ("ncclLaunch", -2, 0, 2)])
    r1 = gpu_rank([(7, 0, 40, 1), (9, 40, 120, 2)], [("cudaLaunchKernel", -5, -2, 1), ("ncclLaunch", -2, 0, 2)])
    for r in (r0, r1):
        r.activities.loc[1, "category"] = "communication"
        r.activities.loc[1, "name"] = "ncclDevKernel_AllReduce"
    g = depgraph.build_graph([r0, r1])
    assert (g.kind == depgraph.COLLECTIVE).sum() == 2
    assert window(g) == pytest.approx(120.0)
    assert window(g) - window(g, halve(g, {0: [0]})) == pytest.approx(50.0)


# On real traces the replay with nothing changed must land every node on the trace's own end time
# (and the window on the diagnosis' window): the gaps, latencies and wait tails are measured so that
# it does. A100 rank 0 holds syncs, cross-stream waits and NCCL; BERT float-µs times; rank_non_gpu
# is CPU-only.
@pytest.mark.parametrize("rel", [A100_TRAIN, H100_BERT, CPU_OPS])
def test_replay_reproduces_shared_traces(rel):
    d, analyses = analysed(shared_trace(rel))
    g = depgraph.build_graph(analyses)
    t = depgraph.retime(g)
    assert t.converged
    assert np.abs(t.end - g.end0).max() < 1e-3
    assert t.window_us == pytest.approx(d.time.total_us, rel=1e-9)
    # every finding got a graph saving, never above the window
    assert all(f.graph_saving_us is not None and -1e-6 <= f.graph_saving_us <= d.time.total_us for f in d.findings)
