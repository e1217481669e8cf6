"""Parse a trace file's ``traceEvents`` array in chunks, so the whole list of event dicts never exists.

A 1 GB trace parsed in one ``orjson.loads`` becomes ~10 GB of Python dicts. Here the file is read
(and gunzipped) block by block, the event array is cut at event boundaries into chunks of a few MB,
and each chunk is parsed and handed to a consumer (the :class:`~bwdiag.trace.events.Tabulator`) that
keeps only the columns bwdiag needs, so peak memory is the tables plus one chunk.

A cut is tried at the last ``},`` before the chunk limit and accepted only if ``[`` + chunk + ``]``
parses: a ``},`` inside a string or a nested object cannot give valid JSON (the string or the event
would be left open), so a valid parse proves the cut is an event boundary. The top-level keys before
the array (``deviceProperties`` …) and after it (tracelens files put ``deviceProperties`` last) are
kept as metadata. Anything unusual — damaged JSON, a truncated gzip stream, no ``traceEvents`` key —
raises :class:`NotStreamable`, and the caller falls back to the whole-file reader, which salvages
what it can and words the error (:mod:`bwdiag.trace.read`).
"""

from __future__ import annotations

import gc
import zlib
from collections import deque
from concurrent.futures import BrokenExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

CHUNK_BYTES = 8 << 20  # JSON bytes per parsed chunk (~10x that in transient dicts)
# With worker processes: 1 MB chunks, each process holding one chunk's dicts at a time (a 1M-event
# trace peaks at 1.6x its JSON size this way, 2.5x with 4 MB chunks; no slower).
WORKER_CHUNK_BYTES = 1 << 20
# JSON bytes handed to the workers before the caller's ``meanwhile`` runs: more than they parse
# while the analysis imports (~0.6 s), so they never run dry meanwhile.
_AHEAD_BYTES = 32 << 20
_READ_BYTES = 256 << 10  # file bytes per read: a gzip block inflates ~20x, and the first chunk should not wait
_HEAD_LIMIT = 64 << 20  # the traceEvents key must appear within this many bytes
_MAX_CUT_TRIES = 16
_GZIP_MAGIC = b"\x1f\x8b"


class NotStreamable(Exception):
    """The file is not a clean trace document; read it whole with the salvaging reader instead."""


class CutRejected(NotStreamable):
    """The parallel parse cannot go on (a chunk sent to a worker was not cut at an event boundary,
    or a worker process died, e.g. killed for memory): stream the file serially instead."""


