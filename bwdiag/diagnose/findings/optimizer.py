"""Per-parameter optimizer kernels: an Adam/AdamW step run as a Python loop over the parameters.

The for-loop (``foreach=False``) implementation launches ~8 elementwise ops per parameter
(``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_`` …), each reading and
writing parameter-sized tensors. A fused step reads param, grad, exp_avg and exp_avg_sq once and
writes param, exp_avg and exp_avg_sq once: 7 parameter-sized tensors. Saving = the bytes the loop
moves beyond those, at the bandwidth the loop achieved.

On a CPU the loop's time is mostly not bytes: each of its ~10 ops per parameter pays the dispatcher,
and the interpreter steps between them (the step's gaps, which the host-overhead rule leaves to this
finding). ``fused=True`` replaces all of it with one op, whose work is the 7 tensors at the host's
memory bandwidth; so there the saving is the loop's ops and the step's gaps, less those bytes at the
ceiling. Checked on 24 ``Linear(32, 32)`` layers, batch 16, one thread (2-core AMD EPYC VM, 7 Dec
2026, ``tests/test_diff.py``'s workload): the bytes at the achieved bandwidth predicted 21 % of the
step (418 µs as run without the profiler), this 1.01 ms; ``fused=True`` saved 50 % (1.99 → 0.99 ms).

The foreach implementation (the default for CUDA tensors) batches the launches but not the math: each
``_foreach_*`` op is one pass over a list of parameter-sized tensors, reading and writing them. Its
tensor lists hold no shapes in the trace when they are longer than 30 (the profiler records ``[]``),
so the bytes are not known; the passes are. With every pass at the bandwidth the step's
multi-tensor kernels achieved, a fused step's 7 tensor passes take ``7 / passes`` of their time:
saving = kernel time × (1 − 7 / passes). On an H200 (the medium bundled transformer, 101 parameters,
``sample_traces/train_transformer_medium_h200``) that predicts 2.44 ms of the 3.66 ms of foreach
kernels per step; ``fused=True`` realised 10 % of the 23.9 ms unprofiled step (benchmarks/README.md).
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pandas as pd

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bandwidth, fmt_bytes, fmt_time, host_gaps, op_column, tensor_sizes
from bwdiag.diagnose.findings.recording import dilation, overhead_by_row
from bwdiag.diagnose.model import FindingKind

STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
ALREADY_BATCHED = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|_fused_", re.I)
FUSED_TENSORS = 7  # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq
FUSED = re.compile(r"fused_adam|FusedAdam|_fused_", re.I)
#: Parameter-sized tensor passes (reads + writes) of each foreach op in Adam/AdamW's foreach step
#: (torch/optim/adam.py ``_multi_tensor_adam``): ``_foreach_mul_(params, 1 - lr·wd)`` 2, ``_foreach_lerp_
#: (exp_avgs, grads, 1 - β1)`` 3, ``_foreach_mul_(exp_avg_sqs, β2)`` 2, ``_foreach_addcmul_(exp_avg_sqs,
#: grads, grads)`` 4, ``_foreach_sqrt(exp_avg_sqs)`` 2, ``_foreach_div_(…, bias_correction2_sqrt)`` 2,
#: ``_foreach_add_(…, eps)`` 2, ``_foreach_addcdiv_(params, exp_avgs, denom)`` 4. Ops over the step
#: counters launch no kernel when those live on the CPU (``capturable=False``) and are not counted.
FOREACH_PASSES = {"aten::_foreach_mul_": 2, "aten::_foreach_lerp_": 3, "aten::_foreach_addcmul_": 4,
                  "aten::_foreach_sqrt": 2, "aten::_foreach_div_": 2, "aten::_foreach_add_": 2,
                  "aten::_foreach_addcdiv_": 4, "aten::_foreach_sub_": 2, "aten::_foreach_maximum_": 3,
                  "aten::_foreach_add": 3, "aten::_foreach_mul": 3, "aten::_foreach_div": 3}


def per_parameter_optimizer(ctx: RuleContext) -> list[RuleResult]:
    """Adam/AdamW steps whose kernels are per-parameter elementwise ops: ``fused=True``."""
    moved = time = fused = ops_us = over_us = gaps_us = 0.0
    found = []  # (rank position, HostGaps): the profiler's stretch of the overhead (CPU)
    params = 0
    name = None
    acts_of = defaultdict(list)
    foreach = _ForeachSteps()
    for pos, a in enumerate(ctx.analyses):
        ops, acts = a.trace.ops, a.activities
        names = pd.Series(op_column(ops, "name"), dtype=object).astype(str)
        adam = {n for n in names.unique() if STEP.match(n) and "adam" in n.lower()}  # per distinct name
        steps = np.flatnonzero(names.isin(adam).to_numpy()).tolist() if adam else []
        if not steps or acts.empty:
            continue
        name = STEP.match(names.iat[steps[0]]).group(1)
        inside = _under(ops, acts["op"].to_numpy(), steps)
        # foreach / fused show in the kernel names on a GPU; on a CPU the foreach op itself loops
        # over the tensors, so its per-tensor children are the activities: look at the ops too.
        in_step = _under(ops, np.arange(len(ops)), steps)
        kernel_names = " ".join(acts.loc[inside, "name"].astype(str).unique())
        if ALREADY_BATCHED.search(kernel_names) or ALREADY_BATCHED.search(" ".join(names[in_step].unique())):
            if not ctx.is_cpu and not FUSED.search(kernel_names + " ".join(names[in_step].unique())):
                foreach.add(pos, a, names, in_step, inside, len(steps))
            continue
        nbytes = acts["bytes"].to_numpy(float)
        known = inside & np.isfinite(nbytes)
        op_names = acts["op_name"].to_numpy()
        for op in np.unique(acts["op"].to_numpy()[inside & (op_names == "aten::addcdiv_")]):
            n, elem = max(tensor_sizes(ops, int(op)), default=(0, 0))
            params += 1
            fused += FUSED_TENSORS * n * elem
        moved += float(nbytes[known].sum())
        time += float(acts["dur"].to_numpy(float)[known].sum())
        acts_of[pos].extend(np.flatnonzero(known).tolist())
        if ctx.is_cpu:
            ops_us += float(acts["dur"].to_numpy(float)[inside].sum())
            over_us += float(overhead_by_row(a)[inside].sum())
            if (g := host_gaps(a)) is not None:
                gaps_us += g.where.get("optimizer step", [0.0, 0])[0]
                found.append((pos, g))
    if not params or moved <= fused or time <= 0:
        return foreach.finding(ctx, name)
    bw = moved / (time / 1e6)
    n = ctx.ranks
    loop = (f"{name}.step runs per parameter: {params // n} parameter updates, "
            f"{sum(len(v) for v in acts_of.values()) // n} elementwise {'CPU ops' if ctx.is_cpu else 'kernels'} "
            f"moving {fmt_bytes(moved / n)} in {fmt_time(time / n)} ({fmt_bandwidth(bw)})")
    if ctx.is_cpu:
        saving, idle, evidence = _cpu_price(ctx, loop, ops_us, over_us, gaps_us, fused, bw, found)
    else:
        saving, idle = (moved - fused) / bw * 1e6 / n, 0.0
        evidence = [
            loop,
            f"a fused step moves {FUSED_TENSORS} parameter-sized tensors = {fmt_bytes(fused / n)} "
            f"→ saves {fmt_bytes((moved - fused) / n)} ÷ {fmt_bandwidth(bw)} = {ctx.per_step(saving)}",
        ]
    if not ctx.worth_reporting(saving):
        return []
    fix = (f"optimizer = torch.optim.{name}(model.parameters(), lr=lr, fused=True)\n"
           "# (foreach=True, the default on GPU, batches the launches; fused=True also fuses the math)")
    return [ctx.finding(FindingKind.FUSION, f"Use a fused {name} step instead of per-parameter kernels",
                        saving, evidence, fix, acts=acts_of, idle_us=idle)]


def _cpu_price(ctx: RuleContext, loop: str, ops_us: float, over_us: float, gaps_us: float, fused: float,
               achieved: float, found: list) -> tuple[float, float, list[str]]:
    """(saving, of it the gaps cut as idle, evidence) of a fused step on a CPU thread, over the window
    (mean per rank): the loop's ops (``over_us`` of them beyond their roofline) and the ``gaps_us``
    between them, less one op over the ``fused`` bytes — the overhead at the plain script's share where
    ``bwdiag run`` timed steps without the profiler (:func:`~.recording.dilation`).

    The fused op reads and writes the tensors the loop's ops did, from the same caches: it runs at the
    host's memory bandwidth, or at the bandwidth the loop's ops ``achieved`` (bytes/s, their dispatch
    included) where that is higher — a model whose optimizer state fits the last-level cache. On the
    Intel Xeon VM (7 Dec 2026) the bundled transformer's 29 tensors (536 k parameters, 15 MB a fused
    step) took 0.50 ms fused, 30 GB/s, where the calibrated DRAM bandwidth was 15.6 GB/s and the loop's
    ops achieved 23–25 GB/s in the trace; at 15.6 the fix's saving came out 0.75–1.13 ms a step where it
    realised 1.26–1.46."""
    n = ctx.ranks
    ceiling = float(ctx.diagnosis.device.memory_bandwidth)
    speed = max(ceiling, achieved)
    fused_us = fused / speed * 1e6
    where = (f"the {fmt_bandwidth(speed)} the loop's ops achieved (above the host's {fmt_bandwidth(ceiling)}: "
             f"its tensors stay in cache)" if achieved > ceiling else f"the host's {fmt_bandwidth(ceiling)}")
    saving = max(0.0, ops_us + gaps_us - fused_us) / n
    idle = min(saving, gaps_us / n)  # of it, the gaps between the loop's ops (cut on the timeline as idle)
    evidence = [
        loop,
        f"on a CPU thread the loop's time is its ops' dispatch as much as its bytes: its ops take "
        f"{fmt_time(ops_us / n)} ({fmt_time(over_us / n)} of it beyond their roofline), the interpreter "
        f"{fmt_time(gaps_us / n)} between them (the step's gaps)",
    ]
    stretch = dilation(ctx, found)
    if stretch is not None:  # the plain script pays its share of the overhead, as the host-overhead rule's
        share, t = stretch.plain_share, ctx.diagnosis.time
        plain = max(0.0, (gaps_us + over_us) * share + (ops_us - over_us) - fused_us) / n
        saving = plain * ctx.recorded_stretch
        idle = min(saving, gaps_us / n * share * ctx.recorded_stretch)
        evidence.append(
            f"the profiler stretched the run's overhead {stretch.factor:.2f}× ({fmt_time(t.step_us)} a step "
            f"profiled, {fmt_time(t.unprofiled_step_us)} after it stopped): the plain script pays {share:.0%} of "
            f"the loop's gaps and overhead" if stretch.factor else
            "the profiler's added time covers all of the run's overhead: the plain script pays none of it")
        evidence.append(
            f"a fused step is one op moving {FUSED_TENSORS} parameter-sized tensors = {fmt_bytes(fused / n)}, "
            f"{fmt_time(fused_us / n)} at {where} → saves ({fmt_time(gaps_us / n)} + "
            f"{fmt_time(over_us / n)}) × {share:.0%} + {fmt_time((ops_us - over_us) / n)} − {fmt_time(fused_us / n)} "
            f"= {fmt_time(plain)} of the plain script's time; as a share of the profiled step → {ctx.per_step(saving)}")
    else:
        evidence.append(
            f"a fused step is one op moving {FUSED_TENSORS} parameter-sized tensors = {fmt_bytes(fused / n)}, "
            f"{fmt_time(fused_us / n)} at {where} → saves {fmt_time(ops_us / n)} + "
            f"{fmt_time(gaps_us / n)} − {fmt_time(fused_us / n)} = {ctx.per_step(saving)}")
    return saving, idle, evidence


class _ForeachSteps:
    """The foreach Adam/AdamW steps of a GPU trace: their multi-tensor kernels and tensor passes."""

    def __init__(self) -> None:
        self.time = 0.0
        self.passes: dict[int, float] = {}  # per rank: passes per step of the foreach ops that launched kernels
        self.ops = self.kernels = 0
        self.acts_of: dict[int, list[int]] = defaultdict(list)

    def add(self, pos: int, a, names: pd.Series, in_step: np.ndarray, inside: np.ndarray, steps: int) -> None:
        acts = a.activities
        act_op = acts["op"].to_numpy()
        dur = acts["dur"].to_numpy(float)
        for op in np.flatnonzero(in_step & names.isin(list(FOREACH_PASSES)).to_numpy()):
            rows = np.flatnonzero(inside & (act_op == op))
            if not len(rows):
                continue  # over CPU step counters: no kernel
            self.passes[pos] = self.passes.get(pos, 0.0) + FOREACH_PASSES[names.iat[op]] / steps
            self.ops += 1
            self.kernels += len(rows)
            self.time += float(dur[rows].sum())
            self.acts_of[pos].extend(rows.tolist())

    def finding(self, ctx: RuleContext, name: str | None) -> list[RuleResult]:
        if not self.passes or self.time <= 0 or name is None:
            return []
        per_step = sum(self.passes.values()) / len(self.passes)  # AdamW's recipe: 8 ops, 21 passes
        if per_step <= FUSED_TENSORS:
            return []
        saving = self.time * (1.0 - FUSED_TENSORS / per_step) / ctx.ranks
        if not ctx.worth_reporting(saving):
            return []
        evidence = [
            f"{name}.step runs as foreach ops: {self.ops / ctx.ranks:,.0f} multi-tensor ops launch "
            f"{self.kernels / ctx.ranks:,.0f} kernels taking {fmt_time(self.time / ctx.ranks)}, "
            f"≈{per_step:.0f} passes over parameter-sized tensors per step (each op reads and writes its lists; "
            "the trace records no sizes for lists over 30 tensors)",
            f"a fused step makes {FUSED_TENSORS} passes → saves {fmt_time(self.time / ctx.ranks)} × "
            f"(1 − {FUSED_TENSORS}/{per_step:.0f}) = {ctx.per_step(saving)}",
        ]
        fix = (f"optimizer = torch.optim.{name}(model.parameters(), lr=lr, fused=True)\n"
               "# one kernel per parameter chunk: reads param, grad and both moments once, writes them once")
        return [ctx.finding(FindingKind.FUSION, f"Use the fused {name} step instead of foreach kernels",
                            saving, evidence, fix, acts=self.acts_of)]


def _under(ops, op_idx: np.ndarray, roots: list[int]) -> np.ndarray:
    """Per activity: whether its op runs inside one of the ``roots`` ranges on the same thread.
    (User annotations such as ``Optimizer.step#…`` are ranges, not parents of the ops in them.)"""
    ts, end, tid = op_column(ops, "ts"), op_column(ops, "end"), op_column(ops, "tid")
    out = np.zeros(len(op_idx), dtype=bool)
    valid = op_idx >= 0
    idx = op_idx[valid].astype(int)
    hit = np.zeros(len(idx), dtype=bool)
    for r in roots:
        hit |= (ts[idx] >= ts[r]) & (ts[idx] <= end[r]) & (tid[idx] == tid[r])
    out[valid] = hit
    return out
