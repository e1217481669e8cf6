"""Bytes of normalization and softmax ops, forward and backward.

Forward: read x and the affine parameters, write y and the saved statistics. Backward: read the
incoming gradient, x and the saved statistics/weights, write the gradients the output mask asks
for. FLOPs are not modelled (``None``): these kernels are memory-bound.
"""

from __future__ import annotations

import math

from .args import OpArgs
from .dtypes import bwdiag_dtype, dtype_bytes, type_from_code
from .memory import Traffic
from .model import Category, Cost, unknown
from .shapes import ShapeError, numel

_STATS_ELEM = 4  # mean / rstd / invstd are kept in fp32 for half/bf16/fp32 inputs


def _read_all_inputs(a: OpArgs, t: Traffic, skip: set[int] = frozenset()) -> None:
    for i in a.tensor_indices():
        if i not in skip and a.shape(i):
            t.add(a.read_shape(i), a.elem(i))


def _mask(a: OpArgs, n: int) -> list[bool]:
    m = a.value("output_mask")
    if isinstance(m, list) and len(m) == n and all(isinstance(v, bool) for v in m):
        return m
    return [True] * n


def _stat_elem(a: OpArgs) -> int:
    e = a.elem(0)
    return 8 if e == 8 else _STATS_ELEM


def norm(a: OpArgs) -> Cost:
    op = a.name.split("::", 1)[1] if "::" in a.name else a.name
    x = a.shape(0)
    if x is None:
        raise ShapeError(f"{a.name}: input shape")
    dt = bwdiag_dtype(a.type(0))
    t = Traffic()
    e = a.elem(0)
    if op in ("native_layer_norm", "layer_norm"):
        ns = a.value("normalized_shape")
        if not isinstance(ns, list) or not ns or len(ns) > len(x):
            # the normalized shape is the trailing dims of the weight when present
            w = a.shape(a.index("weight")) if a.index("weight") is not None else None
            ns = list(w) if w else None
        if not ns:
            return unknown(Category.NORM, "layer_norm normalized_shape not recorded", dt)
        rows = numel(x) // max(1, math.prod(ns))
        _read_all_inputs(a, t)
        t.add(x, e, "output")
        if op == "native_layer_norm":
            t.add((rows,), _stat_elem(a), "mean")
            t.add((rows,), _stat_elem(a), "rstd")
        return t.cost(None, dt, Category.NORM)
    if op in ("native_layer_norm_backward",):
        m = _mask(a, 3)
        _read_all_inputs(a, t)
        if m[0]:
            t.add(x, e, "grad_input")
        for flag, name in ((m[1], "weight"), (m[2], "bias")):
            i = a.index(name)
            if flag and i is not None and a.shape(i) is not None:
                t.add(a.shape(i), a.elem(i), f"grad_{name}")
        return t.cost(None, dt, Category.NORM)
    if op in ("_fused_rms_norm", "rms_norm"):
        ns = a.value("normalized_shape")
        if not isinstance(ns, list) or not ns or len(ns) > len(x):
            return unknown(Category.NORM, "rms_norm normalized_shape not recorded", dt)
        rows = numel(x) // max(1, math.prod(ns))
        _read_all_inputs(a, t)
        t.add(x, e, "output")
        if op == "_fused_rms_norm":
            t.add((rows,), _stat_elem(a), "rstd")
        return t.cost(None, dt, Category.NORM)
    if op == "_fused_rms_norm_backward":
        m = _mask(a, 2)
        _read_all_inputs(a, t)
        if m[0]:
            t.add(x, e, "grad_input")
        i = a.index("weight")
        if m[1] and i is not None and a.shape(i) is not None:
            t.add(a.shape(i), a.elem(i), "grad_weight")
        return t.cost(None, dt, Category.NORM)
    if op in ("native_batch_norm", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm",
              "miopen_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
              "_batch_norm_with_update", "_batch_norm_no_update", "instance_norm"):
        if len(x) < 2:
            raise ShapeError("batch norm input rank")
        c = x[1]
        _read_all_inputs(a, t)
        t.add(x, e, "output")
        training = a.value("training", a.value("use_input_stats", True))
        if training:
            t.add((c,), _stat_elem(a), "save_mean")
            t.add((c,), _stat_elem(a), "save_invstd")
            for name in ("running_mean", "running_var"):  # updated in place
                i = a.index(name)
                if i is not None and a.shape(i):
                    t.add(a.shape(i), a.elem(i), name)
        return t.cost(None, dt, Category.NORM)
    if op in ("native_batch_norm_backward", "cudnn_batch_norm_backward", "miopen_batch_norm_backward",
              "batch_norm_backward"):
        m = _mask(a, 3)
        # cudnn/miopen put input first, grad_output second; shapes are equal either way
        _read_all_inputs(a, t)
        if m[0]:
            t.add(x, e, "grad_input")
        wi = a.index("weight")
        w = a.shape(wi) if wi is not None else None
        c = x[1] if len(x) > 1 else None
        for flag in (m[1], m[2]):
            if flag and c is not None:
                t.add((c,), a.elem(wi) if w is not None else e, "grad_param")
        return t.cost(None, dt, Category.NORM)
    if op == "native_group_norm":
        n, g = a.value("N"), a.value("group")
        if not isinstance(n, int) or not isinstance(g, int):
            return unknown(Category.NORM, "group_norm N/group not recorded", dt)
        _read_all_inputs(a, t)
        t.add(x, e, "output")
        t.add((n, g), e, "mean")
        t.add((n, g), e, "rstd")
        return t.cost(None, dt, Category.NORM)
    if op == "native_group_norm_backward":
        m = _mask(a, 3)
        _read_all_inputs(a, t)
        if m[0]:
            t.add(x, e, "grad_input")
        c = a.value("C")
        for flag in (m[1], m[2]):
            if flag:
                t.add((c,) if isinstance(c, int) else None, e, "grad_param")
        return t.cost(None, dt, Category.NORM)
    return unknown(Category.NORM, f"no cost formula for {a.name}", dt)


def softmax(a: OpArgs) -> Cost:
    """softmax/_softmax/log_softmax (read x, write y) and their backward (read grad, y; write grad)."""
    op = a.name.split("::", 1)[1] if "::" in a.name else a.name
    t = Traffic()
    if op.endswith("_backward_data") or op.endswith("_backward"):
        g, y = a.shape(0), a.shape(1)
        if g is None or y is None:
            raise ShapeError("softmax backward shapes")
        t.add(g, a.elem(0))
        t.add(y, a.elem(1))
        out_t = type_from_code(a.value("input_dtype")) or a.type(0)
        t.add(g, dtype_bytes(out_t), "grad_input")
        return t.cost(None, bwdiag_dtype(a.type(0)), Category.SOFTMAX)
    x = a.shape(0)
    if x is None:
        raise ShapeError("softmax input")
    out_t = a.type(0)
    if a.value("half_to_float") is True:
        out_t = "float"
    elif type_from_code(a.value("dtype")):
        out_t = type_from_code(a.value("dtype"))
    t.add(x, a.elem(0))
    t.add(x, dtype_bytes(out_t), "output")
    return t.cost(None, bwdiag_dtype(a.type(0)), Category.SOFTMAX)
