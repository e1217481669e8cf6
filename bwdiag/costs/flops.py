"""GEMM and attention costs: FLOPs from ``torch.utils.flop_counter``, bytes by hand; convolutions
are priced in ``costs.conv`` (one shape rule for every op name), which ``conv`` here calls.

FLOP formulas are torch's own (``flop_registry``), called with shapes only; bytes are the minimum
traffic (every input read once, every output written once).
"""

from __future__ import annotations

import math

from .args import OpArgs
from .dtypes import bwdiag_dtype, dtype_bytes, type_from_code
from .model import Category, Cost, unknown
from .conv import conv_cost
from .shapes import Shape, ShapeError, broadcast, numel


def _registry(op: str):
    from .torch_free import FLOP_FORMULAS  # the GEMM formulas, restated: no torch import

    if op in FLOP_FORMULAS:
        return FLOP_FORMULAS[op]
    import torch
    from torch.utils.flop_counter import flop_registry

    return flop_registry[getattr(torch.ops.aten, op)]


def _gemm_cost(flops: int, reads: list[tuple[Shape, int]], out: Shape, out_elem: int,
               type_str: str, note: str | None = None) -> Cost:
    total = sum(numel(s) * e for s, e in reads) + numel(out) * out_elem
    return Cost(float(flops), float(total), bwdiag_dtype(type_str), Category.GEMM, True, note)


def gemm(a: OpArgs) -> Cost:
    """mm, addmm, bmm, baddbmm, addbmm, _scaled_mm, linear, matmul, mv, addmv, dot."""
    op = a.name.split("::", 1)[1]
    t = a.type(0)
    if op in ("mm", "_int_mm"):
        x, w = a.shape(0), a.shape(1)
        if not (x and w and len(x) == 2 and len(w) == 2 and x[1] == w[0]):
            raise ShapeError(f"mm shapes {x} {w}")
        f = _registry("mm")(x, w, out_val=None)
        out_elem = 4 if op == "_int_mm" else a.elem(0)
        return _gemm_cost(f, [(x, a.elem(0)), (w, a.elem(1))], (x[0], w[1]), out_elem, t)
    if op in ("addmm", "_addmm_activation"):
        b, x, w = a.shape(0), a.shape(1), a.shape(2)
        if not (b is not None and x and w and len(x) == 2 and len(w) == 2 and x[1] == w[0]):
            raise ShapeError("addmm shapes")
        f = _registry("addmm")(b, x, w, out_val=None)
        return _gemm_cost(f, [(b, a.elem(0)), (x, a.elem(1)), (w, a.elem(2))], (x[0], w[1]), a.elem(1), a.type(1))
    if op == "bmm":
        x, w = a.shape(0), a.shape(1)
        if not (x and w and len(x) == 3 and len(w) == 3 and x[0] == w[0] and x[2] == w[1]):
            raise ShapeError("bmm shapes")
        f = _registry("bmm")(x, w, out_val=None)
        return _gemm_cost(f, [(x, a.elem(0)), (w, a.elem(1))], (x[0], x[1], w[2]), a.elem(0), t)
    if op in ("baddbmm", "addbmm"):
        b, x, w = a.shape(0), a.shape(1), a.shape(2)
        if not (b is not None and x and w and len(x) == 3 and len(w) == 3 and x[0] == w[0] and x[2] == w[1]):
            raise ShapeError("baddbmm shapes")
        f = _registry("baddbmm")(b, x, w, out_val=None)
        out = (x[0], x[1], w[2]) if op == "baddbmm" else (x[1], w[2])
        return _gemm_cost(f, [(b, a.elem(0)), (x, a.elem(1)), (w, a.elem(2))], out, a.elem(1), a.type(1))
    if op == "_scaled_mm":
        x, w = a.shape(0), a.shape(1)
        if not (x and w and len(x) == 2 and len(w) == 2 and x[1] == w[0]):
            raise ShapeError("_scaled_mm shapes")
        f = _registry("_scaled_mm")(x, w, a.shape(2) or (), a.shape(3) or (), out_val=None)
        out_type = type_from_code(a.value("out_dtype")) or t
        reads = [(x, a.elem(0)), (w, a.elem(1))]
        for i in (2, 3, a.index("bias")):
            s = a.shape(i)
            if s:  # row/column-wise scales and bias; 0-dim per-tensor scales count 0 bytes
                reads.append((s, a.elem(i)))
        return _gemm_cost(f, reads, (x[0], w[1]), dtype_bytes(out_type) or a.elem(0), t)
    if op == "linear":
        x, w, b = a.shape(0), a.shape(1), a.shape(2)
        if not (x and w and len(w) == 2 and x[-1] == w[1]):
            raise ShapeError("linear shapes")
        m = math.prod(x[:-1])
        f = _registry("mm")((m, w[1]), (w[1], w[0]), out_val=None)
        reads = [(x, a.elem(0)), (w, a.elem(1))] + ([(b, a.elem(2))] if b is not None else [])
        return _gemm_cost(f, reads, (*x[:-1], w[0]), a.elem(0), t)
    if op in ("matmul", "mv", "addmv", "dot", "vdot", "outer", "ger"):
        return _matmul_like(a, op)
    return unknown(Category.GEMM, f"no cost formula for {a.name}", bwdiag_dtype(t))


