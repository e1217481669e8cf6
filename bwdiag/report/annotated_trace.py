"""``--annotated-trace``: the analysed trace written back with bwdiag's classification, for Perfetto.

Open the file in ui.perfetto.dev (or chrome://tracing) and every kernel, memcpy and memset — on a
CPU-only trace every leaf op bwdiag priced — carries an ``args.bwdiag`` object: bound, its group's
ceiling and % of ceiling, its own FLOPs and bytes, the group's label and the ids of the findings
that act on it (``F1`` … as numbered in the report and in ``diagnosis.json``'s ``findings``). A
process named ``bwdiag`` holds a counter track of time by bound (per 1/100 of the window, % of
it) and one track per finding, a slice spanning what the finding acts on with its title, saving
and fix in ``args``.

Nothing else changes: every original event stays as it was (same order, same fields; the additions
follow them) and so does every top-level key (``deviceProperties``, ``distributedInfo``,
``displayTimeUnit`` …), so the file stays a Chrome trace that Perfetto, chrome://tracing and HTA
load, and ``bwdiag analyze`` on it says what it says on the original. A damaged input is written
back as bwdiag read it (what the loader salvaged). The file is written atomically, ``.json`` or
``.json.gz`` by its name.

One trace, one file: ``FILE`` names it (or names a folder, which gets the trace's own file name).
Several ranks: ``FILE`` is a folder and gets one annotated file per rank analysed, each with its
trace's file name — so HTA's ``TraceAnalysis(trace_dir=FILE)`` reads the job back. Files the
analysis left out (an unreadable rank, an earlier profiling window of the same process) are not
written.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import orjson

from bwdiag.errors import OutputError

SUFFIXES = (".json", ".json.gz")
#: The name of the process that holds bwdiag's tracks (what :func:`is_addition` recognises).
PROCESS_NAME = "bwdiag"
COUNTER_NAME = "time by bound (% of bin)"
_OPTION = "--annotated-trace"


@dataclass(frozen=True)
class AnnotatedTarget:
    """Where each analysed trace file's annotated copy goes (decided, and checked, before the analysis)."""

    path: Path  # what the user gave
    folder: bool
    outputs: dict[Path, Path]  # input file (resolved) -> output file
    force: bool = False
    written: list[Path] = field(default_factory=list)  # filled once written (pipeline.analyze)

    def output_for(self, trace_path: Path) -> Path:
        return self.outputs[Path(trace_path).resolve()]


def plan(target: str | os.PathLike, files: Sequence[Path], *, force: bool = False) -> AnnotatedTarget:
    """Decide and check the output paths for ``files`` (the traces about to be analysed): refuse, before
    any work, a path that exists (without ``force``), an input trace, a wrong suffix, or an unwritable place."""
    path = Path(target)
    files = [Path(f) for f in files]
    is_file_name = path.name.endswith(SUFFIXES)
    if path.exists() and path.is_dir():
        folder = True
    elif len(files) > 1:
        if path.exists() or is_file_name:
            raise OutputError(f"{_OPTION} {path}: {len(files)} trace files are analysed, so this must be a "
                              "folder (one annotated file per rank goes into it); choose a folder name")
        folder = True
    elif path.exists() and not path.is_file():
        raise OutputError(f"{_OPTION} {path}: exists and is not a file or folder; choose another path")
    elif not is_file_name:
        raise OutputError(f"{_OPTION} {path}: name the file .json or .json.gz (it is written as named), "
                          "or give an existing folder")
    else:
        folder = False
    outputs: dict[Path, Path] = {}
    if folder:
        taken: set[str] = set()
        for k, f in enumerate(files):
            name = f.name if f.name not in taken else f"{k}-{f.name}"
            taken.add(name)
            outputs[f.resolve()] = path / name
    else:
        outputs[files[0].resolve()] = path
    inputs = set(outputs)
    for out in outputs.values():
        if out.resolve() in inputs:
            raise OutputError(f"{_OPTION} {out}: is a trace being analysed; choose another path "
                              "(the original is never overwritten)")
        if out.exists() and not force:
            raise OutputError(f"{_OPTION} {out}: already exists; pass --force to overwrite or choose another path")
        if out.exists() and out.is_dir():
            raise OutputError(f"{_OPTION} {out}: is a folder; choose another path")
    _check_writable(path if folder else path.parent if str(path.parent) else Path("."), path)
    return AnnotatedTarget(path, folder, outputs, force)


def _check_writable(folder: Path, given: Path) -> None:
    import tempfile

    target = folder if folder.exists() else next((p for p in folder.absolute().parents if p.exists()), Path("/"))
    if not target.is_dir():
        raise OutputError(f"{_OPTION} {given}: {target} is not a folder; choose another path")
    try:
        probe = tempfile.mkdtemp(prefix=".bwdiag-probe-", dir=target)
    except OSError as err:
        raise OutputError(f"{_OPTION} {given}: cannot write in {target} ({err.strerror or err}); "
                          "choose another path") from None
    os.rmdir(probe)


def write(target: AnnotatedTarget, diagnosis, analyses, results=None) -> list[Path]:
    """Annotate and write every analysed rank's trace; returns the files written, in rank order.

    ``results``: the findings rules' results (``add_findings(..., results_out=)``); run again when
    not given. All files are rendered before the first is written, so a failure leaves none of this
    run's files.
    """
    from bwdiag.diagnose.annotations import annotations
    from bwdiag.report.files import write_atomic

    rendered: list[tuple[Path, bytes]] = []
    for ann in annotations(diagnosis, analyses, results):
        out = target.output_for(ann.path)
        rendered.append((out, encode(annotate_document(ann), out)))
    folder = target.path if target.folder else target.path.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # innermost first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{_OPTION} {target.path}: cannot create {folder} ({err.strerror or err})") from None
    written: list[Path] = []
    try:
        for out, data in rendered:
            write_atomic(out, data)
            written.append(out)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        for d in created:
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return written


