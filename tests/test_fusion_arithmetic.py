"""The fusion saving's arithmetic floor: a fused loop still evaluates every transcendental op
(numbers worked out by hand in each test)."""

from __future__ import annotations

import dataclasses

import pytest

from bwdiag.diagnose.findings import fusion
from bwdiag.diagnose.findings.chains import arithmetic_floor, fusable_runs
from tests.rule_context import context, kernel, op, rank

MiB = 1 << 20
F32 = "float"


def _rank(tanh_us: float, relu_us: float = 8.0, third: str = "aten::relu"):
    """mul(x, y) → tanh(t0) → relu(t1) → add(t2, z) over 1 Mi-element fp32 tensors (4 MiB each);
    ``third`` in relu's place."""
    n = [1 << 20]
    ops = [op("aten::mul", dims=[n, n], types=[F32, F32]), op("aten::tanh", dims=[n], types=[F32]),
           op(third, dims=[n], types=[F32]), op("aten::add", dims=[n, n], types=[F32, F32])]
    acts = [kernel("mul", op=0, ts=0, dur=12, category="elementwise", bound="memory", bytes=12 * MiB),
            kernel("tanh", op=1, ts=12, dur=tanh_us, category="elementwise", bound="memory", bytes=8 * MiB),
            kernel("relu", op=2, ts=12 + tanh_us, dur=relu_us, category="elementwise", bound="memory",
                   bytes=8 * MiB),
            kernel("add", op=3, ts=12 + tanh_us + relu_us, dur=12, category="elementwise", bound="memory",
                   bytes=12 * MiB)]
    return rank(ops, acts)


def test_floor_is_the_transcendental_time_beyond_twice_its_memory_time():
    # Best bandwidth: mul's 12 MiB in 12 µs = 1 MiB/µs. tanh moves 8 MiB → 8 µs at that line;
    # 100 − 2·8 = 84 µs of arithmetic. relu (also 40 µs, 8 MiB) is no transcendental: not counted.
    best, arith, names = arithmetic_floor([("aten::mul", 12 * MiB, 12.0), ("aten::tanh", 8 * MiB, 100.0),
                                           ("aten::relu", 8 * MiB, 40.0)])
    assert best == pytest.approx(MiB / 1e-6)
    assert arith == pytest.approx(84.0)
    assert names == ("aten::tanh",)
    # within 2× of the line (tanh 15 µs < 16 µs): memory-bound with noise, no floor
    assert arithmetic_floor([("aten::mul", 12 * MiB, 12.0), ("aten::tanh", 8 * MiB, 15.0)])[1] == 0.0


def test_compute_bound_chain_saves_time_minus_the_arithmetic():
    a = _rank(tanh_us=100.0)
    (run,) = fusable_runs(a.activities, a.trace.ops)
    # Bytes: 12 + 8 + 8 + 12 = 40 MiB in 12 + 100 + 8 + 12 = 132 µs. Intermediates t0, t1, t2 (4 MiB
    # each) written and read back: 24 MiB saved; fused moves 16 MiB → 132 · 16/40 = 52.8 µs of memory.
    # Arithmetic: tanh 100 − 2 · 8 = 84 µs > 52.8 → fused loop ≈ 84 µs, saving 132 − 84 = 48 µs
    # (the bandwidth model alone said 132 · 24/40 = 79.2 µs).
    assert run.saved_bytes == 24 * MiB and run.time_us == pytest.approx(132.0)
    assert run.memory_floor_us == pytest.approx(52.8)
    assert run.arithmetic_us == pytest.approx(84.0) and run.compute_bound
    assert run.saving_us == pytest.approx(48.0)
    f = fusion.fusion(context([a], total_us=200))[0].finding
    assert f.est_saving_us == pytest.approx(48.0)
    assert "tanh compute for 84 µs" in f.evidence[1] and "compute-bound" in f.evidence[1]


def test_memory_bound_chain_keeps_the_bandwidth_saving():
    a = _rank(tanh_us=20.0)
    (run,) = fusable_runs(a.activities, a.trace.ops)
    # 52 µs unfused; tanh 20 − 16 = 4 µs of arithmetic < memory floor 52 · 16/40 = 20.8 µs:
    # saving = 52 · 24/40 = 31.2 µs, as before the floor.
    assert run.arithmetic_us == pytest.approx(4.0) and not run.compute_bound
    assert run.saving_us == pytest.approx(31.2)
    f = fusion.fusion(context([a], total_us=200))[0].finding
    assert "compute-bound" not in f.evidence[1] and "÷" in f.evidence[1]


