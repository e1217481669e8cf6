"""Quantization: memory-bound GEMMs dominated by weight reads (small-batch inference, decode).

A weight-only int8 GEMM reads half the weight bytes of a bf16/fp16 one (int4: a quarter). At the
bandwidth the kernel achieves today, its new time is ``time × new_bytes / bytes``.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bytes, fmt_time, groups_of, kernel_label, rows_of, weight_bytes
from bwdiag.diagnose.model import FindingKind

#: A GEMM is weight-dominated when the weight is at least this share of its traffic.
MIN_WEIGHT_SHARE = 0.5


def weight_only_quantization(ctx: RuleContext) -> list[RuleResult]:
    """Memory-bound Linear GEMMs whose traffic is mostly the weight: int8 / int4 weight-only."""
    if ctx.is_cpu:
        return []
    saving8 = saving4 = time = 0.0
    acts, items = defaultdict(list), []
    for pos, a, groups in groups_of(ctx):
        for g in groups.itertuples():
            if g.category != "gemm" or g.bound != "memory" or pd.isna(g.bytes) or g.dtype not in ("bf16", "fp16", "fp32"):
                continue
            w = weight_bytes(a, g)
            per_call = g.bytes / g.count
            if w is None or w < MIN_WEIGHT_SHARE * per_call:
                continue
            elem = {"bf16": 2, "fp16": 2, "fp32": 4}[g.dtype]
            for bits, acc in ((8, "8"), (4, "4")):
                new_w = w * bits / 8 / elem
                s = g.total_us * (1 - (per_call - w + new_w) / per_call)
                if acc == "8":
                    saving8 += s
                else:
                    saving4 += s
            time += g.total_us
            acts[pos].extend(rows_of(a, g.Index).tolist())
            items.append((g, w, per_call))
    saving8 /= ctx.ranks
    saving4 /= ctx.ranks
    if not ctx.worth_reporting(saving8):
        return []
    items.sort(key=lambda t: -t[0].total_us)
    g, w, per_call = items[0]
    evidence = [
        f"{len(items)} memory-bound GEMM groups, weights ≥{MIN_WEIGHT_SHARE:.0%} of their traffic, take "
        f"{fmt_time(time / ctx.ranks)}",
        f"e.g. {g.op_name} {g.shapes}: weight {fmt_bytes(w)} of {fmt_bytes(per_call)} per call; int8 weights "
        f"read {fmt_bytes(w / 2 if g.dtype != 'fp32' else w / 4)}",
        f"at today's bandwidth: int8 weight-only saves {ctx.per_step(saving8)}; int4 saves {ctx.per_step(saving4)}",
        *[f"{kernel_label(x.name)} ({x.module or x.op_name}): {fmt_time(x.total_us)}" for x, _, _ in items[:3]],
    ]
    fix = ("from torchao.quantization import quantize_, int8_weight_only\n"
           "quantize_(model, int8_weight_only())\n"
           "# int4: from torchao.quantization import int4_weight_only; quantize_(model, int4_weight_only(group_size=128))")
    if (ctx.diagnosis.device.peak_flops or {}).get("fp8"):  # fp8 only where the device has fp8 units
        fix += f"\n# fp8 on this {ctx.diagnosis.device.name}: float8_weight_only() from torchao.quantization"
    return [ctx.finding(FindingKind.QUANTIZATION, "Quantize the weights of memory-bound GEMMs (int8 weight-only)",
                        saving8, evidence, fix, acts=acts)]
