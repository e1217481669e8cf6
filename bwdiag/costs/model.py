"""The cost of one op: FLOPs, bytes, dtype and category (``None`` = unknown, never zero)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Category(str, Enum):
    """What kind of work an op or kernel does; decides which roofline ceiling applies."""

    __str__ = str.__str__  # prints and formats as its value, like the diagnosis enums
    __format__ = str.__format__

    GEMM = "gemm"
    CONV = "conv"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"  # sum/mean/max/..., pooling, scans
    NORM = "norm"
    SOFTMAX = "softmax"
    EMBEDDING = "embedding"
    INDEX = "index"  # gather / scatter / index_select / index_put
    COPY = "copy"  # copy_ / cat / clone / contiguous / layout transforms
    CAST = "cast"  # dtype-converting copies, quantization
    OPTIMIZER = "optimizer"  # foreach / fused Adam / multi_tensor_apply
    MEMCPY = "memcpy"
    MEMSET = "memset"
    COMMUNICATION = "communication"
    SORT = "sort"  # sort / topk / unique / cumsum-like scans are reductions
    RANDOM = "random"  # rng fills, dropout
    OTHER = "other"


#: Categories whose work runs on tensor / matrix units.
TENSOR_CATEGORIES = frozenset({Category.GEMM, Category.CONV, Category.ATTENTION})


@dataclass(frozen=True)
class Cost:
    """Work done by one op call (all kernels it launched together).

    ``flops``/``bytes`` are ``None`` when unknown (never a made-up number); ``note`` says why an
    estimate is missing or what approximation it uses. ``bytes`` is the minimum DRAM traffic:
    every input read once, every output written once. ``tensor`` is True for GEMM/conv/attention
    work that runs on tensor/matrix units. ``dtype`` is the bwdiag dtype name of the compute
    (inputs of a GEMM, the output of a cast).
    """

    flops: float | None
    bytes: float | None
    dtype: str | None
    category: Category
    tensor: bool = False
    note: str | None = None

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte, when both are known and bytes > 0."""
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes


def unknown(category: Category, note: str, dtype: str | None = None) -> Cost:
    """A cost with no estimate, saying why."""
    return Cost(None, None, dtype, category, category in TENSOR_CATEGORIES, note)
