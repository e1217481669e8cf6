"""Pick the rank files of a big job to analyse: ``--ranks 0-7,128,1023`` and ``--sample N``.

Nothing here parses a whole trace. A file's rank and host come from its header (the top-level keys
Kineto writes before ``traceEvents``: ``distributedInfo.rank``, ``hostname`` or bwdiag's
``bwdiag.host.hostname``), else from its name (``rank3`` / tensorboard's ``HOST_PID.TS.pt.trace.json``).
``--sample`` also makes a cheap first pass over each file's step markers: the text is decompressed
and searched for ``ProfilerStep#N`` spans and their ``dur``, without building a single event.
"""

from __future__ import annotations

import re
import statistics
import zlib
from dataclasses import dataclass
from typing import Sequence

from bwdiag.errors import BwdiagError
from bwdiag.trace.sources import Source, open_source

_HEAD_BYTES = 64 << 10
_RANK_IN_HEAD = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_HOST_IN_HEAD = re.compile(rb'"hostname"\s*:\s*"([^"\\]{1,200})"')
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_HOST_IN_NAME = re.compile(r"^(.+?)_\d+\.\d+\.pt\.trace\.json")  # tensorboard_trace_handler's names
_STEP = re.compile(rb'"name"\s*:\s*"ProfilerStep#(\d+)"[^{}]*?"dur"\s*:\s*([0-9.eE+]+)')
_SPEC_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_BLOCK = 4 << 20


class SelectionError(BwdiagError):
    """A ``--ranks`` / ``--sample`` request that cannot be met (bad spec, ranks not in the folder)."""


@dataclass(frozen=True)
class RankFile:
    """A rank file with what the cheap look at it found (``None``: not found)."""

    path: Source
    rank: int | None
    host: str | None
    median_step_us: float | None = None


def parse_ranks(spec: str) -> list[int]:
    """``"0-7,128,1023"`` → the rank numbers, in order, each once; SelectionError otherwise."""
    out: list[int] = []
    items = spec.split(",")
    for item in items:
        m = _SPEC_ITEM.match(item)
        if not m:
            raise SelectionError(f"--ranks {spec!r}: {item.strip()!r} is not a rank or a range of ranks; "
                                 "write e.g. --ranks 0-7,128,1023")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise SelectionError(f"--ranks {spec!r}: the range {item.strip()} runs backwards; write {hi}-{lo}")
        out.extend(r for r in range(lo, hi + 1) if r not in out)
    return out


def _head(path: Source) -> bytes:
    """The first (decompressed) bytes of the file: where Kineto writes its metadata."""
    with open_source(path) as fh:
        raw = fh.read(_HEAD_BYTES)
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, _HEAD_BYTES * 4)
    except zlib.error:
        return b""


def identify(path: Source) -> RankFile:
    """The file's rank and host from its header, else its name."""
    try:
        head = _head(path)
    except OSError:
        head = b""
    m = _RANK_IN_HEAD.search(head)
    rank = int(m.group(1)) if m else None
    if rank is None and (n := _RANK_IN_NAME.search(path.name)):
        rank = int(n.group(1))
    h = _HOST_IN_HEAD.search(head)
    host = h.group(1).decode("utf-8", "replace") if h else None
    if host is None and (n := _HOST_IN_NAME.match(path.name)):
        host = n.group(1)
    return RankFile(path, rank, host)


def median_step_us(path: Source) -> float | None:
    """The median of the file's ProfilerStep spans (µs; per step id the longest of its spans), found
    by a text search of the decompressed file; None when it has none or cannot be read."""
    steps: dict[int, float] = {}
    tail = b""
    try:
        with open_source(path) as fh:
            first = fh.read(2)
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if first == b"\x1f\x8b" else None
            block = first + fh.read(_BLOCK)
            while block:
                text = inflate.decompress(block) if inflate is not None else block
                buf = tail + text
                last = 0
                for m in _STEP.finditer(buf):
                    try:
                        dur = float(m.group(2))
                    except ValueError:
                        continue
                    sid = int(m.group(1))
                    steps[sid] = max(steps.get(sid, 0.0), dur)
                    last = m.end()
                tail = buf[max(last, len(buf) - 1024):]
                block = fh.read(_BLOCK)
    except (OSError, zlib.error):
        pass  # a damaged file: whatever was found before the damage
    return statistics.median(steps.values()) if steps else None


def _spread_order(n: int) -> list[int]:
    """0..n-1 in an order whose every prefix is spread out: 0, n/2, n/4, 3n/4, … (van der Corput)."""
    bits = max(1, (n - 1).bit_length())

    def key(i: int) -> float:
        return int(format(i, f"0{bits}b")[::-1], 2) / (1 << bits)

    return sorted(range(n), key=lambda i: (key(i), i))


