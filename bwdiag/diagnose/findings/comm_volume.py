"""Communication-bound steps: fewer bytes on the wire, or (on CPU / gloo) the collective off the critical path.

:mod:`.overlap` hides exposed collectives behind compute on GPU traces. This rule covers what shrinks
the collective itself, chosen from what the trace shows:

* who issues it — DDP's gradient buckets (a c10d all-reduce inside the backward pass of a trace with
  ``DistributedDataParallel``), FSDP's all-gathers / reduce-scatters, or the user's own call;
* its dtype and regime — an fp32 message in the bandwidth regime (:mod:`bwdiag.diagnose.communication`)
  halves its transfer in bf16 (DDP: ``bf16_compress_hook``; FSDP: ``MixedPrecision``; one's own
  call: cast it). A message already in bf16/fp16, or latency-dominated, gets no such advice;
* how often — DDP all-reducing after each of k ≥ 2 micro-batches per optimizer step (k DDP forwards
  per ``Optimizer.step``): ``model.no_sync()`` on the first k − 1 saves (k − 1)/k of the exposed
  DDP all-reduce time. (Bigger buckets for latency-bound calls: :mod:`.overlap`.)

The saving is worked out from the measured bandwidth and the bytes: per call the transfer takes
``bytes / β`` (β from the trace's own α/β fit of that collective, else the call's measured algbw, so
the whole call), the half the cast removes is ``bytes / (2β)``, and a rank saves at most its exposed
time. The per-call time is the fastest rank's: what other ranks spend on top is waiting for a
straggler (the diagnosis' ``straggler`` section), which fewer bytes do not remove.

CPU traces (gloo): gloo supports bf16 and fp16 all-reduce, and DDP's compression hooks and
``bucket_cap_mb`` work with it — but a CPU pays for the fp32↔bf16 casts on the same cores that run
the reduction, and gloo sums half-precision elements in software, so halving the bytes does not halve
the call (measured on a 2-core EPYC: 16 MiB fp32 all-reduce 17.3 ms, the same elements in bf16
12.1 ms, fp16 16.8 ms; the two casts 7.5 ms). No compression advice there: the finding names the
exposed collective, what taking it off the critical path can save (``async_op=True`` on a group of
its own, waited where the result is used — at most the main thread's own op time, which it can run
beside), and says why bf16 is not advised. That needs a core free beside each rank's main thread: on a host
with fewer than two cores per rank (``device.trace_host.cores``) the finding still names the
collective and its fixes, with no saving claimed (measured on 2 cores, 2 ranks: async on its own
group saved 0.1 ± 2.6 ms of a 25 ms step).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.costs import dtype_bytes
from bwdiag.diagnose.findings.helpers import fmt_bandwidth, fmt_bytes, fmt_time, op_chain, op_column
from bwdiag.diagnose.model import FindingKind

#: Collectives whose bytes a lower-precision payload halves (and whose issuers this rule knows).
_SHRINKABLE = ("all_reduce", "all_gather", "reduce_scatter")
_C10D = re.compile(r"^c10d::|record_param_comms")
_BACKWARD = re.compile(r"autograd::engine|Backward")
_DDP = re.compile(r"DistributedDataParallel|reducer::")
_FSDP = re.compile(r"FullyShardedDataParallel|FSDP::")
#: The async fix timed where no core is free beside each rank's main thread (``benchmarks/savings.py``).
NO_CORE_MEASURED = "2 ranks on a 2-core VM: 0.87 ± 0.79 ms slower a 16.5 ms step, 0.1 ± 2.6 ms saved in an earlier run"
#: fp32 casts on a CPU: a measured bf16/fp32 gloo all-reduce of the same elements (see the docstring).
GLOO_MEASURED = "16 MiB fp32 all-reduce 17.3 ms, bf16 12.1 ms, fp16 16.8 ms, the two casts 7.5 ms (2-core EPYC, gloo)"


@dataclass
class _Group:
    """One collective of one issuer, size and dtype, over the ranks."""

    collective: str
    issuer: str  # "ddp" | "fsdp" | "user"
    bytes: float
    dtype: str | None
    regime: str | None
    count: dict = field(default_factory=lambda: defaultdict(float))  # rank position -> calls
    total: dict = field(default_factory=lambda: defaultdict(float))  # rank position -> µs
    exposed: dict = field(default_factory=lambda: defaultdict(float))  # rank position -> µs
    rows: dict = field(default_factory=lambda: defaultdict(list))  # rank position -> activity rows

    def per_call_us(self) -> float:
        """The fastest rank's mean call: the collective's own cost, without waiting for a straggler."""
        return min(self.total[p] / self.count[p] for p in self.count if self.count[p])


def communication_volume(ctx: RuleContext) -> list[RuleResult]:
    """Findings that shrink exposed collectives (GPU), or name them and their fix on gloo (CPU)."""
    groups = _groups(ctx)
    if not groups:
        return []
    if ctx.is_cpu:
        return _cpu_blocking(ctx, groups)
    out = [r for g in groups if (r := _half_precision(ctx, g)) is not None]
    if (r := _no_sync(ctx, groups)) is not None:
        out.append(r)
    return out


# -- GPU: gradient accumulation that all-reduces every micro-batch ---------------------------------

#: A DDP forward: the module annotation (``nn.Module: DistributedDataParallel``, ``…_0``) or DDP's own range.
_DDP_FORWARD = re.compile(r"^(nn\.Module: )?DistributedDataParallel(_\d+)?(\.forward)?$")
_OPT_STEP = re.compile(r"^Optimizer\.step#")


def _no_sync(ctx: RuleContext, groups: list[_Group]) -> RuleResult | None:
    """DDP forwards per optimizer step k ≥ 2: the step accumulates gradients over k micro-batches and
    DDP all-reduces them after every backward. ``model.no_sync()`` on the first k − 1 keeps one
    all-reduce (of the same buckets) per step: saving = (k − 1)/k of DDP's exposed all-reduce time."""
    ddp = [g for g in groups if g.issuer == "ddp" and g.collective == "all_reduce" and sum(g.exposed.values()) > 0]
    if not ddp:
        return None
    forwards = steps = 0
    for a in ctx.analyses:
        names = op_column(a.trace.ops, "name").astype(str)
        forwards += sum(1 for n in names if _DDP_FORWARD.match(n))
        steps += sum(1 for n in names if _OPT_STEP.match(n))
    if not steps or forwards < 2 * steps:
        return None
    k = forwards / steps
    exposed = sum(sum(g.exposed.values()) for g in ddp) / ctx.ranks
    saving = exposed * (k - 1) / k
    if not ctx.worth_reporting(saving):
        return None
    calls = sum(sum(g.count.values()) for g in ddp) / ctx.ranks
    evidence = [
        f"{forwards / ctx.ranks:,.0f} DDP forwards for {steps / ctx.ranks:,.0f} optimizer steps: {k:.3g} micro-batches "
        f"per step, and DDP all-reduces the gradient buckets after every backward ({calls:,.0f} calls, "
        f"{fmt_time(exposed)} exposed)",
        f"with no_sync on all but the last micro-batch one all-reduce per step remains: ({k:.3g} − 1)/{k:.3g} of the "
        f"exposed time → {ctx.per_step(saving)}",
    ]
    fix = ("for i, batch in enumerate(micro_batches):\n"
           "    ctx = model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext()\n"
           "    with ctx:  # gradients accumulate locally; DDP all-reduces them after the last backward only\n"
           "        loss_fn(model(batch)).backward()\n"
           "optimizer.step()")
    return ctx.finding(FindingKind.OVERLAP, f"Accumulate gradients without an all-reduce per micro-batch: "
                       f"model.no_sync() ({k:.3g} per step)", saving, evidence, fix, acts=_merge_rows(ddp))


