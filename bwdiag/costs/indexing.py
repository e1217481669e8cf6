"""Bytes of embedding lookups and gather/scatter/index ops: only the rows actually touched count."""

from __future__ import annotations

from .args import OpArgs
from .dtypes import bwdiag_dtype
from .memory import Traffic
from .model import Category, Cost, unknown
from .shapes import ShapeError, numel


def _dim(a: OpArgs, rank: int) -> int:
    d = a.value("dim", 0)
    if not isinstance(d, int) or isinstance(d, bool) or not -max(rank, 1) <= d < max(rank, 1):
        raise ShapeError(f"dim {d!r}")
    return d % max(rank, 1)


def embedding(a: OpArgs) -> Cost:
    op = a.name.split("::", 1)[1]
    t = Traffic()
    if op == "embedding":  # (weight, indices, ...)
        w, idx = a.shape(0), a.shape(1)
        if not w or idx is None or len(w) != 2:
            raise ShapeError("embedding shapes")
        rows = (*idx, w[1])
        t.add(a.read_shape(1), a.elem(1))
        t.add(rows, a.elem(0), "rows read")
        t.add(rows, a.elem(0), "output")
        return t.cost(0.0, bwdiag_dtype(a.type(0)), Category.EMBEDDING)
    if op in ("embedding_dense_backward", "embedding_backward"):  # (grad_output, indices, num_weights, ...)
        g, idx = a.shape(0), a.shape(1)
        nw = a.value("num_weights")
        if not g or idx is None or not isinstance(nw, int):
            raise ShapeError("embedding backward shapes / num_weights")
        t.add(a.read_shape(0), a.elem(0))
        t.add(a.read_shape(1), a.elem(1))
        t.add((nw, g[-1]), a.elem(0), "grad_weight")
        return t.cost(float(numel(g)), bwdiag_dtype(a.type(0)), Category.EMBEDDING, "1 FLOP per accumulated element")
    if op in ("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"):  # (weight, indices, offsets, ...)
        w, idx, off = a.shape(0), a.shape(1), a.shape(2)
        if not w or idx is None or off is None or len(w) != 2:
            raise ShapeError("embedding_bag shapes")
        t.add(a.read_shape(1), a.elem(1))
        t.add(a.read_shape(2), a.elem(2))
        t.add((*idx, w[1]), a.elem(0), "rows read")
        t.add((off[0], w[1]), a.elem(0), "bags")
        return t.cost(float(numel(idx) * w[1]), bwdiag_dtype(a.type(0)), Category.EMBEDDING,
                      "1 FLOP per pooled element")
    return unknown(Category.EMBEDDING, f"no cost formula for {a.name}", bwdiag_dtype(a.type(0)))


def index(a: OpArgs) -> Cost:
    """index_select, gather, scatter(_add/_reduce), index_add_/index_copy_/index_fill_."""
    op = a.name.split("::", 1)[1]
    base = op.rstrip("_")
    t = Traffic()
    dt = bwdiag_dtype(a.type(0))
    if base == "index_select":  # (self, dim, index)
        x, idx = a.shape(0), a.shape(2)
        if x is None or idx is None or len(idx) > 1:
            raise ShapeError("index_select shapes")
        d = _dim(a, len(x))
        out = tuple(numel(idx) if i == d else s for i, s in enumerate(x)) if x else ()
        t.add(a.read_shape(2), a.elem(2))  # an expanded index: distinct elements
        t.add(out, a.elem(0), "rows read")
        t.add(out, a.elem(0), "output")
        return t.cost(0.0, dt, Category.INDEX)
    if base == "gather":  # (self, dim, index, sparse_grad[, out])
        x, idx = a.shape(0), a.shape(2)
        if x is None or idx is None:
            raise ShapeError("gather shapes")
        _dim(a, len(x))
        t.add(a.read_shape(2), a.elem(2))  # an expanded index: distinct elements
        t.add(idx, a.elem(0), "elements read")
        t.add(idx, a.elem(0), "output")
        return t.cost(0.0, dt, Category.INDEX)
    if base in ("scatter", "scatter_add", "scatter_reduce"):  # (self, dim, index, src|value[, reduce])
        x, idx = a.shape(0), a.shape(2)
        if x is None or idx is None:
            raise ShapeError("scatter shapes")
        _dim(a, len(x))
        t.add(a.read_shape(2), a.elem(2))  # an expanded index: distinct elements
        if a.shape(3) is not None:
            t.add(idx, a.elem(3), "source elements")
        reduce_ = base != "scatter" or a.value("reduce") is not None
        if reduce_:
            t.add(idx, a.elem(0), "self elements read")
        t.add(idx, a.elem(0), "elements written")
        if not op.endswith("_"):  # out-of-place: copy self first
            t.add(x, a.elem(0), "self copy read")
            t.add(x, a.elem(0), "self copy written")
        return t.cost(float(numel(idx)) if reduce_ else 0.0, dt, Category.INDEX)
    if base in ("index_add", "index_copy", "index_fill", "index_reduce"):  # (self, dim, index, source|value)
        x, idx = a.shape(0), a.shape(2)
        if x is None or idx is None:
            raise ShapeError("index_* shapes")
        d = _dim(a, len(x))
        touched = tuple(numel(idx) if i == d else s for i, s in enumerate(x)) if x else ()
        t.add(a.read_shape(2), a.elem(2))  # an expanded index: distinct elements
        src = a.shape(3)
        if src is not None and src:
            t.add(a.read_shape(3), a.elem(3), "source")
        if base in ("index_add", "index_reduce"):
            t.add(touched, a.elem(0), "self rows read")
        t.add(touched, a.elem(0), "self rows written")
        if not op.endswith("_"):
            t.add(x, a.elem(0), "self copy read")
            t.add(x, a.elem(0), "self copy written")
        return t.cost(0.0, dt, Category.INDEX)
    return unknown(Category.INDEX, f"no cost formula for {a.name} (index shapes not recorded)", dt)
