"""Overlap: collective time no compute kernel hides, and cutting volume where it cannot be hidden.

Saving ≤ the exposed time (``CollectiveRow.exposed_us``): overlapping a collective with compute can
at best hide all of it. The fix fits the issuer: FSDP's prefetch options for
all-gathers and reduce-scatters only where an FSDP range is in the trace. For small, latency-dominated collectives (the α of ``ctx.comm_fit``
is most of each call) bigger buckets cut the per-call latency instead.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bytes, fmt_time, kernel_label, op_column
from bwdiag.diagnose.model import FindingKind

_FIX = {
    "all_reduce": ("model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100,\n"
                   "                                                  gradient_as_bucket_view=True)\n"
                   "# gradient accumulation: wrap the non-final micro-batches in `with model.no_sync():` "
                   "(one all-reduce per optimizer step)\n"
                   "# tensor-parallel inference: async TP under torch.compile "
                   "(torch._inductor.config._micro_pipeline_tp = True)"),
    "all_gather": ("# FSDP: prefetch the next layer's all-gather while this one computes\n"
                   "model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,\n"
                   "             limit_all_gathers=True)\n"
                   "# FSDP2: fully_shard(layer, reshard_after_forward=False) for the last layers"),
    "reduce_scatter": ("model = FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)\n"
                       "# tensor parallel: torch._inductor.config._micro_pipeline_tp = True (async TP) under torch.compile"),
    "send_recv": ("# pipeline parallel: more micro-batches per step so send/recv overlaps compute\n"
                  "from torch.distributed.pipelining import ScheduleInterleaved1F1B\n"
                  "schedule = ScheduleInterleaved1F1B(stages, n_microbatches=4 * num_stages, loss_fn=loss_fn)\n"
                  "# and issue P2P asynchronously: dist.isend / dist.irecv, wait() only where the tensor is used"),
}
#: All-gathers / reduce-scatters of a trace without FSDP (sequence or tensor parallelism, an optimizer's
#: gather): FSDP's prefetch options do not apply to them.
_NOT_FSDP_FIX = {
    "all_gather": ("# issue the all-gather as soon as its input is ready and wait where the result is first used\n"
                   "work = dist.all_gather_into_tensor(out, shard, async_op=True)\n...  # independent compute\n"
                   "work.wait()\n"
                   "# tensor / sequence parallel under torch.compile: async TP "
                   "(torch._inductor.config._micro_pipeline_tp = True)"),
    "reduce_scatter": ("# issue the reduce-scatter asynchronously and wait where the result is first used\n"
                       "work = dist.reduce_scatter_tensor(out, t, async_op=True)\n...  # independent compute\n"
                       "work.wait()\n"
                       "# tensor / sequence parallel under torch.compile: async TP "
                       "(torch._inductor.config._micro_pipeline_tp = True)"),
}
_FSDP = re.compile(r"FullyShardedDataParallel|FSDP::")
_DEFAULT_FIX = ("# issue the collective asynchronously and wait only where its result is needed\n"
                "work = dist.all_reduce(t, async_op=True)\n...  # independent compute here\nwork.wait()")


def exposed_collectives(ctx: RuleContext) -> list[RuleResult]:
    """One finding per collective type whose exposed time is worth hiding."""
    if ctx.is_cpu:  # record_param_comms spans on a CPU trace are not device time to overlap
        return []
    by_kind: dict[str, list] = defaultdict(list)
    for c in ctx.diagnosis.collectives:
        if c.exposed_us > 0:
            by_kind[c.collective].append(c)
    findings = []
    fsdp = None  # whether an FSDP range is in the trace: looked up once, when an all-gather needs it
    for kind, rows in by_kind.items():
        exposed = sum(c.exposed_us for c in rows) / ctx.ranks
        total = sum(c.total_us for c in rows) / ctx.ranks
        count = sum(c.count for c in rows) / ctx.ranks
        if not ctx.worth_reporting(exposed):
            continue
        top = max(rows, key=lambda c: c.exposed_us)
        evidence = [
            f"{count:.0f} {kind} calls take {fmt_time(total)}, {fmt_time(exposed)} of it "
            f"({100 * exposed / total:.0f}%) with no compute kernel running → up to {ctx.per_step(exposed)} to hide",
            kernel_label(top.name, 120),
        ]
        if top.busbw and top.pct_of_link is not None:
            evidence.append(f"bus bandwidth {fmt_bytes(top.busbw)}/s = {top.pct_of_link:.0f}% of the link "
                            f"({fmt_bytes(top.bytes or 0)} per call)")
        acts = _comm_rows(ctx, {c.name for c in rows})
        fix = _FIX.get(kind, _DEFAULT_FIX)
        if kind in _NOT_FSDP_FIX:
            fsdp = _has_fsdp(ctx) if fsdp is None else fsdp
            fix = fix if fsdp else _NOT_FSDP_FIX[kind]
        findings.append(ctx.finding(FindingKind.OVERLAP, f"Overlap the exposed {kind} with compute",
                                    exposed, evidence, fix, acts=acts))
    findings.extend(_latency_dominated(ctx))
    return findings


#: A fitted per-call latency above this is not link latency (NCCL's is ~5-100 µs) but peers
#: waiting on each other; bucketing would not remove it.
MAX_PLAUSIBLE_ALPHA_US = 1000.0


def _latency_dominated(ctx: RuleContext) -> list[RuleResult]:
    """Many small collectives whose time is mostly the fixed α per call: fewer, bigger buckets.

    A message is latency-dominated below the half-performance size n½ = α·β (transfer time equals
    the fixed latency there) when α·calls is at least half its time."""
    fit = ctx.comm_fit
    if fit is None:
        return []
    alpha = fit.alpha_us
    if not 0 < alpha <= MAX_PLAUSIBLE_ALPHA_US:
        return []
    n_half = alpha / 1e6 * fit.beta_bytes_per_s
    kind = fit.collective
    small = [c for c in ctx.diagnosis.collectives
             if (kind is None or c.collective == kind) and c.count > 1 and c.total_us > 0
             and c.bytes is not None and c.bytes <= n_half and alpha * c.count >= 0.5 * c.total_us]
    if not small:
        return []
    calls = sum(c.count for c in small) / ctx.ranks
    # Bucketing k calls into one pays α once: saving ≤ α·(calls − calls/4) at 4× bigger buckets,
    # and never more than the part of their time that is exposed.
    saving = min(alpha * calls * 0.75, sum(c.exposed_us for c in small) / ctx.ranks)
    if not ctx.worth_reporting(saving):
        return []
    evidence = [
        f"{calls:.0f} {kind or 'collective'} calls of ≤{fmt_bytes(max((c.bytes or 0) for c in small))}, below "
        f"n½ = α·β = {fmt_bytes(n_half)}: the fitted latency α = {fmt_time(alpha)} per call is ≥ half their time",
        f"4× bigger buckets: {calls:.0f} → {calls / 4:.0f} calls saves α·{0.75 * calls:.0f} = {fmt_time(alpha * calls * 0.75)}"
        f", capped by their exposed time → {ctx.per_step(saving)}",
    ]
    fix = ("model = DistributedDataParallel(model, bucket_cap_mb=100)  # default 25 MB\n"
           "# or accumulate gradients: with model.no_sync(): ... for all but the last micro-batch")
    return [ctx.finding(FindingKind.OVERLAP, "Send fewer, bigger collectives (latency-dominated)", saving,
                        evidence, fix, acts=_comm_rows(ctx, {c.name for c in small}))]


def _has_fsdp(ctx: RuleContext) -> bool:
    """Whether any rank's ops hold an FSDP range (``FullyShardedDataParallel.*``, ``FSDP::*``)."""
    return any(any(_FSDP.search(n) for n in set(op_column(a.trace.ops, "name").astype(str)))
               for a in ctx.analyses if len(a.trace.ops))


def _comm_rows(ctx: RuleContext, names: set[str]) -> dict[int, np.ndarray]:
    out = {}
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities
        mask = (acts["category"] == "communication").to_numpy() & acts["name"].isin(names).to_numpy()
        out[pos] = np.flatnonzero(mask)
    return out
