"""``bwdiag analyze … --annotated-trace FILE``: the trace written back with bwdiag's classification.

For every shared trace: every original event and top-level key survives unchanged (the additions
are only ``args.bwdiag`` and the events of the ``bwdiag`` process), the file is a valid Chrome trace
(a checker of the required fields per phase), HTA loads it exactly as it loads the original, and the
numbers agree with the diagnosis and with the raw events: each group's count and time summed from
the raw events carrying its label, the counter's bins summed to ``time.by_bound``, findings slices
over what they act on, a GEMM's FLOPs as 2·m·n·k from its op's shapes.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import H100_BERT, NO_SHARED_TRACES, REPO, SAMPLE_TRACES, SHARED_TRACES, raw_events, shared_trace

BOUNDS = ("compute", "memory", "latency", "unknown", "communication", "idle")


def _names() -> list[str]:
    """Every shared trace bwdiag analyses (capture-time traces are read beside their replay)."""
    if not SHARED_TRACES.is_dir():
        return [NO_SHARED_TRACES]
    return sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.rglob("*.json*")
                  if p.name.endswith((".json", ".json.gz")) and "capture_traces" not in p.parts)


def _read(path: Path) -> dict:
    with (gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path, encoding="utf-8")) as fh:
        doc = json.load(fh)
    return {"traceEvents": doc} if isinstance(doc, list) else doc


def _bwdiag_pid(events: list) -> int:
    (pid,) = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
              and e.get("args", {}).get("name") == "bwdiag"}
    return pid


def _strip(doc: dict, original: list) -> list:
    """The annotated events less bwdiag's additions: its process's events and ``args.bwdiag``."""
    pid = _bwdiag_pid(doc["traceEvents"])
    out = []
    for ev in (e for e in doc["traceEvents"] if e.get("pid") != pid):
        if isinstance(ev.get("args"), dict) and "bwdiag" in ev["args"]:
            ev = {**ev, "args": {k: v for k, v in ev["args"].items() if k != "bwdiag"}}
            if not ev["args"]:
                del ev["args"]  # args made only to hold bwdiag's object
        out.append(ev)
    return out


@pytest.fixture(scope="module", params=_names())
def annotated(request, tmp_path_factory):
    """One analysis per trace: (trace path, annotated file, its document, diagnosis.json as a dict)."""
    from bwdiag import pipeline
    from bwdiag.report.json_out import render_json

    path = shared_trace(request.param)
    out = tmp_path_factory.mktemp("annotated") / path.name
    target = pipeline.plan_annotated_trace(out, [path])
    diagnosis = pipeline.analyze([path], annotated=target)
    assert target.written == [out]
    return path, out, _read(out), json.loads(render_json(diagnosis))


def test_keeps_every_original_event_and_top_level_key(annotated):
    path, out, doc, _ = annotated
    original = raw_events(path)
    if isinstance(original, list):
        original = {"traceEvents": original}
    events = original.pop("traceEvents")
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == original
    assert _strip(doc, events) == events
    assert len(doc["traceEvents"]) > len(events)  # the additions are there


def _check_event(ev: dict) -> list[str]:
    """What is wrong with ``ev`` as a Chrome trace event (Trace Event Format, by phase)."""
    problems = []
    ph = ev.get("ph")
    if not isinstance(ph, str) or not ph:
        return ["no ph"]
    if "name" not in ev and ph not in ("s", "f", "t"):
        problems.append("no name")
    need = {"X": ("ts", "dur", "pid", "tid"), "B": ("ts", "pid", "tid"), "E": ("ts", "pid", "tid"),
            "i": ("ts", "pid"), "I": ("ts", "pid"), "C": ("ts", "pid", "args"), "M": ("pid", "args"),
            "s": ("ts", "pid", "id"), "f": ("ts", "pid", "id"), "t": ("ts", "pid", "id")}
    for field in need.get(ph, ("ts", "pid")):
        if field not in ev:
            problems.append(f"{ph} without {field}")
    for field in ("ts", "dur"):
        if field in ev and not (isinstance(ev[field], (int, float)) and not isinstance(ev[field], bool)
                                and math.isfinite(ev[field])):
            problems.append(f"{field} not a finite number")
    if ph == "X" and isinstance(ev.get("dur"), (int, float)) and ev["dur"] < 0:
        problems.append("negative dur")
    if ph == "C" and not (isinstance(ev.get("args"), dict) and ev["args"] and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in ev["args"].values())):
        problems.append("counter args not all numbers")
    if ph == "M":
        if ev.get("name") not in ("process_name", "process_labels", "process_sort_index", "thread_name",
                                  "thread_sort_index"):
            problems.append(f"unknown metadata {ev.get('name')!r}")
        elif not isinstance(ev.get("args"), dict):
            problems.append("metadata without args")
    if "args" in ev and not isinstance(ev["args"], dict):
        problems.append("args not an object")
    return problems


def test_is_a_valid_chrome_trace(annotated):
    path, out, doc, _ = annotated
    assert isinstance(doc["traceEvents"], list)
    original = _read(path)["traceEvents"]
    before = {i for i, e in enumerate(original) if _check_event(e)}  # the original's own quirks, if any
    bad = [(e, _check_event(e)) for i, e in enumerate(doc["traceEvents"]) if i not in before and _check_event(e)]
    assert bad == []
    pid = _bwdiag_pid(doc["traceEvents"])
    added = [e for e in doc["traceEvents"] if e.get("pid") == pid]
    assert {e["ph"] for e in added} >= {"M", "C"}
    named = {e["tid"] for e in added if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in added if e["ph"] in ("X", "C")} <= named  # every track is named
    assert pid not in {e.get("pid") for e in original if isinstance(e, dict)}


def _hta(path: Path):
    """HTA's TraceAnalysis on a folder holding only ``path``: (rank -> its DataFrame) or the exception."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / path.name).symlink_to(path.resolve())
        try:
            return TraceAnalysis(trace_dir=folder).t.traces
        except Exception as err:  # noqa: BLE001 - compared with what HTA does on the original
            return err