# -- GPU: send the fp32 payload in bf16 -------------------------------------------------------------


def _half_precision(ctx: RuleContext, g: _Group) -> RuleResult | None:
    if g.collective not in _SHRINKABLE or g.dtype != "fp32" or g.regime != "bandwidth":
        return None
    fit = ctx.comm_fit_for(g.collective)
    # Per call, the transfer: bytes/β from the fit (its α stays), else the measured call (algbw).
    transfer_us = min(g.per_call_us(), g.bytes / fit.beta_bytes_per_s * 1e6) if fit else g.per_call_us()
    half_us = transfer_us / 2
    saving = sum(min(g.exposed[p], g.count[p] * half_us) for p in g.count) / ctx.ranks
    if not ctx.worth_reporting(saving):
        return None
    calls = sum(g.count.values()) / ctx.ranks
    low = "bf16" if "bf16" in (ctx.diagnosis.device.peak_flops or {}) else "fp16"
    source = (f"β = {fmt_bandwidth(fit.beta_bytes_per_s)} from the trace's α/β fit of {fit.n} {g.collective} calls"
              if fit else f"measured algbw {fmt_bandwidth(g.bytes / g.per_call_us() * 1e6)}")
    exposed = sum(g.exposed.values()) / ctx.ranks
    evidence = [
        f"{calls:,.0f} {_who(g)} {g.collective} calls of {fmt_bytes(g.bytes)} in fp32, {fmt_time(exposed)} of them "
        f"exposed; each moves its bytes in {fmt_time(transfer_us)} ({source})",
        f"in {low} the message is {fmt_bytes(g.bytes / 2)}: {fmt_time(half_us)} less per call, capped by each rank's "
        f"exposed time → {ctx.per_step(saving)}",
    ]
    title = {"ddp": f"Compress DDP's gradient all-reduce to {low}",
             "fsdp": f"Run FSDP's {g.collective} in {low} (MixedPrecision)"}.get(
        g.issuer, f"Send the {fmt_bytes(g.bytes)} {g.collective} in {low}")
    return ctx.finding(FindingKind.PRECISION, title, saving, evidence, _half_fix(g, low), acts=dict(g.rows))


