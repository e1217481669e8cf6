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
    consumed = 0  # bytes of the original file dropped by earlier splices (to report true offsets)
    doc_bytes = data
    for _ in range(MAX_REPAIRS + 1):
        try:
            doc = orjson.loads(doc_bytes)
        except orjson.JSONDecodeError as err:
            pos = error_offset(doc_bytes, err)
        else:
            return _finish(doc, kept, damaged_at, truncated=False, bare=bare)
        if pos <= start:
            return None  # the damage is in the metadata before the events
        kept.extend(_close_prefix(doc_bytes[start:pos]))
        nxt = _NEXT_EVENT.search(doc_bytes, pos)
        if nxt is None:  # nothing after the damage looks like an event: the file is cut short there
            return _finish(_header(doc_bytes, start, bare), kept, damaged_at, truncated=True, bare=bare)
        damaged_at.append(pos + consumed)
        resume = nxt.end() - 1  # at the `{` of the next event
        consumed += resume - (start + 1)
        doc_bytes = doc_bytes[: start + 1] + doc_bytes[resume:]
    # Too many damaged places: keep what was read and the header.
    return _finish(_header(doc_bytes, start, bare), kept, damaged_at, truncated=True, bare=bare)


def _finish(doc: Any, kept: list[Any], damaged_at: list[int], *, truncated: bool, bare: bool) -> Salvaged | None:
    if doc is None:
        return None
    if bare:
        doc = {"traceEvents": doc if isinstance(doc, list) else []}
    if not isinstance(doc, dict):
        return None
    tail = doc.get("traceEvents")
    events = kept + (tail if isinstance(tail, list) else [])
    doc["traceEvents"] = events
    return Salvaged(doc, len(events), damaged_at, truncated)


def _header(doc_bytes: bytes, start: int, bare: bool) -> Any:
    """The document with an empty event array: everything written before the events."""
    if bare:
        return []
    try:
        return orjson.loads(doc_bytes[: start + 1] + b"]}")
    except orjson.JSONDecodeError:
        return None


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
