"""Bytes (and, where they mean something, FLOPs) of the memory-bound op families.

Every formula counts the minimum DRAM traffic: each input element read once, each output element
written once, in its own dtype. An input read whole counts its distinct elements
(``OpArgs.read_shape``: stride-0 dimensions of an expanded tensor count once). 0-dim tensor inputs and Scalars count 0 bytes (broadcast scalars
live in registers / kernel arguments); a 0-dim output counts one element.

FLOP conventions, where given: elementwise ops count 1 FLOP per output element; reductions 1 FLOP
per input element; pure data movement (copy, cast, index, fill, cat) 0 FLOPs. Norms, softmax and
optimizer steps leave FLOPs ``None`` (not modelled; they are memory-bound).
"""

from __future__ import annotations

import re

from .args import OpArgs
from .dtypes import bwdiag_dtype, dtype_bytes, promote, type_from_code
from .model import Category, Cost, unknown
from .shapes import Shape, ShapeError, broadcast, numel, pool_output_shape, reduced_shape

_COMPARISONS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "logical_and", "logical_or", "logical_xor", "logical_not", "signbit", "isclose", "isin",
})
_NO_FLOP_ELEMENTWISE = frozenset({
    "where", "masked_fill", "masked_fill_", "fill_", "zero_", "copy_", "clone", "contiguous",
    "_to_copy", "to", "alias", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
    "new_zeros", "new_ones", "new_full", "empty", "empty_like", "empty_strided",
})


class Traffic:
    """Accumulates bytes read and written; ``unknown`` stays set once any part is unknown."""

    def __init__(self) -> None:
        self.bytes = 0
        self.missing: str | None = None

    def add(self, shape: Shape | None, elem: int | None, what: str = "tensor") -> None:
        if shape is None or elem is None:
            self.missing = self.missing or f"{what}: shape or element type unknown"
            return
        self.bytes += numel(shape) * elem

    def cost(self, flops: float | None, dtype: str | None, category: Category, note: str | None = None) -> Cost:
        if self.missing:
            return Cost(flops, None, dtype, category, False, self.missing)
        return Cost(flops, float(self.bytes), dtype, category, False, note)


def _op(a: OpArgs) -> str:
    return a.name.split("::", 1)[1] if "::" in a.name else a.name


def _inputs(a: OpArgs) -> list[int]:
    outs = set(a.out_indices())
    return [i for i in a.tensor_indices() if i not in outs]


# --- elementwise ---------------------------------------------------------------------------------

def elementwise(a: OpArgs, category: Category = Category.ELEMENTWISE) -> Cost:
    """Unary/binary/ternary pointwise ops, in-place (``add_``) and ``.out`` variants.

    Output shape = broadcast of the tensor inputs; in-place ops write into the first input (which
    they also read). Comparisons write bool.
    """
    op = _op(a)
    base = op.rstrip("_") if not op.startswith("_") else op.lstrip("_").rstrip("_")
    outs = a.out_indices()
    ins = _inputs(a)
    if not ins and not outs:
        raise ShapeError(f"{a.name}: no tensor arguments")
    shapes = [a.shape(i) for i in ins]
    in_place = op.endswith("_") and not op.endswith("__")
    if outs:
        out_shape = a.shape(outs[0])
        out_type = a.type(outs[0])
        if out_shape is None:
            raise ShapeError("out= tensor shape")
        if ins:
            bshape = broadcast(*shapes)
            if numel(out_shape) == 0 or len(out_shape) < len(bshape):
                out_shape = bshape  # out= tensors are often recorded before resize
    elif in_place:
        out_shape, out_type = shapes[0], a.type(ins[0])
        broadcast(*shapes)  # validates
    else:
        out_shape = broadcast(*shapes)
        dimensioned = [a.type(i) for i in ins if a.shape(i)]
        zero_dim = [a.type(i) for i in ins if not a.shape(i)] + \
                   ["double" for i in range(len(a)) if a.type(i) == "Scalar" and isinstance(a.value(i), float)]
        out_type = "bool" if base in _COMPARISONS else promote(dimensioned, zero_dim)
        if op in ("div", "true_divide") and out_type in ("long int", "int", "short int", "signed char",
                                                         "unsigned char", "bool") \
                and a.value("rounding_mode") is None:
            out_type = "float"
    t = Traffic()
    for i in ins:
        if a.shape(i):  # 0-dim inputs: broadcast scalars, 0 bytes
            t.add(a.read_shape(i), a.elem(i))
    t.add(out_shape, dtype_bytes(out_type), "output")
    flops = 0.0 if op.rstrip("_") in _NO_FLOP_ELEMENTWISE or op in _NO_FLOP_ELEMENTWISE else float(numel(out_shape))
    compute_type = a.type(ins[0]) if ins else out_type
    return t.cost(flops, bwdiag_dtype(compute_type), category,
                  "1 FLOP per output element" if flops else None)


