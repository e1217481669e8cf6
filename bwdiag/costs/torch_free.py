"""What the cost model needs from torch, without importing torch (2-4 s, ~190 MB) on the hot path.

* Operator schemas (argument names, to read ``Concrete Inputs`` by name) and dtype promotion between
  Kineto type strings: pure data, dumped from torch by ``scripts/gen_torch_tables.py`` into
  ``torch_tables.json`` and checked against the installed torch by ``tests/test_speed_torch_free.py``.
* The GEMM FLOP formulas of ``torch.utils.flop_counter`` (mm, addmm, bmm, baddbmm, _scaled_mm):
  restated below line for line; the same test checks them against torch's ``flop_registry``.
  Convolution and attention formulas are longer and still come from torch itself.

Anything not covered here falls back to torch, so results never depend on this module's coverage.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("torch_tables.json")
UNKNOWN = object()  # "not in the tables: ask torch"
_UNREPRESENTABLE = "?"


def promotion_key(a: str, b: str) -> str:
    return f"{a}|{b}"


@lru_cache(maxsize=1)
def _tables() -> dict:
    import orjson

    try:
        return orjson.loads(TABLE_PATH.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {"schemas": {}, "promotions": {}}


def overloads(name: str):
    """``args._overloads(name)`` from the table: ((arg name, type text, is_out), ...) per overload."""
    ovs = _tables()["schemas"].get(name)
    if ovs is None:
        return None
    return tuple(tuple((a, t, bool(o)) for a, t, o in ov) for ov in ovs)


def promote_types(types: list[str]):
    """torch.promote_types folded over Kineto type strings; None where torch refuses; UNKNOWN if not tabled."""
    table = _tables()["promotions"]
    first = promotion_key(types[0], types[0])  # promoting a type with itself normalises its spelling
    if first not in table:
        return None
    result = table[first]
    for t in types[1:]:
        key = promotion_key(result, t)
        if key not in table:
            return UNKNOWN if _known(result) and _known(t) else None
        result = table[key]
        if result is None:
            return None
        if result == _UNREPRESENTABLE:
            return UNKNOWN
    if result is None:
        return None
    return UNKNOWN if result == _UNREPRESENTABLE else result


def _known(t: str) -> bool:
    return promotion_key(t, t) in _tables()["promotions"]


# --- torch.utils.flop_counter's GEMM formulas (torch 2.x), restated --------------------------------
def mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    m, k = a_shape
    k2, n = b_shape
    if k != k2:
        raise AssertionError(f"matmul: inner dimensions must match (k == k2), got {k} and {k2}")
    return m * n * 2 * k


def addmm_flop(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
    return mm_flop(a_shape, b_shape)


def bmm_flop(a_shape, b_shape, out_shape=None, **kwargs) -> int:
    b, m, k = a_shape
    b2, k2, n = b_shape
    if b != b2:
        raise AssertionError(f"bmm: batch dimensions must match (b == b2), got {b} and {b2}")
    if k != k2:
        raise AssertionError(f"bmm: inner dimensions must match (k == k2), got {k} and {k2}")
    return b * m * n * 2 * k


def baddbmm_flop(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
    return bmm_flop(a_shape, b_shape)


def _scaled_mm_flop(a_shape, b_shape, scale_a_shape, scale_b_shape, bias_shape=None, scale_result_shape=None,
                    out_dtype=None, use_fast_accum=False, out_shape=None, **kwargs) -> int:
    return mm_flop(a_shape, b_shape)


FLOP_FORMULAS = {"mm": mm_flop, "addmm": addmm_flop, "bmm": bmm_flop, "baddbmm": baddbmm_flop,
                 "_scaled_mm": _scaled_mm_flop}
