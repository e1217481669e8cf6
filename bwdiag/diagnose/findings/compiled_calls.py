"""What a ``torch.compile``'d step still pays on the host: the part of the gaps compiling does not remove.

Compiling removes the eager dispatch between ops, but the compiled code has its own per-call cost:
Dynamo checks its guards on every call, the AOTAutograd wrappers run (in training a compiled
backward node too), and Inductor's generated Python calls each extern kernel (GEMM, convolution,
attention) with its buffers — a few µs per call that the trace cannot show before the fix. So a
host-overhead saving keeps

    compiled calls × ``call_us``  +  extern kernel calls × ``extern_us``

of the gaps it would otherwise count, per mode (``inference`` under ``no_grad``, ``training`` with a
backward). ``bwdiag calibrate`` measures both on the host (``device.calibration.values.compiled_call``;
:mod:`bwdiag.hardware.compiled_probe`); without it the figures below, from the Intel Xeon VM, stand.
A compiled call is a forward of the top-level model (``model = torch.compile(model)``), or a step where
the trace records no modules (the compiled function is the step's). Checked on the decode loop of
``benchmarks/whatif.py`` (one compiled forward with 11 extern calls a step, Intel Xeon VM, 7 Dec 2026):
with per-call costs probed on bare ``Linear`` layers (19.8 + 11 × 2.72 µs kept) the eager trace's gaps
predicted 129 µs saved a step where compiling saved 60–70; the compiled forward spent 70–108 µs a call
outside its graph (timed whole, less its transformed bytecode called directly). Probed on transformer
blocks (36.0 + 11 × 5.78 µs) the same capture predicts 55 µs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bwdiag.diagnose.findings.helpers import op_column

#: Per-call costs of compiled code (µs) on the 2-core Intel Xeon VM (torch 2.13 CPU, one thread, 7 Dec
#: 2026), the calibration's probe of tiny transformer blocks (:mod:`bwdiag.hardware.compiled_probe`) run
#: three times: inference 36.4 / 34.1 / 36.0 µs a call and 5.28 / 5.44 / 5.78 µs an extern call, training
#: 125 / 148 / 158 µs a call and 9.23 / 8.93 / 8.59 µs an extern call; their means. (A probe of bare
#: ``Linear(8, 8)`` layers gave 19.8 + 2.72 and 91.4 + 5.23 there: it left out what the guards, wrappers
#: and generated loops of the layer norms, activations and residuals between the GEMMs cost.)
COMPILED_CALL: Mapping[str, Mapping[str, float]] = {
    "inference": {"call_us": 35.5, "extern_us": 5.5},
    "training": {"call_us": 143.5, "extern_us": 8.92},
}

_MODULE_SPAN = "nn.Module: "
#: A top-level module that is the loss (``criterion(out, y)``): compiling the model does not compile it.
_LOSS_MODULE = re.compile(r"Loss(_\d+)?$|^(loss|criterion)", re.I)


@dataclass(frozen=True)
class Kept:
    """What a compiled step keeps of the gaps, over the window (mean per rank)."""

    us: float
    calls: float  # compiled calls in the window
    externs: float  # extern kernel calls in the window
    mode: str  # "inference" | "training"
    call_us: float
    extern_us: float
    source: str  # where the per-call figures come from

    def line(self, fmt_time) -> str:
        """The evidence line: how the kept time was worked out."""
        backward = ", the compiled backward node" if self.mode == "training" else ""
        return (f"a compiled step still pays {self.calls:,.0f} compiled calls × {self.call_us:g} µs (Dynamo's guards, "
                f"the AOTAutograd wrappers{backward}) + {self.externs:,.0f} GEMM/convolution/attention calls × "
                f"{self.extern_us:g} µs of generated code around each ({self.mode}, {self.source}) = "
                f"{fmt_time(self.us)}, which stays")


def compiled_call_costs(ctx, mode: str) -> tuple[float, float, str]:
    """(µs per compiled call, µs per extern call, where they come from) for ``mode``: the calibration's
    ``compiled_call`` when the diagnosis used a calibration of the trace's host that measured it, else
    ``COMPILED_CALL``."""
    values = (ctx.diagnosis.device.calibration or {}).get("values") or {}
    measured = (values.get("compiled_call") or {}).get(mode) if isinstance(values.get("compiled_call"), Mapping) else None
    if isinstance(measured, Mapping) and all(_number(measured.get(k)) for k in ("call_us", "extern_us")):
        return float(measured["call_us"]), float(measured["extern_us"]), "measured on this host by bwdiag calibrate"
    d = COMPILED_CALL[mode]
    return d["call_us"], d["extern_us"], "measured on a 2-core Intel Xeon VM; `bwdiag calibrate` measures this host"


def kept_by_compiled(ctx, found, externs: float) -> Kept:
    """What a compiled step keeps over the window: ``found`` the (rank position, HostGaps) pairs of the
    host-overhead finding, ``externs`` the extern kernel calls in the window (mean per rank)."""
    mode = "training" if ctx.is_training else "inference"
    call_us, extern_us, source = compiled_call_costs(ctx, mode)
    calls = sum(top_level_calls(ctx.analyses[pos], g.tid) for pos, g in found) / ctx.ranks
    if calls == 0:  # no modules recorded: the compiled function is called once a step
        scale = ctx.step_scale
        calls = 1.0 / scale if scale else 1.0
    return Kept(calls * call_us + externs * extern_us, calls, externs, mode, call_us, extern_us, source)


def top_level_calls(a, tid) -> int:
    """Forwards of a top-level module (not a loss module) on thread ``tid`` of rank analysis ``a``,
    inside its window: the calls ``model = torch.compile(model)`` compiles."""
    ops, acts = a.trace.ops, a.activities
    if ops.empty or acts.empty or "module" not in ops.columns:
        return 0
    start, stop = float(acts["ts"].min()), float(acts["end"].max())
    names = op_column(ops, "name").astype(str)
    modules = op_column(ops, "module")
    ts, end = op_column(ops, "ts").astype(float), op_column(ops, "end").astype(float)
    mine = (op_column(ops, "tid") == tid) & (end > start) & (ts < stop)
    span = np.char.startswith(names.astype(str), _MODULE_SPAN)
    count = 0
    for i in np.flatnonzero(mine & span):
        path = modules[i]
        if isinstance(path, str) and path and "." not in path and not _LOSS_MODULE.search(path):
            count += 1
    return count


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
