"""Batching: GEMM/conv/attention kernels too small to fill the device (latency-bound).

A latency-bound kernel runs below its roof because its grid is too small or it is too short to
leave the launch ramp. Batched to a shape that fills the device, each request's share of the work
runs at the roof: the saving is the time above the kernels' best time at their roof.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_time, groups_of, kernel_label, rows_of
from bwdiag.diagnose.model import FindingKind

SMALL = ("gemm", "conv", "attention")


def small_kernels(ctx: RuleContext) -> list[RuleResult]:
    """Latency-bound matrix kernels with known work: batch more rows per launch."""
    saving = time = best = 0.0
    acts, items = defaultdict(list), []
    for pos, a, groups in groups_of(ctx):
        for g in groups.itertuples():
            if g.category not in SMALL or g.bound != "latency" or pd.isna(g.best_time_s) or g.best_time_s is None:
                continue
            b = float(g.best_time_s) * 1e6
            saving += max(0.0, g.total_us - b)
            time += g.total_us
            best += b
            acts[pos].extend(rows_of(a, g.Index).tolist())
            items.append(g)
    saving /= ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    items.sort(key=lambda g: -g.total_us)
    unit = "CPU ops" if ctx.is_cpu else "kernels"
    evidence = [
        f"{sum(g.count for g in items)} latency-bound GEMM/conv/attention {unit} take {fmt_time(time / ctx.ranks)}; "
        f"at their roof the same work takes {fmt_time(best / ctx.ranks)} → {ctx.per_step(saving)} is fixed "
        f"overhead a bigger batch amortises",
        *[f"{kernel_label(g.name)} ({g.op_name}, {g.shapes}): {ctx.times(g.count)}, mean {fmt_time(g.mean_us)}"
          for g in items[:4]],
    ]
    fix = ("# serve more requests per forward (continuous batching), or micro-batch several inputs together:\n"
           "batch = torch.cat([x1, x2, x3, x4])          # one [4·B, ...] launch instead of four\n"
           "out = model(batch)\n"
           "# vLLM / TGI: raise max_num_seqs / max_batch_size; training: larger micro-batch, fewer accumulation steps")
    return [ctx.finding(FindingKind.BATCHING, f"Batch the small GEMMs: {len(items)} shape{'s' if len(items) != 1 else ''} never fill{'s' if len(items) == 1 else ''} the device",
                        saving, evidence, fix, acts=acts)]