# -- a CPU thread's loop: bytes and arithmetic add up, arithmetic priced as Inductor's code ----------


def _cpu_rank(tanh_us: float = 100.0, third: str = "aten::relu"):
    """The same chain as CPU ops on one thread (kind ``cpu_op``): mul → tanh → relu → add, 1 Mi floats."""
    a = _rank(tanh_us, third=third)
    acts = a.activities.copy()
    acts["kind"], acts["stream"] = "cpu_op", 1
    return dataclasses.replace(a, activities=acts)


def _calibrated(ctx, ns_per_element: dict, threads: int | None = None, chained: dict | None = None):
    """``ctx`` diagnosed with a calibration that measured ``ns_per_element`` ({threads: {op: ns}}; ops
    feeding one another: ``chained``), of a trace a bwdiag capture said ran ``threads`` intra-op threads."""
    pointwise = {"ns_per_element": ns_per_element, **({"chained_ns_per_element": chained} if chained else {})}
    calibration = {"path": "calibration-cpu.json", "origin": "local",
                   "values": {"compiled_pointwise": pointwise}}
    if threads is not None:
        for a in ctx.analyses:
            a.trace.metadata = {"bwdiag": {"torch_threads": threads}}
    device = dataclasses.replace(ctx.diagnosis.device, calibration=calibration)
    return dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, device=device))


def test_cpu_loop_pays_its_bytes_plus_the_compiled_arithmetic():
    a = _cpu_rank(tanh_us=100.0)
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={"tanh": 0.05})
    # Memory floor: the 16 MiB the fused loop still moves at the best line an op reached (mul's 12 MiB in
    # 12 µs: 1 MiB/µs) = 16 µs — not the run's average (40 MiB in 132 µs → 52.8 µs), which holds tanh's
    # own time, counted below. Arithmetic: Inductor's tanh, 1,048,576 elements × 0.05 ns = 52.4288 µs —
    # not the eager kernel's 84 µs beyond its bytes. One thread does both in turn: fused loop 16 + 52.4288
    # = 68.4288 µs, saving 132 − 68.4288 = 63.5712 µs.
    assert run.serial and run.memory_floor_us == pytest.approx(16.0)
    assert run.arithmetic_us == pytest.approx(52.4288) and run.arithmetic_ops == ("aten::tanh",)
    assert run.saving_us == pytest.approx(63.5712)


def test_cpu_fusion_finding_uses_the_hosts_calibration_and_says_so():
    a = _cpu_rank(tanh_us=100.0)
    ctx = context([a], total_us=200, trace_kind="cpu")
    # measured on the host at 2 threads (the most measured; the trace says nothing of its threads):
    # tanh 0.02 ns per element → 20.97152 µs; loop 16 + 20.97152; saving 95.02848 µs
    f = fusion.fusion(_calibrated(ctx, {"1": {"tanh": 0.04}, "2": {"tanh": 0.02, "exp": 0.1}}))[0].finding
    assert f.est_saving_us == pytest.approx(132 - 16 - 20.97152)
    assert "16.8 MB would take 16 µs at the best op's 1.05 TB/s, plus 21 µs for tanh in the compiled loop" in f.evidence[1]
    assert "Inductor's ns per element, measured on this host by bwdiag calibrate, 2 threads" in f.evidence[1]
    # without a calibration of the trace's host: the eager tanh's time beyond twice its bytes at the
    # run's best bandwidth (100 − 2 · 8 = 84 µs, as on a GPU), added to the bytes: 132 − 16 − 84 = 32 µs
    (f,) = [r.finding for r in fusion.fusion(ctx)]
    assert f.est_saving_us == pytest.approx(32.0)
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={})
    assert run.serial and run.arithmetic_us == pytest.approx(84.0) and run.saving_us == pytest.approx(32.0)
    a = _cpu_rank(tanh_us=150.0)  # 150 − 16 = 134 µs of arithmetic + 16 of bytes: the 182 µs chain saves 32
    (f,) = [r.finding for r in fusion.fusion(context([a], total_us=300, trace_kind="cpu"))]
    assert f.est_saving_us == pytest.approx(182 - 16 - 134)
    assert "from the eager ops' time beyond their bytes" in f.evidence[1]


