"""What compiling a CPU training step costs on top of what its findings save: dropout's random draws
(:mod:`bwdiag.diagnose.findings.compile_costs`), taken off the fix's saving and ranked by."""

from __future__ import annotations

import dataclasses

import pytest

from bwdiag.diagnose.findings import _with_fix_savings, ranked
from bwdiag.diagnose.findings.base import RuleResult
from bwdiag.diagnose.findings.compile_costs import dropout_draws
from bwdiag.diagnose.model import Finding, FindingKind
from bwdiag.report.verdict import same_fix_note
from tests.rule_context import context, kernel, op, rank

F32 = "float"


def _training_rank(backward: bool = True):
    """A CPU step: two dropouts (65,536 and 131,072 floats; eager bernoulli_ 400 and 800 µs), a matmul,
    and (``backward``) an autograd node — in a 2,000 µs window."""
    ops = [op("aten::bernoulli_", dims=[[8, 64, 128], [], []], types=[F32, "Scalar", ""], ts=0, end=400),
           op("aten::bernoulli_", dims=[[8, 4, 64, 64], [], []], types=[F32, "Scalar", ""], ts=500, end=1300),
           op("aten::mm", dims=[[512, 128], [128, 128]], types=[F32, F32], ts=1300, end=1800),
           op("autograd::engine::evaluate_function: MmBackward0" if backward else "aten::relu", ts=1800, end=2000)]
    acts = [kernel(o["name"], op=i, ts=o["ts"], dur=o["end"] - o["ts"], category="elementwise", bound="memory",
                   kind="cpu_op", stream=1, bytes=1.0) for i, o in enumerate(ops)]
    return rank(ops, acts)


def _calibrated(ctx, dropout_ns: float | None):
    """``ctx`` diagnosed with a calibration of its host whose probe drew ``dropout_ns`` per element at one
    thread (None: the probe has no dropout figure, as calibrations before it), of a one-thread trace."""
    per_op = {"tanh": 1.4, **({} if dropout_ns is None else {"dropout": dropout_ns})}
    calibration = {"path": "calibration-cpu.json", "origin": "local",
                   "values": {"compiled_pointwise": {"ns_per_element": {"1": per_op}}}}
    for a in ctx.analyses:
        a.trace.metadata = {"bwdiag": {"torch_threads": 1}}
    device = dataclasses.replace(ctx.diagnosis.device, calibration=calibration)
    return dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, device=device))


def test_draws_cost_what_inductor_takes_beyond_eager():
    ctx = _calibrated(context([_training_rank()], total_us=2000, trace_kind="cpu"), 16.0)
    draws = dropout_draws(ctx)
    # 65,536 + 131,072 = 196,608 elements × 16 ns = 3,145.728 µs compiled, against 400 + 800 µs eager
    assert draws.calls == 2 and draws.elements == 196_608 and draws.eager_us == pytest.approx(1200.0)
    assert draws.compiled_us == pytest.approx(3145.728) and draws.extra_us == pytest.approx(1945.728)
    # no cost to count: Inductor draws faster than eager did (5 ns → 983 µs < 1,200), the probe has no
    # dropout figure, a GPU trace (Philox draws hide behind the kernel's bytes), or an inference trace
    assert dropout_draws(_calibrated(context([_training_rank()], total_us=2000, trace_kind="cpu"), 5.0)) is None
    assert dropout_draws(_calibrated(context([_training_rank()], total_us=2000, trace_kind="cpu"), None)) is None
    assert dropout_draws(_calibrated(context([_training_rank()], total_us=2000, trace_kind="gpu"), 16.0)) is None
    assert dropout_draws(_calibrated(context([_training_rank(backward=False)], total_us=2000, trace_kind="cpu"),
                                     16.0)) is None


def _finding(title: str, saving: float, fix: str, kind=FindingKind.FUSION) -> RuleResult:
    return RuleResult(Finding(kind, title, saving, 100.0 * saving / 2000, ("measured",), fix))


def test_a_compile_fix_pays_the_draws_and_ranks_by_what_it_saves_applied():
    ctx = _calibrated(context([_training_rank()], total_us=2000, trace_kind="cpu"), 16.0)
    results = [_finding("Cut the Python between 900 tiny ops", 1500.0, "train_step = torch.compile(train_step)",
                        FindingKind.HOST_BOUND),
               _finding("Use a fused AdamW step", 600.0, "optimizer = torch.optim.AdamW(params, fused=True)")]
    host, adamw = [r.finding for r in _with_fix_savings(ctx, results, None)]
    # the compile fix saves 1,500 − 1,945.728 µs: it makes the step 445.728 µs slower; the other is untouched
    assert host.fix_saving_us == pytest.approx(1500 - 1945.728)
    assert host.fix_saving_pct == pytest.approx(100 * (1500 - 1945.728) / 2000)
    assert host.evidence[-1].startswith("compiling also moves dropout's random draws into Inductor's loop: 2 draws "
                                        "over 196,608 elements × 16 ns")
    assert host.evidence[-1].endswith("`torch._inductor.config.fallback_random = True` before compiling keeps "
                                      "eager's draws (other random numbers, the same distribution)")
    assert adamw.fix_saving_us is None and adamw.evidence == ("measured",)
    # ranked by what applying the fix saves: the fused AdamW (600 µs) comes first
    assert ranked([host, adamw]) == [1, 0]
    assert same_fix_note(host, [host.title, adamw.title]) == (
        "Applied, the fix makes the step slower by 446 µs over the window: it also pays what the last line of "
        "the evidence says, which also says how to avoid it.")
    # a larger saving survives the draws: it is said with the figure, and ranks by it
    (big,) = [r.finding for r in _with_fix_savings(ctx, [dataclasses.replace(
        results[0], finding=dataclasses.replace(results[0].finding, est_saving_us=2600.0, est_saving_pct=130.0))],
        None)]
    assert big.fix_saving_us == pytest.approx(2600 - 1945.728) and big.rank_us == pytest.approx(654.272)
    assert same_fix_note(big, [big.title]).startswith("Applied, it saves 654 µs over the window (32.7%), less than "
                                                      "this finding alone")
    # without draws to pay (an inference trace) nothing changes
    plain = context([_training_rank(backward=False)], total_us=2000, trace_kind="cpu")
    assert [r.finding for r in _with_fix_savings(_calibrated(plain, 16.0), results, None)] == \
        [r.finding for r in results]
