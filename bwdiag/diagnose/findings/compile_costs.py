"""What compiling a CPU training step costs that the eager trace already shows: dropout's random draws.

A ``torch.compile`` fix removes the Python between ops and fuses chains; the findings price that.
But Inductor also takes over work eager ATen did faster. On a CPU the largest such item is dropout:
eager ``aten::bernoulli_`` draws ≈6 ns an element, while Inductor's loop in a training step (the
forward that also writes the mask for the backward) drew 16–21 ns on the Intel Xeon dev VM of 7 Dec
2026. A GPT-2 built from its config (2 layers, n_embd 128, batch 8 × 64, AdamW, one thread) ran
61.6 / 60.3 ms a step eager and 71.3 / 69.9 ms with its forward and loss compiled; with the dropout
rates set to 0 the two ran 55.1 / 57.7 ms eager and 54.8 / 56.8 ms compiled — all of compile's loss
was dropout's. ``bwdiag calibrate`` measures Inductor's draw per element on the host
(:mod:`bwdiag.hardware.pointwise_probe`, op ``dropout``); the trace gives the elements each recorded
draw covers and what eager took for it (:func:`dropout_draws`). Where Inductor's draws cost more,
``torch._inductor.config.fallback_random = True`` makes it call ATen's instead: the same GPT-2 ran
61.7 / 63.6 ms compiled so against 61.5 / 62.9 eager, and in ``benchmarks/savings.py``'s processes
compiling saved 3.6 ms a step with it where it cost 4.7 without. So the findings layer
(:func:`bwdiag.diagnose.findings._with_eager_draws`) gives every fix that compiles such a step that
line too, and the evidence line that says why; the fix's saving counts the draws as eager's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bwdiag.diagnose.findings.compiled_loops import loop_costs
from bwdiag.diagnose.findings.helpers import op_column, tensor_sizes

#: Recorded ops that draw one random number per element of their tensor. ``native_dropout`` counts
#: only on a rank that records no ``bernoulli_`` (where it does, it is the caller of one).
DRAW_OPS = ("aten::bernoulli_", "aten::bernoulli")
FALLBACK_DRAW_OPS = ("aten::native_dropout",)


@dataclass(frozen=True)
class Draws:
    """Dropout's random draws in the window (mean per rank) and what compiling them costs more."""

    calls: float
    elements: float
    eager_us: float  # what the recorded draws took (eager ATen)
    ns_per_element: float  # Inductor's draw on this host (bwdiag calibrate)
    source: str

    @property
    def compiled_us(self) -> float:
        return self.elements * self.ns_per_element / 1e3

    @property
    def extra_us(self) -> float:
        """What a compiled step pays more for them (≥ 0)."""
        return max(0.0, self.compiled_us - self.eager_us)

    def line(self, fmt_time, per_step) -> str:
        """The evidence line for a finding whose fix compiles the step."""
        return (f"compiled as it is, the step would draw dropout's random numbers in Inductor's loop: "
                f"{self.calls:,.0f} draws over {self.elements:,.0f} elements × {self.ns_per_element:g} ns "
                f"({self.source}) = {fmt_time(self.compiled_us)}, against {fmt_time(self.eager_us)} for eager's "
                f"bernoulli_ — {per_step(self.extra_us)} more; the fix's "
                f"fallback_random line keeps eager's draws (other random numbers, the same distribution), "
                f"and the saving counts them as eager's")

    def fix_line(self) -> str:
        """The line a compile fix gains: Inductor calls ATen's draw instead of its own."""
        return (f"import torch._inductor.config; torch._inductor.config.fallback_random = True  # dropout: "
                f"ATen's draws ({self.eager_ns:.1f} ns an element here) instead of Inductor's "
                f"({self.ns_per_element:.1f} ns)")

    @property
    def eager_ns(self) -> float:
        return self.eager_us * 1e3 / self.elements if self.elements else 0.0


def dropout_draws(ctx) -> Draws | None:
    """The draws of a CPU training trace whose host's calibration measured Inductor's ``dropout``, when
    compiling them costs more than eager did; else None (GPU traces: Inductor's Philox draw is a
    fraction of the kernel's bytes; inference: dropout is off)."""
    if not ctx.is_cpu or not ctx.is_training:
        return None
    costs, source = loop_costs(ctx)
    ns = costs.get("dropout")
    if not ns:
        return None
    calls = elements = eager = 0.0
    for a in ctx.analyses:
        c, n, us = _recorded(a)
        calls, elements, eager = calls + c, elements + n, eager + us
    ranks = ctx.ranks or 1
    draws = Draws(calls / ranks, elements / ranks, eager / ranks, float(ns), source)
    return draws if draws.calls and draws.extra_us > 0 else None


def _recorded(a) -> tuple[int, float, float]:
    """(draw ops, elements, µs) inside rank analysis ``a``'s window."""
    ops, acts = a.trace.ops, a.activities
    if ops.empty or acts.empty:
        return 0, 0.0, 0.0
    start, stop = float(acts["ts"].min()), float(acts["end"].max())
    names = op_column(ops, "name").astype(str)
    ts, end = op_column(ops, "ts").astype(float), op_column(ops, "end").astype(float)
    inside = (end > start) & (ts < stop)
    rows = np.flatnonzero(inside & np.isin(names, DRAW_OPS))
    if not len(rows):
        rows = np.flatnonzero(inside & np.isin(names, FALLBACK_DRAW_OPS))
    elements = sum(max((n for n, _ in tensor_sizes(ops, int(i))), default=0) for i in rows)
    return len(rows), float(elements), float((end[rows] - ts[rows]).sum())
