"""The shapes text of the kernel table (``f32[4096, 100], bf16[8, 16]``) from an op's recorded
``Input Dims`` and ``Input type``; shared by the activity tables and the compiled regions."""

from __future__ import annotations

_SHORT = {"float": "f32", "c10::Half": "f16", "c10::BFloat16": "bf16", "double": "f64", "long int": "i64",
          "int": "i32", "bool": "b"}


def format_shapes(dims, types) -> str | None:
    """``dtype[dims]`` of each tensor argument, comma-separated; None when the op records none."""
    if not isinstance(dims, list):
        return None
    parts = []
    for i, d in enumerate(dims):
        if isinstance(d, list) and d:
            t = types[i] if isinstance(types, list) and i < len(types) else ""
            parts.append(f"{_short_type(t)}{d}")
    return ", ".join(parts) if parts else None


def _short_type(t) -> str:
    return _SHORT.get(t, str(t).replace("c10::", "")) if t else ""
