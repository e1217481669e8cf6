"""``bwdiag diff BEFORE AFTER``: did the fix work?

Numbers are checked against the raw traces (ProfilerStep durations read with plain json) or worked
out by hand from a finding's own evidence, never against what the diff happened to print.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import H100_BERT, REPO, raw_events, shared_trace

A100_TRITON = "hta/triton_example/triton_example.json.gz"
OUTPUTS = {"diff.json", "diff.html"}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COLUMNS", None)
    return env


def _cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bwdiag", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=_env(), timeout=timeout)


def _doc(folder: Path) -> dict:
    return json.loads((folder / "diff.json").read_text())


def _step_durations(trace: Path, cat: str) -> list[float]:
    events = raw_events(trace)["traceEvents"]
    return [e["dur"] for e in events if e.get("cat") == cat and str(e.get("name", "")).startswith("ProfilerStep#")]


# ---------------------------------------------------------------------------- a run with itself


def test_a_trace_with_itself_shows_no_change(tmp_path):
    trace = shared_trace(H100_BERT)
    out = tmp_path / "same"
    result = _cli("diff", str(trace), str(trace), "-o", str(out), "--fail-if-slower", "1")
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.iterdir()} == OUTPUTS
    doc = _doc(out)
    assert doc["schema"] == "bwdiag/diff@1"
    # The trace's one GPU ProfilerStep span (gpu_user_annotation ProfilerStep#6) is 3907.827 µs.
    (gpu_step,) = _step_durations(trace, "gpu_user_annotation")
    assert doc["step"]["before"]["median_us"] == pytest.approx(gpu_step)
    assert doc["step"]["after"]["median_us"] == pytest.approx(gpu_step)
    assert doc["step"]["delta_us"] == 0 and not doc["step"]["beyond_noise"]
    assert doc["step"]["verdict"] == "no change"
    # another tool's trace: no unprofiled steps, the gate is on the recorded ones
    assert doc["gate"] == {"fail_if_slower_pct": 1.0, "limit_us": pytest.approx(0.01 * gpu_step), "failed": False,
                           "on": "recorded"}
    assert doc["headline"]["source"] == "recorded" and doc["headline"]["verdict"] == "no change"
    assert doc["warnings"] == []
    groups = doc["kernels"]["groups"]
    assert groups and all(g["status"] == "matched" and g["delta_us"] == 0 for g in groups)
    assert doc["kernels"]["matched_share_of_before_pct"] == pytest.approx(100.0)
    assert doc["findings"] and all(f["status"] == "still there" and f["realised_us"] == 0 for f in doc["findings"])
    assert "No change beyond the noise" in result.stdout
    page = (out / "diff.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script src" not in page
    embedded = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded) == doc
    # A second diff into the same folder needs --force.
    again = _cli("diff", str(trace), str(trace), "-o", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr


# ------------------------------------------------------------------ one of two sleeps removed

_WORKLOAD = textwrap.dedent(
    """
    import time, torch
    m = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(4, 16)
    for i in range(10):
        m(x).square().mean().backward()
        for _ in range({sleeps}):
            time.sleep(0.05)
        opt.step()
        opt.zero_grad()
    """
)


@pytest.fixture(scope="module")
def sleep_runs(tmp_path_factory):
    """Two captured CPU runs: two 50 ms sleeps per step, then one."""
    root = tmp_path_factory.mktemp("sleeps")
    outs = {}
    for sleeps in (2, 1):
        script = root / f"sleep{sleeps}.py"
        script.write_text(_WORKLOAD.format(sleeps=sleeps))
        out = root / f"run{sleeps}"
        result = _cli("run", "--wait", "1", "--warmup", "1", "--active", "6", "-o", str(out), str(script),
                      cwd=root)
        assert result.returncode == 0, result.stderr
        outs[sleeps] = out
    return outs


def test_removing_one_of_two_sleeps_is_beyond_the_noise(sleep_runs, tmp_path):
    before, after = sleep_runs[2], sleep_runs[1]
    out = tmp_path / "d"
    result = _cli("diff", str(before), str(after), "-o", str(out), "--fail-if-slower", "1")
    assert result.returncode == 0, result.stderr
    assert {p.name for p in out.iterdir()} == OUTPUTS
    doc = _doc(out)
    assert doc["before"]["read_from"] == doc["after"]["read_from"] == "diagnosis.json"
    # The medians are those of the recorded ProfilerStep spans, read from the raw traces.
    raw_b = _step_durations(before / "rank0.pt.trace.json.gz", "user_annotation")
    raw_a = _step_durations(after / "rank0.pt.trace.json.gz", "user_annotation")
    assert len(raw_b) == len(raw_a) == 6
    s = doc["step"]
    assert s["before"]["median_us"] == pytest.approx(statistics.median(raw_b))
    assert s["after"]["median_us"] == pytest.approx(statistics.median(raw_a))
    # Noise: half the larger range of the steps, those over 1.5x their run's median left out.
    def spread(raw):
        ordinary = [x for x in raw if x <= 1.5 * statistics.median(raw)]
        return max(ordinary) - min(ordinary)

    assert s["noise_us"] == pytest.approx(max(spread(raw_b), spread(raw_a)) / 2)
    # One 50 ms sleep fewer per step: −50 ms within 10 %.
    assert -55_000 <= s["delta_us"] <= -45_000, s
    assert s["beyond_noise"] and s["verdict"] == "faster"
    assert doc["gate"]["failed"] is False
    # Nothing unfair, unless a loaded test host made one of the runs a busy-host recording.
    busy = [side for side in ("before", "after") if _oversubscribed(doc["runs"][side]["host_load"])]
    assert [w for w in doc["warnings"] if not w.startswith("busy host: ")] == []
    assert len(doc["warnings"]) == (1 if busy else 0), doc["warnings"]
    # The same two runs the other way round: slower by ~50 ms, beyond noise + 1 %: the gate fails.
    back = _cli("diff", str(after), str(before), "-o", str(tmp_path / "back"), "--fail-if-slower", "1")
    assert back.returncode == 1, back.stderr
    assert _doc(tmp_path / "back")["gate"]["failed"] is True
    assert "FAILED" in back.stdout


# ------------------------------------------------------------- a known fix: fused=True for AdamW

_ADAMW = textwrap.dedent(
    """
    import sys, torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*(torch.nn.Linear(32, 32) for _ in range(24)))
    fused = {fused}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=None if fused else False, fused=fused or None)
    x = torch.randn(16, 32)
    for _ in range(44):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
    """
)


def _unprofiled_median(run: Path) -> float:
    """The median of the steps ``bwdiag run`` timed after the profiler stopped, from its clock file."""
    return statistics.median(json.loads((run / "rank0.clock.json").read_text())["after_window"]["host_us"])


def test_fused_adamw_resolves_its_finding_and_realises_what_it_predicted(tmp_path):
    """Two captures: 24 Linear(32, 32) layers with AdamW's per-parameter loop (``foreach=False``), then
    ``fused=True``. The fused-step finding is resolved, the step is faster beyond the noise, and the
    saving it predicted (as run without the profiler) is the unprofiled steps' drop within 0.5–2×
    (2-core AMD EPYC VM, 7 Dec 2026: predicted 1.01 ms, realised 1.99 → 0.99 ms)."""
    # One pair of captures, recorded again once when the fixed run was no faster: inside the full suite
    # on the 2-core VM one fused capture ran its steps at 1.9 ms (twice its 0.97 ms alone) — a slow
    # process, which bwdiag's advice for it is to record again.
    for attempt in range(2):
        runs = {}
        for fused in (False, True):
            script = tmp_path / f"adamw_{fused}.py"
            script.write_text(_ADAMW.format(fused=fused))
            out = runs[fused] = tmp_path / f"run{attempt}_{fused}"
            result = _cli("run", "--wait", "1", "--warmup", "1", "--active", "6", "-o", str(out), str(script),
                          cwd=tmp_path)
            assert result.returncode == 0, result.stderr
        result = _cli("diff", str(runs[False]), str(runs[True]), "-o", str(tmp_path / f"d{attempt}"))
        assert result.returncode == 0, result.stderr
        doc = _doc(tmp_path / f"d{attempt}")
        if doc["step"]["unprofiled"]["verdict"] == "faster":
            break
    before = json.loads((runs[False] / "diagnosis.json").read_text())
    (adamw,) = [f for f in before["findings"] if f["title"] == "Use a fused AdamW step instead of per-parameter kernels"]
    after = json.loads((runs[True] / "diagnosis.json").read_text())
    assert not [f for f in after["findings"] if "AdamW" in f["title"]]
    (row,) = [f for f in doc["findings"] if f["title"] == adamw["title"]]
    assert row["status"] == "resolved"
    unprofiled = doc["step"]["unprofiled"]
    assert unprofiled["verdict"] == "faster"
    t = before["time"]
    assert (unprofiled["before_us"], unprofiled["after_us"]) == (t["unprofiled_step_us"], after["time"]["unprofiled_step_us"])
    # realised: the raw clock files' medians (the diagnoses leave out the slow steps right after the window)
    realised = _unprofiled_median(runs[False]) - _unprofiled_median(runs[True])
    predicted = adamw["est_saving_per_step_us"] * t["unprofiled_step_us"] / t["step_us"]
    assert 0.5 <= realised / predicted <= 2.0, (predicted, realised)


# ---------------------------------------------------------------------------- unfair comparisons


def test_other_devices_warn(tmp_path):
    h100, a100 = shared_trace(H100_BERT), shared_trace(A100_TRITON)
    result = _cli("diff", str(h100), str(a100), "-o", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    doc = _doc(tmp_path / "d")
    assert doc["runs"]["before"]["device"].startswith("H100")
    assert doc["runs"]["after"]["device"].startswith("A100")
    assert any(w.startswith("other device: BEFORE ran on H100") for w in doc["warnings"]), doc["warnings"]
    assert "warning: other device" in result.stdout


def _oversubscribed(load) -> bool:
    # Worked out here, not imported: more than one runnable process beyond the cores.
    return load is not None and load["load1"] > load["cores"] + 1.0


def test_a_busy_host_on_one_side_warns(sleep_runs, tmp_path):
    # The recorded load average of each run (the trace's bwdiag.host_load) reaches diagnosis.json ...
    before, after = sleep_runs[2], sleep_runs[1]
    for run in (before, after):
        with gzip.open(run / "rank0.pt.trace.json.gz", "rt") as fh:
            recorded = json.load(fh)["bwdiag"]["host_load"]
        trace_host = json.loads((run / "diagnosis.json").read_text())["device"]["trace_host"]
        assert trace_host["load1"] == recorded["load1"] and trace_host["cores"] == recorded["cores"] == os.cpu_count()
    # ... and diff says so when one side was recorded on an oversubscribed host: 2 cores, load 3.5.
    busy = tmp_path / "busy"
    shutil.copytree(after, busy)
    doc = json.loads((busy / "diagnosis.json").read_text())
    doc["device"]["trace_host"].update(load1=3.5, cores=2)
    (busy / "diagnosis.json").write_text(json.dumps(doc))
    quiet = tmp_path / "quiet"
    shutil.copytree(before, quiet)
    doc = json.loads((quiet / "diagnosis.json").read_text())
    doc["device"]["trace_host"].update(load1=0.4, cores=2)
    (quiet / "diagnosis.json").write_text(json.dumps(doc))
    result = _cli("diff", str(quiet), str(busy), "-o", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    d = _doc(tmp_path / "d")
    assert d["runs"]["before"]["host_load"] == {"load1": 0.4, "cores": 2}
    assert d["runs"]["after"]["host_load"] == {"load1": 3.5, "cores": 2}
    assert d["warnings"] == ["busy host: AFTER with a load average of 3.5 on 2 cores was recorded while the host "
                             "was oversubscribed; its op and step times include waiting for a CPU, so part of the "
                             "change may be the host's, not the code's"]
    assert "warning: busy host: AFTER" in result.stdout
    # At 3.0 on 2 cores (one runnable process beyond the cores, not more) nothing is said.
    doc["device"]["trace_host"].update(load1=3.0)
    (quiet / "diagnosis.json").write_text(json.dumps(doc))
    (busy / "diagnosis.json").write_text(json.dumps(doc))
    result = _cli("diff", str(quiet), str(busy), "-o", str(tmp_path / "d2"))
    assert result.returncode == 0 and _doc(tmp_path / "d2")["warnings"] == []


# ---------------------------------------------------------------------------------- bad inputs


def test_a_missing_side_is_one_line_and_exit_2(tmp_path):
    trace = shared_trace(H100_BERT)
    missing = tmp_path / "nope.json.gz"
    for args in ((str(trace), str(missing)), (str(missing), str(trace))):
        result = _cli("diff", *args, "-o", str(tmp_path / "d"))
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert str(missing) in result.stderr and "no such file or folder" in result.stderr
    assert not (tmp_path / "d").exists()


def test_a_missing_side_is_named_before_an_existing_output_folder(tmp_path):
    # the output folder already holds a diff: the missing input is still the first thing said
    out = tmp_path / "d"
    out.mkdir()
    (out / "diff.json").write_text("{}")
    missing = tmp_path / "nope"
    result = _cli("diff", str(missing), str(tmp_path), "-o", str(out))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"BEFORE {missing}: no such file or folder" in result.stderr
    assert "no such file or folder" in result.stderr and "already" not in result.stderr
    assert (out / "diff.json").read_text() == "{}"


def test_a_damaged_diagnosis_json_is_one_line_and_exit_2(tmp_path):
    trace = shared_trace(H100_BERT)
    damaged = tmp_path / "run"
    damaged.mkdir()
    (damaged / "diagnosis.json").write_text('{"schema": "bwdiag/diagnosis@2", "time": ')
    result = _cli("diff", str(damaged), str(trace), "-o", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert str(damaged / "diagnosis.json") in result.stderr and "not valid JSON" in result.stderr
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------- findings: predicted vs realised


@pytest.fixture(scope="module")
def bert():
    from bwdiag import pipeline

    return pipeline.analyze([shared_trace(H100_BERT)])


def test_findings_resolved_and_realised_on_the_groups_they_name(bert):
    from bwdiag.diff import compare

    # Found on the bert trace (the order is the graph's since issue 14: the GPU waits on the host,
    # so the batching finding's kernel saving re-times to ~0 and ranks below the quantization one).
    kinds = [str(f.kind) for f in bert.findings]
    assert {"launch_overhead", "batching", "sync"} <= set(kinds) and kinds[0] == "launch_overhead"
    launch, batching, sync = (next(f for f in bert.findings if f.kind == k) for k in ("launch_overhead", "batching", "sync"))
    # AFTER: the launch finding is gone, 1000 µs of idle less (one step, so step and window shrink
    # by the same 1000 µs), and the four latency-bound GEMM groups the batching finding names gone.
    named = [r for r in bert.kernels if r.op and f"({r.op}, {r.shapes})" in "\n".join(batching.evidence)]
    t = bert.time
    after = dataclasses.replace(
        bert,
        findings=tuple(f for f in bert.findings if f is not launch),
        kernels=tuple(r for r in bert.kernels if r not in named),
        time=dataclasses.replace(t, total_us=t.total_us - 1000, step_us=t.step_us - 1000,
                                 step_min_us=t.step_min_us - 1000, step_max_us=t.step_max_us - 1000,
                                 step_durations_us=tuple(x - 1000 for x in t.step_durations_us),
                                 by_bound={**t.by_bound, "idle": t.by_bound["idle"] - 1000}),
    )
    doc = compare(bert, after)
    rows = {f["kind"]: f for f in doc["findings"]}
    assert doc["step"]["delta_us"] == pytest.approx(-1000)
    # The launch finding is gone: resolved; it acts on idle, which fell by 1000 µs per step (up to
    # the window→step scaling: 3907.827 / 3907.825, a ppm).
    assert rows["launch_overhead"]["status"] == "resolved"
    assert rows["launch_overhead"]["measured_on"] == "idle time"
    assert rows["launch_overhead"]["realised_us"] == pytest.approx(1000, abs=0.5)
    # The batching finding's evidence: ×17 mean 5.81 µs, ×4 9.35, ×4 8.27, ×4 6.13 → 193.7 µs,
    # the "29 latency-bound GEMM/conv/attention kernels take 194 µs" of its first line.
    assert len(named) == 4
    assert rows["batching"]["groups"] and len(rows["batching"]["groups"]) == 4
    assert rows["batching"]["realised_us"] == pytest.approx(17 * 5.81 + 4 * 9.35 + 4 * 8.27 + 4 * 6.13, rel=2e-3)
    assert rows["batching"]["status"] == "still there"  # the finding itself is still in AFTER
    assert rows["sync"]["status"] == "still there"
    assert rows["sync"]["realised_on_step_us"] == pytest.approx(1000)
    assert rows["batching"]["predicted_us"] == pytest.approx(batching.est_saving_per_step_us)
    # The graph model's prediction rides beside the rule's, and the step's change is set against it.
    launch = next(f for f in bert.findings if f.kind == "launch_overhead")
    assert launch.graph_saving_per_step_us is not None and launch.graph_saving_per_step_us > 0
    assert rows["launch_overhead"]["graph_predicted_us"] == pytest.approx(launch.graph_saving_per_step_us)
    assert rows["launch_overhead"]["realised_on_step_over_graph"] == pytest.approx(
        1000 / launch.graph_saving_per_step_us)


def test_a_chain_is_the_same_finding_when_compile_drops_its_module_names():
    # With torch.compile in the script, bwdiag records no module annotations: the GPT-2 chains' titles lose
    # their module paths but keep their chain of ops over the same shape (a new-user run called
    # them "resolved" while AFTER still listed them).
    from types import SimpleNamespace

    from bwdiag.diagnose.model import Finding
    from bwdiag.diff.compare import _match_finding

    def fusion(title, chain):
        return Finding("fusion", title, 1000.0, 1.0, (chain, "unfused CPU ops move 44.1 MB in 12 ms"), "fix")

    ln = "a chain of 3 ops over f32[8, 128, 128] (×12 in the window, ≈4 per step): dropout → add → layer_norm"
    act = ("a chain of 8 ops over f32[8, 128, 512] (×6 in the window, ≈2 per step): mul → pow → mul → add → mul → "
           "tanh → add → mul")
    before_ln = fusion("Fuse 3 ops in GPT2LMHeadModel.transformer.{h.*.ln_*, ln_f} (×12 in the window)", ln)
    before_act = fusion("Fuse 8 ops in GPT2LMHeadModel.transformer.h.*.mlp.act (×6 in the window)", act)
    after_ln = fusion("Fuse 3 ops (dropout → add → layer_norm) (×12 in the window)", ln)
    after_act = fusion("Fuse 8 ops (mul → pow → mul → add → mul → tanh → add → mul) (×6 in the window)", act)
    after = SimpleNamespace(findings=(after_act, after_ln))
    assert _match_finding(before_ln, after) is after_ln and _match_finding(before_act, after) is after_act
    # The one fusion finding left in AFTER is not taken for another chain ...
    other = fusion("Fuse 2 ops (zero_ → _log_softmax_backward_data)",
                   "a chain of 2 ops over f32[1024, 4096] (×3 in the window): zero_ → _log_softmax_backward_data")
    assert _match_finding(before_ln, SimpleNamespace(findings=(other,))) is None
    # ... but still stands in for a finding of its kind that names no chain.
    plain = Finding("fusion", "Fuse the optimizer", 10.0, 1.0, ("no chain here",), "fix")
    assert _match_finding(plain, SimpleNamespace(findings=(other,))) is other


def test_groups_that_changed_shape_are_not_a_findings_realised_saving():
    # Batch 1 → 8: the GEMM groups the batching finding names vanish and reappear at [8, 1, 128]; their
    # before − after (387 µs in a new-user run, 2.1× the prediction) is the reshaping, not the finding.
    from bwdiag.diff.compare import _reshaped

    mm1 = ("op", "aten::mm", "f32[1, 1, 128], f32[128, 384]", "f32", "attn")
    mm8 = ("op", "aten::mm", "f32[8, 1, 128], f32[128, 384]", "f32", "attn")
    add = ("op", "aten::add", "f32[1, 128]", "f32", "attn")
    assert _reshaped([mm1], {mm8: {}}) is True
    assert _reshaped([mm1], {mm1: {}, mm8: {}}) is False  # still there at its shape: measured on it
    assert _reshaped([mm1, add], {mm8: {}}) is False  # the add op is gone altogether: a real removal
    assert _reshaped([mm1], {}) is False


def test_groups_named_by_evidence():
    from bwdiag.diff.compare import _acts_on

    def g(*names):
        return {"us": 1.0, "calls": 1, "names": list(names), "rows": []}

    long = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)"
    groups = {
        ("op", "aten::mm", "f32[8, 8], f32[8, 8]", "f32", "M.a"): g("k_small"),
        ("op", "aten::mm", "f32[4, 4], f32[4, 4]", "f32", "M.b"): g("k_small"),
        ("op", "aten::addmm", "bf16[512]", "bf16", "M.c"): g(long),
        ("op", "aten::bmm", "", "", ""): g("ampere_sgemm_128x128_tn"),
        ("op", "aten::mul", "bf16[2]", "bf16", "Net.Norm_0"): g("elementwise_kernel"),
        ("op", "aten::mul", "bf16[2]", "bf16", "Net.Norm_1"): g("elementwise_kernel"),
        ("name", "ncclKernel_AllReduce"): g("ncclKernel_AllReduce"),
    }
    keys = list(groups)
    # (op, shapes) names the first mm group only; the label of a cut name followed by another op's
    # (op, shapes) names nothing else.
    assert _acts_on(["k_small (aten::mm, f32[8, 8], f32[8, 8]): ×3"], groups) == [keys[0]]
    # A name cut at 60 characters as the findings cut it (59 + "…"), followed by its own op.
    cut = long[:59] + "…"
    assert _acts_on([f"{cut} (aten::addmm, bf16[512]): ×17 per step"], groups) == [keys[2]]
    assert _acts_on([f"{cut} (aten::mm, f32[1, 1]): ×1"], groups) == []
    assert _acts_on(["ampere_sgemm_128x128_tn (aten::bmm): 2.64 ms"], groups) == [keys[3]]
    # A chain of ops in a module listed in the evidence: that module's mul, not the other's.
    assert _acts_on(["a chain of 2 ops over bf16[2] (×8 per step): add → mul", "Net.Norm_0"], groups) == [keys[4]]
    # A bare kernel name (a collective).
    assert _acts_on(["ncclKernel_AllReduce"], groups) == [keys[6]]


def test_world_size_and_rank_sets(bert):
    from bwdiag.diff import compare

    two = dataclasses.replace(bert, source=dataclasses.replace(bert.source, ranks=(0, 1)))
    doc = compare(bert, two)
    assert [w.split(":")[0] for w in doc["warnings"]] == ["other world size"]
    assert doc["runs"]["before"]["world_size"] == 1 and doc["runs"]["after"]["world_size"] == 2
    # Two ranks: each group is the mean over the ranks, so the same rows read half as long.
    g = doc["kernels"]["groups"][0]
    assert g["after_us"] == pytest.approx(g["before_us"] / 2)
    other = dataclasses.replace(bert, source=dataclasses.replace(bert.source, ranks=(3,)))
    doc = compare(bert, other)
    assert doc["warnings"] == [] and any(n.startswith("other ranks: BEFORE has ranks [0], AFTER [3]")
                                         for n in doc["notes"])


def test_run_with_a_baseline_prints_the_diff(sleep_runs, tmp_path):
    """``bwdiag run --baseline DIR``: the script runs as under python, then the diff against DIR is
    printed (prefixed) and written beside the report; a missing baseline is refused before the script."""
    script = tmp_path / "sleep1.py"
    script.write_text(_WORKLOAD.format(sleeps=1))
    out = tmp_path / "after"
    result = _cli("run", "--wait", "1", "--warmup", "1", "--active", "6", "--baseline", str(sleep_runs[2]),
                  "-o", str(out), str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert all(line.startswith("bwdiag: ") for line in result.stderr.splitlines())
    assert f"bwdiag: bwdiag diff {sleep_runs[2].name} → {out.name}" in result.stderr
    doc = json.loads((out / "diff.json").read_text())
    assert doc["step"]["verdict"] == "faster"  # one 50 ms sleep fewer per step
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "diagnosis.json", "diff.html", "diff.json", "rank0.clock.json", "rank0.pt.trace.json.gz", "report.html"]
    missing = _cli("run", "--baseline", str(tmp_path / "nope"), "-o", str(tmp_path / "o2"), str(script), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--baseline" in missing.stderr
    assert not (tmp_path / "o2").exists()


def test_diff_of_an_h200_fix_shows_both_unprofiled_steps(tmp_path):
    # KV-cache decode on an H200: cuDNN attention planning per token, then sdpa_kernel(FLASH_ATTENTION).
    before = REPO / "sample_traces" / "decode_kv_cache_h200"
    after = REPO / "sample_traces" / "decode_kv_cache_h200_flash"
    proc = _cli("diff", str(before), str(after), "-o", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "d" / "diff.json").read_text())

    def unprofiled(folder):  # the captures' own clock, read from the raw traces
        with gzip.open(folder / "rank0.pt.trace.json.gz", "rt") as f:
            return statistics.median(json.load(f)["bwdiag"]["unprofiled_steps"]["device_us"][-3:])

    u = doc["step"]["unprofiled"]
    assert u["before_us"] == pytest.approx(unprofiled(before)) and u["after_us"] == pytest.approx(unprofiled(after))
    assert u["clock"] == "device" and u["delta_pct"] < -90
    assert "unprofiled step" in proc.stdout + proc.stderr
    # Three steps each, timed without the profiler: the verdict and the gate compare those, with their
    # own noise (half the larger range), not the recorded steps (whose profiler cost the fix changes).
    def last3(folder):
        with gzip.open(folder / "rank0.pt.trace.json.gz", "rt") as f:
            return json.load(f)["bwdiag"]["unprofiled_steps"]["device_us"][-3:]

    noise = max(max(v) - min(v) for v in (last3(before), last3(after))) / 2
    h = doc["headline"]
    assert h["source"] == "unprofiled" and h["steps"] == [3, 3] and h["noise_us"] == pytest.approx(noise)
    assert h["verdict"] == "faster" and h["delta_us"] == pytest.approx(u["delta_us"])
    assert "Faster, beyond the noise: unprofiled step" in proc.stdout
    assert "recorded steps (under the profiler)" in proc.stdout
    # A finding measured on the step is measured on the headline's steps, as its share of BEFORE's
    # profiled step (the unit of every prediction): −Δ unprofiled × profiled ÷ unprofiled step.
    on_step = -u["delta_us"] * doc["step"]["before"]["median_us"] / u["before_us"]
    assert doc["findings"] and all(f["realised_on_step_us"] == pytest.approx(on_step) for f in doc["findings"])
    for f in doc["findings"]:
        if f["measured_on"].startswith("the step"):
            assert f["realised_us"] == pytest.approx(on_step) and "unprofiled" in f["measured_on"]
    assert "unprofiled step" in (tmp_path / "d" / "diff.html").read_text()


def test_findings_measured_on_the_step_say_they_share_it():
    from bwdiag.diff.compare import _shared_step

    rows = [{"title": "A", "measured_on": "the step (its unprofiled steps, as a share of the profiled one)"},
            {"title": "B", "measured_on": "idle time"},
            {"title": "C", "measured_on": "the step"}]
    out = _shared_step(rows)
    assert [r["shared_with"] for r in out] == [["C"], [], ["A"]]
    assert out[0]["measured_on"].endswith("— the same change as 1 other finding(s) measured there")
    assert out[1]["measured_on"] == "idle time"
    # one finding alone on the step shares it with nobody
    (only,) = _shared_step([{"title": "A", "measured_on": "the step"}])
    assert only["shared_with"] == [] and only["measured_on"] == "the step"
