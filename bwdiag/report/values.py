"""Small value helpers shared by the report modules.

The diagnosis records hold no NaN or infinity (they are turned into ``None`` once, when a record is
built: :mod:`bwdiag.diagnose.records`), so nothing here cleans numbers again: :func:`jsonable` only
gives the page context JSON's shapes (enums as values, tuples as lists), and :func:`num` reads an
optional number as 0.0 for sums and sorting.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from bwdiag.diagnose.model import KernelRow


def bound_of(k: KernelRow) -> str:
    """The group's bound as its string value (``"memory"``)."""
    return k.bound.value


def num(value: Any) -> float:
    """A number, 0.0 for unknown (``None``): only for sums and sorting, never for display."""
    return 0.0 if value is None else float(value)


def positive(value: Any) -> bool:
    """Whether ``value`` is a number above zero."""
    return num(value) > 0


def jsonable(value: Any) -> Any:
    """The context as JSON types all the way down: enums to values, tuples to lists, keys to str."""
    t = type(value)
    if value is None or t is str or t is bool or t is int or t is float:  # exact types first
        return value
    if t is dict:
        return {str(k): jsonable(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"report context value of type {t.__name__} is not JSON: {value!r}")
