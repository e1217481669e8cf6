"""Where bwdiag keeps what it can rebuild: calibrations, compiled report templates."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/bwdiag`` (``~/.cache/bwdiag`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bwdiag"
