"""A fusable run ends at a ``ProfilerStep#N`` boundary: a chain the loop repeats in every step is that
chain ×steps, not one chain steps times as long (numbers worked out by hand)."""

from __future__ import annotations

import pytest

from bwdiag.diagnose.findings import fusion
from bwdiag.diagnose.findings.chains import fusable_runs
from tests.rule_context import context, kernel, op, rank

MiB = 1 << 20
F32 = "float"
N = [1 << 20]  # 1 Mi fp32 elements: 4 MiB a tensor


def _steps(n_steps: int, marked: bool = True):
    """``n_steps`` steps of mul(x, y) → relu → add(·, z) as CPU ops, 10 µs each, 100 µs apart; each step
    in a ``ProfilerStep#k`` span when ``marked``. The add of one step writes a tensor the size the
    next step's mul reads: by the dataflow test alone the chain goes on."""
    ops, acts = [], []
    for k in range(n_steps):
        t = 100.0 * k
        if marked:
            ops.append(op(f"ProfilerStep#{k}", cat="user_annotation", ts=t, end=t + 99))
        for j, (name, dims, nbytes) in enumerate((("aten::mul", [N, N], 12 * MiB), ("aten::relu", [N], 8 * MiB),
                                                  ("aten::add", [N, N], 12 * MiB))):
            ops.append(op(name, dims=dims, types=[F32] * len(dims), ts=t + 10 * j, end=t + 10 * j + 10))
            acts.append(kernel(name.removeprefix("aten::"), op=len(ops) - 1, ts=t + 10 * j, dur=10, kind="cpu_op",
                               stream=1, category="elementwise", bound="memory", bytes=nbytes))
    return rank(ops, acts)


def test_a_chain_repeated_in_four_steps_is_four_runs_of_three_ops():
    a = _steps(4)
    runs = fusable_runs(a.activities, a.trace.ops)
    assert [len(r.rows) for r in runs] == [3, 3, 3, 3]
    # Per step: 12 + 8 + 12 = 32 MiB in 30 µs; intermediates (mul's and relu's 4 MiB outputs) written
    # and read back: 16 MiB saved → 30 µs × 16/32 = 15 µs a step.
    assert all(r.saved_bytes == 16 * MiB and r.saving_us == pytest.approx(15.0) for r in runs)
    (f,) = fusion.fusion(context([a], total_us=400, trace_kind="cpu"))
    assert f.title.startswith("Fuse 3 ops (mul → relu → add) (×4")
    # the finding prices a CPU trace's fused loop at the best op's line (mul and add: 12 MiB in 10 µs):
    # 16 MiB in 13.33 µs, so each step saves 30 − 13.33 = 16.67 µs
    assert f.finding.est_saving_us == pytest.approx(4 * (30 - 16 / 1.2))
    assert "67.1 MB would take 53.3 µs at the best op's 1.26 TB/s → saves 120 µs − 53.3 µs" in f.finding.evidence[1]


def test_the_split_changes_the_saving_by_the_step_boundaries_only():
    # Without step spans the dataflow test keeps one 12-op run: 128 MiB in 120 µs, 11 intermediates of
    # 4 MiB saved twice = 88 MiB → 120 × 88/128 = 82.5 µs.
    (whole,) = fusable_runs(*(lambda a: (a.activities, a.trace.ops))(_steps(4, marked=False)))
    assert len(whole.rows) == 12 and whole.saving_us == pytest.approx(82.5)
    # Split at the 3 step boundaries, each boundary's 4 MiB tensor is no longer kept on chip:
    # 82.5 − 3 × 2 × 4 MiB ÷ (128 MiB / 120 µs) = 82.5 − 22.5 = 60 µs, the four runs' sum.
    a = _steps(4)
    split = sum(r.saving_us for r in fusable_runs(a.activities, a.trace.ops))
    assert split == pytest.approx(whole.saving_us - 3 * 2 * 4 * MiB / (128 * MiB / 120.0))
    assert split == pytest.approx(60.0)