def fill(a: OpArgs) -> Cost:
    """fill_/zero_/normal_/uniform_/... in place: write the tensor, read nothing."""
    s = a.shape(0)
    if s is None:
        raise ShapeError("fill target shape")
    cat = Category.RANDOM if _op(a).rstrip("_") in ("normal", "uniform", "bernoulli", "random",
                                                     "exponential", "cauchy", "log_normal", "geometric") \
        else Category.ELEMENTWISE
    t = Traffic()
    if _op(a) == "bernoulli_" and a.shape(1):  # bernoulli_(self, p: Tensor)
        t.add(a.shape(1), a.elem(1))
    t.add(s, a.elem(0))
    return t.cost(0.0, bwdiag_dtype(a.type(0)), cat)


def factory(a: OpArgs) -> Cost:
    """zeros/ones/full/arange/linspace...: write the new tensor (size from Concrete Inputs)."""
    op = _op(a)
    outs = a.out_indices()
    if op in ("empty", "empty_like", "empty_strided"):
        return Cost(0.0, 0.0, None, Category.ELEMENTWISE, False, "allocation only")
    if op in ("arange", "linspace", "logspace"):
        out_type = a.type(outs[0]) if outs else (type_from_code(a.value("dtype")) or "long int")
        if op == "arange":
            start, end, step = a.value("start", 0), a.value("end"), a.value("step", 1)
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)) or step == 0:
                raise ShapeError("arange bounds not recorded")
            import math
            n = max(0, math.ceil((end - start) / step))
        else:
            n = a.value("steps")
            if not isinstance(n, int):
                raise ShapeError("steps not recorded")
        t = Traffic()
        t.add((n,), dtype_bytes(out_type), "output")
        return t.cost(0.0, bwdiag_dtype(out_type), Category.ELEMENTWISE)
    if op.endswith("_like") or op.startswith("new_"):
        src = a.shape(0)
        size = src if op.endswith("_like") else a.value("size")
        out_type = type_from_code(a.value("dtype")) or a.type(0)
    else:
        size = a.value("size")
        out_type = type_from_code(a.value("dtype")) or (a.type(outs[0]) if outs else "float")
    if not isinstance(size, (list, tuple)) or not all(isinstance(d, int) and d >= 0 for d in size):
        raise ShapeError("factory size not recorded")
    t = Traffic()
    t.add(tuple(size), dtype_bytes(out_type), "output")
    return t.cost(0.0, bwdiag_dtype(out_type), Category.ELEMENTWISE)


# --- copies and casts ---------------------------------------------------------------------------

def copy(a: OpArgs) -> Cost:
    """copy_(dst, src), clone, contiguous, _to_copy, to: read src in its dtype, write dst in its own.

    A dtype change makes it a CAST.
    """
    op = _op(a)
    if op in ("copy_", "_copy_from", "copy"):
        dst, src = a.shape(0), a.shape(1)
        dst_t, src_t = a.type(0), a.type(1)
        if dst is None or src is None:
            raise ShapeError("copy shapes")
        broadcast(dst, src)
        # in aten::copy_ self is the destination; _copy_from(self=src, dst)
        src_i = 1
        if op == "_copy_from":
            dst, src, dst_t, src_t = src, dst, src_t, dst_t
            src_i = 0
    else:
        src, src_t, src_i = a.shape(0), a.type(0), 0
        if src is None:
            raise ShapeError("copy source shape")
        dst = src
        dst_t = src_t
        code = a.value("dtype")
        if type_from_code(code):
            dst_t = type_from_code(code)
        elif op == "to" and a.shape(1) is not None and a.index("other") == 1:
            dst_t = a.type(1)
        outs = a.out_indices()
        if outs and a.shape(outs[0]) is not None:
            dst_t = a.type(outs[0])
        if op == "to" and _returns_self(a, src_t, dst_t):
            return Traffic().cost(0.0, bwdiag_dtype(dst_t), Category.COPY)
    t = Traffic()
    t.add(a.read_shape(src_i), dtype_bytes(src_t), "source")  # an expanded source: distinct elements
    t.add(dst, dtype_bytes(dst_t), "destination")
    cast = dtype_bytes(src_t) is not None and src_t != dst_t
    cat = Category.CAST if cast else Category.COPY
    return t.cost(0.0, bwdiag_dtype(dst_t), cat)


