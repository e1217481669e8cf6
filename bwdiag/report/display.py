"""Turn a section of the diagnosis (its diagnosis.json form) into a small display tree the page renders.

The idle breakdown, launch facts, torch.compile facts, step durations and the what-if are shown this
way, labelled from their field names, so a field added to a section shows up without template work.
A display tree is plain data:

* ``{"kind": "kv", "rows": [{"label", "value", "share", "child"}]}`` — a mapping, one row per key;
  ``share`` is the row's percentage of the mapping's time total when its values are times;
* ``{"kind": "table", "columns": [...], "rows": [[str, ...]], "more": int}`` — a list of mappings;
* ``{"kind": "text", "value": str}`` — anything else.

Values are formatted from their key's suffix: ``*_us`` are µs, ``*_pct`` percentages, ``*bytes``
byte counts, ``*_per_s`` rates; inside a mapping whose own key says time (``idle_breakdown``) bare
numbers are µs as well (``step_durations_us``: step id -> µs).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from bwdiag.units import fmt_bandwidth, fmt_bytes, fmt_count, fmt_pct, fmt_si, fmt_time

#: Sections that break a time down into parts: shown with each part's share, and their bare
#: numbers are µs when no key in the mapping names its unit.
TIME_VALUED_KEYS = frozenset({"idle", "idle_us"})

#: Most rows a list is shown with; the rest are counted, not dropped silently.
MAX_LIST_ROWS = 50
_MAX_DEPTH = 4


def humanize(key: str) -> str:
    """``"host_wait_us"`` -> ``"Host wait"``: a label from an identifier."""
    words = str(key).replace("-", "_").split("_")
    if len(words) > 1 and words[-1] in {"pct", "s", "per"}:
        words = words[:-1]
    if len(words) > 1:
        words = [w for w in words if w != "us"]  # the unit, shown with the value
    words = [_ACRONYMS.get(w.lower(), w) for w in words if w]
    text = " ".join(words)
    return text[:1].upper() + text[1:] if text else str(key)


_ACRONYMS = {w.lower(): w for w in ("CPU", "GPU", "NCCL", "HBM", "SM", "IO", "DDP", "FSDP")}


def names_us(key: str) -> bool:
    """Whether an identifier says its numbers are µs (``wait_us_by_rank``, ``idle_us``)."""
    return "us" in str(key).lower().split("_")[1:]


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def format_value(key: str, value: Any, *, time_valued: bool = False) -> str:
    """One scalar as text, its unit chosen from the key's suffix."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not _is_number(value):
        return str(value)
    if not math.isfinite(value):
        return "—"
    k = str(key).lower()
    if k.endswith("_us") or k == "us":
        return fmt_time(value)
    if k.endswith("pct") or k.endswith("percent"):
        return fmt_pct(value)
    if k.endswith("bytes_per_s") or k.endswith("bw"):
        return fmt_bandwidth(value)
    if k.endswith("flops_per_s"):
        return fmt_si(value, "FLOP/s")
    if k.endswith("bytes"):
        return fmt_bytes(value)
    if k.endswith("count") or k.startswith("n_") or k.startswith("num_"):
        return fmt_count(value)
    if time_valued:
        return fmt_time(value)
    if isinstance(value, numbers.Integral) or float(value).is_integer():
        return fmt_count(value)
    return f"{value:.4g}"


def _is_time_key(key: str, time_valued: bool) -> bool:
    k = str(key).lower()
    if k.endswith("_us"):
        return True
    return time_valued and not (
        k.endswith("pct") or k.endswith("count") or k.endswith("bytes")
        or k.startswith("n_") or k.startswith("num_")
    )


def display_tree(key: str, value: Any, *, time_valued: bool | None = None, depth: int = 0) -> dict:
    """The display tree for section ``key`` holding ``value`` (see the module docstring)."""
    if time_valued is None:
        time_valued = str(key).lower() in TIME_VALUED_KEYS or names_us(key)
    if depth >= _MAX_DEPTH:
        return {"kind": "text", "value": _short(value)}
    if isinstance(value, dict):
        if len(value) > 1 and all(isinstance(v, dict) for v in value.values()):
            return _rows_tree(key, value, time_valued=time_valued)
        return _mapping_tree(value, time_valued=time_valued, depth=depth)
    if isinstance(value, (list, tuple)):
        return _list_tree(key, list(value), time_valued=time_valued, depth=depth)
    return {"kind": "text", "value": format_value(key, value, time_valued=time_valued)}


