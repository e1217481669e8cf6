"""FSDP / ZeRO sharding choices for communication-bound steps, from what the trace's FSDP collectives show.

FULL_SHARD (ZeRO-3; FSDP2's default ``reshard_after_forward=True``) frees each unit's gathered
parameters after its forward and all-gathers them again in the backward. When the trace shows FSDP
all-gathers in the forward *and* again in the backward, and the backward's are exposed (no compute
kernel runs beside them), ``ShardingStrategy.SHARD_GRAD_OP`` (ZeRO-2; FSDP2
``reshard_after_forward=False``) keeps the parameters gathered between forward and backward and drops
the backward all-gathers:

* saving = Σ over the backward all-gathers of min(exposed time, bytes ÷ algbw), with the algbw the
  fastest rank's measured algbw of the trace's own FSDP all-gathers (so a rank waiting for a straggler
  is not counted as transfer), per rank;
* its cost, memory: each rank keeps the unsharded parameters from forward to backward — the forward
  all-gathers' gathered bytes × (n − 1)/n (n the group size; the rank's own shard it holds anyway).

Only FSDP's collectives count: an all-gather is FSDP's when an FSDP range (``FullyShardedDataParallel.*``,
``FSDP::*``) encloses its c10d op. Sequence-parallel reduce-scatters whose autograd backward is an
all-gather, an optimizer's all-gather (distributed Shampoo) or a tensor-parallel gather in inference
are no sharding choice and get nothing here; a DDP model (all-reduces) gets no sharding advice.
Exposed forward all-gathers are :mod:`.overlap`'s (``forward_prefetch`` / ``BACKWARD_PRE``). CPU traces
(gloo) are :mod:`.comm_volume`'s. Cross-node gathers (HYBRID_SHARD) need the job's node layout, which
a rank trace does not record: not advised.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from bwdiag.diagnose.communication import collective_kind, exposed_time
from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bandwidth, fmt_bytes, fmt_time, op_chain, op_column
from bwdiag.diagnose.model import FindingKind

_FSDP = re.compile(r"FullyShardedDataParallel|FSDP::")
_BACKWARD = re.compile(r"backward|autograd::engine", re.I)


@dataclass(frozen=True)
class _Call:
    """One FSDP all-gather kernel on one rank."""

    pos: int
    row: int
    backward: bool
    bytes: float
    group: int | None
    dur: float
    exposed: float


def fsdp_sharding(ctx: RuleContext) -> list[RuleResult]:
    """SHARD_GRAD_OP / ``reshard_after_forward=False`` where FSDP re-gathers in the backward what its
    forward gathered, and the backward's all-gathers are exposed."""
    if ctx.is_cpu:
        return []
    calls = _fsdp_all_gathers(ctx)
    fwd = [c for c in calls if not c.backward]
    bwd = [c for c in calls if c.backward]
    if not fwd or not bwd or not any(c.exposed > 0 for c in bwd):
        return []
    # The backward must gather what the forward did (same messages): FULL_SHARD's re-gather.
    if not {c.bytes for c in bwd} & {c.bytes for c in fwd}:
        return []
    algbw = _fastest_algbw(calls)
    saving = sum(min(c.exposed, c.bytes / algbw * 1e6) for c in bwd) / ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    n_fwd, n_bwd = len(fwd) / ctx.ranks, len(bwd) / ctx.ranks
    fwd_bytes = sum(c.bytes for c in fwd) / ctx.ranks
    bwd_bytes = sum(c.bytes for c in bwd) / ctx.ranks
    exposed = sum(c.exposed for c in bwd) / ctx.ranks
    group = max((c.group for c in fwd if c.group), default=None)
    share = (group - 1) / group if group else 1.0
    scale = ctx.step_scale
    held = fwd_bytes * share * (scale if scale is not None else 1.0)
    held_text = (f"{fmt_bytes(held)} more per rank (the forward all-gathers' {fmt_bytes(fwd_bytes * (scale or 1.0))} "
                 + (f"gathered {'per step' if scale is not None else 'in the window'} × ({group} − 1)/{group}, "
                    "the rank's own shard it holds anyway)" if group else
                    f"gathered {'per step' if scale is not None else 'in the window'}; the group size is not "
                    "recorded, so this is an upper bound)"))
    evidence = [
        f"FSDP all-gathers {n_fwd:,.0f} parameter messages in the forward ({fmt_bytes(fwd_bytes)}) and "
        f"{n_bwd:,.0f} again in the backward ({fmt_bytes(bwd_bytes)}): FULL_SHARD frees the gathered parameters "
        f"after each forward and gathers them again; {fmt_time(exposed)} of the backward's all-gathers is exposed",
        f"SHARD_GRAD_OP keeps them gathered until the backward: each backward all-gather's bytes ÷ the measured "
        f"algbw {fmt_bandwidth(algbw)} (the fastest rank's FSDP all-gathers), capped by its exposed time → "
        f"{ctx.per_step(saving)}",
        f"the cost is memory: parameters stay unsharded from forward to backward, {held_text} — "
        "check it fits before switching",
    ]
    fix = ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n"
           "model = FSDP(model, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)  # ZeRO-2: no re-gather "
           "in backward\n"
           "# FSDP2: fully_shard(block, reshard_after_forward=False) for each block (or only the last few, "
           "if memory is short)")
    rows: dict[int, list[int]] = defaultdict(list)
    for c in bwd:
        rows[c.pos].append(c.row)
    return [ctx.finding(FindingKind.OVERLAP, "Keep FSDP's parameters gathered for the backward: "
                        "SHARD_GRAD_OP (reshard_after_forward=False)", saving, evidence, fix, acts=dict(rows))]


