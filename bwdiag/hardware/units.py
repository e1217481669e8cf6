"""Reading and writing quantities: ``2.1e12``, ``4G``, ``1.5T``, ``16Gi``, ``450us``."""

from __future__ import annotations

import math
import re

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40, "pi": 2.0**50}
_QUANTITY = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtTpPeE]i?)?\s*(b|bytes?|flops?|ops?)?\s*$",
    re.IGNORECASE,
)
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ns|us|µs|ms|s)?\s*$")
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}


#: The unit words of :func:`parse_quantity`, by what they count.
_UNIT_WORDS = {"b": "B", "byte": "B", "bytes": "B", "flop": "FLOP", "flops": "FLOP", "op": "FLOP",
               "ops": "FLOP"}
_UNIT_NAMES = {"B": "bytes", "FLOP": "FLOPs"}


def parse_quantity(text: str, unit: str | None = None) -> float:
    """A count with an optional SI (``k M G T P E``, powers of 1000) or binary (``Ki Mi Gi Ti``)
    suffix and an optional unit word: ``2.1e12``, ``4G``, ``1.5T``, ``16GiB``, ``3e9 FLOP``.
    ``unit`` ("FLOP" or "B") is what the count must be: a unit word of the other kind
    (``--flops 2.2TB``) raises ``ValueError``. Raises ``ValueError`` for anything else, negative
    or non-finite values."""
    found = _QUANTITY.match(str(text))
    if not found:
        raise ValueError(f"not a quantity: {text!r} (examples: 2.1e12, 4G, 1.5T, 16Gi)")
    word = _UNIT_WORDS.get((found.group(3) or "").lower())
    if unit is not None and word is not None and word != unit:
        raise ValueError(
            f"{text!r} is a number of {_UNIT_NAMES[word]}, not of {_UNIT_NAMES[unit]} "
            f"(write e.g. {found.group(1)}{found.group(2) or ''}{'' if unit == 'FLOP' else 'B'})"
        )
    value = float(found.group(1))
    suffix = (found.group(2) or "").lower()
    factor = _BINARY[suffix] if suffix.endswith("i") else _SI[suffix]
    result = value * factor
    if not math.isfinite(result):
        raise ValueError(f"not a finite quantity: {text!r}")
    return result


def parse_duration(text: str) -> float:
    """Seconds from ``0.00044``, ``440us``, ``0.44ms``, ``1.2s``, ``900ns``."""
    found = _DURATION.match(str(text))
    if not found:
        raise ValueError(f"not a duration: {text!r} (examples: 0.00044, 440us, 0.44ms)")
    return float(found.group(1)) * _TIME_UNITS[found.group(2)]


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """``312e12, 'FLOP/s'`` -> ``'312 TFLOP/s'``; ``None`` -> ``'-'``."""
    if value is None:
        return "-"
    if value == 0:
        return f"0 {unit}".strip()
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                           (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".strip()


def duration(seconds: float | None) -> str:
    """``0.00044`` -> ``'440 µs'``."""
    if seconds is None:
        return "-"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= factor:
            return f"{seconds / factor:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"
