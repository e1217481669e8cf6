"""Capture: ``bwdiag run`` (an unmodified script) and ``bwdiag.profile(...)`` (a loop of your own).

Nothing in this package imports torch at import time; torch is taken from the script once it has
imported it (``bwdiag run``) or imported when a ``profile`` starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CaptureOptions", "Profile", "StepMarker", "profile"]


def __getattr__(name: str) -> Any:
    if name in ("Profile", "profile"):
        from bwdiag.capture import context as _context

        return getattr(_context, name)
    if name in ("CaptureOptions", "StepMarker"):
        from bwdiag.capture import options

        return getattr(options, name)
    raise AttributeError(f"module 'bwdiag.capture' has no attribute {name!r}")