def test_hta_loads_it_as_it_loads_the_original(annotated):
    pytest.importorskip("hta")
    path, out, doc, _ = annotated
    before, after = _hta(path), _hta(out)
    if isinstance(before, Exception):  # HTA's own parser fails on a few real traces (a dtype overflow)
        assert type(after) is type(before) and str(after) == str(before)
        return
    assert not isinstance(after, Exception), after
    assert set(after) == set(before)  # the same rank, from distributedInfo
    pid = _bwdiag_pid(doc["traceEvents"])
    for rank, df in before.items():
        mine = after[rank][after[rank]["pid"] != pid]
        assert len(mine) == len(df)
        assert sorted(zip(mine["ts"], mine["dur"])) == sorted(zip(df["ts"], df["dur"]))


def _annotated_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if isinstance(e.get("args"), dict) and "bwdiag" in e["args"]]


def test_group_figures_agree_with_the_raw_events_and_diagnosis(annotated):
    path, out, doc, diag = annotated
    events = _annotated_events(doc)
    assert events
    # Every priced activity is annotated: as many as the diagnosis counts, each kernel group's count
    # and time equal to the raw events carrying its label (their own dur, read from the file).
    assert len(events) == sum(r["count"] for r in diag["kernels"])
    groups = defaultdict(list)
    for e in events:
        b = e["args"]["bwdiag"]
        groups[(e["name"], b["group"])].append(e)
    rows = defaultdict(list)
    for r in diag["kernels"]:
        rows[(r["name"], r["count"])].append(r)
    for (name, _), members in groups.items():
        b = members[0]["args"]["bwdiag"]
        assert b["group_count"] == len(members)
        assert math.isclose(b["group_total_us"], sum(float(e["dur"]) for e in members), rel_tol=1e-9, abs_tol=1e-6)
        match = [r for r in rows[(name, len(members))] if math.isclose(r["total_us"], b["group_total_us"], rel_tol=1e-9)
                 and r["bound"] == b["bound"] and r["ceiling"] == b["ceiling"]]
        assert match, (name, b)
        assert any(r["pct_of_ceiling"] == b["pct_of_ceiling"] for r in match)
        flops = [e["args"]["bwdiag"]["flops"] for e in members]
        if all(f is not None for f in flops):
            assert any(r["flops"] is not None and math.isclose(r["flops"], sum(flops), rel_tol=1e-9) for r in match)


