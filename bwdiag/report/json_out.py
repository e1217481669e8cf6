"""``diagnosis.json``: the machine interface (CI, notebooks, diffing)."""

from __future__ import annotations

import math
from typing import Any

import orjson

from bwdiag.diagnose.model import Diagnosis


def render_json(diagnosis: Diagnosis) -> bytes:
    """``diagnosis.to_dict()`` as indented UTF-8 JSON with a final newline.

    NaN and ±inf become ``null`` (unknown), so every JSON parser reads the file.
    """
    option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return orjson.dumps(_finite(diagnosis.to_dict()), option=option) + b"\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