@contextmanager
def paused_gc():
    """The cyclic garbage collector off for the duration: parsed events are trees (no cycles to
    find), yet millions of new dicts trigger collections that walk every live object: with pandas
    loaded that doubles the time of ``orjson.loads`` (0.26 s → 0.55 s on a 25 MB trace)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def tabulate_chunk(data: bytes):
    """Worker side of a parallel stream: parse one chunk of events and tabulate it (None if invalid)."""
    from bwdiag.trace.events import Tabulator

    with paused_gc():
        events = _loads(b"[" + data + b"]")
        if not isinstance(events, list):
            return None
        part = Tabulator()
        part.add(events)
        return part.detach()


def _blocks(path: Path, progress: Callable[[int, int], None] | None) -> Iterator[bytes]:
    """The file's (gunzipped) bytes, block by block; ``progress(done, total)`` in file bytes.

    Like the whole-file reader, refuses (TraceError) a trace whose text exceeds the free memory,
    checked on the first block and every 256 MB after: the tables need about as much again.
    """
    from bwdiag.trace.read import _check_fits

    text = checked = 0
    for block in _raw_blocks(path, progress):
        text += len(block)
        if not checked or text - checked > 256 << 20:
            _check_fits(path, text, "the decompressed trace (so far)" if checked else "the trace text")
            checked = text
        yield block


def _raw_blocks(path: Path, progress: Callable[[int, int], None] | None) -> Iterator[bytes]:
    from bwdiag.trace.sources import open_source, source_size

    try:
        fh = open_source(path)
    except OSError as err:
        raise NotStreamable(str(err)) from None
    with fh:
        total = source_size(path)
        first = fh.read(_READ_BYTES)
        done = len(first)
        if not first.startswith(_GZIP_MAGIC):
            block = first
            while block:
                yield block
                if progress:
                    progress(done, total)
                block = fh.read(_READ_BYTES)
                done += len(block)
            return
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        block = first
        while True:
            try:
                out = inflate.decompress(block)
                while inflate.eof and inflate.unused_data:  # a multi-member gzip file
                    rest = inflate.unused_data
                    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out += inflate.decompress(rest)
            except zlib.error as err:
                raise NotStreamable(f"gzip: {err}") from None
            if out:
                yield out
            if progress:
                progress(done, total)
            block = fh.read(_READ_BYTES)
            if not block:
                break
            done += len(block)
        if not inflate.eof:
            raise NotStreamable("gzip stream is cut short")
        tail = inflate.flush()
        if tail:
            yield tail


def _boundary(buf: bytes, limit: int) -> int:
    """Position of the last ``}`` before ``limit`` that is followed by ``,`` and the next ``{`` (or -1).

    Only a candidate: ``}, {`` can also sit inside a string or a nested list of objects; the parse
    of the chunk decides.
    """
    while True:
        cut = buf.rfind(b"},", 0, limit)
        if cut < 0:
            return -1
        nxt = cut + 2
        while nxt < len(buf) and buf[nxt] in b" \t\r\n":
            nxt += 1
        if nxt < len(buf) and buf[nxt] == 0x7B:  # "{"
            return cut
        limit = cut


def _loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def stream_events(path: Path, consume: Callable[[list], None], *, chunk_bytes: int | None = None,
                  progress: Callable[[int, int], None] | None = None, executor=None,
                  merge: Callable[[Any], None] | None = None,
                  meanwhile: Callable[[], None] | None = None) -> dict[str, Any]:
    """Feed the events of ``path`` to ``consume`` in chunks; return every other top-level key.

    Raises :class:`NotStreamable` when the file is not a clean JSON trace document (the caller then
    reads it whole, with salvage and error messages). ``consume`` may already have been called.

    With an ``executor`` (a process pool), whole chunks are parsed and tabulated by its workers
    (:func:`tabulate_chunk`) and their partial tables handed, in file order, to ``merge``; only the
    last events go to ``consume``. Rather than wait for a worker, this process parses queued chunks
    no worker has started, so a pool of N workers keeps N + 1 cores busy. A chunk a worker cannot
    parse, or a worker that dies, raises :class:`CutRejected`.
    ``meanwhile()`` is then called once, after the first ``_AHEAD_BYTES`` of chunks are handed out and
    before waiting for any: the caller's own work overlaps the parse. The garbage collector is paused
    while parsing and tabulating (:func:`paused_gc`), though not during ``meanwhile()``.
    """
    if meanwhile is not None:
        meanwhile = _with_gc(meanwhile, gc.isenabled())
    with paused_gc():
        return _stream_events(path, consume, chunk_bytes, progress, executor, merge, meanwhile)


class _Parsed:
    """A chunk parsed by the reading process itself, in the place of its worker's future."""

    def __init__(self, part) -> None:
        self.part = part

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def result(self):
        return self.part


def _with_gc(fn: Callable[[], None], enabled: bool) -> Callable[[], None]:
    """``fn`` run with the garbage collector as the caller had it (the caller's code may make cycles)."""
    def run() -> None:
        if enabled:
            gc.enable()
        try:
            fn()
        finally:
            gc.disable()
    return run


def _stream_events(path, consume, chunk_bytes, progress, executor, merge, meanwhile) -> dict[str, Any]:
    # Workers' chunks are smaller and few are in flight: every worker holds one chunk's dicts at once.
    chunk_bytes = chunk_bytes or (WORKER_CHUNK_BYTES if executor is not None else CHUNK_BYTES)
    # A few chunks queued per process (the workers and this one): none waits on the round trip.
    in_flight = 4 * (getattr(executor, "_max_workers", 1) + 1)
    pending: deque = deque()  # [future, chunk] in file order; chunk None once parsed here
    ahead = 0  # chunk bytes handed out before ``meanwhile`` ran

    def steal() -> bool:
        """Parse here the last queued chunk no worker has started (this process is the extra worker)."""
        for entry in reversed(pending):
            if entry[1] is not None and entry[0].cancel():
                entry[0], entry[1] = _Parsed(tabulate_chunk(entry[1])), None
                return True
        return False

    def drain(keep: int) -> None:
        while len(pending) > keep:
            if not pending[0][0].done() and steal():
                continue
            try:
                part = pending.popleft()[0].result()
            except BrokenExecutor:
                raise CutRejected("a worker process died") from None
            if part is None:
                for fut, _ in pending:
                    fut.cancel()
                raise CutRejected("a chunk was not cut at an event boundary")
            merge(part)

    blocks = _blocks(path, progress)
    buf = b""
    eof = False

    def fill(limit: int) -> None:
        nonlocal buf, eof
        parts = [buf]
        size = len(buf)
        while size < limit:
            block = next(blocks, None)
            if block is None:
                eof = True
                break
            parts.append(block)
            size += len(block)
        buf = b"".join(parts)

    # 1. The document's head: either a bare event array or an object whose traceEvents we find.
    fill(1)
    start = len(buf) - len(buf.lstrip())
    while not eof and start == len(buf):
        fill(len(buf) + 1)
        start = len(buf) - len(buf.lstrip())
    bare = buf[start:start + 1] == b"["
    if bare:
        metadata: dict[str, Any] = {}
        buf = buf[start + 1:]
    else:
        key = buf.find(b'"traceEvents"')
        while key < 0 and not eof and len(buf) < _HEAD_LIMIT:
            fill(len(buf) + _READ_BYTES)
            key = buf.find(b'"traceEvents"')
        if key < 0:
            raise NotStreamable("no traceEvents key")
        head = _loads(buf[:key] + b'"traceEvents":[]}')
        if not isinstance(head, dict):
            raise NotStreamable("the keys before traceEvents do not parse")
        head.pop("traceEvents")
        metadata = head
        rest = buf[key + len(b'"traceEvents"'):].lstrip()
        while not eof and len(rest) < 2:
            fill(len(buf) + _READ_BYTES)
            rest = buf[key + len(b'"traceEvents"'):].lstrip()
        if not rest.startswith(b":"):
            raise NotStreamable("traceEvents is not followed by ':'")
        rest = rest[1:].lstrip()
        if not rest.startswith(b"["):
            raise NotStreamable("traceEvents is not an array")
        buf = rest[1:]

    # 2. Whole chunks of events, cut at event boundaries.
    while True:
        fill(chunk_bytes + _READ_BYTES)
        if eof and len(buf) <= chunk_bytes + _READ_BYTES:
            break
        limit = chunk_bytes
        if executor is not None:
            cut = _boundary(buf, limit)
            if cut >= 0:
                chunk = buf[: cut + 1]
                try:
                    pending.append([executor.submit(tabulate_chunk, chunk), chunk])
                except BrokenExecutor:
                    raise CutRejected("a worker process died") from None
                del chunk
                buf = buf[cut + 2:]
                if meanwhile is not None:
                    ahead += cut + 1
                    if ahead < _AHEAD_BYTES:
                        continue  # keep the workers fed through the caller's work
                    meanwhile()
                    meanwhile = None
                drain(in_flight)
                continue
            if len(buf) > 32 * chunk_bytes:
                raise NotStreamable("no event boundary found")
            chunk_bytes *= 2
            continue
        for _ in range(_MAX_CUT_TRIES):
            cut = _boundary(buf, limit)
            if cut < 0:
                break
            events = _loads(b"[" + buf[: cut + 1] + b"]")
            if isinstance(events, list):
                consume(events)
                del events
                buf = buf[cut + 2:]
                break
            limit = cut
        else:
            raise NotStreamable("no event boundary found")
        if cut < 0:
            if len(buf) > 32 * chunk_bytes:
                raise NotStreamable("no event boundary found")
            chunk_bytes *= 2  # one huge event (or no boundary yet): take a larger chunk

    if meanwhile is not None and pending:
        meanwhile()
    drain(0)
    # 3. The last events and whatever top-level keys follow the array.
    if bare:
        events = _loads(b"[" + buf)
        if not isinstance(events, list):
            raise NotStreamable("the end of the event array does not parse")
        consume(events)
        return metadata
    tail = _loads(b'{"traceEvents":[' + buf)
    if not isinstance(tail, dict) or not isinstance(tail.get("traceEvents"), list):
        raise NotStreamable("the end of the document does not parse")
    consume(tail.pop("traceEvents"))
    metadata.update(tail)
    return metadata