def test_counter_adds_up_to_time_by_bound(annotated):
    path, out, doc, diag = annotated
    pid = _bwdiag_pid(doc["traceEvents"])
    samples = sorted((e for e in doc["traceEvents"] if e.get("pid") == pid and e["ph"] == "C"), key=lambda e: e["ts"])
    assert len(samples) == 101 and all(v == 0 for v in samples[-1]["args"].values())
    total = {k: 0.0 for k in BOUNDS}
    for s, nxt in zip(samples, samples[1:]):
        assert math.isclose(sum(s["args"].values()), 100.0, rel_tol=1e-6)
        for k in BOUNDS:
            total[k] += s["args"][k] / 100.0 * (nxt["ts"] - s["ts"])
    window = samples[-1]["ts"] - samples[0]["ts"]
    assert math.isclose(window, diag["time"]["total_us"], rel_tol=1e-9, abs_tol=1.0)
    for k in BOUNDS:  # to float precision of µs timestamps ~1e15 (0.25 µs per bin)
        assert math.isclose(total[k], diag["time"]["by_bound"][k], rel_tol=1e-6, abs_tol=30.0), k


def test_one_slice_per_finding_over_what_it_acts_on(annotated):
    path, out, doc, diag = annotated
    pid = _bwdiag_pid(doc["traceEvents"])
    slices = {e["args"]["id"]: e for e in doc["traceEvents"] if e.get("pid") == pid and e["ph"] == "X"}
    assert list(slices) == [f"F{i + 1}" for i in range(len(diag["findings"]))]  # one rank: every finding
    for i, f in enumerate(diag["findings"]):
        s = slices[f"F{i + 1}"]
        assert s["name"] == f"F{i + 1}: {f['title']}"
        assert (s["args"]["title"], s["args"]["fix"], s["args"]["kind"]) == (f["title"], f["fix"], f["kind"])
        assert s["args"]["est_saving_us"] == f["est_saving_us"] and s["args"]["evidence"] == f["evidence"]
    acted = defaultdict(list)
    for e in _annotated_events(doc):
        for fid in e["args"]["bwdiag"]["findings"]:
            acted[fid].append(e)
    for fid, members in acted.items():
        s = slices[fid]
        assert s["args"]["activities"] == len(members)
        assert math.isclose(s["ts"], min(float(e["ts"]) for e in members), abs_tol=0.5)
        assert math.isclose(s["ts"] + s["dur"], max(float(e["ts"]) + float(e["dur"]) for e in members), abs_tol=0.5)
    for fid, s in slices.items():  # findings on idle time (no activities) span the window
        if fid not in acted:
            assert s["args"]["activities"] == 0
            assert math.isclose(s["dur"], diag["time"]["total_us"], rel_tol=1e-9, abs_tol=1.0)


# -- figures worked out by hand ----------------------------------------------------------------------


def _annotate(trace: Path, out: Path, *extra: str, report: Path | None = None) -> subprocess.CompletedProcess:
    report = report or out.parent / "report"
    return subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(report),
                           "--annotated-trace", str(out), *extra], cwd=REPO, capture_output=True, text=True)


def test_gemm_flops_are_2mnk_from_the_op_shapes(tmp_path):
    """BERT-small on an H100: every ``aten::addmm`` launches one GEMM kernel (same External id); its
    annotated FLOPs are 2·m·n·k from the op's Input Dims ([bias], [m, k], [k, n])."""
    path = shared_trace(H100_BERT)
    out = tmp_path / "bert.json"
    done = _annotate(path, out)
    assert done.returncode == 0, done.stderr
    assert f"annotated trace: {out}" in done.stdout
    doc = _read(out)
    ops = {e["args"]["External id"]: e for e in doc["traceEvents"]
           if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"}
    kernels = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            kernels[e["args"].get("External id")].append(e)
    checked = 0
    for ext, op in ops.items():
        (kernel,) = kernels[ext]
        (m, k), (k2, n) = op["args"]["Input Dims"][1], op["args"]["Input Dims"][2]
        assert k == k2
        b = kernel["args"]["bwdiag"]
        assert b["flops"] == 2 * m * n * k and b["category"] == "gemm"
        checked += 1
    assert checked == 26


def test_cpu_trace_annotates_its_leaf_ops_and_reanalyses_the_same(tmp_path):
    """A CPU-only trace: the leaf ops bwdiag prices carry args.bwdiag; ``bwdiag analyze`` on the
    annotated file says what it says on the original (the additions are invisible to the loader)."""
    trace = SAMPLE_TRACES / "train_transformer_cpu" / "rank0.pt.trace.json.gz"
    out = tmp_path / "cpu.json.gz"
    done = _annotate(trace, out)
    assert done.returncode == 0, done.stderr
    with gzip.open(out, "rb") as fh:
        assert fh.read(1) == b"{"  # gzip, by the name
    doc = _read(out)
    annotated = _annotated_events(doc)
    assert annotated and {e["cat"] for e in annotated} == {"cpu_op"}
    mm = [e for e in annotated if e["name"] == "aten::mm"]
    for e in mm:  # [m, k] @ [k, n]
        (m, k), (_, n) = e["args"]["Input Dims"][:2]
        assert e["args"]["bwdiag"]["flops"] == 2 * m * n * k
    again = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(out), "-o", str(tmp_path / "again")],
                           cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    first = json.loads((tmp_path / "report" / "diagnosis.json").read_text())
    second = json.loads((tmp_path / "again" / "diagnosis.json").read_text())
    for d in (first, second):
        d["source"].pop("paths")
        d["warnings"] = [w.replace(trace.name, "X").replace(out.name, "X") for w in d["warnings"]]
    assert first == second