def _half_fix(g: _Group, low: str) -> str:
    torch_dtype = "torch.bfloat16" if low == "bf16" else "torch.float16"
    if g.issuer == "ddp":
        return ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                f"model.register_comm_hook(None, default_hooks.{low}_compress_hook)  # gradients travel in {low}, "
                "are averaged, and land back in fp32")
    if g.issuer == "fsdp":
        return ("from torch.distributed.fsdp import MixedPrecision\n"
                f"model = FSDP(model, mixed_precision=MixedPrecision(param_dtype={torch_dtype}, "
                f"reduce_dtype={torch_dtype}))\n"
                f"# FSDP2: fully_shard(m, mp_policy=MixedPrecisionPolicy(param_dtype={torch_dtype}, "
                f"reduce_dtype={torch_dtype}))")
    return (f"t_low = t.to({torch_dtype})\ndist.{g.collective}(t_low)  # half the bytes on the wire\n"
            f"t.copy_(t_low)  # only where {low}'s precision is enough for what the sum is used for")


# -- CPU (gloo): the blocking collective and what can take it off the critical path ---------------


def _cpu_blocking(ctx: RuleContext, groups: list[_Group]) -> list[RuleResult]:
    # Collectives of a known kind only: a CPU trace's "communication" spans include annotations
    # (torchrec's All2All_Pooled_Req/_Wait) whose duration is no transfer of the bytes they name.
    exposed_groups = [g for g in groups if g.collective != "unknown" and sum(g.exposed.values()) > 0]
    if not exposed_groups:
        return []
    exposed = sum(sum(g.exposed.values()) for g in exposed_groups) / ctx.ranks
    if not ctx.worth_reporting(exposed):
        return []
    by_bound = ctx.diagnosis.time.by_bound
    # What the main thread can run beside an asynchronous collective: its own op time.
    beside = sum(float(by_bound.get(k, 0.0)) for k in ("compute", "memory", "latency"))
    # The collective runs on gloo's own thread: it proceeds beside the main thread only with a core
    # of its own (the trace's host cores ÷ its ranks, when the trace records them).
    cores = ctx.host_cores
    no_core = cores is not None and cores < 2 * ctx.ranks_in_job
    saving = 0.0 if no_core else min(exposed, beside)
    if not no_core and not ctx.worth_reporting(saving):
        return []
    top = max(exposed_groups, key=lambda g: sum(g.exposed.values()))
    excess = sum(g.total[p] - g.count[p] * g.per_call_us() for g in exposed_groups for p in g.count) / ctx.ranks
    evidence = [
        f"{_who(g)} {g.collective} of {fmt_bytes(g.bytes)} {g.dtype or ''} ×{sum(g.count.values()) / ctx.ranks:,.0f}: "
        f"{fmt_time(g.per_call_us())} per call on the fastest rank "
        f"({fmt_bandwidth(g.bytes / g.per_call_us() * 1e6)} algbw), {fmt_time(sum(g.exposed.values()) / ctx.ranks)} exposed"
        for g in sorted(exposed_groups, key=lambda g: -sum(g.exposed.values()))[:3]
    ]
    if excess > 0.05 * exposed:
        evidence.append(f"{fmt_time(excess)} of it is ranks waiting for a slower one (see the straggler): no change "
                        f"to the collective removes that")
    evidence += [
        f"the main thread's own op time is {fmt_time(beside)}: an asynchronous collective hides at most that much, "
        + (f"and only with a core free beside each rank's main thread — this host has {cores} cores for "
           f"{ctx.ranks_in_job} ranks, so no saving is claimed here" if no_core else f"→ {ctx.per_step(saving)}"),
        "not advised here: bf16/fp16 payloads — gloo supports them (and DDP's compress hooks run on gloo), but on a "
        f"CPU the casts cost about what the smaller message saves ({GLOO_MEASURED})",
    ]
    ddp = any(g.issuer == "ddp" for g in groups)
    fix = ("pg = dist.new_group(backend=\"gloo\")  # a group of its own"
           + (": on DDP's group the call would queue behind the gradient buckets" if ddp else "") + "\n"
           f"work = dist.{top.collective}(t, group=pg, async_op=True)  # issue it as soon as t is ready\n"
           "...  # work that does not read t\nwork.wait()  # where the result is first used")
    if ddp:
        fix += ("\n# DDP's own buckets: with model.no_sync(): for all but the last micro-batch (one all-reduce per "
                "optimizer step); DDP(model, bucket_cap_mb=...) works on gloo too")
    if no_core:  # the fix is for another host: here gloo's thread takes a core from a rank's main thread
        fix = (f"# for a host with 2 cores or more per rank; on this one ({cores} cores, {ctx.ranks_in_job} ranks) "
               f"it saves nothing ({NO_CORE_MEASURED})\n" + fix)
    title = (f"The blocking {top.collective} ({fmt_bytes(top.bytes)}) takes {ctx.pct(sum(top.exposed.values()) / ctx.ranks):.0f}% of the time: "
             f"no free core to overlap it on this host" if no_core
             else f"Take the blocking {top.collective} ({fmt_bytes(top.bytes)}) off the critical path")
    return [ctx.finding(FindingKind.OVERLAP, title, saving, evidence, fix,
                        acts=_merge_rows(exposed_groups))]


