"""KV-cache quantization on the decode sample trace, the saving worked out from the shapes."""

from __future__ import annotations

import re

import pytest

from bwdiag.pipeline import analyze
from tests.conftest import H100_QWEN, SAMPLE_TRACES, shared_trace


def test_no_8bit_kv_cache_on_cpu_eager_decode():
    """Issue 13: on CPU eager there is no attention kernel that reads an 8-bit cache; quantizing it
    and dequantizing before attention made the decode loop 1.6× slower. The decode groups are there
    (memory-bound SDPA over the cache: what the rule would act on) — the advice is not."""
    d = analyze([SAMPLE_TRACES / "decode_kv_cache_cpu"])
    assert d.source.trace_kind == "cpu"
    groups = [k for k in d.kernels if k.op == "aten::scaled_dot_product_attention" and k.bound == "memory"]
    assert len(groups) == 3
    for g in groups:
        # q f32[4, 4, 1, 32] over k, v f32[4, 4, L, 32]: K+V = 2·4·4·L·32·4 B, q and out 2·4·4·32·4 B
        length = int(re.search(r"f32\[4, 4, (\d+), 32\]", g.shapes.split("], ", 1)[1]).group(1))
        kv_bytes, other = 2 * 4 * 4 * length * 32 * 4, 2 * 4 * 4 * 1 * 32 * 4
        assert g.bytes == pytest.approx(g.count * (kv_bytes + other))
    assert not [f for f in d.findings if "KV cache" in f.title]


def test_prefill_attention_is_not_decode():
    d = analyze([shared_trace(H100_QWEN)])  # flash attention over 559 queries: no cache to shrink
    assert not [f for f in d.findings if "KV cache" in f.title]
