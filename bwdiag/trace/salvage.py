"""Recover the events of a trace whose JSON is damaged: cut short, or corrupt in places.

A trace is one big JSON object whose ``traceEvents`` array holds almost all of the bytes, so almost
any damage (a writer killed mid-event, a disk that filled, a flipped byte, an unescaped quote in a
kernel name) lands inside that array. :func:`salvage_document` keeps every event that still parses:
it reads up to the first error, closes the array after the last complete event, skips forward to the
start of the next event and goes on, at most :data:`MAX_REPAIRS` times (each repair re-parses the
rest of the file, so the bound keeps a badly damaged file from taking minutes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

#: Damaged places skipped before giving up on the rest of the file.
MAX_REPAIRS = 16
#: Event boundaries tried, newest first, when closing the array before a damaged place.
_MAX_CLOSE_TRIES = 64
# Where one event ends and the next begins: `}` `,` `{` with optional whitespace between.
_NEXT_EVENT = re.compile(rb"\}\s*,\s*\{")


@dataclass
class Salvaged:
    """A damaged document's parse: the document (events included) and what was done to get it."""

    doc: Any
    events_kept: int
    damaged_at: list[int]  # byte offsets of the damaged places skipped
    truncated: bool  # the file ends inside the events (cut short)
    header_lost: bool = False  # the metadata before the events (deviceProperties …) was damaged and dropped
    gave_up: bool = False  # more than MAX_REPAIRS damaged places: the rest of the file was not read


def error_offset(data: bytes, err: orjson.JSONDecodeError) -> int:
    """The byte offset of a parse error (orjson reports a character index into the decoded text)."""
    pos = getattr(err, "pos", None)
    if not isinstance(pos, int):
        return 0
    doc = getattr(err, "doc", None)
    if isinstance(doc, str) and not data.isascii():
        return len(doc[:pos].encode("utf-8", errors="surrogatepass"))
    return min(pos, len(data))


def salvage_document(data: bytes) -> Salvaged | None:
    """Parse ``data`` (valid UTF-8, no raw control characters) keeping every event that parses.

    Returns None when there is nothing to salvage: no ``traceEvents`` array, or damage before it.
    """
    key = data.find(b'"traceEvents"')
    if key >= 0:
        start = data.find(b"[", key)
    else:  # a bare event array
        stripped = len(data) - len(data.lstrip())
        start = stripped if data[stripped:stripped + 1] == b"[" else -1
    if start < 0:
        return None
    bare = key < 0

    kept: list[Any] = []
    damaged_at: list[int] = []
    header_lost = False
    consumed = 0  # bytes of the original file dropped by earlier splices (to report true offsets)
    doc_bytes = data
    for _ in range(MAX_REPAIRS + 1):
        try:
            doc = orjson.loads(doc_bytes)
        except orjson.JSONDecodeError as err:
            pos = error_offset(doc_bytes, err)
        else:
            return _finish(doc, kept, damaged_at, truncated=False, bare=bare, header_lost=header_lost)
        if pos <= start:
            if bare or header_lost:
                return None
            # The metadata before the events is damaged: drop it and read the events as a bare array.
            header_lost = True
            consumed += start
            doc_bytes, start, bare = doc_bytes[start:], 0, True
            continue
        whole = _complete_array(doc_bytes[start:pos])
        if whole is not None:
            # The events array is whole; the damage is in the metadata after it: keep the events.
            kept.extend(whole)
            damaged_at.append(pos + consumed)
            return _finish(_header(doc_bytes, start, bare), kept, damaged_at, truncated=False, bare=bare,
                           header_lost=header_lost)
        kept.extend(_close_prefix(doc_bytes[start:pos]))
        nxt = _NEXT_EVENT.search(doc_bytes, pos)
        if nxt is None:  # nothing after the damage looks like an event: the file is cut short there
            return _finish(_header(doc_bytes, start, bare), kept, damaged_at, truncated=True, bare=bare,
                           header_lost=header_lost)
        damaged_at.append(pos + consumed)
        resume = nxt.end() - 1  # at the `{` of the next event
        consumed += resume - (start + 1)
        doc_bytes = doc_bytes[: start + 1] + doc_bytes[resume:]
    # Too many damaged places: keep what was read and the header, and say the rest was not read.
    out = _finish(_header(doc_bytes, start, bare), kept, damaged_at, truncated=False, bare=bare,
                  header_lost=header_lost)
    if out is not None:
        out.gave_up = True
    return out


