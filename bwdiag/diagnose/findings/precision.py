"""Precision: fp32 GEMMs/convs on the vector units of a GPU with tensor cores; bf16 → fp8 as a further step.

Saving per kernel group: the new time is its best time on the faster roof (FLOPs at the tensor
peak, bytes at the memory bandwidth — halved for a 16-bit copy) divided by the share of its roof it
reaches today. Without FLOPs (no shapes) it is at least half the time: a 16-bit kernel moves half
the bytes and has a ≥2× higher compute roof, so whichever roof limits it, it runs ≥2× faster.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import (
    MATRIX,
    fmt_flops,
    fmt_time,
    groups_of,
    kernel_label,
    rows_of,
    share_of_roof,
)
from bwdiag.diagnose.model import FindingKind
from bwdiag.diagnose.tensor_units import on_fp32_vector_units

FP8_DEVICES_NOTE = "H100/H200/B200/MI300X-class fp8 tensor cores"


def _peak(ctx: RuleContext, dtype: str) -> float | None:
    return ctx.diagnosis.device.peak_flops.get(dtype)


def fp32_on_vector_units(ctx: RuleContext) -> list[RuleResult]:
    """fp32 GEMM/conv kernels not on tensor cores, on a GPU whose tensor cores take bf16/fp16."""
    if ctx.is_cpu:
        return []
    dev = ctx.diagnosis.device
    fp32 = dev.vector_flops.get("fp32") or _peak(ctx, "fp32")
    target = "bf16" if (_peak(ctx, "bf16") or 0) > (fp32 or 0) * 1.5 else "fp16"
    peak16 = _peak(ctx, target)
    if not fp32 or not peak16 or peak16 <= fp32 * 1.5:
        return []
    bw = dev.memory_bandwidth
    saving, time, lower_bound = 0.0, 0.0, False
    acts, items = defaultdict(list), []
    for pos, a, groups in groups_of(ctx):
        for g in groups.itertuples():
            if g.category not in MATRIX or not on_fp32_vector_units(str(g.name), g.dtype, bool(g.tensor)):
                continue
            share = share_of_roof(g)
            if pd.notna(g.flops) and pd.notna(g.bytes) and share:
                new = max(g.flops / peak16, g.bytes / 2 / bw) * 1e6 / share
            else:
                new, lower_bound = g.total_us / 2, True
            s = max(0.0, g.total_us - new)
            saving += s
            time += g.total_us
            acts[pos].extend(rows_of(a, g.Index).tolist())
            items.append((s, g))
    saving /= ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    items.sort(key=lambda t: -t[0])
    evidence = [
        f"{len(items)} fp32 GEMM/conv kernel groups on the vector units take {fmt_time(time / ctx.ranks)}: "
        f"fp32 peak {fmt_flops(fp32)} vs {target} tensor-core peak {fmt_flops(peak16)} ({peak16 / fp32:.0f}×)",
        f"at today's share of their roof they would take {fmt_time(time / ctx.ranks - saving)} in {target} "
        f"→ saves {ctx.per_step(saving)}" + (" (FLOPs unknown for some: counted at ≥2× faster, a lower bound)"
                                              if lower_bound else ""),
        *[f"{kernel_label(g.name)} ({g.op_name or 'no op'}): {fmt_time(g.total_us)}" for _, g in items[:3]],
    ]
    amp = "torch.autocast(\"cuda\", dtype=torch.bfloat16)" if target == "bf16" else \
        "torch.autocast(\"cuda\", dtype=torch.float16)"
    fix = (f"with {amp}:\n    loss = model(batch)\n"
           + ("# fp16 training also needs torch.amp.GradScaler(\"cuda\")\n" if target == "fp16" else "")
           + ("# or, keeping fp32 tensors: torch.backends.cuda.matmul.allow_tf32 = True; "
              "torch.backends.cudnn.allow_tf32 = True" if "tf32" in ctx.diagnosis.device.peak_flops else ""))
    return [ctx.finding(FindingKind.PRECISION, f"Run fp32 GEMMs/convs on tensor cores ({target} autocast)",
                        saving, evidence, fix.rstrip(), acts=acts)]


def bf16_to_fp8(ctx: RuleContext) -> list[RuleResult]:
    """Compute-bound bf16/fp16 GEMMs on a GPU with fp8 tensor cores: fp8 as a further step."""
    if ctx.is_cpu:
        return []
    fp8 = _peak(ctx, "fp8")
    if not fp8:
        return []
    saving, time = 0.0, 0.0
    acts, items = defaultdict(list), []
    for pos, a, groups in groups_of(ctx):
        for g in groups.itertuples():
            if g.category != "gemm" or g.dtype not in ("bf16", "fp16") or not g.tensor or g.bound != "compute":
                continue
            share = share_of_roof(g)
            peak = _peak(ctx, g.dtype)
            if pd.isna(g.flops) or pd.isna(g.bytes) or not share or not peak or fp8 <= peak:
                continue
            new = max(g.flops / fp8, g.bytes / ctx.diagnosis.device.memory_bandwidth) * 1e6 / share
            s = max(0.0, g.total_us - new)
            saving += s
            time += g.total_us
            acts[pos].extend(rows_of(a, g.Index).tolist())
            items.append((s, g))
    saving /= ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    items.sort(key=lambda t: -t[0])
    dtype = items[0][1].dtype
    evidence = [
        f"{len(items)} compute-bound {dtype} GEMM groups take {fmt_time(time / ctx.ranks)}; "
        f"fp8 tensor peak {fmt_flops(fp8)} vs {dtype} {fmt_flops(_peak(ctx, dtype))}",
        f"at today's share of their roof, in fp8 → saves {ctx.per_step(saving)}",
        *[f"{kernel_label(g.name)} ({g.op_name}, {g.shapes}): {fmt_time(g.total_us)}" for _, g in items[:3]],
    ]
    if ctx.is_training:
        fix = ("from torchao.float8 import convert_to_float8_training\n"
               "convert_to_float8_training(model)   # nn.Linear -> Float8Linear (dynamic scaling)\n"
               "# or Transformer Engine: with te.fp8_autocast(enabled=True): out = model(batch)  (te.Linear layers)")
    else:
        fix = ("from torchao.quantization import quantize_, float8_dynamic_activation_float8_weight\n"
               "quantize_(model, float8_dynamic_activation_float8_weight())\n"
               "# vLLM: LLM(model, quantization=\"fp8\")")
    return [ctx.finding(FindingKind.PRECISION, f"Move compute-bound {dtype} GEMMs to fp8 ({FP8_DEVICES_NOTE})",
                        saving, evidence, fix, acts=acts)]
