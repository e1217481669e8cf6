"""Attention materialisation: bmm → softmax → bmm over an (B·H, L, L) score tensor.

Eager attention writes the scores, reads them back for scale / mask / softmax / dropout, and reads
the probabilities again for the second bmm. A fused attention kernel (FlashAttention, SDPA) keeps
them on chip: every kernel between the two bmms exists only to move the score tensor, so its time is
the saving (the bmms' FLOPs remain).
"""

from __future__ import annotations

import re
from collections import defaultdict

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bytes, fmt_time, generic_module, op_chain
from bwdiag.diagnose.model import FindingKind

BMM_OPS = frozenset({"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::einsum"})
BETWEEN = frozenset({"softmax", "elementwise", "random", "cast", "copy", "reduction"})
#: Most kernels between the two bmms (scale, mask, softmax, dropout, casts …).
MAX_BETWEEN = 8


#: Ops of a fused attention (or the SDPA entry point that may fall back to its math kernel).
SDPA = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|_flash_attn|fmha|cudnn_attention", re.I)


def attention_materialisation(ctx: RuleContext) -> list[RuleResult]:
    """Eager attention: a softmax between two batched matmuls over a square-ish score tensor.

    A match inside ``aten::scaled_dot_product_attention`` is SDPA's math fallback (the code already
    calls SDPA: the fix is inputs a fused kernel accepts); a match in a module whose other calls
    already run fused attention kernels is left alone (the module already uses them)."""
    found = {"eager": _Matches(), "fallback": _Matches()}
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities.sort_values(["stream", "ts"], kind="stable")
        names = acts["op_name"].to_numpy()
        cats = acts["category"].to_numpy()
        streams = acts["stream"].to_numpy()
        ops_of = acts["op"].to_numpy()
        rows = a.activities.index.get_indexer(acts.index)  # positions in the rank's activities
        fused_modules = _fused_attention_modules(a)
        i = 0
        while i < len(acts):
            if names[i] not in BMM_OPS:
                i += 1
                continue
            j = i + 1
            while j < len(acts) and j - i <= MAX_BETWEEN + 1 and streams[j] == streams[i] and cats[j] in BETWEEN:
                j += 1
            between = list(range(i + 1, j))
            if (j < len(acts) and names[j] in BMM_OPS and streams[j] == streams[i] and between
                    and any(cats[k] == "softmax" or "softmax" in str(names[k]) for k in between)):
                sm = next(k for k in between if cats[k] == "softmax" or "softmax" in str(names[k]))
                op = int(ops_of[sm])
                module = acts["module"].iloc[sm]
                under_sdpa = op >= 0 and any(SDPA.search(str(n)) for n in op_chain(a.trace.ops, op)[1:])
                if not under_sdpa and isinstance(module, str) and generic_module(module) in fused_modules:
                    i = j  # this module already runs fused attention kernels
                    continue
                m = found["fallback" if under_sdpa else "eager"]
                sub = acts.iloc[between]
                m.saving += float(sub["dur"].sum())
                m.score += float(sub["bytes"].fillna(0).sum())
                m.count += 1
                m.acts[pos].extend(rows[between].tolist())
                if m.example is None:
                    m.example = (acts.iloc[sm], [str(n).removeprefix("aten::") for n in names[i:j + 1]])
                i = j
            else:
                i += 1
    return [r for kind, m in found.items() if (r := _finding(ctx, m, kind == "fallback")) is not None]


class _Matches:
    def __init__(self):
        self.saving = self.score = 0.0
        self.count = 0
        self.acts = defaultdict(list)
        self.example = None


def _fused_attention_modules(a) -> set[str]:
    """Module patterns (``blocks.*.attn``) whose activities include a fused attention kernel or op."""
    acts = a.activities
    fused = (acts["category"] == "attention").to_numpy() | \
        acts["op_name"].astype(str).str.contains(SDPA).to_numpy() | acts["name"].astype(str).str.contains(SDPA).to_numpy()
    return {generic_module(m) for m in acts.loc[fused, "module"] if isinstance(m, str) and m}


def _finding(ctx: RuleContext, m: _Matches, fallback: bool) -> RuleResult | None:
    saving = m.saving / ctx.ranks
    if not m.count or not ctx.worth_reporting(saving):
        return None
    row, seq = m.example
    evidence = [
        f"{'SDPA math fallback' if fallback else 'eager attention'} ({ctx.times(m.count / ctx.ranks)}): "
        f"{' → '.join(seq)} over scores {row['shapes']}",
        f"the {len(seq) - 2} kernels between the bmms only move the score tensor: {fmt_bytes(m.score / ctx.ranks)} "
        f"in {fmt_time(saving)} → a fused kernel saves {ctx.per_step(saving)}",
    ]
    if isinstance(row["module"], str):
        evidence.append(row["module"])
    if fallback:
        fix = ("# the code already calls scaled_dot_product_attention, but these inputs run its math kernel:\n"
               "# fused kernels want fp16/bf16 (flash) or fp32 (memory-efficient), is_causal=True instead of a dense\n"
               "# float mask where possible, head_dim a multiple of 8; check which backend refuses and why:\n"
               "from torch.nn.attention import sdpa_kernel, SDPBackend\n"
               "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):\n"
               "    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # raises, naming the reason")
        title = "SDPA runs its math fallback (bmm → softmax → bmm): give it inputs a fused kernel takes"
    else:
        fix = ("out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,\n"
               "                                                     dropout_p=p if self.training else 0.0,\n"
               "                                                     is_causal=mask is None)\n"
               "# Hugging Face: AutoModel.from_pretrained(..., attn_implementation=\"sdpa\")  # or \"flash_attention_2\"")
        title = "Use fused attention instead of bmm → softmax → bmm"
    return ctx.finding(FindingKind.FUSION, title, saving, evidence, fix, acts=m.acts)