# -- grouping -------------------------------------------------------------------------------------


def _groups(ctx: RuleContext) -> list[_Group]:
    regimes = {(c.rank, c.name, c.collective, c.bytes, c.dtype): c.regime for c in ctx.diagnosis.collectives}
    ranks = [r.rank for r in ctx.diagnosis.ranks] if ctx.diagnosis.ranks else list(range(ctx.ranks))
    out: dict[tuple, _Group] = {}
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities
        if "msg_bytes" not in acts:
            continue
        comm = np.flatnonzero((acts["category"] == "communication").to_numpy())
        if not len(comm):
            continue
        issuers = _issuers(a.trace.ops)
        exposed = _exposed(acts, comm)
        rank = ranks[pos] if pos < len(ranks) else pos
        for row, exp in zip(comm, exposed):
            nbytes = acts["msg_bytes"].iat[row]
            if not np.isfinite(nbytes) or nbytes <= 0:
                continue
            coll = acts["collective"].iat[row] or "unknown"
            dtype = acts["msg_dtype"].iat[row]
            elem = dtype_bytes(dtype) if dtype else None
            issuer = issuers.get((coll, round(nbytes / elem)), "user") if elem else "user"
            key = (coll, issuer, float(nbytes), dtype)
            g = out.get(key)
            if g is None:
                regime = regimes.get((rank, acts["name"].iat[row], coll, float(nbytes), dtype))
                g = out[key] = _Group(coll, issuer, float(nbytes), dtype, None if regime is None else str(regime))
            g.count[pos] += 1
            g.total[pos] += float(acts["dur"].iat[row])
            g.exposed[pos] += float(exp)
            g.rows[pos].append(int(row))
    return list(out.values())