def test_ops_that_feed_one_another_are_priced_as_a_chain():
    a = _cpu_rank(tanh_us=100.0, third="aten::sigmoid")  # mul → tanh → sigmoid → add
    alone, chained = {"tanh": 0.02, "sigmoid": 0.005}, {"tanh": 0.03, "sigmoid": 0.01}
    # two priced ops in one loop, sigmoid reading tanh's output: 1,048,576 × (0.03 + 0.01) ns = 41.94304 µs
    # (side by side they would cost 1,048,576 × 0.025 = 26.2144); memory 16 → saving 132 − 16 − 41.94304
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns=alone, chained_ns=chained)
    assert run.chained and run.arithmetic_us == pytest.approx(41.94304)
    assert run.saving_us == pytest.approx(132 - 16 - 41.94304)
    # a calibration made before chains were measured: the figures side by side
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns=alone)
    assert not run.chained and run.arithmetic_us == pytest.approx(26.2144)
    # one without a chained figure keeps its own: 1,048,576 × (0.03 + 0.005) = 36.70016 µs
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns=alone, chained_ns={"tanh": 0.03})
    assert run.chained and run.arithmetic_us == pytest.approx(36.70016)
    # one priced op (relu is no transcendental) chains with nothing: tanh's own 0.02 → 20.97152 µs
    b = _cpu_rank(tanh_us=100.0)
    (run,) = fusable_runs(b.activities, b.trace.ops, loop_ns=alone, chained_ns=chained)
    assert not run.chained and run.arithmetic_us == pytest.approx(20.97152)
    # the finding reads both tables from the calibration, at the trace's threads, and says so
    ctx = _calibrated(context([a], total_us=200, trace_kind="cpu"), {"1": alone}, threads=1, chained={"1": chained})
    (f,) = [r.finding for r in fusion.fusion(ctx)]
    assert f.est_saving_us == pytest.approx(132 - 16 - 41.94304)
    assert "plus 41.9 µs for tanh, sigmoid (each feeding the next) in the compiled loop" in f.evidence[1]


def test_cpu_loop_is_priced_at_the_threads_the_trace_ran_with():
    a = _cpu_rank(tanh_us=100.0)
    table = {"1": {"tanh": 0.04}, "2": {"tanh": 0.025}}
    # one thread, measured: 1,048,576 × 0.04 ns = 41.94304 µs → saving 132 − 16 − 41.94304 = 74.05696 µs
    f = fusion.fusion(_calibrated(context([a], total_us=200, trace_kind="cpu"), table, threads=1))[0].finding
    assert f.est_saving_us == pytest.approx(74.05696)
    # four threads, not measured: the one-thread figure ÷ 4 = 0.01 ns → 10.48576 µs → saving 105.51424 µs
    f = fusion.fusion(_calibrated(context([a], total_us=200, trace_kind="cpu"), table, threads=4))[0].finding
    assert f.est_saving_us == pytest.approx(132 - 16 - 10.48576)
    assert "one-thread figures ÷ the trace's 4 threads" in f.evidence[1]


def test_gpu_kernels_keep_the_larger_floor_even_with_loop_costs():
    a = _rank(tanh_us=100.0)  # GPU kernels on a stream: compute and memory overlap
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={"tanh": 0.05})
    assert not run.serial and run.saving_us == pytest.approx(48.0)


def test_op_key_maps_recorded_names_to_the_probe():
    from bwdiag.diagnose.findings.compiled_loops import op_key

    assert op_key("aten::tanh") == "tanh" and op_key("aten::tanh_") == "tanh"
    assert op_key("aten::sigmoid.out") == "sigmoid"
    # not the same op: left as recorded, so no probe figure applies
    assert op_key("aten::log_softmax") == "aten::log_softmax" and op_key("aten::gelu_backward") == "aten::gelu_backward"
    # every way a trace records dropout's random draw is the probe's "dropout"
    assert {op_key(n) for n in ("aten::dropout", "aten::native_dropout", "aten::bernoulli_",
                                "aten::feature_dropout")} == {"dropout"}