def _returns_self(a: OpArgs, src_t, dst_t) -> bool:
    """``tensor.to(dtype)`` to the dtype it already has, with no device, memory format or ``copy=True``,
    returns the tensor itself: no bytes move (only when the trace records the arguments' values; a
    real conversion runs ``aten::_to_copy`` under it). Seen on a CPU GPT-2 step: 33.6 MB "moved" in
    6 µs by ``aten::to`` of a float tensor to float."""
    if src_t is None or src_t != dst_t or a.value("dtype") is None or a.value("copy") is not False:
        return False  # the target dtype or the copy flag not recorded (no Concrete Inputs): a copy, as before
    return a.value("device") in (None, "") and a.value("memory_format") in (None, "")


#: Ops that hand a whole tensor to one ``cudaMemcpy``/``hipMemcpy`` (same dtype, same size) or
#: fill it with one ``cudaMemset``/``hipMemset`` (a constant byte pattern).
MEMCPY_OPS = frozenset({"copy_", "_copy_from", "copy", "clone", "contiguous", "_to_copy", "to"})
MEMSET_OPS = frozenset({"fill_", "zero_"})


def transfer_payload(a: OpArgs, kind: str) -> tuple[float, str] | tuple[None, str]:
    """Bytes a ``gpu_memcpy`` (``kind="memcpy"``) or ``gpu_memset`` (``"memset"``) event moves,
    from the op that launched it, for traces that do not record ``bytes`` on the event (ROCm).

    memcpy under a copy op (``copy_(self=dst, src)``, ``_copy_from(self=src, dst)``, ``clone``,
    ``contiguous``, ``_to_copy``, ``to``): numel × element size of the source. A memcpy casts
    nothing, so source and destination must agree in dtype and element count; a casting or
    broadcasting copy moves a temporary of unknown dtype and stays unknown. memset under
    ``fill_``/``zero_``: numel × element size of ``self``, the tensor written. Returns
    ``(bytes, basis)`` or ``(None, why not)``.
    """
    op = _op(a)
    if kind == "memset":
        if op not in MEMSET_OPS:
            return None, f"memset under {a.name}: its size is not an argument's"
        s = a.shape(0)
        e = a.elem(0)
        if s is None or e is None:
            return None, f"{a.name}: target shape or dtype not recorded"
        return float(numel(s) * e), f"{a.name} target {a.type(0)}{list(s)}"
    if op not in MEMCPY_OPS:
        return None, f"memcpy under {a.name}: not a copy op"
    if op in ("copy_", "copy"):
        src, dst = 1, 0
    elif op == "_copy_from":
        src, dst = 0, 1
    else:
        src, dst = 0, None
    s, e = a.shape(src), a.elem(src)
    if s is None or e is None:
        return None, f"{a.name}: source shape or dtype not recorded"
    if dst is not None:
        d = a.shape(dst)
        if d is None or a.type(dst) != a.type(src) or numel(d) != numel(s):
            return None, f"{a.name}: casting or broadcasting copy (the memcpy moves a temporary)"
    elif type_from_code(a.value("dtype")) not in (None, a.type(src)):
        return None, f"{a.name}: casting copy (the memcpy moves a temporary)"
    return float(numel(s) * e), f"{a.name} source {a.type(src)}{list(s)}"


def concat(a: OpArgs) -> Cost:
    """cat/stack(tensors, dim): read every input, write their sum. The element type of a TensorList
    is not recorded: it comes from the kernel name when the caller passes one."""
    shapes = a.list_shapes(0)
    if shapes is None:
        return unknown(Category.COPY, "TensorList shapes not recorded")
    total = sum(numel(s) for s in shapes)
    elem = dtype_bytes(a.kernel_type) if a.kernel_type else a.kernel_elem
    if elem is None:
        return Cost(0.0, None, None, Category.COPY, False,
                    "TensorList element type not recorded (pass kernel_name)")
    return Cost(0.0, float(2 * total * elem), bwdiag_dtype(a.kernel_type), Category.COPY, False, None)


