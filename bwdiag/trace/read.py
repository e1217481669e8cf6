"""Read one trace file into its top-level metadata and its list of events.

Kineto writes one JSON object (``{"traceEvents": [...], "deviceProperties": [...], ...}``), plain or
gzip. Files from the wild are truncated, carry ``inf``/``NaN`` numbers, control characters or bad
UTF-8: those are salvaged with a warning. Anything that is not a trace is refused with a TraceError
that names the file and the problem.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bwdiag.errors import TraceError

_GZIP_MAGIC = b"\x1f\x8b"
# Bare non-finite numbers (Python's json.dumps writes Infinity/NaN; C++ writers have written inf/nan).
_NON_FINITE = re.compile(rb"(?<=[:\[,\s])-?(?:Infinity|NaN|inf|nan)(?=\s*[,\]\}])")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


@dataclass
class RawTrace:
    """A parsed trace file: its metadata (every top-level key but the events) and its events."""

    path: Path
    metadata: dict[str, Any]
    events: list[Any]
    warnings: list[str] = field(default_factory=list)


def read_trace_file(path: Path) -> RawTrace:
    """Parse ``path`` (``.json`` or ``.json.gz``), salvaging what damaged files allow."""
    warnings: list[str] = []
    data = _read_bytes(path, warnings)
    if not data.strip():
        raise TraceError(f"{path}: the file is empty; re-export the trace (prof.export_chrome_trace)")
    doc = _parse(path, data, warnings)
    if isinstance(doc, list):  # a bare event array is valid Chrome trace format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(
            f"{path}: JSON but not a torch.profiler trace (no traceEvents list); "
            "pass a file written by torch.profiler's export_chrome_trace or tensorboard_trace_handler"
        )
    events = doc.pop("traceEvents")
    return RawTrace(path=path, metadata=doc, events=events, warnings=warnings)


def _read_bytes(path: Path, warnings: list[str]) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder, not a trace file") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot be read ({err.strerror or err})") from None
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error):
        # A gzip stream cut short: keep everything that decompresses.
        out = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = out.decompress(raw)
        except zlib.error as err:
            raise TraceError(f"{path}: gzip data is corrupt ({err}); nothing could be recovered") from None
        if not data:
            raise TraceError(f"{path}: gzip stream is cut short before any data")
        warnings.append(f"{path.name}: gzip stream is cut short; analysed the {len(data):,} bytes recovered")
        return data


def _parse(path: Path, data: bytes, warnings: list[str]) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        first_error = err
    if data.lstrip()[:1] not in (b"{", b"["):
        raise TraceError(f"{path}: not JSON or gzip (starts with {data[:12]!r}); expected a torch.profiler trace")
    cleaned, fixes = _clean(data)
    if fixes:
        try:
            doc = orjson.loads(cleaned)
        except orjson.JSONDecodeError:
            pass
        else:
            warnings.append(f"{path.name}: {', '.join(fixes)}")
            return doc
    doc = _close_truncated(cleaned)
    if doc is None:
        raise TraceError(f"{path}: not valid JSON ({first_error}); the file cannot be read as a trace")
    warnings.append(
        f"{path.name}: JSON is truncated ({', '.join(fixes + ['cut at the last complete event'])}); "
        f"analysed the {len(doc.get('traceEvents', doc) if isinstance(doc, dict) else doc):,} events before the cut"
    )
    return doc


def _clean(data: bytes) -> tuple[bytes, list[str]]:
    """Repair what a lenient reader would accept: bad UTF-8, control characters, inf/NaN."""
    fixes = []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", errors="replace").encode("utf-8")
        fixes.append("invalid UTF-8 replaced")
    data, n = _CONTROL.subn(b" ", data)
    if n:
        fixes.append(f"{n} control characters replaced")
    data, n = _NON_FINITE.subn(b"null", data)
    if n:
        fixes.append(f"{n} non-finite numbers read as null")
    return data, fixes


def _close_truncated(data: bytes) -> Any:
    """Cut at the last complete event of the traceEvents array and close the document."""
    start = data.find(b"[", data.find(b'"traceEvents"') if b'"traceEvents"' in data else 0)
    if start < 0:
        return None
    end = len(data)
    for _ in range(64):  # try the last few event boundaries, newest first
        cut = data.rfind(b"}", start, end)
        if cut < 0:
            return None
        body = data[: cut + 1]
        for tail in (b"]}", b"]"):
            try:
                doc = orjson.loads(body + tail)
            except orjson.JSONDecodeError:
                continue
            return doc
        end = cut
    return None
