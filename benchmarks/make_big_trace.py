"""Make big traces from a real one: repeat its steps with shifted timestamps and ids.

Each copy of the source trace's events is shifted in time (past the end of the previous copy) and
in every id that links events together — ``correlation``, ``External id``, flow ``id``, ``Ev Idx``
and the ``ProfilerStep#N`` numbers — so linking, step counting and flows stay consistent: copy ``k``
of a kernel links to copy ``k`` of its op, never to another copy's. The output is written as gzip,
streamed event by event (a 10M-event trace is 3-4 GB of JSON; it never exists in memory at once).

    python benchmarks/make_big_trace.py SRC.json.gz --events 1000000 -o /tmp/big1m.json.gz
    python benchmarks/make_big_trace.py SRC.json.gz --events 109000 --ranks 8 -o /tmp/ranks8/

With ``--ranks N`` the output is a folder of N files whose ``distributedInfo.rank`` are 0..N-1.
Write outputs to /tmp, never into the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import orjson

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("correlation", "External id", "Ev Idx")


def load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return orjson.loads(raw)


def _id_span(events: list) -> int:
    """One more than the largest id of any kind, so shifted copies never collide."""
    top = 0
    for ev in events:
        args = ev.get("args")
        if isinstance(args, dict):
            for key in _ID_ARGS:
                v = args.get(key)
                if isinstance(v, int) and v > top:
                    top = v
        v = ev.get("id")
        if isinstance(v, int) and v > top:
            top = v
    return top + 1


def _time_span(events: list) -> tuple[float, float]:
    lo, hi = float("inf"), float("-inf")
    for ev in events:
        ts = ev.get("ts")
        if isinstance(ts, (int, float)):
            lo = min(lo, ts)
            hi = max(hi, ts + (ev.get("dur") if isinstance(ev.get("dur"), (int, float)) else 0))
    return lo, hi


def _steps(events: list) -> int:
    nums = [int(m.group(1)) for ev in events if isinstance(ev.get("name"), str) and (m := _STEP.match(ev["name"]))]
    return (max(nums) - min(nums) + 1) if nums else 0


def shifted(ev: dict, k: int, dt: float, did: int, dstep: int) -> dict:
    """Copy ``k`` of one event: times moved by ``k*dt``, ids by ``k*did``, step numbers by ``k*dstep``."""
    if k == 0 or ev.get("ph") == "M":
        return ev
    out = dict(ev)
    ts = ev.get("ts")
    if isinstance(ts, (int, float)):
        out["ts"] = ts + k * dt
    if isinstance(ev.get("id"), int):
        out["id"] = ev["id"] + k * did
    name = ev.get("name")
    if dstep and isinstance(name, str) and name.startswith("ProfilerStep#"):
        m = _STEP.match(name)
        if m:
            out["name"] = f"ProfilerStep#{int(m.group(1)) + k * dstep}"
    args = ev.get("args")
    if isinstance(args, dict) and any(key in args for key in _ID_ARGS):
        args = dict(args)
        for key in _ID_ARGS:
            v = args.get(key)
            if isinstance(v, int) and v >= 0:  # -1 means "none" in Kineto
                args[key] = v + k * did
        out["args"] = args
    return out


def write_trace(doc: dict, copies: int, out: Path, rank: int | None = None, world: int | None = None,
                level: int = 1) -> int:
    """Write ``copies`` shifted copies of ``doc``'s events to ``out`` (gzip). Returns the event count."""
    events = doc["traceEvents"]
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    if rank is not None:
        info = dict(meta.get("distributedInfo") or {})
        info["rank"] = rank
        if world is not None:
            info["world_size"] = world
        meta["distributedInfo"] = info
    lo, hi = _time_span(events)
    dt = float(int(hi - lo) + 1000)  # whole µs keep integer timestamps integer
    if all(isinstance(e.get("ts"), int) for e in events[:1000] if "ts" in e):
        dt = int(dt)
    did, dstep = _id_span(events), _steps(events)
    meta_only = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    n = 0
    with gzip.open(out, "wb", compresslevel=level) as fh:
        # The source's metadata first, spaced like Kineto writes it: HTA finds a file's rank with the
        # regex '"rank":\s+(\d+)' and would put every compact '"rank":3' file on rank 0.
        head = json.dumps(meta).encode()[:-1]
        fh.write(head + (b", " if meta else b"") + b'"traceEvents": [\n')
        first = True
        for ev in meta_only:
            fh.write((b"" if first else b",\n") + orjson.dumps(ev))
            first, n = False, n + 1
        for k in range(copies):
            chunk = [orjson.dumps(shifted(ev, k, dt, did, dstep)) for ev in body]
            fh.write((b"" if first else b",\n") + b",\n".join(chunk))
            first, n = False, n + len(chunk)
        fh.write(b"]}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("--events", type=int, default=1_000_000, help="about how many events per file")
    ap.add_argument("--ranks", type=int, default=0, help="write a folder of this many rank files")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    doc = load(args.source)
    per_copy = sum(1 for e in doc["traceEvents"] if e.get("ph") != "M")
    copies = max(1, round(args.events / per_copy))
    if args.ranks:
        args.out.mkdir(parents=True, exist_ok=True)
        for r in range(args.ranks):
            path = args.out / f"rank{r}.json.gz"
            n = write_trace(doc, copies, path, rank=r, world=args.ranks)
            print(f"{path}: {n:,} events", file=sys.stderr)
    else:
        n = write_trace(doc, copies, args.out)
        print(f"{args.out}: {n:,} events ({copies} copies)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
