"""Convolution shapes that an op's own args lack, found elsewhere in the trace.

Two rules, for every convolution op name (``costs.conv.CONV_SPECS``):

* A backward op that records only part of the shapes takes the rest from the enclosing backward op.
  PyTorch 1.x's ``cudnn_convolution_backward_weight(weight_size, grad_output, self, ...)`` records
  the weight as an int list (only ``Concrete Inputs``, which 1.x traces lack, holds it), and
  ``..._backward_input(self_size, grad_output, weight, ...)`` the input likewise; the enclosing
  ``cudnn_convolution_backward(self, grad_output, weight, ...)`` records all three tensors.
* A forward convolution without stride/padding takes its output shape from the grad_output of a
  backward op on the same input and weight shapes (the same layer's backward). Layers with equal
  input and weight shapes but different strides would disagree: then nothing is taken.
"""

from __future__ import annotations

import pandas as pd

from .args import OpArgs
from .conv import CONV_SPECS, _Args, backward, forward
from .model import Cost
from .shapes import Shape, ShapeError

_ERRORS = (ShapeError, ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, OverflowError)
_BACKWARD_KINDS = frozenset({"backward", "dgrad", "wgrad"})
_BACKWARD_NAMES = frozenset(n for n, s in CONV_SPECS.items() if s.kind in _BACKWARD_KINDS)
_PARENT_DEPTH = 3  # autograd node -> ..._backward -> ..._backward_input / _weight


def _op_args(ops: pd.DataFrame, idx) -> OpArgs:
    row = ops.loc[idx]
    return OpArgs.build(row["name"], row["dims"], row["types"], row["concrete"], row["strides"])


def _shapes(a: OpArgs) -> tuple[Shape | None, Shape | None, Shape | None]:
    """(input, weight, grad_output) shapes an op records as tensors."""
    r = _Args(a)
    return r.shape("input", "self"), r.shape("weight"), r.shape("grad_output")


def complete_conv_costs(ops: pd.DataFrame, costs: dict[int, Cost]) -> dict[int, Cost]:
    """``costs`` (op label -> Cost) with convolution costs whose FLOPs or bytes are unknown completed
    from the trace, where the rules above give the missing shape; other entries are returned as they are."""
    missing = [i for i, c in costs.items()
               if (c.flops is None or c.bytes is None) and ops.at[i, "name"] in CONV_SPECS]
    if not missing:
        return costs
    out = dict(costs)
    by_layer: dict[tuple[Shape, Shape], set[Shape]] | None = None
    for idx in missing:
        a = _op_args(ops, idx)
        spec = CONV_SPECS[a.name]
        try:
            if spec.kind in _BACKWARD_KINDS:
                x, w = _from_parent(ops, idx)
                if x is None and w is None:
                    continue
                cost = backward(a, spec, x=x, w=w)
            elif spec.kind == "forward":
                x, w, _ = _shapes(a)
                if x is None or w is None:
                    continue
                if by_layer is None:
                    by_layer = _grad_output_by_layer(ops)
                outs = by_layer.get((x, w), set())
                if len(outs) != 1:
                    continue
                cost = forward(a, spec, out=next(iter(outs)))
            else:
                continue
        except _ERRORS:
            continue
        before = out[idx]
        if cost.flops is not None and (before.flops is None or cost.bytes is not None):
            note = "shapes completed from the same layer's backward op"
            out[idx] = Cost(cost.flops, cost.bytes, cost.dtype, cost.category, cost.tensor,
                            f"{cost.note}; {note}" if cost.note else note)
    return out


def _from_parent(ops: pd.DataFrame, idx) -> tuple[Shape | None, Shape | None]:
    """Input and weight shapes of the nearest enclosing convolution backward op that records them."""
    parent = ops.at[idx, "parent"]
    for _ in range(_PARENT_DEPTH):
        if parent is None or parent < 0 or parent not in ops.index:
            return None, None
        if ops.at[parent, "name"] in _BACKWARD_NAMES:
            x, w, _ = _shapes(_op_args(ops, parent))
            if x is not None or w is not None:
                return x, w
        parent = ops.at[parent, "parent"]
    return None, None


def _grad_output_by_layer(ops: pd.DataFrame) -> dict[tuple[Shape, Shape], set[Shape]]:
    """(input shape, weight shape) -> the grad_output shapes of backward ops on them."""
    found: dict[tuple[Shape, Shape], set[Shape]] = {}
    for idx in ops.index[ops["name"].isin(_BACKWARD_NAMES)]:
        x, w, g = _shapes(_op_args(ops, idx))
        if x is not None and w is not None and g is not None:
            found.setdefault((x, w), set()).add(g)
    return found