# --- reductions ---------------------------------------------------------------------------------

_INDEX_OUTPUT = frozenset({"argmax", "argmin"})
_VALUE_AND_INDEX = frozenset({"max", "min", "kthvalue", "mode", "median", "nanmedian", "cummax", "cummin"})
_SCANS = frozenset({"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "cumsum_"})
_TWO_OUTPUTS = frozenset({"var_mean", "std_mean", "aminmax"})


def reduction(a: OpArgs) -> Cost:
    """sum/mean/amax/max/norm/var/all/any/argmax/cumsum...: read the input, write the reduced output."""
    op = _op(a).rstrip("_")
    x = a.shape(0)
    if x is None:
        raise ShapeError("reduction input")
    in_elem = a.elem(0)
    keepdim = a.value("keepdim", False)
    if op in _SCANS:
        out = x
    else:
        dim_i = a.index("dim")
        if dim_i is None and a.names() is None:
            return _reduction_lower_bound(a, f"reduction dims of {a.name} not recorded (arguments match no schema)")
        if dim_i is not None and not a.concrete:
            # older Kineto records neither the dim list ("" type) nor Concrete Inputs
            return _reduction_lower_bound(a, "reduction dims not recorded (no Concrete Inputs)")
        dims = a.value("dim") if dim_i is not None else None
        out = reduced_shape(x, dims, bool(keepdim))
    out_type = type_from_code(a.value("dtype")) or a.type(0)
    if op in ("all", "any"):
        out_type = "bool"
    t = Traffic()
    t.add(a.read_shape(0), in_elem, "input")
    for i in _inputs(a)[1:]:  # losses read the target too
        if a.shape(i):
            t.add(a.read_shape(i), a.elem(i), "input")
    if op in _INDEX_OUTPUT:
        t.add(out, 8, "indices")
    else:
        t.add(out, dtype_bytes(out_type), "output")
        if op in _VALUE_AND_INDEX and a.index("dim") is not None:
            t.add(out, 8, "indices")
        if op in _TWO_OUTPUTS:
            t.add(out, dtype_bytes(out_type), "output")
    return t.cost(float(numel(x)), bwdiag_dtype(a.type(0)), Category.REDUCTION, "1 FLOP per input element")


#: Start of ``Cost.note`` for estimates that count only part of the traffic (the true bytes are at
#: least this much). Every such note starts with it, so a reader can tell bounds from estimates.
LOWER_BOUND = "lower bound"


def _reduction_lower_bound(a: OpArgs, why: str) -> Cost:
    """A reduction whose reduced dims are not recorded: the output size is unknown (one element
    for a reduction over everything, up to the input's size over one dim of extent 1), but every
    input element is read once and costs 1 FLOP whatever the dims. Bytes = the tensor inputs read
    (the input, a loss's target), the output not counted: a lower bound, labelled as one."""
    t = Traffic()
    t.add(a.shape(0), a.elem(0), "input")
    for i in _inputs(a)[1:]:
        if a.shape(i):
            t.add(a.shape(i), a.elem(i), "input")
    x = a.shape(0)
    return t.cost(float(numel(x)) if x is not None else None, bwdiag_dtype(a.type(0)), Category.REDUCTION,
                  f"{LOWER_BOUND}: input read, output not counted ({why}); 1 FLOP per input element")


def pool(a: OpArgs) -> Cost:
    """max/avg pooling forward (read input, write output [+ int64 indices]) and backward."""
    op = _op(a)
    if op.startswith("max_pool") and op.endswith("_with_indices_backward"):
        g, x = a.shape(0), a.shape(1)
        idx = a.shape(a.index("indices"))
        if g is None or x is None or idx is None:
            raise ShapeError("pool backward shapes")
        t = Traffic()
        t.add(g, a.elem(0))
        t.add(idx, 8)
        t.add(x, a.elem(0), "grad_input")
        return t.cost(None, bwdiag_dtype(a.type(0)), Category.REDUCTION)
    if op.startswith("_adaptive_avg_pool") or op.startswith("adaptive_avg_pool") or op.startswith("adaptive_max_pool"):
        x = a.shape(0)
        size = a.value("output_size")
        if x is None or not isinstance(size, list) or not all(isinstance(v, int) for v in size):
            raise ShapeError("adaptive pool")
        out = (*x[: len(x) - len(size)], *size)
        t = Traffic()
        t.add(x, a.elem(0))
        t.add(out, a.elem(0), "output")
        if op.startswith("adaptive_max_pool"):
            t.add(out, 8, "indices")
        return t.cost(float(numel(x)), bwdiag_dtype(a.type(0)), Category.REDUCTION, "1 FLOP per input element")
    if op.endswith("_backward"):
        g, x = a.shape(0), a.shape(1)
        if g is None or x is None:
            raise ShapeError("pool backward shapes")
        t = Traffic()
        t.add(g, a.elem(0))
        t.add(x, a.elem(0), "grad_input")
        return t.cost(None, bwdiag_dtype(a.type(0)), Category.REDUCTION)
    x = a.shape(0)
    if x is None or not a.concrete:
        raise ShapeError("pool input / parameters not recorded")
    out = pool_output_shape(x, a.value("kernel_size"), a.value("stride"), a.value("padding", 0),
                            a.value("dilation", 1), bool(a.value("ceil_mode", False)))
    t = Traffic()
    t.add(x, a.elem(0))
    t.add(out, a.elem(0), "output")
    if "with_indices" in op:
        t.add(out, 8, "indices")
    return t.cost(float(numel(x)), bwdiag_dtype(a.type(0)), Category.REDUCTION, "1 FLOP per input element")


#: Inductor's pointwise kernels fused onto an extern kernel's result whose bias inductor peeled off:
#: ``addmm`` (``unfuse_bias_add_to_pointwise``: mm on cuBLAS, bias add + activation in Triton) and
#: ``convolution`` (bias peeled off the cuDNN call on GPU). Their fused-op list names the op.
_TRITON_EPILOGUE = re.compile(r"^triton_poi_fused_(?:.*_)?(addmm|convolution)(?:_.*)?_\d+$")


def triton_kernel_op(a: OpArgs, category: Category) -> Cost:
    """A Triton kernel recorded as an op (torch.compile with record_shapes): its arguments are the
    kernel's buffers. Inputs and outputs are not distinguished, so every tensor argument counts as
    touched once: a lower bound, since a buffer the kernel updates in place is read and written.

    GEMM/conv epilogues are the exception where the in-place buffer is known: a pointwise kernel
    named ``triton_poi_fused_…addmm…`` or ``…convolution…`` adds the bias (and activation) to the
    extern GEMM/conv output, a temporary with no other user, so inductor passes it as
    ``in_out_ptr0`` — in-place buffers come first in inductor's argument list — and the kernel reads
    and writes it. The first tensor argument then counts twice (read + write) when its size is the
    kernel's ``xnumel`` (the first integer after the buffers; checked when recorded), the others once.
    """
    t = Traffic()
    tensors = [i for i in a.tensor_indices() if a.shape(i)]
    if not tensors:
        raise ShapeError("no tensor arguments")
    for i in tensors:
        t.add(a.shape(i), a.elem(i))
    dtype = bwdiag_dtype(a.type(a.tensor_indices()[0]))
    m = _TRITON_EPILOGUE.match(a.name)
    first = a.shape(tensors[0])
    if m and first is not None and tensors[0] == 0 and _xnumel(a, tensors) in (None, numel(first)):
        t.add(first, a.elem(0), "in-place output")
        return t.cost(None, dtype, category,
                      f"Triton {m.group(1)} epilogue: first buffer (the extern {m.group(1)} output, "
                      "in_out_ptr0) read and written, other tensor arguments counted once")
    return t.cost(None, dtype, category,
                  f"{LOWER_BOUND}: Triton kernel, each tensor argument counted once "
                  "(inputs/outputs not distinguished; in-place buffers are read and written)")


def _xnumel(a: OpArgs, tensors: list[int]) -> int | None:
    """The first integer argument after a Triton kernel's buffers (``xnumel``), if recorded."""
    for i in range(tensors[-1] + 1, len(a)):
        v = a.value(i)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None
