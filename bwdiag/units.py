"""Human-readable numbers with units (µs/ms/s, GB/s, TFLOP/s): the one set of formatters.

Findings' evidence text, the terminal summary and the HTML page all format through these (a leaf
module: every layer may import it). The page's JavaScript formats the kernel table and the roofline
from raw numbers with the same rules (``templates/report.js``: ``fmtTime``, ``fmtRate``); keep the
two in step.
"""

from __future__ import annotations

import math
import numbers

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))

DASH = "—"


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


def fmt_time(us: float | None) -> str:
    """Microseconds as ``850 µs`` / ``12.3 ms`` / ``4.56 s``; ``—`` when unknown."""
    if not _finite(us):
        return DASH
    a = abs(us)
    if a >= 1e6:
        return f"{_sig(us / 1e6)} s"
    if a >= 1e3:
        return f"{_sig(us / 1e3)} ms"
    return f"{_sig(us)} µs"


def fmt_si(value: float | None, unit: str) -> str:
    """A decimal-prefixed quantity: ``fmt_si(3.12e14, "FLOP/s") == "312 TFLOP/s"``."""
    if not _finite(value):
        return DASH
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{_sig(value / scale)} {prefix}{unit}"
    return f"{_sig(value)} {unit}"


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
