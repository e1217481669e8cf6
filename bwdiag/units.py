"""Numbers with units, read and written: the one module for both.

Writing (``fmt_*``): findings' evidence text, the terminal summary, the HTML page and the CLI's
tables all format through these (a leaf module: every layer may import it). Reading
(``parse_quantity``, ``parse_duration``): what a user types on the command line (``4G``, ``440us``). The page's JavaScript formats the kernel table and the roofline
from raw numbers with the same rules (``templates/report.js``: ``fmtTime``, ``fmtRate``); keep the
two in step.
"""

from __future__ import annotations

import math
import numbers
import re

_SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))

DASH = "—"


_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
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
    factor = _BINARY[suffix] if suffix.endswith("i") else _PREFIX[suffix]
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



def _sig(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures, no exponent, no trailing ``.0``."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _finite(value: float | None) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def fmt_time(us: float | None, digits: int = 3) -> str:
    """Microseconds as ``850 µs`` / ``12.3 ms`` / ``4.56 s``; ``—`` when unknown."""
    if not _finite(us):
        return DASH
    a = abs(us)
    if a >= 1e6:
        return f"{_sig(us / 1e6, digits)} s"
    if a >= 1e3:
        return f"{_sig(us / 1e3, digits)} ms"
    return f"{_sig(us, digits)} µs"


def fmt_seconds(seconds: float | None, digits: int = 4) -> str:
    """Seconds as ``440 µs`` / ``2.224 ms``, down to ``3.1 ns`` (what a user typed for --time)."""
    if _finite(seconds) and 0 < abs(seconds) < 1e-6:
        return f"{_sig(seconds * 1e9, digits)} ns"
    return fmt_time(seconds * 1e6 if _finite(seconds) else None, digits)


def fmt_si(value: float | None, unit: str, digits: int = 3) -> str:
    """A decimal-prefixed quantity: ``fmt_si(3.12e14, "FLOP/s") == "312 TFLOP/s"``."""
    if not _finite(value):
        return DASH
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}".rstrip()
    return f"{_sig(value, digits)} {unit}".rstrip()


def fmt_flops(flops_per_s: float | None) -> str:
    """FLOP/s with a decimal prefix (``19.5 TFLOP/s``)."""
    return fmt_si(flops_per_s, "FLOP/s")


def fmt_bandwidth(bytes_per_s: float | None) -> str:
    """B/s with a decimal prefix (``2.04 TB/s``), as datasheets quote bandwidth."""
    return fmt_si(bytes_per_s, "B/s")


def fmt_bytes(n: float | None) -> str:
    """A byte count with a decimal prefix (``64 MB``)."""
    return fmt_si(n, "B")


def fmt_count(n: float | None) -> str:
    """An integer count with thousands separators."""
    if not _finite(n):
        return DASH
    return f"{int(round(n)):,}"


def fmt_pct(pct: float | None, digits: int = 1) -> str:
    """A percentage (already ×100) such as ``47.2%``."""
    if not _finite(pct):
        return DASH
    if 0 < abs(pct) < 0.1:
        return "<0.1%"
    if abs(pct) >= 1000:
        return f"{pct:,.0f}%"
    return f"{pct:.{digits}f}%"


def fmt_intensity(flop_per_byte: float | None) -> str:
    """Arithmetic intensity in FLOP/B."""
    if not _finite(flop_per_byte):
        return DASH
    return f"{_sig(flop_per_byte)} FLOP/B"
