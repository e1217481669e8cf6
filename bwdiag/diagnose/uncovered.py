"""Why compute-kernel time has no estimate: the reasons, their shares, and the warnings they earn.

Coverage says how much of the compute-kernel time is priced; this module says why the rest is not,
in terms a user can act on — the kernel has no launching op (a CUDA-graph replay, a launch missing
from the trace, a launch outside any recorded op), the op's shapes were not recorded
(``record_shapes`` off), its TensorList arguments were recorded empty (lists of more than 30
tensors, or any list before PyTorch 2.1), an argument
the formula needs is absent (conv stride, reduction dims …), or bwdiag has no formula for the op.
"""

from __future__ import annotations

import re
import numpy as np
import pandas as pd

from bwdiag.costs import Category
from bwdiag.diagnose.model import UncoveredShare as Uncovered

#: A reason whose share of compute-kernel time is at least this (percent) earns its own warning.
WARN_PCT = 5.0
#: The breakdown keeps this many reasons; the rest are summed as "other reasons".
MAX_REASONS = 8

NO_OP_GRAPH = "no launching op: CUDA/HIP graph replay"
NO_OP_LAUNCH = "no launching op: the launch event is not in the trace"
NO_OP_OUTSIDE = "no launching op: launched outside any recorded CPU op"
NO_SHAPES = "op shapes not recorded (record_shapes off)"
EMPTY_LIST = "TensorList arguments recorded empty"
COMPILED = "torch.compile region: Inductor/Triton kernels with no shaped op"
HELPER = "helper kernel of a GEMM/conv/attention op (its size is not in the op's shapes)"

_NOT_COMPUTE = frozenset({"memcpy", "memset"})
_NO_FORMULA = re.compile(r"^no cost formula for (\S+)")
_COMPILED_OP = re.compile(r"^(CompiledFunction(Backward)?|Torch-Compiled Region|## Call CompiledFxGraph|"
                          r"CompiledFxGraph|inductor::|triton_)")


def reasons(analyses, op_costs) -> tuple[Uncovered, ...]:
    """The reasons compute-kernel time of ``analyses`` (build.RankAnalysis) has no estimate,
    largest first. ``op_costs(ops, indices)`` gives each op's :class:`~bwdiag.costs.Cost`."""
    return combine([rank_reasons(a, op_costs) for a in analyses])


def rank_reasons(a, op_costs) -> tuple[float, dict[str, float]]:
    """One rank's part of :func:`reasons`: its compute-kernel µs and the µs of each reason it has
    (what a rank summary carries to the reduce)."""
    acts = a.activities
    if acts.empty:
        return 0.0, {}
    kind = acts["kind"].to_numpy(dtype=object)
    compute = ~np.isin(kind, list(_NOT_COMPUTE)) & (acts["category"].to_numpy(dtype=object)
                                                     != Category.COMMUNICATION.value)
    dur = acts["dur"].to_numpy(float)
    compute_us = float(dur[compute].sum())
    missing = compute & acts["flops"].isna().to_numpy() & acts["bytes"].isna().to_numpy()
    if not missing.any():
        return compute_us, {}
    return compute_us, _reasons_of(a, acts[missing], op_costs)


def combine(parts) -> tuple[Uncovered, ...]:
    """:func:`reasons` from each rank's ``(compute_us, {reason: us})`` (:func:`rank_reasons`), in rank order."""
    by_reason: dict[str, float] = {}
    compute_us = 0.0
    for rank_compute_us, rank_by_reason in parts:
        compute_us += rank_compute_us
        for reason, us in rank_by_reason.items():
            by_reason[reason] = by_reason.get(reason, 0.0) + us
    if compute_us <= 0:
        return ()
    ranked = sorted(by_reason.items(), key=lambda kv: -kv[1])
    if len(ranked) > MAX_REASONS:
        rest = sum(us for _, us in ranked[MAX_REASONS - 1:])
        ranked = ranked[:MAX_REASONS - 1] + [("other reasons", rest)]
    return tuple(Uncovered(r, float(us), float(100.0 * us / compute_us)) for r, us in ranked if us > 0)