def select(files: Sequence[Source], *, ranks: str | None = None, sample: int | None = None
           ) -> tuple[list[Source], dict | None]:
    """The files to analyse and the ``source.selection`` record (``RankSelection.to_dict()`` shape);
    ``(files, None)`` when neither option is given."""
    if ranks is not None and sample is not None:
        raise SelectionError("--ranks and --sample pick ranks in two ways: give one of them")
    if ranks is None and sample is None:
        return list(files), None
    wanted = parse_ranks(ranks) if ranks is not None else []  # a bad spec fails before any file is read
    if sample is not None and sample < 1:
        raise SelectionError(f"--sample {sample}: sample at least one rank")
    found = [identify(f) for f in files]
    if ranks is not None:
        by_rank = {f.rank: f for f in found if f.rank is not None}
        missing = [r for r in wanted if r not in by_rank]
        if missing:
            have = sorted(by_rank)
            span = f"ranks {have[0]}–{have[-1]}" if have else "no file with a rank"
            raise SelectionError(f"--ranks {ranks}: no rank file for rank{'s' if len(missing) > 1 else ''} "
                                 f"{_short(missing)} among the {len(files)} files ({span})")
        picked = [(by_rank[r], f"asked for (--ranks {ranks})") for r in wanted]
        return _result(picked, f"--ranks {ranks}", len(files))
    if sample >= len(found):
        picked = [(f, f"all {len(found)} rank files (--sample {sample} asks for as many or more)") for f in found]
        return _result(picked, f"--sample {sample}", len(files))
    return _result(_sample(found, sample), f"--sample {sample}", len(files))


#: A rank is only called slow when its median step is beyond the job's median by more than this share
#: of it, or by more than :data:`SLOW_MADS` scaled median absolute deviations of the ranks' medians,
#: whichever is larger: a 0.3 % difference between two ranks is jitter, not a straggler.
SLOW_SHARE = 0.01
SLOW_MADS = 3.0


def slow_margin_us(medians: Sequence[float], job_median: float) -> float:
    """How far above ``job_median`` a rank's median step must be to be picked as one of the slowest:
    the larger of ``SLOW_SHARE`` of the median and ``SLOW_MADS`` × 1.4826 × MAD (the robust standard
    deviation of the ranks' medians, so a handful of stragglers do not widen it)."""
    mad = statistics.median(abs(m - job_median) for m in medians) if medians else 0.0
    return max(SLOW_SHARE * job_median, SLOW_MADS * 1.4826 * mad)


def _sample(found: list[RankFile], n: int) -> list[tuple[RankFile, str]]:
    from bwdiag.units import fmt_time

    timed = [RankFile(f.path, f.rank, f.host, median_step_us(f.path)) for f in found]
    with_steps = [f for f in timed if f.median_step_us is not None]
    medians = [f.median_step_us for f in with_steps]
    job_median = statistics.median(medians) if medians else 0.0
    bar = job_median + slow_margin_us(medians, job_median)
    above = [f for f in with_steps if f.median_step_us > bar]  # steps within the ranks' noise: none is slow
    n_slow = min(len(above), max(1, n // 4))
    picked: list[tuple[RankFile, str]] = []
    if n_slow:
        slow = sorted(above, key=lambda f: (-f.median_step_us, _order(f)))[:n_slow]
        picked = [(f, f"one of the {n_slow} slowest by a first pass over step markers: median step "
                      f"{fmt_time(f.median_step_us)} (all ranks' median {fmt_time(job_median)})") for f in slow]
    taken = {id(f.path) for f, _ in picked}
    rest = [f for f in timed if id(f.path) not in taken]
    hosts: dict[str | None, list[RankFile]] = {}
    for f in sorted(rest, key=_order):
        hosts.setdefault(f.host, []).append(f)
    queues = [[files[i] for i in _spread_order(len(files))] for _, files in sorted(hosts.items(), key=lambda h: str(h[0]))]
    named = len(hosts) > 1 or None not in hosts
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                f = q.pop(0)
                picked.append((f, f"spread across the {len(hosts)} nodes: host {f.host}" if named and f.host else
                               "spread across the ranks (no host in the trace metadata or file names)"))
    return picked


def _order(f: RankFile) -> tuple:
    return (f.rank if f.rank is not None else 1 << 62, str(f.path))


def _short(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _result(picked: list[tuple[RankFile, str]], how: str, n_files: int) -> tuple[list[Source], dict]:
    picked = sorted(picked, key=lambda p: _order(p[0]))
    return [f.path for f, _ in picked], {
        "how": how, "files": n_files,
        "ranks": [{"rank": f.rank if f.rank is not None else -1, "why": why} for f, why in picked]}