def _mapping_tree(value: dict, *, time_valued: bool, depth: int) -> dict:
    # Bare numbers are µs only in a time-valued mapping that names no unit itself; once a key
    # says ``_us``, the unsuffixed ones are counts (``gaps: 7071``).
    bare_are_times = time_valued and not any(str(k).lower().endswith("_us") for k in value)
    times = {
        k: float(v)
        for k, v in value.items()
        if _is_number(v) and math.isfinite(v) and v >= 0 and _is_time_key(k, bare_are_times)
    }
    shares = _shares(times) if time_valued and depth == 0 else {}
    rows = []
    for k, v in value.items():
        child = None
        if isinstance(v, (dict, list, tuple)):
            child = display_tree(k, v, time_valued=time_valued or names_us(k), depth=depth + 1)
            text = ""
        else:
            text = format_value(k, v, time_valued=bare_are_times)
        rows.append({"label": humanize(k), "value": text, "share": shares.get(k), "child": child})
    return {"kind": "kv", "rows": rows}


def _shares(times: dict[str, float]) -> dict[str, float]:
    """Each part's % of the whole. When one value is the sum of the others (within 1%) it is
    the whole (``idle_us`` beside ``host_wait_us``, ``kernel_wait_us``…) and gets no share."""
    if len(times) < 2:
        return {}
    total = sum(times.values())
    for key, v in times.items():
        rest = total - v
        if v > 0 and abs(rest - v) <= 0.01 * v:
            return {k: 100.0 * x / v for k, x in times.items() if k != key}
    if total <= 0:
        return {}
    return {k: 100.0 * x / total for k, x in times.items()}


def _rows_tree(key: str, value: dict, *, time_valued: bool) -> dict:
    """A mapping of mappings (``idle_by_rank`` as rank -> facts) as a table, one row per key.

    Only scalar facts become columns; nested ones are summed up in the aggregate beside it."""
    first = "Rank" if str(key).lower().endswith("by_rank") else humanize(key)
    columns: list[str] = []
    for inner in value.values():
        for k, v in inner.items():
            if not isinstance(v, (dict, list, tuple)) and k not in columns:
                columns.append(k)
    rows = []
    for name, inner in list(value.items())[:MAX_LIST_ROWS]:
        bare_are_times = time_valued and not any(str(k).lower().endswith("_us") for k in inner)
        rows.append([str(name)] + [format_value(c, inner.get(c), time_valued=bare_are_times)
                                   for c in columns])
    return {"kind": "table", "columns": [first] + [humanize(c) for c in columns], "rows": rows,
            "more": max(0, len(value) - MAX_LIST_ROWS)}


def _list_tree(key: str, items: list, *, time_valued: bool, depth: int) -> dict:
    if items and all(isinstance(item, dict) for item in items):
        columns: list[str] = []
        for item in items:
            for k in item:
                if k not in columns:
                    columns.append(k)
        rows = [
            [
                _short(item.get(c)) if isinstance(item.get(c), (dict, list, tuple))
                else format_value(c, item.get(c), time_valued=time_valued)
                for c in columns
            ]
            for item in items[:MAX_LIST_ROWS]
        ]
        return {
            "kind": "table",
            "columns": [humanize(c) for c in columns],
            "rows": rows,
            "more": max(0, len(items) - MAX_LIST_ROWS),
        }
    if not items:
        return {"kind": "text", "value": "none"}
    shown = ", ".join(format_value(key, v, time_valued=time_valued) for v in items[:MAX_LIST_ROWS])
    if len(items) > MAX_LIST_ROWS:
        shown += f", … ({len(items) - MAX_LIST_ROWS} more)"
    return {"kind": "text", "value": shown}


def _short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
