"""Bytes of common non-aten inference ops (vLLM ``_C::`` kernels, symmetric-memory all-reduce)."""

from __future__ import annotations

from .args import OpArgs
from .dtypes import bwdiag_dtype
from .memory import Traffic
from .model import Category, Cost
from .shapes import ShapeError, numel


def fused_add_rms_norm(a: OpArgs) -> Cost:
    """``_C::fused_add_rms_norm(input, residual, weight, eps)``: read input, residual, weight;
    write the new residual (input + residual) and the normalized input, both in place."""
    x, r, w = a.shape(0), a.shape(1), a.shape(2)
    if x is None or r is None or w is None:
        raise ShapeError("fused_add_rms_norm shapes")
    t = Traffic()
    t.add(x, a.elem(0)); t.add(r, a.elem(1)); t.add(w, a.elem(2))
    t.add(x, a.elem(0), "normalized"); t.add(r, a.elem(1), "residual")
    return t.cost(None, bwdiag_dtype(a.type(0)), Category.NORM)


def rms_norm_out(a: OpArgs) -> Cost:
    """``_C::rms_norm(out, input, weight, eps)``: read input and weight, write out."""
    out, x, w = a.shape(0), a.shape(1), a.shape(2)
    if out is None or x is None or w is None:
        raise ShapeError("rms_norm shapes")
    t = Traffic()
    t.add(x, a.elem(1)); t.add(w, a.elem(2)); t.add(out, a.elem(0), "output")
    return t.cost(None, bwdiag_dtype(a.type(1)), Category.NORM)


def rotary_embedding(a: OpArgs) -> Cost:
    """``_C::rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)``:
    read positions, the cache rows for those positions, query and key; write query and key."""
    pos, q, k, cache = a.shape(0), a.shape(1), a.shape(2), a.shape(4)
    if pos is None or q is None or k is None or not cache or len(cache) != 2:
        raise ShapeError("rotary_embedding shapes")
    t = Traffic()
    t.add(pos, a.elem(0))
    t.add((numel(pos), cache[1]), a.elem(4), "cos/sin rows")
    t.add(q, a.elem(1)); t.add(k, a.elem(2))
    t.add(q, a.elem(1), "query out"); t.add(k, a.elem(2), "key out")
    return t.cost(None, bwdiag_dtype(a.type(1)), Category.ELEMENTWISE, "FLOPs not modelled")


def scaled_quant(a: OpArgs) -> Cost:
    """``_C::static_scaled_fp8_quant(out, input, scale)`` / dynamic variants: read input, write out."""
    out, x = a.shape(0), a.shape(1)
    if out is None or x is None:
        raise ShapeError("quant shapes")
    t = Traffic()
    t.add(x, a.elem(1)); t.add(out, a.elem(0), "output")
    for i in range(2, len(a)):
        if a.shape(i):
            t.add(a.shape(i), a.elem(i), "scale")
    return t.cost(float(numel(x)), bwdiag_dtype(a.type(0)), Category.CAST, "1 FLOP per element")


def reshape_and_cache(a: OpArgs) -> Cost:
    """``_C_cache_ops::reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, ...)``:
    read the new keys/values and slot mapping, write them into the caches in the cache's dtype."""
    k, v, kc, vc, slots = a.shape(0), a.shape(1), a.shape(2), a.shape(3), a.shape(4)
    if k is None or v is None or kc is None or vc is None or slots is None:
        raise ShapeError("reshape_and_cache shapes")
    t = Traffic()
    t.add(k, a.elem(0)); t.add(v, a.elem(1)); t.add(slots, a.elem(4))
    t.add(k, a.elem(2), "key cache"); t.add(v, a.elem(3), "value cache")
    return t.cost(0.0, bwdiag_dtype(a.type(2)), Category.INDEX)


def inplace_all_reduce(a: OpArgs) -> Cost:
    """``symm_mem::multimem_all_reduce_(input, reduce_op, group_name)`` and tensor-arg collectives:
    ``bytes`` is the message size (the tensor), not DRAM traffic."""
    x = a.shape(0)
    if x is None:
        raise ShapeError("all_reduce tensor")
    t = Traffic()
    t.add(x, a.elem(0), "message")
    return t.cost(None, bwdiag_dtype(a.type(0)), Category.COMMUNICATION, "bytes = message size")


CUSTOM = {
    "_C::fused_add_rms_norm": fused_add_rms_norm,
    "_C::rms_norm": rms_norm_out,
    "_C::rotary_embedding": rotary_embedding,
    "_C::static_scaled_fp8_quant": scaled_quant,
    "_C::dynamic_scaled_fp8_quant": scaled_quant,
    "_C::dynamic_per_token_scaled_fp8_quant": scaled_quant,
    "_C_cache_ops::reshape_and_cache_flash": reshape_and_cache,
    "_C_cache_ops::reshape_and_cache": reshape_and_cache,
    "symm_mem::multimem_all_reduce_": inplace_all_reduce,
    "symm_mem::one_shot_all_reduce": inplace_all_reduce,
    "symm_mem::two_shot_all_reduce_": inplace_all_reduce,
}