def _exposed(acts, comm: np.ndarray) -> np.ndarray:
    from bwdiag.diagnose.communication import exposed_time

    is_comm = np.zeros(len(acts), bool)
    is_comm[comm] = True
    return exposed_time(acts, is_comm)[comm]


def _issuers(ops) -> dict[tuple[str, int], str]:
    """(collective, message elements) -> who issues it, from the c10d ops: DDP's buckets are all-reduces
    issued inside the backward pass of a trace with DDP; FSDP's are its all-gathers and reduce-scatters."""
    names = op_column(ops, "name").astype(str)
    ddp = bool(len(names)) and any(_DDP.search(n) for n in np.unique(names))
    fsdp = bool(len(names)) and any(_FSDP.search(n) for n in np.unique(names))
    out: dict[tuple[str, int], str] = {}
    if not (ddp or fsdp):
        return out
    from bwdiag.diagnose.communication import collective_kind

    for idx in np.flatnonzero([bool(_C10D.search(n)) for n in names]):
        args = ops["args"].iat[idx] if "args" in ops else None
        numel = _numel(args, op_column(ops, "dims")[idx])
        if numel is None:
            continue
        coll = collective_kind(names[idx], args)
        if fsdp and coll in ("all_gather", "reduce_scatter"):
            out[(coll, numel)] = "fsdp"
        elif ddp and coll == "all_reduce" and any(_BACKWARD.search(n) for n in op_chain(ops, int(idx))[1:]):
            out[(coll, numel)] = "ddp"
    return out


def _numel(args, dims) -> int | None:
    """Elements of a c10d op's message: ``In msg nelems`` (record_param_comms), else its first
    tensor (or tensor list, summed) in ``Input Dims``."""
    if isinstance(args, dict) and isinstance(args.get("In msg nelems"), (int, float)) and args["In msg nelems"] > 0:
        return int(args["In msg nelems"])
    if not isinstance(dims, list):
        return None
    for d in dims:
        shapes = d if d and all(isinstance(x, list) for x in d) else [d]
        if all(isinstance(s, list) and s and all(isinstance(x, int) for x in s) for s in shapes):
            return int(sum(int(np.prod(s)) for s in shapes))
    return None


def _who(g: _Group) -> str:
    return {"ddp": "DDP gradient", "fsdp": "FSDP"}.get(g.issuer, "the script's")


def _merge_rows(groups: list[_Group]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for g in groups:
        for pos, rows in g.rows.items():
            out[pos].extend(rows)
    return dict(out)


__all__ = ["communication_volume"]
