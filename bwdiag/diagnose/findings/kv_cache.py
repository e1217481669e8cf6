"""KV-cache quantization: decode attention that spends its time reading the cache.

In decode each new token's query (a few rows) attends over every cached key and value, so the
attention kernel's traffic is almost all K and V, and it is memory-bound. Storing the cache in 8
bits reads half the bytes of a bf16/fp16 cache (a quarter of fp32); at the bandwidth the kernel
achieves today its new time is ``time × new_bytes / bytes``.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from bwdiag.costs import dtype_bytes
from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import fmt_bytes, fmt_time, groups_of, op_column, rows_of
from bwdiag.diagnose.model import FindingKind

#: Decode: at most this many query positions per call …
MAX_QUERY_LEN = 4
#: … over a cache at least this many times longer.
MIN_CACHE_RATIO = 8


def cache_bytes(q: list, k: list, v: list, elem: int) -> float | None:
    """Bytes of K and V read by one decode attention call, or None when it is not decode.

    Shapes are (batch, heads, length, head_dim) as ``scaled_dot_product_attention`` records them.
    """
    if not all(isinstance(t, list) and len(t) == 4 and all(isinstance(x, int) for x in t) for t in (q, k, v)):
        return None
    if q[2] > MAX_QUERY_LEN or k[2] < MIN_CACHE_RATIO * max(q[2], 1):
        return None
    return float((k[0] * k[1] * k[2] * k[3] + v[0] * v[1] * v[2] * v[3]) * elem)


def kv_cache_quantization(ctx: RuleContext) -> list[RuleResult]:
    """Memory-bound decode attention whose bytes are the KV cache: an 8-bit cache (GPU traces: eager
    CPU attention has no kernel that reads an 8-bit cache, and dequantizing it first made decode 1.6×
    slower in issue 13's measurement)."""
    if ctx.is_cpu:
        return []
    saving = time = cache_total = 0.0
    acts, items = defaultdict(list), []
    for pos, a, groups in groups_of(ctx):
        dims_of = op_column(a.trace.ops, "dims")
        types_of = op_column(a.trace.ops, "types")
        for g in groups.itertuples():
            if g.category != "attention" or g.bound != "memory" or pd.isna(g.bytes) or not g.bytes:
                continue
            rows = rows_of(a, g.Index)
            op = int(a.activities["op"].to_numpy()[rows[0]])
            if op < 0:
                continue
            dims, types = dims_of[op], types_of[op]
            if not isinstance(dims, list) or len(dims) < 3 or not isinstance(types, list) or len(types) < 2:
                continue
            elem = dtype_bytes(types[1])
            kv = cache_bytes(dims[0], dims[1], dims[2], elem) if elem else None
            if kv is None:
                continue
            per_call = g.bytes / g.count
            kv = min(kv, per_call)
            s = g.total_us * (kv - kv / elem) / per_call  # 8-bit cache: one byte per element
            saving += s
            time += g.total_us
            cache_total += kv * g.count
            acts[pos].extend(rows.tolist())
            items.append((g, kv, per_call, elem))
    saving /= ctx.ranks
    if not items or not ctx.worth_reporting(saving):
        return []
    items.sort(key=lambda t: -t[0].total_us)
    g, kv, per_call, elem = items[0]
    evidence = [
        f"{len(items)} decode attention groups (≤{MAX_QUERY_LEN} query rows over a cache ≥{MIN_CACHE_RATIO}× "
        f"longer), memory-bound, take {fmt_time(time / ctx.ranks)}",
        f"e.g. {g.op_name} {g.shapes}: K+V {fmt_bytes(kv)} of {fmt_bytes(per_call)} per call; "
        f"an 8-bit cache reads {fmt_bytes(kv / elem)}",
        f"at today's bandwidth an 8-bit KV cache saves {ctx.per_step(saving)}",
    ]
    fix = ("# vLLM: LLM(model=..., kv_cache_dtype=\"fp8\")\n"
           "# Hugging Face transformers: an 8-bit quantized cache at generation time\n"
           "out = model.generate(**inputs, cache_implementation=\"quantized\",\n"
           "                     cache_config={\"backend\": \"quanto\", \"nbits\": 8})")
    return [ctx.finding(FindingKind.QUANTIZATION, "Store the KV cache in 8 bits: decode attention reads it all",
                        saving, evidence, fix, acts=acts)]
