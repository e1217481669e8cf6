"""Bytes of multi-tensor ops: ``_foreach_*`` and the fused optimizers (``_fused_adam_`` ...).

TensorList arguments give shapes (nested lists) but no element type. The profiler records ``[]``
for a list of more than 30 tensors (seen on PyTorch 2.11 and 2.13; before 2.1 for every list),
which leaves the estimate unknown: an optimizer step over more than 30 parameters. The element
type comes from a tensor argument of the same op, or from the kernel name when the caller passes one.
"""

from __future__ import annotations

from .args import OpArgs
from .dtypes import bwdiag_dtype, dtype_bytes
from .model import Category, Cost, unknown
from .shapes import numel


#: The note of a list recorded ``[]``; ``diagnose.uncovered`` matches its first words.
_EMPTY_LIST = "TensorList shapes not recorded (the profiler records `[]` for a list of more than 30 tensors)"


#: The note of a list whose element type neither the op nor a kernel name gives (a CPU-only trace).
ASSUMED_FP32 = "TensorList element type not recorded: fp32 assumed (optimizer state and parameters usually are)"


def _list_elem(a: OpArgs) -> tuple[int, str | None, str | None]:
    """(bytes per element, type string, note) of an op's TensorLists: from the kernel name when the
    caller passes one; else fp32, said in the note — a CPU-only trace records no kernel, and leaving
    the op unknown hid its time behind the ``aten::item`` calls it makes (``_fused_adamw_``: 2.2–2.7 ms
    a step on a 3-layer MLP, missing from the kernel table)."""
    if a.kernel_type:
        return dtype_bytes(a.kernel_type), a.kernel_type, None
    if a.kernel_elem:
        return a.kernel_elem, None, None
    return 4, "float", ASSUMED_FP32


def foreach(a: OpArgs) -> Cost:
    """``_foreach_<op>[_]``: read every TensorList argument, write the first list's size
    (in place, or a new list); ``_foreach_norm`` writes one element per tensor."""
    lists = [i for i in range(len(a)) if a.type(i) == "TensorList"]
    if not lists:
        return unknown(Category.OPTIMIZER, f"{a.name}: no TensorList argument")
    shapes = [a.list_shapes(i) for i in lists]
    if any(s is None for s in shapes):
        return unknown(Category.OPTIMIZER, _EMPTY_LIST)
    elem, type_str, assumed = _list_elem(a)
    first = sum(numel(s) for s in shapes[0])
    read = sum(sum(numel(s) for s in lst) for lst in shapes)
    op = a.name.split("::", 1)[1]
    # a tensor (not list) operand, e.g. a 0-dim lr tensor, is read once per element at most: ignore
    write = len(shapes[0]) if op.rstrip("_") in ("_foreach_norm", "_foreach_max") else first
    return Cost(float(first), float((read + write) * elem), bwdiag_dtype(type_str), Category.OPTIMIZER,
                False, "1 FLOP per element of the first list" + (f"; {assumed}" if assumed else ""))


def fused_optimizer(a: OpArgs) -> Cost:
    """``_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, ...)``
    and ``_fused_adamw_`` / ``_fused_sgd_`` / ``_fused_adagrad_``: read all lists, write params and
    the optimizer state lists (all but grads and state_steps)."""
    lists = [i for i in range(len(a)) if a.type(i) == "TensorList"]
    shapes = [a.list_shapes(i) for i in lists]
    if not lists or shapes[0] is None:
        return unknown(Category.OPTIMIZER, _EMPTY_LIST)
    elem, type_str, assumed = _list_elem(a)
    names = [n for n, _ in (a.names() or ())]
    total = 0
    for i, lst in zip(lists, shapes):
        name = names[i] if i < len(names) else ""
        if lst is None:
            continue  # optional empty list (e.g. max_exp_avg_sqs without amsgrad)
        n = sum(numel(s) for s in lst)
        if name == "state_steps":
            total += len(lst) * 4 * 2  # fp32 step counters, read + written
            continue
        total += n * elem  # read
        if name not in ("grads",):
            total += n * elem  # written back
    return Cost(None, float(total), bwdiag_dtype(type_str), Category.OPTIMIZER, False,
                "FLOPs not modelled for fused optimizers" + (f"; {assumed}" if assumed else ""))