def test_ranks_go_into_a_folder_one_file_each(tmp_path):
    folder = SAMPLE_TRACES / "ddp_gloo_cpu"
    out = tmp_path / "annotated"
    done = _annotate(folder, out / "x.json")  # a file name for two ranks: refused before any work
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "2 trace files are analysed, so this must be a folder" in done.stderr
    assert not (tmp_path / "report").exists()
    done = _annotate(folder, out)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for name in names:
        original = raw_events(folder / name)
        doc = _read(out / name)
        assert doc["distributedInfo"] == original["distributedInfo"]
        assert _strip(doc, original["traceEvents"]) == original["traceEvents"]
    pytest.importorskip("hta")
    assert sorted(_folder_hta(out)) == [0, 1]  # HTA reads the job back, a rank per file


def _folder_hta(folder: Path):
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    return TraceAnalysis(trace_dir=str(folder)).t.traces


def test_refuses_bad_paths_in_one_line(tmp_path):
    trace = SAMPLE_TRACES / "decode_kv_cache_cpu" / "rank0.pt.trace.json.gz"
    existing = tmp_path / "a.json"
    existing.write_text("{}")
    cases = [
        (existing, (), "already exists; pass --force"),
        (tmp_path / "a.txt", (), "name the file .json or .json.gz"),
        (Path("/proc/x.json"), (), "cannot write in"),
        (trace, ("--force",), "is a trace being analysed"),
    ]
    for target, extra, words in cases:
        done = _annotate(trace, target, *extra, report=tmp_path / "report")
        assert done.returncode == 2, (target, done.stderr)
        assert done.stderr.startswith("bwdiag: error: --annotated-trace ") and words in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    assert existing.read_text() == "{}"
    done = _annotate(trace, existing, "--force", report=tmp_path / "report2")
    assert done.returncode == 0, done.stderr
    assert _annotated_events(_read(existing))
    folder = tmp_path / "into"
    folder.mkdir()
    done = _annotate(trace, folder, report=tmp_path / "report3")  # an existing folder takes the trace's own name
    assert done.returncode == 0, done.stderr
    assert [p.name for p in folder.iterdir()] == [trace.name]


def test_annotating_an_annotated_trace_gives_the_same_file(tmp_path):
    """The earlier bwdiag process and args.bwdiag objects are replaced, not stacked: byte for byte
    the file annotating the original gives (args made only for bwdiag stay, as ``{}``)."""
    trace = SAMPLE_TRACES / "decode_kv_cache_cpu" / "rank0.pt.trace.json.gz"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert _annotate(trace, first).returncode == 0
    done = _annotate(first, second, report=tmp_path / "report2")
    assert done.returncode == 0, done.stderr
    a, b = _read(first), _read(second)
    assert len(b["traceEvents"]) == len(a["traceEvents"])
    assert b == a


def test_a_truncated_trace_is_written_back_as_salvaged(tmp_path):
    """A trace cut off mid-event (the writer was interrupted): the events bwdiag recovered are
    written back, the cut one is not, and the file is whole JSON again; missing folders are made."""
    trace = SAMPLE_TRACES / "decode_kv_cache_cpu" / "rank0.pt.trace.json.gz"
    text = gzip.decompress(trace.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: int(len(text) * 0.8)])
    out = tmp_path / "new" / "folder" / "cut-annotated.json"
    done = _annotate(cut, out, report=tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert "truncated" in done.stdout
    doc = _read(out)
    original = json.loads(text)
    pid = _bwdiag_pid(doc["traceEvents"])
    kept = _strip(doc, original["traceEvents"])
    assert 0 < len(kept) < len(original["traceEvents"])
    assert kept == original["traceEvents"][: len(kept)]  # a prefix of the original events, unchanged
    assert _annotated_events(doc) and pid not in {e.get("pid") for e in kept}
