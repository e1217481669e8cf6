"""Attention materialisation: bmm → softmax → bmm over an (B·H, L, L) score tensor.

Eager attention writes the scores, reads them back for scale / mask / softmax / dropout, and reads
the probabilities again for the second bmm. A fused attention kernel (FlashAttention, SDPA) keeps
them on chip: every kernel between the two bmms exists only to move the score tensor, so its time is
the saving (the bmms' FLOPs remain).
"""

from __future__ import annotations

from collections import defaultdict

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bytes, fmt_time, tensor_sizes
from bwdiag.diagnose.model import FindingKind

BMM_OPS = frozenset({"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::einsum"})
BETWEEN = frozenset({"softmax", "elementwise", "random", "cast", "copy", "reduction"})
#: Most kernels between the two bmms (scale, mask, softmax, dropout, casts …).
MAX_BETWEEN = 8


def attention_materialisation(ctx: RuleContext) -> list[RuleResult]:
    """Eager attention: a softmax between two batched matmuls over a square-ish score tensor."""
    saving = score = 0.0
    count = 0
    acts_of = defaultdict(list)
    example = None
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities.sort_values(["stream", "ts"], kind="stable")
        names = acts["op_name"].to_numpy()
        cats = acts["category"].to_numpy()
        streams = acts["stream"].to_numpy()
        rows = a.activities.index.get_indexer(acts.index)  # positions in the rank's activities
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
                sub = acts.iloc[between]
                saving += float(sub["dur"].sum())
                score += float(sub["bytes"].fillna(0).sum())
                count += 1
                acts_of[pos].extend(rows[between].tolist())
                if example is None:
                    sm = next(k for k in between if cats[k] == "softmax" or "softmax" in str(names[k]))
                    example = (acts.iloc[sm], [str(n).removeprefix("aten::") for n in names[i:j + 1]],
                               tensor_sizes(a.trace.ops, int(acts["op"].iloc[sm])))
                i = j
            else:
                i += 1
    saving /= ctx.ranks
    if not count or not ctx.worth_reporting(saving):
        return []
    row, seq, _ = example
    evidence = [
        f"eager attention ({ctx.times(count / ctx.ranks)}): {' → '.join(seq)} over scores {row['shapes']}",
        f"the {len(seq) - 2} kernels between the bmms only move the score tensor: {fmt_bytes(score / ctx.ranks)} "
        f"in {fmt_time(saving)} → a fused kernel saves {ctx.per_step(saving)}",
    ]
    if isinstance(row["module"], str):
        evidence.append(row["module"])
    fix = ("out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,\n"
           "                                                     dropout_p=p if self.training else 0.0,\n"
           "                                                     is_causal=mask is None)\n"
           "# Hugging Face: AutoModel.from_pretrained(..., attn_implementation=\"sdpa\")  # or \"flash_attention_2\"")
    return [ctx.finding(FindingKind.FUSION, "Use fused attention instead of bmm → softmax → bmm", saving,
                        evidence, fix, acts=acts_of)]
