"""Shape arithmetic on recorded ``Input Dims``: validation, broadcasting, conv/pool outputs."""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """Recorded shapes that do not fit the op (malformed, negative, inconsistent)."""


def as_shape(value: object) -> Shape | None:
    """A recorded dims entry as a tuple of non-negative ints, or None if it is not a flat shape."""
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for d in value:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            return None
        out.append(d)
    return tuple(out)


def numel(shape: Sequence[int]) -> int:
    """Number of elements (1 for a 0-dim tensor)."""
    return math.prod(shape)


def broadcast(*shapes: Sequence[int]) -> Shape:
    """NumPy/PyTorch broadcast of shapes; raises ShapeError when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size not in (1, d):
                        raise ShapeError(f"shapes {list(shapes)} do not broadcast")
                    size = d
        out.append(size)
    return tuple(out)


def expand_param(value: object, n: int, name: str) -> list[int]:
    """A conv/pool parameter (int or list) expanded to ``n`` spatial dims."""
    if isinstance(value, bool):
        raise ShapeError(f"{name}: bool")
    if isinstance(value, int):
        return [value] * n
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if len(value) == n:
            return list(value)
        if len(value) == 1:
            return list(value) * n
    raise ShapeError(f"{name}={value!r} does not fit {n} spatial dims")


def conv_output_shape(x: Shape, w: Shape, stride: object, padding: object, dilation: object,
                      transposed: bool = False, output_padding: object = 0, groups: int = 1) -> Shape:
    """Output shape ``(N, C_out, *spatial)`` of a convolution from its input and weight shapes.

    Non-transposed: ``out = (in + 2p - d(k-1) - 1) // s + 1`` and ``C_out = w[0]``.
    Transposed: ``out = (in-1)s - 2p + d(k-1) + output_padding + 1`` and ``C_out = w[1]*groups``.
    ``padding`` may be ``"same"``/``"valid"`` (conv with string padding).
    """
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"conv input {x} and weight {w} ranks do not fit")
    n = len(x) - 2
    k = w[2:]
    s = expand_param(stride, n, "stride")
    d = expand_param(dilation, n, "dilation")
    if padding == "same" and not transposed:
        spatial = list(x[2:])
    else:
        p = [0] * n if padding == "valid" else expand_param(padding, n, "padding")
        if transposed:
            op = expand_param(output_padding if output_padding is not None else 0, n, "output_padding")
            spatial = [(i - 1) * st - 2 * pa + dl * (kk - 1) + o + 1
                       for i, st, pa, dl, kk, o in zip(x[2:], s, p, d, k, op)]
        else:
            if any(st <= 0 for st in s):
                raise ShapeError("stride <= 0")
            spatial = [(i + 2 * pa - dl * (kk - 1) - 1) // st + 1 for i, st, pa, dl, kk in zip(x[2:], s, p, d, k)]
    if any(v <= 0 for v in spatial):
        raise ShapeError(f"conv output {spatial} not positive")
    c_out = w[1] * groups if transposed else w[0]
    return (x[0], c_out, *spatial)


def pool_output_shape(x: Shape, kernel: object, stride: object, padding: object, dilation: object,
                      ceil_mode: bool) -> Shape:
    """Output shape of max/avg pooling over the trailing ``len(kernel)`` dims (PyTorch's rule)."""
    kk = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
    n = len(kk) if len(kk) > 1 else len(x) - 2
    if n <= 0 or n > len(x):
        raise ShapeError("pool dims")
    k = expand_param(kernel, n, "kernel_size")
    s = expand_param(stride if stride not in (None, []) else k, n, "stride")
    p = expand_param(padding, n, "padding")
    d = expand_param(dilation if dilation is not None else 1, n, "dilation")
    out = []
    for i, kk_, st, pa, dl in zip(x[-n:], k, s, p, d):
        if st <= 0:
            raise ShapeError("stride <= 0")
        num = i + 2 * pa - dl * (kk_ - 1) - 1
        o = (num + (st - 1 if ceil_mode else 0)) // st + 1
        if ceil_mode and (o - 1) * st >= i + pa:
            o -= 1
        if o <= 0:
            raise ShapeError("pool output not positive")
        out.append(o)
    return (*x[:-n], *out)


def reduced_shape(x: Shape, dims: object, keepdim: bool) -> Shape:
    """Shape after reducing ``dims`` (None or [] = all dims) of ``x``."""
    if dims is None or dims == []:
        axes = set(range(len(x)))
    else:
        dl = [dims] if isinstance(dims, int) and not isinstance(dims, bool) else dims
        if not isinstance(dl, (list, tuple)) or not all(isinstance(v, int) for v in dl):
            raise ShapeError(f"dim={dims!r}")
        nd = max(len(x), 1)
        axes = set()
        for v in dl:
            if not -nd <= v < nd:
                raise ShapeError(f"dim {v} out of range for {x}")
            axes.add(v % nd)
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(x))
    return tuple(s for i, s in enumerate(x) if i not in axes)