def _finish(doc: Any, kept: list[Any], damaged_at: list[int], *, truncated: bool, bare: bool,
            header_lost: bool) -> Salvaged | None:
    if doc is None:
        return None
    if bare:
        doc = {"traceEvents": doc if isinstance(doc, list) else []}
    if not isinstance(doc, dict):
        return None
    tail = doc.get("traceEvents")
    events = kept + (tail if isinstance(tail, list) else [])
    doc["traceEvents"] = events
    return Salvaged(doc, len(events), damaged_at, truncated, header_lost)


def _header(doc_bytes: bytes, start: int, bare: bool) -> Any:
    """The document with an empty event array: everything written before the events."""
    if bare:
        return []
    try:
        return orjson.loads(doc_bytes[: start + 1] + b"]}")
    except orjson.JSONDecodeError:
        return None


def _complete_array(text: bytes) -> list[Any] | None:
    """``text`` parsed when it is one whole JSON array (the events, closed), else None."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None


def _close_prefix(prefix: bytes) -> list[Any]:
    """The complete events of ``prefix`` (``[`` then events, cut anywhere): close after the last one."""
    end = len(prefix)
    for _ in range(_MAX_CLOSE_TRIES):
        cut = prefix.rfind(b"}", 0, end)
        if cut < 0:
            return []
        try:
            events = orjson.loads(prefix[: cut + 1] + b"]")
        except orjson.JSONDecodeError:
            end = cut
            continue
        return events if isinstance(events, list) else []
    return []


# -- event args of the wrong shape ----------------------------------------------------------------

_SCALARS = frozenset((str, int, float, bool, type(None)))


def _is_dims(value: Any, depth: int = 0) -> bool:
    """``Input Dims`` / ``Input Strides``: lists of sizes, nested for tensor-list inputs."""
    if value.__class__ is not list or depth > 4:
        return False
    for v in value:
        c = v.__class__
        if c is int:
            continue
        if c is not list:
            return False
        for x in v:  # the common case, [[8, 512], [512]], without a call per size
            if x.__class__ is not int and not _is_dims(x, depth + 2):
                return False
    return True


def _is_scalar_list(value: Any) -> bool:
    """``Input type`` / ``Concrete Inputs``: one string (or number) per input."""
    return value.__class__ is list and all(v.__class__ in _SCALARS for v in value)


def _args_ok(value: Any) -> bool:
    if value.__class__ is not dict:
        return False
    for v in value.values():
        if v.__class__ not in _SCALARS and not _is_scalar_list(v):
            return False
    return True


def _clean_args(value: Any) -> Any:
    """Copied kernel/collective args: scalars and lists of scalars kept; anything else dropped."""
    if value.__class__ is not dict:
        return None
    kept = {k: v for k, v in value.items() if v.__class__ in _SCALARS or _is_scalar_list(v)}
    return kept or None


_CHECKS = {"dims": _is_dims, "strides": _is_dims, "types": _is_scalar_list, "concrete": _is_scalar_list,
           "args": _args_ok}


def sanitize_args(tables) -> int:
    """Drop shape and collective args whose structure is wrong (an ``Input type`` holding a dict …).

    Downstream code (costs, shapes) may then trust their types. Returns how many events lost an arg.
    ``tables`` is an :class:`~bwdiag.trace.events.EventTables`; its frames are changed in place.
    """
    import numpy as np
    import pandas as pd

    touched: set[tuple[str, int]] = set()
    for name, frame, cols in (("ops", tables.ops, ("dims", "strides", "types", "concrete", "args")),
                              ("gpu", tables.gpu, ("args",))):
        if frame.empty:
            continue
        # Ops sharing an argument signature share these values: check one op per signature.
        by_sig = _first_of_each(frame["sig"].to_numpy()) if "sig" in frame else None
        for col in cols:
            if col not in frame:
                continue
            ok = _CHECKS[col]
            values = frame[col].tolist()
            if by_sig is not None and col != "args":
                sig, firsts = by_sig
                bad_sigs = [sig[i] for i in firsts if values[i] is not None and not ok(values[i])]
                bad = np.flatnonzero(np.isin(sig, bad_sigs)).tolist() if bad_sigs else []
            else:
                bad = [i for i, v in enumerate(values) if v is not None and not ok(v)]
            if not bad:
                continue
            for i in bad:
                values[i] = _clean_args(values[i]) if col == "args" else None
            frame[col] = pd.Series(values, index=frame.index, dtype=object)
            touched.update((name, i) for i in bad)
    return len(touched)


def _first_of_each(sig):
    """``sig`` and the row position of the first op of each distinct signature."""
    import numpy as np

    return sig, np.unique(sig, return_index=True)[1]
