"""Small value helpers shared by the report modules: finite numbers, enum values, JSON safety."""

from __future__ import annotations

import math
import numbers
from enum import Enum
from typing import Any

from bwdiag.diagnose.model import Bound, KernelRow


def bound_of(k: KernelRow) -> str:
    """The group's bound as its string value (``"memory"``), whether stored as enum or string."""
    b = k.bound
    return b.value if isinstance(b, Bound) else str(b)


def num(value: Any) -> float:
    """A finite float, 0.0 for unknown: only for sums and sorting, never for display."""
    t = type(value)
    if t is float or t is int:  # the common cases, without the ABC checks below
        return float(value) if math.isfinite(value) else 0.0
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def positive(value: Any) -> bool:
    """Whether ``value`` is a finite number above zero."""
    return num(value) > 0


def clean(value: Any) -> Any:
    """JSON-safe all the way down: enums to values, tuples/sets to lists, NaN/inf to None,
    numpy-style scalars to Python numbers, anything else unknown to its ``str``."""
    t = type(value)
    if value is None or t is str or t is bool or t is int:  # exact types first: ABC checks are slow
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if t is dict:
        return {str(k): clean(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [clean(v) for v in value]
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return clean(value.value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [clean(v) for v in value]
    return str(value)