def _reasons_of(a, missing: pd.DataFrame, op_costs) -> dict[str, float]:
    out: dict[str, float] = {}
    op = missing["op"].to_numpy()
    dur = missing["dur"].to_numpy(float)
    no_op = op < 0
    if no_op.any():
        graph = missing["graph"].to_numpy(dtype=bool) if "graph" in missing else np.zeros(len(missing), bool)
        no_launch = missing["launch_ts"].isna().to_numpy() if "launch_ts" in missing else np.ones(len(missing), bool)
        for mask, reason in ((no_op & graph, NO_OP_GRAPH), (no_op & ~graph & no_launch, NO_OP_LAUNCH),
                             (no_op & ~graph & ~no_launch, NO_OP_OUTSIDE)):
            if mask.any():
                out[reason] = out.get(reason, 0.0) + float(dur[mask].sum())
    if (~no_op).any():
        ops = a.trace.ops
        idx = np.unique(op[~no_op])
        costs = op_costs(ops, idx)
        per_op = pd.Series(dur[~no_op]).groupby(op[~no_op]).sum()
        for o, us in per_op.items():
            cost = costs.get(int(o))
            reason = _reason(cost, ops.at[int(o), "name"] if int(o) in ops.index else None)
            out[reason] = out.get(reason, 0.0) + float(us)
    return out


def _reason(cost, op_name) -> str:
    """A user-facing reason from a cost's note (``None`` cost or note: the op is estimated, so the
    kernel is a helper that took no share)."""
    note = getattr(cost, "note", None)
    if cost is None or (cost.flops is not None or cost.bytes is not None):
        return HELPER
    if isinstance(op_name, str) and _COMPILED_OP.match(op_name):
        return COMPILED
    if not note:
        return f"no estimate for {op_name}"
    if "shapes not recorded (record_shapes" in note:
        return NO_SHAPES
    if "TensorList shapes not recorded" in note:
        return EMPTY_LIST
    m = _NO_FORMULA.match(note)
    if m:
        return f"no cost formula for {m.group(1)}"
    return note


def warnings_for(found: tuple[Uncovered, ...]) -> list[str]:
    """Warnings for the reasons large enough to matter, each with what to do about it."""
    out = []
    for u in found:
        if u.pct < WARN_PCT:
            continue
        share = f"{u.pct:.1f}% of compute-kernel time"
        if u.reason == NO_SHAPES:
            out.append(f"{share} has no FLOP/byte estimate because its ops carry no shapes: re-record with "
                       "`torch.profiler.profile(..., record_shapes=True)` (`bwdiag run` and `bwdiag.profile` do)")
        elif u.reason == EMPTY_LIST:
            out.append(f"{share} has no estimate because its ops' TensorList arguments were recorded empty: "
                       "the profiler records `[]` for a list of more than 30 tensors (PyTorch before 2.1: for "
                       "every list), as in a foreach/fused optimizer step over all parameters; their time is "
                       "counted, their bytes are not (re-recording does not help with more than 30 tensors)")
        elif u.reason == COMPILED:
            out.append(f"{share} runs in torch.compile regions: Inductor launches those kernels without a "
                       "shaped aten op, so their FLOPs and bytes are unknown; profile the eager model once "
                       "(without torch.compile) to price every kernel")
        elif u.reason == NO_OP_LAUNCH:
            out.append(f"{share} has no estimate because the kernels' launch events are not in the trace "
                       "(dropped by the profiler, filtered, or before the recorded window): with no launch "
                       "there is no op and no shapes")
        elif u.reason == NO_OP_OUTSIDE:
            out.append(f"{share} has no estimate because the kernels were launched outside any recorded CPU "
                       "op (a custom extension, a Triton/compiled launcher or a thread the profiler did "
                       "not record): bwdiag prices a kernel from its launching op's shapes")
    return out