def _matmul_like(a: OpArgs, op: str) -> Cost:
    t = a.type(0)
    if op == "addmv":
        b, x, v = a.shape(0), a.shape(1), a.shape(2)
        if not (b is not None and x and v and len(x) == 2 and len(v) == 1 and x[1] == v[0]):
            raise ShapeError("addmv shapes")
        f = 2 * x[0] * x[1]
        return _gemm_cost(f, [(b, a.elem(0)), (x, a.elem(1)), (v, a.elem(2))], (x[0],), a.elem(1), a.type(1))
    x, y = a.shape(0), a.shape(1)
    if not x or not y:
        raise ShapeError(f"{op} shapes")
    if op in ("outer", "ger"):
        if len(x) != 1 or len(y) != 1:
            raise ShapeError("outer shapes")
        return _gemm_cost(x[0] * y[0], [(x, a.elem(0)), (y, a.elem(1))], (x[0], y[0]), a.elem(0), t)
    if len(x) == 1 and len(y) == 1:
        if x != y:
            raise ShapeError("dot shapes")
        return _gemm_cost(2 * x[0], [(x, a.elem(0)), (y, a.elem(1))], (), a.elem(0), t)
    xs = (1, x[0]) if len(x) == 1 else x
    ys = (y[0], 1) if len(y) == 1 else y
    if xs[-1] != ys[-2]:
        raise ShapeError("matmul inner dims")
    batch = broadcast(xs[:-2], ys[:-2])
    m, k, n = xs[-2], xs[-1], ys[-1]
    f = 2 * math.prod(batch) * m * n * k
    out = (*batch, *(() if len(x) == 1 else (m,)), *(() if len(y) == 1 else (n,)))
    return _gemm_cost(f, [(x, a.elem(0)), (y, a.elem(1))], out, a.elem(0), t)


# --- convolution --------------------------------------------------------------------------------

def conv(a: OpArgs) -> Cost:
    """Every convolution op name, forward and backward, PyTorch 1.x and 2.x: see ``costs.conv``."""
    return conv_cost(a)


# --- attention ----------------------------------------------------------------------------------

# op -> (layout, is_backward); "bshd" layouts are transposed to (B, H, S, D).
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": ("bhsd", False),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", False),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", False),
    "aten::_cudnn_attention_forward": ("bhsd", False),  # what SDPA's cuDNN kernels link to (torch >= 2.5)
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", False),
    "aten::scaled_dot_product_attention": ("bhsd", False),
    "aten::_scaled_dot_product_attention_math": ("bhsd", False),
    "aten::_flash_attention_forward": ("bshd", False),
    "aten::_efficient_attention_forward": ("bshd", False),
    "flash_attn::_flash_attn_forward": ("bshd", False),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", True),
    "aten::_cudnn_attention_backward": ("bhsd", True),
    "aten::_flash_attention_backward": ("bshd", True),
    "aten::_efficient_attention_backward": ("bshd", True),
    "flash_attn::_flash_attn_backward": ("bshd", True),
}

# flash_attn package ops have no torch schema: fixed positions of ``causal``.
_FLASH_ATTN_CAUSAL_INDEX = {"flash_attn::_flash_attn_forward": 5, "flash_attn::_flash_attn_backward": 11}


