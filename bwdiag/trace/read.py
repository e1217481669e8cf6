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
from bwdiag.trace.salvage import Salvaged, salvage_document

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
# Bare non-finite numbers (Python's json.dumps writes Infinity/NaN; C++ writers have written inf/nan).
_NON_FINITE = re.compile(rb"(?<=[:\[,\s])-?(?:Infinity|NaN|inf|nan)(?=\s*[,\]\}])")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# \uD800-\uDFFF escapes outside a high+low pair: Python writes them for names decoded with surrogateescape
# (undecodable bytes in file paths); strict parsers such as orjson reject the whole file for one.
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


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
    if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("bwdiag/diagnosis"):
        raise TraceError(
            f"{path}: this is a diagnosis bwdiag wrote, not a trace; pass the trace it was made from "
            "(listed under source.paths in that file)"
        )
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(
            f"{path}: JSON but not a torch.profiler trace (no traceEvents list); "
            "pass a file written by torch.profiler's export_chrome_trace or tensorboard_trace_handler"
        )
    events = doc.pop("traceEvents")
    return RawTrace(path=path, metadata=doc, events=events, warnings=warnings)


def _read_bytes(path: Path, warnings: list[str]) -> bytes:
    try:
        size = path.stat().st_size
        if not path.is_dir():
            _check_fits(path, size, "the file")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder, not a trace file") from None
    except MemoryError:
        raise TraceError(f"{path}: too large to read into memory on this machine") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot be read ({err.strerror or err})") from None
    if path.is_dir():
        raise TraceError(f"{path}: is a folder, not a trace file")
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return _gunzip(path, raw, warnings)
    except MemoryError:
        raise TraceError(f"{path}: the decompressed trace is too large to hold in memory on this machine") from None


_PIECE = 16 << 10  # compressed bytes fed at a time: what came before a corrupt block is kept


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``; psutil elsewhere), or None."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return psutil.virtual_memory().available
    except (ImportError, OSError):
        return None


def _check_fits(path: Path, nbytes: int, what: str) -> None:
    """Refuse a trace whose text alone exceeds the free memory: parsing it would get the process killed."""
    free = available_memory()
    if free is None:
        return
    if nbytes > free:
        raise TraceError(
            f"{path}: {what} is {nbytes / 1e9:,.1f} GB, more than the {free / 1e9:,.1f} GB of free memory; "
            "analyse it on a machine with more memory, or profile fewer steps"
        )


def _gunzip(path: Path, raw: bytes, warnings: list[str]) -> bytes:
    """Decompress every gzip member; a stream cut short, corrupt or followed by garbage keeps what came before.

    The input is fed a piece at a time, so a stream that expands past the free memory is refused with
    a message instead of getting the process killed.
    """
    parts: list[bytes] = []
    total = checked = 0
    rest = raw
    while rest:
        out = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            for i in range(0, len(rest), _PIECE):
                chunk = out.decompress(rest[i:i + _PIECE])
                parts.append(chunk)
                total += len(chunk)
                if total - checked > 256 << 20:  # ask about memory only as the text grows
                    _check_fits(path, total, "the decompressed trace (so far)")
                    checked = total
                if out.eof:
                    break
        except zlib.error as err:
            if not total:
                raise TraceError(
                    f"{path}: gzip data is corrupt ({err}); nothing could be recovered: "
                    "copy the file again or re-export it"
                ) from None
            warnings.append(f"{path.name}: gzip data is corrupt after {total:,} bytes ({err}); "
                            "analysed what came before")
            break
        if not out.eof:
            if not total:
                raise TraceError(
                    f"{path}: gzip stream is cut short before any data; copy the file again or re-export it"
                )
            warnings.append(f"{path.name}: gzip stream is cut short; analysed the {total:,} bytes recovered")
            break
        rest = out.unused_data
        if rest and not rest.startswith(_GZIP_MAGIC):
            if rest.strip(b"\x00"):
                warnings.append(f"{path.name}: {len(rest):,} bytes of garbage after the gzip stream; ignored")
            break
    _check_fits(path, total, "the decompressed trace")  # parsing needs several times the text
    return b"".join(parts)


def _parse(path: Path, data: bytes, warnings: list[str]) -> Any:
    if data.startswith(_UTF8_BOM):  # written by some Windows tools; not JSON, but harmless
        data = data[len(_UTF8_BOM):]
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        first_error = err
    if data.lstrip(b" \t\r\n\x00")[:1] not in (b"{", b"["):  # NULs: blocks a crash left unwritten
        raise TraceError(
            f"{path}: not JSON or gzip (starts with {data[:12]!r}); pass the .json or .json.gz file "
            "torch.profiler wrote (export_chrome_trace or tensorboard_trace_handler)"
        )
    cleaned, fixes = _clean(data)
    if fixes:
        try:
            doc = orjson.loads(cleaned)
        except orjson.JSONDecodeError:
            pass
        else:
            warnings.append(f"{path.name}: {', '.join(fixes)}")
            return doc
    salvaged = salvage_document(cleaned)
    if salvaged is None:
        if fixes:  # report what is still wrong once the encoding problems are repaired
            try:
                orjson.loads(cleaned)
            except orjson.JSONDecodeError as err:
                first_error = err
        raise TraceError(
            f"{path}: not valid JSON ({_short(first_error)}) and no trace events could be recovered; "
            "re-export the trace"
        )
    warnings.append(f"{path.name}: {_salvage_note(salvaged, fixes)}")
    return salvaged.doc


def _short(err: Exception) -> str:
    text = str(err)
    return text if len(text) <= 120 else text[:117] + "..."


def _salvage_note(s: Salvaged, fixes: list[str]) -> str:
    parts = []
    if s.header_lost:
        parts.append("the metadata before the events (deviceProperties, distributedInfo) is damaged and was dropped")
    if s.damaged_at:
        where = f"byte {s.damaged_at[0]:,}" if len(s.damaged_at) == 1 else \
            f"{len(s.damaged_at)} places, first at byte {s.damaged_at[0]:,}"
        parts.append(f"JSON is damaged at {where}: the damaged events were skipped")
    if s.gave_up:
        parts.append("too damaged to read on: the rest of the file was not read")
    if s.truncated:
        parts.append("JSON is truncated (the file ends mid-trace: the writer was interrupted or the disk filled)")
    note = "; ".join(parts) + f"; analysed the {s.events_kept:,} complete events recovered"
    return note + (f" ({', '.join(fixes)})" if fixes else "")


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
    data, n = _LONE_SURROGATE.subn(rb"\\ufffd", data)
    if n:
        fixes.append(f"{n} lone UTF-16 surrogates replaced")
    data, n = _NON_FINITE.subn(b"null", data)
    if n:
        fixes.append(f"{n} non-finite numbers read as null")
    return data, fixes