def _fastest_algbw(calls: list[_Call]) -> float:
    """Bytes per second of the fastest rank's FSDP all-gathers (sum of bytes ÷ sum of durations)."""
    by_pos: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for c in calls:
        by_pos[c.pos][0] += c.bytes
        by_pos[c.pos][1] += c.dur
    return max(b / d * 1e6 for b, d in by_pos.values() if d > 0)


def _fsdp_all_gathers(ctx: RuleContext) -> list[_Call]:
    """Every all-gather kernel whose c10d op FSDP issued (:func:`fsdp_all_gather_phases`), with its
    phase and exposed time."""
    out: list[_Call] = []
    for pos, a in enumerate(ctx.analyses):
        acts, ops = a.activities, a.trace.ops
        if "msg_bytes" not in acts or not len(ops):
            continue
        phases = fsdp_all_gather_phases(ops)
        if not phases:
            continue
        parent = op_column(ops, "parent")
        is_comm = (acts["category"] == "communication").to_numpy()
        exposed = exposed_time(acts, is_comm)
        for row in np.flatnonzero(is_comm):
            # The kernel's op, or an op enclosing it (record_param_comms runs inside the c10d op).
            idx, phase = int(acts["op"].iat[row]), None
            for _ in range(4):
                if idx < 0 or (phase := phases.get(idx)) is not None:
                    break
                idx = int(parent[idx])
            nbytes = float(acts["msg_bytes"].iat[row])
            if phase is None or not np.isfinite(nbytes) or nbytes <= 0:
                continue
            group = acts["msg_group"].iat[row] if "msg_group" in acts else np.nan
            out.append(_Call(pos, int(row), phase == "backward", nbytes,
                             int(group) if np.isfinite(group) and group > 0 else None,
                             float(acts["dur"].iat[row]), float(exposed[row])))
    return out


def fsdp_all_gather_phases(ops) -> dict[int, str]:
    """Op row → ``"forward"`` / ``"backward"`` for every c10d all-gather op that FSDP issued.

    FSDP's ranges (``FullyShardedDataParallel._pre_forward``, ``._pre_backward_hook``, ``FSDP::*``) are
    ``record_function`` annotations, no op's parent: a c10d op is FSDP's when one of its thread spans
    its start. It is the backward's when its op chain holds the autograd engine or an enclosing range
    says backward. (The kernel's name can say SendRecv: the issuing op says what the collective is.)"""
    names = op_column(ops, "name").astype(str)
    unique, codes = np.unique(names, return_inverse=True)
    fsdp = np.flatnonzero(np.array([bool(_FSDP.search(n)) for n in unique])[codes])
    if not len(fsdp):
        return {}
    gathers = np.array([n.startswith("c10d::") and collective_kind(n) == "all_gather" for n in unique])[codes]
    ts, end, tid = (np.asarray(op_column(ops, c)) for c in ("ts", "end", "tid"))
    f_ts, f_end, f_tid = ts[fsdp], end[fsdp], tid[fsdp]
    out: dict[int, str] = {}
    for idx in np.flatnonzero(gathers):
        inside = (f_tid == tid[idx]) & (f_ts <= ts[idx]) & (ts[idx] < f_end)
        ranges = [names[i] for i in fsdp[inside]]
        chain = op_chain(ops, int(idx), depth=16)
        ranges += [n for n in chain if _FSDP.search(n)]
        if ranges:
            out[int(idx)] = "backward" if any(_BACKWARD.search(n) for n in chain + ranges) else "forward"
    return out


__all__ = ["fsdp_all_gather_phases", "fsdp_sharding"]
