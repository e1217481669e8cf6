"""Every case of the bad-input corpus (``tests/data/bad``) through the real ``bwdiag analyze``.

Salvage cases: exit 0, and the warning is in ``diagnosis.json``'s ``warnings`` and in the terminal
output (stderr). Refusals: exit 2, stderr is one ``bwdiag: error:`` line naming the file, and no
output folder is left behind. Expected numbers come from ``bad/cases.json``, which the corpus script
wrote from what it did to the real BERT trace, not from bwdiag.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bwdiag.cli import main

REPO = Path(__file__).resolve().parents[1]
BAD = REPO / "tests" / "data" / "bad"
CASES = json.loads((BAD / "cases.json").read_text())
BASE = CASES["_base"]


def run(args: list[str]):
    """The CLI in-process (click's runner keeps stdout and stderr apart)."""
    return CliRunner().invoke(main, args)


def flat(text: str) -> str:
    """Whitespace collapsed: the terminal may wrap a long line anywhere there is a space."""
    return " ".join(text.split())


def salvage(case: str, tmp_path: Path) -> tuple[dict, str]:
    """Analyse a salvage case: it must succeed; returns diagnosis.json and the terminal output."""
    out = tmp_path / "out"
    res = run(["analyze", str(BAD / case), "-o", str(out)])
    assert res.exit_code == 0, (res.stderr, res.exception)
    diagnosis = json.loads((out / "diagnosis.json").read_text(), parse_constant=_no_constants)
    assert (out / "report.html").stat().st_size > 0
    return diagnosis, res.stdout


def _no_constants(name: str):
    raise AssertionError(f"diagnosis.json holds {name}: not valid JSON for strict readers")


def warned(diagnosis: dict, terminal: str, *fragments: str) -> str:
    """The one warning holding every fragment; it must also be printed on the terminal."""
    hits = [w for w in diagnosis["warnings"] if all(f in w for f in fragments)]
    assert len(hits) == 1, (fragments, diagnosis["warnings"])
    assert flat(hits[0]) in flat(terminal), (hits[0], terminal)
    return hits[0]


def activities(diagnosis: dict, rank: int | None = None) -> int:
    return sum(k["count"] for k in diagnosis["kernels"] if rank is None or k["rank"] == rank)


# -- salvage ----------------------------------------------------------------------------------


def test_json_truncated_mid_event(tmp_path):
    facts = CASES["truncated_mid_event.json"]
    d, term = salvage("truncated_mid_event.json", tmp_path)
    warned(d, term, "truncated_mid_event.json: JSON is truncated",
           f"analysed the {facts['complete_events']:,} complete events recovered")
    assert activities(d) == facts["gpu_activities"] == 32
    assert d["device"]["name"] == "H100 SXM5 80GB"  # the header before the events survived


def test_json_missing_closing_bracket(tmp_path):
    facts = CASES["missing_closing_bracket.json.gz"]
    d, term = salvage("missing_closing_bracket.json.gz", tmp_path)
    warned(d, term, "JSON is truncated", f"analysed the {facts['complete_events']:,} complete events")
    assert facts["complete_events"] == BASE["events"]  # nothing but the closing was lost
    assert activities(d) == BASE["gpu_activities"]
    assert sum(k["total_us"] for k in d["kernels"]) == pytest.approx(BASE["gpu_us"], abs=1e-6)


def test_gzip_stream_cut_short(tmp_path):
    facts = CASES["gzip_cut_short.json.gz"]
    d, term = salvage("gzip_cut_short.json.gz", tmp_path)
    warned(d, term, f"gzip stream is cut short; analysed the {facts['recovered_bytes']:,} bytes recovered")
    warned(d, term, "JSON is truncated", f"analysed the {facts['complete_events']:,} complete events")
    assert activities(d) == facts["gpu_activities"]


def test_gzip_corrupt_mid_stream_keeps_what_came_before(tmp_path):
    facts = CASES["gzip_corrupt_mid_stream.json.gz"]
    d, term = salvage("gzip_corrupt_mid_stream.json.gz", tmp_path)
    warned(d, term, f"gzip data is corrupt after {facts['recovered_bytes']:,} bytes", "analysed what came before")
    warned(d, term, "JSON is damaged at", "the damaged events were skipped")
    assert 0 < activities(d) < BASE["gpu_activities"]


def test_json_damaged_mid_file_keeps_the_events_after_the_damage(tmp_path):
    facts = CASES["damaged_mid_file.json.gz"]
    d, term = salvage("damaged_mid_file.json.gz", tmp_path)
    warned(d, term, f"JSON is damaged at {facts['damaged']} places, first at byte {facts['first_damage_byte']:,}",
           f"analysed the {facts['complete_events']:,} complete events recovered")
    assert activities(d) == facts["gpu_activities"] == BASE["gpu_activities"] - 2


def test_non_finite_numbers(tmp_path):
    facts = CASES["non_finite_numbers.json.gz"]
    d, term = salvage("non_finite_numbers.json.gz", tmp_path)
    warned(d, term, f"{facts['non_finite']} non-finite numbers read as null")
    warned(d, term, f"skipped malformed events ({facts['missing_dur']} missing dur, {facts['missing_ts']} missing ts)")
    assert activities(d) == facts["gpu_activities"] == BASE["gpu_activities"] - 3


def test_control_characters_in_names(tmp_path):
    facts = CASES["control_chars_in_names.json.gz"]
    d, term = salvage("control_chars_in_names.json.gz", tmp_path)
    warned(d, term, f"{facts['control_chars']} control characters replaced")
    names = {k["name"] for k in d["kernels"]}
    assert set(facts["names"]) <= names
    assert activities(d) == BASE["gpu_activities"]


def test_invalid_utf8_in_names(tmp_path):
    facts = CASES["invalid_utf8_in_names.json.gz"]
    d, term = salvage("invalid_utf8_in_names.json.gz", tmp_path)
    warned(d, term, "invalid UTF-8 replaced")
    names = {k["name"] for k in d["kernels"]}
    assert set(facts["names"]) <= names  # each bad byte sequence became U+FFFD
    assert activities(d) == BASE["gpu_activities"]


def test_unknown_categories(tmp_path):
    facts = CASES["unknown_categories.json.gz"]
    d, term = salvage("unknown_categories.json.gz", tmp_path)
    w = warned(d, term, "ignored events of categories bwdiag does not use")
    assert w.endswith(f": {facts['category']} ({facts['events']})")  # categories read past on purpose not listed
    assert activities(d) == BASE["gpu_activities"]


def test_events_missing_ts_dur_or_args(tmp_path):
    facts = CASES["missing_ts_dur_args.json.gz"]
    d, term = salvage("missing_ts_dur_args.json.gz", tmp_path)
    warned(d, term, f"skipped malformed events ({facts['missing_dur']} missing dur, {facts['missing_ts']} missing ts)")
    warned(d, term, f"{facts['missing_args']} GPU activities or runtime calls have no args")
    pct = 100 * facts["no_args_us"] / facts["kernel_us_left"]
    warned(d, term, f"{facts['missing_args']} kernels ({facts['no_args_us']:.1f} µs, {pct:.1f}% of kernel time) "
                    "are not linked")
    assert activities(d) == facts["gpu_activities"] == BASE["gpu_activities"] - 5


def test_zero_durations_kept_negative_dropped(tmp_path):
    facts = CASES["zero_and_negative_durations.json.gz"]
    d, term = salvage("zero_and_negative_durations.json.gz", tmp_path)
    w = warned(d, term, f"skipped malformed events ({facts['negative']} negative dur)")
    assert d["warnings"] == [w]  # instant kernels are legitimate: no warning about them
    assert activities(d) == facts["gpu_activities"] == BASE["gpu_activities"] - facts["negative"]
    rows = {k["name"]: k for k in d["kernels"]}
    for name in facts["zero_names"]:
        assert rows[name]["count"] == 1 and rows[name]["total_us"] == 0.0
        assert rows[name]["achieved_flops_per_s"] is None  # no rate from a zero time
    # The instant GEMM keeps its op's cost: addmm of [141, 512] x [512, 30522] is 2·141·512·30522 FLOPs.
    gemm = next(rows[n] for n in facts["zero_names"] if "gemm" in n)
    assert gemm["flops"] == 2 * 141 * 512 * 30522


def test_kernels_whose_launch_is_missing(tmp_path):
    facts = CASES["missing_launches.json.gz"]
    d, term = salvage("missing_launches.json.gz", tmp_path)
    n = facts["unlinked_kernels"]
    warned(d, term, f"{n} kernels ({facts['unlinked_us']:.1f} µs, {facts['unlinked_pct']:.1f}% of kernel time) "
                    f"are not linked to the op that launched them ({n} have no launch event in the trace)",
           "The trace records launches, but not these")
    # linked_pct is over compute kernels: the trace's one memcpy (gpu_us − kernel_us) is not counted
    linked = 100 * (BASE["kernel_us"] - facts["unlinked_us"]) / BASE["kernel_us"]
    assert d["coverage"]["linked_pct"] == pytest.approx(linked, abs=0.01)


def test_device_properties_missing(tmp_path):
    d, term = salvage("no_device_properties.json.gz", tmp_path)
    warned(d, term, "a GPU with no name in deviceProperties is not in bwdiag's device table", "--device-spec")
    assert d["device"]["spec_source"] == "assumed"
    assert activities(d) == BASE["gpu_activities"]


def test_unknown_device(tmp_path):
    facts = CASES["unknown_device.json.gz"]
    d, term = salvage("unknown_device.json.gz", tmp_path)
    warned(d, term, f"GPU {facts['device']!r} is not in bwdiag's device table", "--device-spec")
    assert d["device"]["spec_source"] == "assumed"


def test_one_unreadable_rank_among_good_ones(tmp_path):
    d, term = salvage("one_bad_rank", tmp_path)
    warned(d, term, "skipped unreadable rank file:", "one_bad_rank/rank2.json.gz: gzip data is corrupt")
    assert d["source"]["ranks"] == [0, 1]
    assert activities(d, 0) == activities(d, 1) == BASE["gpu_activities"]


def test_two_files_claim_the_same_rank(tmp_path):
    d, term = salvage("duplicate_rank", tmp_path)
    warned(d, term, "node1_worker.json.gz and node0_worker.json.gz both claim rank 0; "
                    "node1_worker.json.gz is analysed as rank 1")
    assert d["source"]["ranks"] == [0, 1]


def test_distributed_info_missing(tmp_path):
    d, term = salvage("no_distributed_info", tmp_path)
    warned(d, term, "worker_a.json.gz: no rank in distributedInfo or the file name; treated as rank 0")
    warned(d, term, "worker_b.json.gz: no rank in distributedInfo or the file name; treated as rank 1")
    assert d["source"]["ranks"] == [0, 1]


def test_old_kineto_categories_read_like_new_ones(tmp_path):
    d, term = salvage("old_kineto_categories.json.gz", tmp_path)
    assert d["warnings"] == []
    assert activities(d) == BASE["gpu_activities"]
    assert sum(k["total_us"] for k in d["kernels"]) == pytest.approx(BASE["gpu_us"], abs=1e-6)
    assert d["coverage"]["linked_pct"] == 100.0  # Runtime/Operator still link kernels to ops


def test_html_and_terminal_escapes_in_names_are_shown_not_run(tmp_path):
    facts = CASES["html_in_names.json.gz"]
    d, term = salvage("html_in_names.json.gz", tmp_path)
    rows = {k["name"]: k for k in d["kernels"]}
    assert set(facts["kernel_names"]) <= set(rows)  # JSON keeps them byte for byte
    assert rows[facts["op_kernel"]]["op"] == facts["op_name"]
    # Terminal: HTML and rich markup printed literally; an ESC/BEL shown as \x1b / \x07, never sent.
    assert facts["kernel_names"][0] in term
    assert facts["kernel_names"][1] in term
    assert r"\x1b[2J\x07clear_screen" in term
    assert "\x1b" not in term and "\x07" not in term
    html = (tmp_path / "out" / "report.html").read_text()
    assert facts["kernel_names"][0] not in html and facts["op_name"] not in html  # escaped in the page


# -- refusals ---------------------------------------------------------------------------------

REFUSALS = [
    # (case, what is wrong, what to do)
    ("empty.json", "the file is empty", "re-export the trace"),
    ("not_json_or_gzip.json", "not JSON or gzip (starts with b'step 10 loss')", "pass the .json or .json.gz file"),
    ("corrupt_gzip.json.gz", "gzip data is corrupt", "copy the file again or re-export it"),
    ("not_a_trace.json", "JSON but not a torch.profiler trace (no traceEvents list)", "pass a file written by"),
    ("array_of_numbers.json", "none of its 3 events is a CPU op, GPU kernel or runtime call (3 not an object)",
     "pass a file written by"),
    ("no_events.json.gz", "the trace holds no events", "check that the profiled code ran inside"),
    ("bwdiag_output/diagnosis.json", "this is a diagnosis bwdiag wrote, not a trace", "source.paths"),
    ("bwdiag_output", "folder holds no trace files", "point at the folder"),
    ("empty_folder", "folder holds no trace files", "point at the folder"),
    ("does_not_exist.json.gz", "no such file or folder", ""),
]


def refused(res, named: str, what: str, todo: str) -> None:
    assert res.exit_code == 2, (res.stderr, res.exception)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"bwdiag: error: {named}"), lines[0]
    assert what in lines[0] and todo in lines[0], lines[0]
    assert res.stdout == ""


