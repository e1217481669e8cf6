"""Per-parameter optimizer kernels: an Adam/AdamW step run as a Python loop over the parameters.

The for-loop (``foreach=False``) implementation launches ~8 elementwise ops per parameter
(``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_`` …), each reading and
writing parameter-sized tensors. A fused step reads param, grad, exp_avg and exp_avg_sq once and
writes param, exp_avg and exp_avg_sq once: 7 parameter-sized tensors. Saving = the bytes the loop
moves beyond those, at the bandwidth the loop achieved.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pandas as pd

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bandwidth, fmt_bytes, fmt_time, op_column, tensor_sizes
from bwdiag.diagnose.model import FindingKind

STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
ALREADY_BATCHED = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|_fused_", re.I)
FUSED_TENSORS = 7  # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq


def per_parameter_optimizer(ctx: RuleContext) -> list[RuleResult]:
    """Adam/AdamW steps whose kernels are per-parameter elementwise ops: ``fused=True``."""
    moved = time = fused = 0.0
    params = 0
    name = None
    acts_of = defaultdict(list)
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
        if ALREADY_BATCHED.search(" ".join(acts.loc[inside, "name"].astype(str).unique())) or \
                ALREADY_BATCHED.search(" ".join(names[in_step].unique())):
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
    if not params or moved <= fused or time <= 0:
        return []
    bw = moved / (time / 1e6)
    saving = (moved - fused) / bw * 1e6 / ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    evidence = [
        f"{name}.step runs per parameter: {params // ctx.ranks} parameter updates, "
        f"{sum(len(v) for v in acts_of.values()) // ctx.ranks} elementwise {'CPU ops' if ctx.is_cpu else 'kernels'} "
        f"moving {fmt_bytes(moved / ctx.ranks)} in {fmt_time(time / ctx.ranks)} ({fmt_bandwidth(bw)})",
        f"a fused step moves {FUSED_TENSORS} parameter-sized tensors = {fmt_bytes(fused / ctx.ranks)} "
        f"→ saves {fmt_bytes((moved - fused) / ctx.ranks)} ÷ {fmt_bandwidth(bw)} = {ctx.per_step(saving)}",
    ]
    fix = (f"optimizer = torch.optim.{name}(model.parameters(), lr=lr, fused=True)\n"
           "# (foreach=True, the default on GPU, batches the launches; fused=True also fuses the math)")
    return [ctx.finding(FindingKind.FUSION, f"Use a fused {name} step instead of per-parameter kernels",
                        saving, evidence, fix, acts=acts_of)]


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
