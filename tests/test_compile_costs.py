"""What compiling a CPU training step would cost on top of what its findings save: dropout's random
draws (:mod:`bwdiag.diagnose.findings.compile_costs`), which every compile fix then keeps eager."""

from __future__ import annotations

import dataclasses

import pytest

from bwdiag.diagnose.findings import _with_eager_draws
from bwdiag.diagnose.findings.base import RuleResult
from bwdiag.diagnose.findings.compile_costs import dropout_draws
from bwdiag.diagnose.findings.same_fix import compile_scope
from bwdiag.diagnose.model import Finding, FindingKind
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


def _ctx(dropout_ns: float | None, *, backward: bool = True, trace_kind: str = "cpu"):
    """A context over :func:`_training_rank` whose host's calibration drew ``dropout_ns`` per element
    at one thread (None: the probe has no dropout figure, as calibrations before it), one-thread trace."""
    ctx = context([_training_rank(backward)], total_us=2000, trace_kind=trace_kind)
    per_op = {"tanh": 1.4, **({} if dropout_ns is None else {"dropout": dropout_ns})}
    calibration = {"path": "calibration-cpu.json", "origin": "local",
                   "values": {"compiled_pointwise": {"ns_per_element": {"1": per_op}}}}
    for a in ctx.analyses:
        a.trace.metadata = {"bwdiag": {"torch_threads": 1}}
    device = dataclasses.replace(ctx.diagnosis.device, calibration=calibration)
    return dataclasses.replace(ctx, diagnosis=dataclasses.replace(ctx.diagnosis, device=device))


def test_draws_cost_what_inductor_takes_beyond_eager():
    draws = dropout_draws(_ctx(16.0))
    # 65,536 + 131,072 = 196,608 elements × 16 ns = 3,145.728 µs compiled, against 400 + 800 µs eager
    # (6.1 ns an element)
    assert draws.calls == 2 and draws.elements == 196_608 and draws.eager_us == pytest.approx(1200.0)
    assert draws.compiled_us == pytest.approx(3145.728) and draws.extra_us == pytest.approx(1945.728)
    assert draws.eager_ns == pytest.approx(1200e3 / 196_608)
    # nothing to keep eager: Inductor draws faster than eager did (5 ns → 983 µs < 1,200), the probe has
    # no dropout figure, a GPU trace (Philox draws hide behind the kernel's bytes), an inference trace
    assert dropout_draws(_ctx(5.0)) is None
    assert dropout_draws(_ctx(None)) is None
    assert dropout_draws(_ctx(16.0, trace_kind="gpu")) is None
    assert dropout_draws(_ctx(16.0, backward=False)) is None


def _finding(title: str, fix: str, kind=FindingKind.FUSION) -> RuleResult:
    return RuleResult(Finding(kind, title, 1500.0, 75.0, ("measured",), fix))


def test_every_compile_fix_keeps_eagers_draws_and_says_why():
    results = [_finding("Cut the Python between 900 tiny ops",
                        "train_step = torch.compile(train_step)  # the step\n# or larger batches",
                        FindingKind.HOST_BOUND),
               _finding("Fuse 2 ops", "model = torch.compile(model)  # the chain"),
               _finding("Use a fused AdamW step", "optimizer = torch.optim.AdamW(params, fused=True)")]
    host, fusion, adamw = [r.finding for r in _with_eager_draws(_ctx(16.0), results)]
    line = ("import torch._inductor.config; torch._inductor.config.fallback_random = True  # dropout: ATen's "
            "draws (6.1 ns an element here) instead of Inductor's (16.0 ns)")
    # the line goes right under the compile line, which stays first (what same_fix reads the scope from)
    assert host.fix.splitlines() == ["train_step = torch.compile(train_step)  # the step", line,
                                     "# or larger batches"]
    assert fusion.fix.splitlines() == ["model = torch.compile(model)  # the chain", line]
    assert compile_scope(host.fix) == compile_scope(results[0].finding.fix)
    assert host.evidence[-1].startswith("compiled as it is, the step would draw dropout's random numbers in "
                                        "Inductor's loop: 2 draws over 196,608 elements × 16 ns")
    assert "1.95 ms over the window" in host.evidence[-1] and fusion.evidence == host.evidence
    # the savings stand (they count the draws as eager's); a fix that compiles nothing is untouched
    assert host.est_saving_us == 1500.0 and adamw == results[2].finding
    # no draws to keep (an inference trace): nothing changes
    assert [r.finding for r in _with_eager_draws(_ctx(16.0, backward=False), results)] == \
        [r.finding for r in results]