@pytest.mark.parametrize(("case", "what", "todo"), REFUSALS, ids=[c for c, _, _ in REFUSALS])
def test_refused_with_one_line_and_nothing_written(case, what, todo, tmp_path):
    out = tmp_path / "out"
    res = run(["analyze", str(BAD / case), "-o", str(out)])
    refused(res, str(BAD / case), what, todo)
    assert list(tmp_path.iterdir()) == []  # no output folder, no probe left behind


def test_refusal_in_a_real_process_has_no_traceback(tmp_path):
    """The installed entry point (python -m bwdiag), not click's runner: one line, exit 2."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(BAD / "not_json_or_gzip.json"),
                           "-o", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"bwdiag: error: {BAD / 'not_json_or_gzip.json'}: not JSON or gzip")
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not out.exists()


def test_output_path_is_a_file(tmp_path):
    target = tmp_path / "taken"
    target.write_text("mine")
    res = run(["analyze", str(BAD / "unknown_device.json.gz"), "-o", str(target)])
    refused(res, str(target), "exists and is not a folder", "choose another -o/--out")
    assert target.read_text() == "mine"


def test_output_path_below_a_file(tmp_path):
    (tmp_path / "file").write_text("mine")
    out = tmp_path / "file" / "out"
    res = run(["analyze", str(BAD / "unknown_device.json.gz"), "-o", str(out)])
    refused(res, str(out), "is not a folder", "choose another -o/--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (unwritable even for root)")
def test_output_path_that_cannot_be_written_fails_before_the_analysis():
    """/proc refuses new entries even for root, whose permission bits say yes to everything."""
    res = run(["analyze", str(BAD / "unknown_device.json.gz"), "-o", "/proc/bwdiag-out"])
    refused(res, "/proc/bwdiag-out", "cannot write in /proc", "choose another -o/--out")


def test_existing_outputs_are_not_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "diagnosis.json").write_text("{}")
    res = run(["analyze", str(BAD / "unknown_device.json.gz"), "-o", str(out)])
    refused(res, str(out), "already holds diagnosis.json", "pass --force")
    assert (out / "diagnosis.json").read_text() == "{}"


def test_trace_larger_than_free_memory_is_refused_not_killed(tmp_path, monkeypatch):
    """A gzip that expands past the free memory is stopped with a message, before the OOM killer acts."""
    from bwdiag.trace import read

    monkeypatch.setattr(read, "available_memory", lambda: 100_000)  # 0.1 MB free
    case = BAD / "reference_good.json.gz"  # 21 kB on disk, 297 kB of JSON inside
    res = run(["analyze", str(case), "-o", str(tmp_path / "out")])
    refused(res, str(case), "more than the 0.0 GB of free memory", "analyse it on a machine with more memory")


def _gpu_trace_text() -> str:
    """A small GPU trace as Kineto orders it: deviceProperties, the host's events, then the device's."""
    host = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
             "args": {"Input Dims": [[1024], [1024]], "Input type": ["float", "float"]}} for i in range(20)]
    host += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10 * i + 1,
              "dur": 3, "args": {"correlation": 100 + i}} for i in range(20)]
    device = [{"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7,
               "ts": 10 * i + 6, "dur": 2, "args": {"correlation": 100 + i, "device": 0, "stream": 7}}
              for i in range(20)]
    doc = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "numSms": 108}],
           "traceEvents": host + device}
    return json.dumps(doc)


def test_a_gpu_trace_cut_before_its_device_events_is_refused(tmp_path):
    text = _gpu_trace_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index('"cat": "kernel"') + 5])  # ends inside the first kernel event
    out = tmp_path / "out"
    res = run(["analyze", str(cut), "-o", str(out)])
    refused(res, str(cut), "cut or damaged before its GPU activity: 20 kernel launches are recorded but none "
                           "of their kernels", "copy the whole file again")
    assert not out.exists()


def test_launches_without_device_activity_in_an_intact_file_are_named(tmp_path):
    doc = json.loads(_gpu_trace_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "kernel"]  # CUPTI recorded nothing
    path = tmp_path / "nokernels.json"
    path.write_text(json.dumps(doc))
    res = run(["analyze", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, (res.stderr, res.exception)
    d = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert any("20 kernel launches are recorded but no GPU activity" in w for w in d["warnings"])


def test_a_gpu_trace_cut_inside_its_host_events_is_refused(tmp_path):
    """The helper's case: a real H100 trace's gzip cut at 30,000 bytes keeps only host events (no
    launch, no deviceProperties: Kineto writes those later), but its ``[memory]`` events on
    Device Type 1 (CUDA) say the ops ran on a GPU: no CPU diagnosis of them."""
    import gzip

    from conftest import H100_BERT, shared_trace

    whole = gzip.decompress(shared_trace(H100_BERT).read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(whole)[:30_000])
    res = run(["analyze", str(cut), "-o", str(tmp_path / "out")])
    # (how many of the memory events survive depends on the compressor's block boundaries)
    refused(res, str(cut), "memory events on a GPU are recorded but no launch or GPU activity was recovered",
            "copy the whole file again")
    assert "cut or damaged before its GPU activity: " in res.stderr
    assert not (tmp_path / "out").exists()


def test_memory_events_on_a_gpu_in_an_intact_cpu_only_recording_are_named(tmp_path):
    # profile_memory=True without ProfilerActivity.CUDA: CUDA allocations, host events only
    memory = [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
               "ts": 10 * i + 2, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096, "Addr": 1 + i}}
              for i in range(5)]
    memory.append({**memory[0], "args": {**memory[0]["args"], "Device Type": 0}})  # one on the CPU
    host = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
             "args": {"Input Dims": [[1024], [1024]], "Input type": ["float", "float"]}} for i in range(20)]
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps({"traceEvents": host + memory}))
    res = run(["analyze", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, (res.stderr, res.exception)
    d = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert any("5 memory events on a GPU are recorded but no launch or GPU activity" in w for w in d["warnings"])
    assert d["source"]["trace_kind"] == "cpu"