def _dropout_rank(dropout_us: float):
    """dropout(x) → add(t0, r) → relu(t1) over 1 Mi-element fp32 tensors, CPU ops on one thread."""
    n = [1 << 20]
    ops = [op("aten::dropout", dims=[n, [], []], types=[F32, "Scalar", "Scalar"]),
           op("aten::add", dims=[n, n], types=[F32, F32]), op("aten::relu", dims=[n], types=[F32])]
    acts = [kernel("dropout", op=0, ts=0, dur=dropout_us, category="elementwise", bound="memory", bytes=8 * MiB),
            kernel("add", op=1, ts=dropout_us, dur=12, category="elementwise", bound="memory", bytes=12 * MiB),
            kernel("relu", op=2, ts=dropout_us + 12, dur=8, category="elementwise", bound="memory", bytes=8 * MiB)]
    a = rank(ops, acts)
    acts = a.activities.copy()
    acts["kind"], acts["stream"] = "cpu_op", 1
    return dataclasses.replace(a, activities=acts)


def test_a_fused_loop_still_draws_dropouts_random_numbers():
    # Eager dropout 6,000 µs over 1 Mi floats (≈5.7 ns each: ATen's bernoulli_, as on the Intel dev VM).
    # Bytes: 28 MiB in 6,020 µs; saved 2 × (4 + 4) = 16 MiB of intermediates → memory floor: 12 MiB at
    # the best op's line (add: 12 MiB in 12 µs) = 12 µs.
    a = _dropout_rank(6000.0)
    # Inductor draws each element's number too: 1,048,576 × 7 ns = 7,340.032 µs, more than the eager
    # kernel took → the fused loop (12 + 7,340) is slower than the three ops: no saving
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={"dropout": 7.0})
    assert run.arithmetic_ops == ("aten::dropout",) and run.arithmetic_us == pytest.approx(7340.032)
    assert run.saving_us == 0.0
    # at 2 ns an element (a host whose Inductor draws fast): 6,020 − 12 − 2,097.152 = 3,910.848 µs
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={"dropout": 2.0})
    assert run.saving_us == pytest.approx(6020 - 12 - 2097.152)
    # uncalibrated: the eager draw's time beyond twice its bytes at the run's best bandwidth stays in
    # the loop (best: add's 12 MiB in 12 µs; dropout's 8 MiB → 16 µs; 6,000 − 16 = 5,984 µs) — it is
    # not the memory traffic fusion removes: 6,020 − 12 − 5,984 = 24 µs saved
    (run,) = fusable_runs(a.activities, a.trace.ops, loop_ns={})
    assert run.arithmetic_us == pytest.approx(6000 - 16.0) and run.saving_us == pytest.approx(24.0)


def test_cpu_loop_arithmetic_counts_in_the_recorded_windows_terms():
    # The 200 µs window holds two recorded steps, 120 (a slow first step) and 80 µs: 100 on average;
    # `bwdiag run` timed the steps after it at 80 µs each. The eager ops and the bytes' time are the
    # recording's; the calibrated tanh (0.02 ns × 1,048,576 = 20.97152 µs) is the plain script's speed,
    # so it counts × 100 / 80 = 1.25 in the window: 26.2144 µs, saving 132 − 16 − 26.2144 = 89.7856 µs.
    # The views give it per plain step as × 80 / 200: 35.9 µs.
    a = _cpu_rank(tanh_us=100.0)
    ctx = _calibrated(context([a], total_us=200, trace_kind="cpu"), {"2": {"tanh": 0.02}})
    t = dataclasses.replace(ctx.diagnosis.time, step_us=100.0, step_durations_us=(120.0, 80.0), unprofiled_step_us=80.0)
    ctx = dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, time=t))
    assert ctx.recorded_stretch == pytest.approx(1.25)
    f = fusion.fusion(ctx)[0].finding
    assert f.est_saving_us == pytest.approx(132 - 16 - 1.25 * 20.97152)
    assert "plus 26.2 µs for tanh" in f.evidence[1], f.evidence[1]
    assert "× 1.25: the recorded steps took 100 µs on average, 80 µs without the profiler" in f.evidence[1]
    assert "(35.9 µs per step as run without the profiler)" in f.evidence[1]
    # a GPU trace keeps its kernels' own times: no stretch
    gpu = dataclasses.replace(ctx, diagnosis=dataclasses.replace(
        ctx.diagnosis, source=dataclasses.replace(ctx.diagnosis.source, trace_kind="gpu")))
    assert gpu.recorded_stretch == 1.0