def _is_causal(a: OpArgs) -> bool | None:
    if a.name in _FLASH_ATTN_CAUSAL_INDEX:
        v = a.value(_FLASH_ATTN_CAUSAL_INDEX[a.name])
        return v if isinstance(v, bool) else None
    if a.index("is_causal") is not None:
        v = a.value("is_causal")
        return v if isinstance(v, bool) else None
    if a.index("custom_mask_type") is not None:  # efficient attention: 0 none, 1/2 causal
        v = a.value("custom_mask_type")
        return None if not isinstance(v, int) else v != 0
    return None


def attention(a: OpArgs) -> Cost:
    """SDPA and its flash / memory-efficient / cuDNN variants, forward and backward.

    ``is_causal=True`` halves the FLOPs (half the score matrix is masked and skipped; torch's
    ``flop_counter`` does not, bwdiag does for every attention op). Variable-length (cu_seqlens)
    calls are left without an estimate: per-sequence lengths are not recorded.

    Bytes are the minimum traffic: forward reads q, k, v and writes the output (+ the fp32
    logsumexp when it is kept for the backward); backward reads grad_out, q, k, v, out, logsumexp
    and writes dq, dk, dv. q/k/v count their distinct elements (a stride-0 ``expand`` of the KV
    heads, as in grouped-query attention, is read once).
    """
    spec = _ATTENTION.get(a.name)
    t = a.type(1 if spec and spec[1] else 0)
    if spec is None:
        return unknown(Category.ATTENTION, f"no cost formula for {a.name}", bwdiag_dtype(a.type(0)))
    layout, backward = spec
    qi = 1 if backward else 0
    q, k, v = a.shape(qi), a.shape(qi + 1), a.shape(qi + 2)
    if not (q and k and v):
        raise ShapeError("attention shapes")
    if len(q) == 3 and layout == "bshd":
        return unknown(Category.ATTENTION, "variable-length attention: per-sequence lengths not recorded",
                       bwdiag_dtype(t))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise ShapeError("attention expects 4-d q/k/v")

    def bhsd(s: Shape) -> Shape:
        return (s[0], s[2], s[1], s[3]) if layout == "bshd" else s

    qh, kh, vh = bhsd(q), bhsd(k), bhsd(v)
    out = (qh[0], qh[1], qh[2], vh[3])
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    try:
        f = sdpa_backward_flop_count(out, qh, kh, vh) if backward else sdpa_flop_count(qh, kh, vh)
    except AssertionError as err:
        raise ShapeError(str(err)) from err
    causal = _is_causal(a)
    note = None
    if causal:
        f = f / 2
        note = "causal: half the score matrix counted"
    elif causal is None:
        note = "causal flag not recorded: counted as full (non-causal) attention"
    e = dtype_bytes(t)
    if e is None:
        return Cost(float(f), None, None, Category.ATTENTION, True, f"unknown element type {t!r}")
    read_qkv = sum(numel(a.read_shape(i)) for i in (qi, qi + 1, qi + 2))
    qkv = numel(qh) + numel(kh) + numel(vh)
    if backward:
        # read grad_out, q, k, v, out, logsumexp; write dq, dk, dv (gradients are dense)
        total = (numel(out) * 2 + read_qkv + qkv) * e + _logsumexp_bytes(a, qh)
    else:
        total = (read_qkv + numel(out)) * e + _logsumexp_bytes(a, qh)
    return Cost(float(f), float(total), bwdiag_dtype(t), Category.ATTENTION, True, note)


def _logsumexp_bytes(a: OpArgs, q_bhsd: Shape) -> int:
    """Bytes of the per-row logsumexp an attention op writes (forward) or reads (backward).

    Backward: the recorded ``logsumexp`` argument. Forward: B·H·S_q fp32 values when the op keeps
    them — flash always does, cuDNN / memory-efficient ops when ``compute_log_sumexp`` is True.
    """
    li = a.index("logsumexp")
    if li is not None:
        s, el = a.shape(li), a.elem(li)
        return numel(s) * el if s and el else 0
    keep = a.value("compute_log_sumexp")
    if keep is True or (keep is None and "flash" in a.name and a.index("compute_log_sumexp") is None):
        return numel(q_bhsd[:3]) * 4
    return 0
