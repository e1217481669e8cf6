"""The fusion saving's arithmetic floor: a fused loop still evaluates every transcendental op
(numbers worked out by hand in each test)."""

from __future__ import annotations

import pytest

from bwdiag.diagnose.findings import fusion
from bwdiag.diagnose.findings.chains import arithmetic_floor, fusable_runs
from tests.rule_context import context, kernel, op, rank

MiB = 1 << 20
F32 = "float"


def _rank(tanh_us: float, relu_us: float = 8.0):
    """mul(x, y) → tanh(t0) → relu(t1) → add(t2, z) over 1 Mi-element fp32 tensors (4 MiB each)."""
    n = [1 << 20]
    ops = [op("aten::mul", dims=[n, n], types=[F32, F32]), op("aten::tanh", dims=[n], types=[F32]),
           op("aten::relu", dims=[n], types=[F32]), op("aten::add", dims=[n, n], types=[F32, F32])]
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