def encode(doc: dict, out: Path) -> bytes:
    """The document as Kineto lays it out: the top-level keys first (``"key": value``, with the space
    after the colon: HTA finds a file's rank with the pattern ``"rank":\\s+N``), then ``traceEvents``,
    one event per line; gzip-compressed when ``out`` ends in ``.gz``."""
    import json

    parts = [b"{\n"]
    for key, value in doc.items():
        if key != "traceEvents":
            parts.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n".encode("utf-8"))
    parts.append(b'  "traceEvents": [\n')
    parts.append(b",\n".join(orjson.dumps(ev) for ev in doc["traceEvents"]))
    parts.append(b"\n  ]\n}\n")
    data = b"".join(parts)
    return gzip.compress(data, compresslevel=6, mtime=0) if out.name.endswith(".gz") else data


def annotate_document(ann) -> dict[str, Any]:
    """The trace document of ``ann.path`` (read as the loader reads it) with ``ann``'s additions."""
    from bwdiag.trace.keys import event_key
    from bwdiag.trace.read import read_trace_file

    raw = read_trace_file(Path(ann.path))
    events = _without_earlier_annotations(raw.events)
    pending = {k: list(v) for k, v in ann.rows.items()}
    t0 = ann.t0_us
    for ev in events:
        if not pending:
            break
        key = event_key(ev, t0)
        if key is None:
            continue
        queue = pending.get(key)
        if not queue:
            continue
        entry = queue.pop(0)
        if not queue:
            del pending[key]
        args = ev.get("args")
        if args is None and "args" not in ev:
            ev["args"] = {"bwdiag": entry}
        elif type(args) is dict:
            args["bwdiag"] = entry
    events.extend(additions(ann, bwdiag_pid(events)))
    doc = dict(raw.metadata)
    doc["traceEvents"] = events
    return doc


def is_bwdiag_process(ev: Any) -> bool:
    """Whether ``ev`` is the ``process_name`` event of a bwdiag process (an annotated trace's)."""
    return (type(ev) is dict and ev.get("ph") == "M" and ev.get("name") == "process_name"
            and type(ev.get("args")) is dict and ev["args"].get("name") == PROCESS_NAME)


def _without_earlier_annotations(events: list) -> list:
    """An annotated trace annotated again: its earlier bwdiag process and ``args.bwdiag`` objects
    go, so the new file is what annotating the original gives."""
    pids = {ev.get("pid") for ev in events if is_bwdiag_process(ev)}
    if not pids:
        return events
    kept = [ev for ev in events if not (type(ev) is dict and ev.get("pid") in pids)]
    for ev in kept:
        if type(ev) is dict and type(ev.get("args")) is dict:
            ev["args"].pop("bwdiag", None)
    return kept


def bwdiag_pid(events: list) -> int:
    """A pid no event uses: one above the largest integer pid."""
    top = -1
    for ev in events:
        if type(ev) is dict:
            pid = ev.get("pid")
            if type(pid) is int and pid > top:
                top = pid
    return top + 1


def additions(ann, pid: int) -> list[dict[str, Any]]:
    """bwdiag's process: metadata events, the time-by-bound counter and one slice per finding."""
    t0 = ann.t0_us
    start = t0 + ann.window[0]
    out: list[dict[str, Any]] = [
        _meta("process_name", pid, 0, start, {"name": PROCESS_NAME}),
        _meta("process_labels", pid, 0, start, {"labels": f"rank {ann.rank}: bound classes and findings"}),
        _meta("process_sort_index", pid, 0, start, {"sort_index": -1}),
        _meta("thread_name", pid, 0, start, {"name": COUNTER_NAME}),
        _meta("thread_sort_index", pid, 0, start, {"sort_index": 0}),
    ]
    for k, f in enumerate(ann.findings, start=1):
        out.append(_meta("thread_name", pid, k, start, {"name": f"{f.id} · {f.kind}"}))
        out.append(_meta("thread_sort_index", pid, k, start, {"sort_index": k}))
    for ts, values in ann.counter:
        out.append({"ph": "C", "name": COUNTER_NAME, "pid": pid, "tid": 0, "ts": t0 + ts, "args": values})
    if ann.counter:
        zeros = {k: 0.0 for k in ann.counter[0][1]}
        out.append({"ph": "C", "name": COUNTER_NAME, "pid": pid, "tid": 0, "ts": t0 + ann.window[1], "args": zeros})
    for k, f in enumerate(ann.findings, start=1):
        out.append({"ph": "X", "name": f"{f.id}: {f.title}", "pid": pid, "tid": k, "ts": t0 + f.start_us,
                    "dur": max(0.0, f.end_us - f.start_us), "args": {**f.args, "activities": f.activities}})
    return out


def _meta(name: str, pid: int, tid: int, ts: float, args: dict) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": ts, "args": args}


def describe(paths: Sequence[Path]) -> str:
    """The terminal line for what was written."""
    if len(paths) == 1:
        return f"annotated trace: {paths[0]} (open it in ui.perfetto.dev)"
    return f"annotated traces: {len(paths)} files in {paths[0].parent} (open them in ui.perfetto.dev)"
