"""One recorded op call: its dims, types, concrete values and strides, with argument lookup by name.

Kineto records every argument of the call (kwargs too) in schema order. For ``aten::`` ops the
argument names come from the op's schema in the installed torch (the overload whose argument count
and kinds fit the recording), so ``args.value("stride")`` works whatever the op's argument order
(``cudnn_convolution`` puts ``padding`` before ``stride``, ``convolution`` the other way round).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .concrete import parse_concrete
from .dtypes import dtype_bytes, is_tensor_type
from .shapes import Shape, as_shape

_SCHEMA_NAMESPACES = frozenset({"aten"})


@lru_cache(maxsize=2048)
def _overloads(name: str) -> tuple[tuple[tuple[str, str, bool], ...], ...]:
    """Per overload of ``ns::op``: ((arg name, arg type text, is_out), ...)."""
    from .torch_free import overloads  # tabled: no torch import (see torch_free)

    tabled = overloads(name)
    return tabled if tabled is not None else _torch_overloads(name)


def _torch_overloads(name: str) -> tuple[tuple[tuple[str, str, bool], ...], ...]:
    """:func:`_overloads` asked of the installed torch."""
    ns, sep, op = name.partition("::")
    if not sep or ns not in _SCHEMA_NAMESPACES or not op.isidentifier():
        return ()
    import torch

    try:
        packet = getattr(getattr(torch.ops, ns), op)
        names = packet.overloads()
    except (AttributeError, RuntimeError):
        return ()
    out = []
    for ov in names:
        try:
            schema = getattr(packet, ov)._schema
        except (AttributeError, RuntimeError):
            continue
        out.append(tuple((a.name, str(a.type), a.is_out) for a in schema.arguments))
    return tuple(out)


def _fits(recorded: str, schema_type: str) -> int:
    """How well a recorded Input type fits a schema argument type (higher is better, <0 no fit)."""
    is_list = schema_type.endswith("[]") or "List[" in schema_type
    tensorish = "Tensor" in schema_type
    if recorded == "TensorList":
        return 2 if is_list and tensorish else -1
    if recorded == "ScalarList":
        return 2 if is_list and not tensorish else -1
    if recorded == "GenericList":
        return 1 if is_list else -1
    if recorded == "Scalar":
        return 2 if not tensorish else (0 if "Scalar" in schema_type else -1)
    if recorded == "":
        return 1 if ("Optional" in schema_type or "?" in schema_type or not tensorish) else 0
    if is_tensor_type(recorded):
        return 2 if tensorish and not is_list else -1
    return 0


@lru_cache(maxsize=8192)
def schema_args(name: str, types: tuple[str, ...]) -> tuple[tuple[str, bool], ...] | None:
    """(argument name, is_out) per recorded argument, from the best fitting overload; None if unknown."""
    best, best_score = None, -1.0
    for args in _overloads(name):
        # Newer torch appends optional arguments to schemas, so a recording from an older torch
        # matches a prefix of today's schema; an exact length is preferred.
        if len(args) < len(types):
            continue
        score = -0.5 * (len(args) - len(types))
        for (_, stype, _), rec in zip(args, types):
            f = _fits(rec, stype)
            if f < 0:
                score = -1
                break
            score += f
        if score > best_score:
            best, best_score = args, score
    if best is None:
        return None
    return tuple((n, is_out) for n, _, is_out in best[: len(types)])


@dataclass(frozen=True)
class OpArgs:
    """Validated view of one op's recorded arguments. Never raises on lookups: missing -> None."""

    name: str
    dims: tuple
    types: tuple[str, ...]
    concrete: tuple
    strides: tuple
    kernel_type: str | None = None  # element type guessed from the kernel name
    kernel_elem: int | None = None  # element size guessed from the kernel name

    @classmethod
    def build(cls, name: object, dims: object, types: object, concrete: object = None,
              strides: object = None, kernel_type: str | None = None,
              kernel_elem: int | None = None) -> OpArgs:
        n = name if isinstance(name, str) else ""
        d = tuple(dims) if isinstance(dims, (list, tuple)) else ()
        t = tuple(x if isinstance(x, str) else "" for x in types) if isinstance(types, (list, tuple)) else ()
        if len(t) < len(d):
            t = t + ("",) * (len(d) - len(t))
        c = tuple(concrete) if isinstance(concrete, (list, tuple)) else ()
        s = tuple(strides) if isinstance(strides, (list, tuple)) else ()
        return cls(n, d, t, c, s, kernel_type, kernel_elem)

    # --- positional access -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.dims)

    def type(self, i: int | None) -> str:
        return self.types[i] if i is not None and 0 <= i < len(self.types) else ""

    def is_tensor(self, i: int | None) -> bool:
        return i is not None and 0 <= i < len(self.dims) and is_tensor_type(self.type(i)) \
            and as_shape(self.dims[i]) is not None

    def shape(self, i: int | None) -> Shape | None:
        """Shape of tensor argument ``i`` (None if it is not a tensor with a valid shape)."""
        if not self.is_tensor(i):
            return None
        return as_shape(self.dims[i])

    def read_shape(self, i: int | None) -> Shape | None:
        """Shape of tensor argument ``i`` counting each distinct element once: a dimension whose
        recorded stride is 0 (``expand``, broadcast views) has size 1. Reading the argument whole
        moves ``numel(read_shape(i))`` elements. Without recorded strides, the shape itself."""
        s = self.shape(i)
        st = self.strides[i] if s and 0 <= i < len(self.strides) else None  # type: ignore[operator]
        if not isinstance(st, (list, tuple)) or len(st) != len(s) \
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in st):
            return s
        return tuple(1 if x == 0 else d for d, x in zip(s, st))

    def elem(self, i: int | None) -> int | None:
        return dtype_bytes(self.type(i)) if self.is_tensor(i) else None

    def value(self, key: int | str | None, default: object = None) -> object:
        """Parsed concrete value of argument ``key`` (index or schema name); ``default`` if absent."""
        i = self.index(key) if isinstance(key, str) else key
        if i is None or not 0 <= i < len(self.concrete):
            return default
        v = parse_concrete(self.concrete[i])
        return default if v is None else v

    def list_shapes(self, i: int | None) -> list[Shape] | None:
        """Shapes in TensorList argument ``i``; None when not recorded (older Kineto gives ``[]``)."""
        if i is None or not 0 <= i < len(self.dims) or self.type(i) != "TensorList":
            return None
        v = self.dims[i]
        if not isinstance(v, (list, tuple)) or not v:
            return None
        out = [as_shape(s) for s in v]
        if any(s is None for s in out):
            return None
        return out  # type: ignore[return-value]

    # --- lookup by schema name -----------------------------------------------------------
    def names(self) -> tuple[tuple[str, bool], ...] | None:
        return schema_args(self.name, self.types)

    def index(self, argname: str) -> int | None:
        names = self.names()
        if not names:
            return None
        for i, (n, _) in enumerate(names):
            if n == argname:
                return i
        return None

    def out_indices(self) -> list[int]:
        """Indices of ``out=`` arguments (an ``.out`` overload writes into them)."""
        names = self.names() or ()
        return [i for i, (_, is_out) in enumerate(names) if is_out]

    def tensor_indices(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.is_tensor(i)]
