"""Capture with torch: schedule, step markers, metadata, crash notes, the context manager, and a
2-process gloo run. Kept to a handful of small processes (the machine has 2 cores)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import torch  # a declared dependency: missing torch is an error, not a skip

from tests.gloo_ranks import run_ranks

REPO = Path(__file__).resolve().parents[1]
SECRET = "tok-5e0c7e9a-never-in-a-trace"

TRAIN = textwrap.dedent(
    """
    import sys, torch, torch.nn as nn
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Sequential(nn.ReLU(), nn.Linear(32, 4)))
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    crash_at = int(sys.argv[1]) if len(sys.argv) > 1 else -1
    for i in range(6):
        loss_fn(m(x), y).backward()
        opt.step()
        opt.zero_grad()
        if i == crash_at:
            raise RuntimeError(f"crash after step {i}")
    print("trained")
    """
)

DECODE = textwrap.dedent(
    """
    import torch, torch.nn as nn
    m = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval()
    pre = nn.Identity()  # a top-level module without parameters: not the model
    x = torch.randn(2, 8)
    with torch.no_grad():
        for i in range(7):
            x = m(pre(x))
    print("decoded")
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["BWDIAG_TEST_SECRET"] = SECRET
    return env


def _bwdiag_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bwdiag", "run", *args],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180,
    )


def _load(path: Path) -> tuple[dict, bytes]:
    raw = gzip.decompress(path.read_bytes())
    return json.loads(raw), raw


def _names(trace: dict, cat: str) -> list[str]:
    return sorted(e["name"] for e in trace["traceEvents"] if e.get("cat") == cat)


def _ops(trace: dict, name: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == name]


def test_training_window_metadata_and_modules(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    sched = ["--wait", "1", "--warmup", "1", "--active", "2", "--no-analyze", "-o", "out"]
    result = _bwdiag_run(tmp_path, *sched, "train.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "trained\n"
    assert all(line.startswith("bwdiag: ") for line in result.stderr.splitlines()), result.stderr
    trace, raw = _load(tmp_path / "out" / "rank0.pt.trace.json.gz")
    # Step i ends at its optimizer.step(): step 0 skipped, 1 warm-up, 2 and 3 recorded.
    steps = [n for n in _names(trace, "user_annotation") if n.startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    # record_shapes: the first Linear is addmm(bias[32], x[8,16], W^T[16,32], beta, alpha), once
    # per forward; W^T is the transposed view of the [32,16] weight (strides [1,16]).
    first = [e for e in _ops(trace, "aten::addmm") if e["args"]["Input Dims"] == [[32], [8, 16], [16, 32], [], []]]
    assert len(first) == 2
    assert first[0]["args"]["Input Strides"][2] == [1, 16]
    modules = {n for n in _names(trace, "user_annotation") if n.startswith("nn.Module: ")}
    # Top-level modules by class (the loss has no parameters but is top level too), others by path
    # relative to the calling module: Sequential > 1 > 1 is the inner Linear, path "1.1".
    assert modules == {"nn.Module: Sequential", "nn.Module: 0", "nn.Module: 1", "nn.Module: MSELoss"}
    inner = [e for e in _ops(trace, "aten::addmm") if e["args"]["Input Dims"][1] == [8, 32]][0]
    enclosing = [
        e["name"] for e in sorted(trace["traceEvents"], key=lambda e: e.get("ts", 0))
        if e.get("cat") == "user_annotation" and e["name"].startswith("nn.Module: ")
        and e["ts"] <= inner["ts"] <= e["ts"] + e["dur"]
    ]
    assert enclosing == ["nn.Module: Sequential", "nn.Module: 1", "nn.Module: 1"]
    meta = trace["bwdiag"]
    assert meta["argv"] == ["bwdiag", "run", *sched, "train.py"]
    assert meta["schedule"] == {
        "step_on": "auto", "wait": 1, "warmup": 1, "active": 2, "first_recorded_step": 2,
    }
    assert (meta["rank"], meta["world_size"], meta["steps_captured"]) == (0, 1, 2)
    assert meta["torch_version"] == torch.__version__ and meta["device"]["kind"] == "cpu"
    # the script's intra-op threads (its default here, as this process's: same host, same environment)
    assert meta["torch_threads"] == torch.get_num_threads()
    assert "note" not in meta
    assert SECRET.encode() not in raw  # environment variables are never written


def test_crash_inside_window_keeps_steps_and_traceback(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    plain = subprocess.run([sys.executable, "train.py", "2"], cwd=tmp_path, capture_output=True, text=True)
    args = ["--wait", "1", "--warmup", "1", "--active", "2", "-o", "out", "train.py", "2"]
    result = _bwdiag_run(tmp_path, *args)
    assert result.returncode == plain.returncode == 1
    script_err = [l for l in result.stderr.splitlines() if not l.startswith("bwdiag: ")]
    assert script_err == plain.stderr.splitlines()
    assert script_err[-1] == "RuntimeError: crash after step 2"
    trace, _ = _load(tmp_path / "out" / "rank0.pt.trace.json.gz")
    note = "the script raised RuntimeError after 1 of 2 active steps"
    assert trace["bwdiag"]["note"].startswith(note)
    assert trace["bwdiag"]["steps_captured"] == 1
    assert f"bwdiag: {note}" in result.stderr
    assert len(_ops(trace, "aten::addmm")) == 2  # step 2's two Linears; step 3 never ran a forward
    # the report carries the note too
    warnings = json.loads((tmp_path / "out" / "diagnosis.json").read_text())["warnings"]
    assert any(w.startswith(f"rank0.pt.trace.json.gz: {note}") for w in warnings)


def test_inference_steps_found_from_top_level_forward(tmp_path: Path) -> None:
    (tmp_path / "decode.py").write_text(DECODE)
    result = _bwdiag_run(tmp_path, "--wait", "1", "--warmup", "1", "--active", "2", "--no-analyze",
                         "-o", "out", "decode.py")
    assert result.returncode == 0 and result.stdout == "decoded\n"
    assert "marking steps by the forward of Sequential" in result.stderr
    trace, _ = _load(tmp_path / "out" / "rank0.pt.trace.json.gz")
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(e["name"] for e in steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    for step in steps:  # each recorded step holds exactly one forward: one addmm
        inside = [e for e in _ops(trace, "aten::addmm") if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
        assert len(inside) == 1
        # ... and the whole of the model's module span: the step is marked before the span opens (the
        # first recorded step's root span used to open in the warm-up step and be lost, so its modules
        # read "0" where the later steps' read "Sequential.0")
        roots = [e for e in trace["traceEvents"] if e.get("name") == "nn.Module: Sequential"
                 and step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]]
        assert len(roots) == 1, step["name"]


def test_profile_context_manager(tmp_path: Path) -> None:
    import bwdiag
    from bwdiag.errors import BwdiagError

    with pytest.raises(TypeError):
        bwdiag.profile(out=3)
    with pytest.raises(TypeError):
        bwdiag.profile(active="3")
    with pytest.raises(BwdiagError):
        bwdiag.profile(active=0)
    with pytest.raises(BwdiagError):
        bwdiag.profile(step_on="epoch")
    with pytest.raises(TypeError):
        bwdiag.profile("out")  # keyword-only

    model = torch.nn.Linear(4, 4)
    prof = bwdiag.profile(out=tmp_path / "p", wait=1, warmup=0, active=2, analyze=True)
    with prof:
        for _ in range(5):
            model(torch.ones(3, 4))
            prof.step()
    assert prof.result is not None and prof.result.steps_captured == 2
    trace, _ = _load(tmp_path / "p" / "rank0.pt.trace.json.gz")
    assert [n for n in _names(trace, "user_annotation") if n.startswith("ProfilerStep")] == [
        "ProfilerStep#1", "ProfilerStep#2"
    ]
    assert len(_ops(trace, "aten::addmm")) == 2
    with pytest.raises(BwdiagError, match="used once"):
        with prof:
            pass
    view = prof.diagnosis
    assert view is not None
    assert (tmp_path / "p" / "diagnosis.json").exists() and (tmp_path / "p" / "report.html").exists()
    assert list(view.kernels.columns)[:3] == ["name", "rank", "category"]
    assert set(view.kernels["module"].dropna()) == {"Linear"}  # the module spans reach the loader
    assert isinstance(view.findings, list)
    assert view.to_html().lstrip().lower().startswith("<!doctype html")
    assert isinstance(view.summary(), str)


DDP = textwrap.dedent(
    """
    import sys
    import torch, torch.distributed as dist, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    # one write of a whole line: both ranks share the pipe, and print() writes piece by piece
    sys.stdout.write(f"rank {dist.get_rank()} done\\n"); sys.stdout.flush()
    # the window ends in the last step: no rank tears gloo down while the other still exports its trace
    dist.barrier()
    dist.destroy_process_group()
    """
)


def test_two_rank_gloo_run(tmp_path: Path) -> None:
    (tmp_path / "ddp.py").write_text(DDP)
    result = run_ranks([sys.executable, "-m", "bwdiag", "run", "--nproc-per-node", "2", "--wait", "1",
                        "--warmup", "1", "--active", "2", "-o", "out", "ddp.py"],
                       before_retry=lambda: shutil.rmtree(tmp_path / "out", ignore_errors=True),
                       cwd=tmp_path, env=_env(), timeout=180)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["rank 0 done", "rank 1 done"]
    out = tmp_path / "out"
    for rank in (0, 1):
        trace, _ = _load(out / f"rank{rank}.pt.trace.json.gz")
        assert trace["bwdiag"]["rank"] == rank and trace["bwdiag"]["world_size"] == 2
        assert trace["distributedInfo"]["rank"] == rank
        # DDP all-reduces the bucket of gradients once per step: two recorded steps
        assert len([e for e in trace["traceEvents"] if e.get("name") == "gloo:all_reduce"]) >= 2
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert sorted(diagnosis["source"]["ranks"]) == [0, 1]
    assert (out / "report.html").exists()
    # `bwdiag analyze FOLDER` reproduces the run's diagnosis (paths are spelled as given)
    again = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", "out", "-o", "again"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    reproduced = json.loads((tmp_path / "again" / "diagnosis.json").read_text())
    assert [Path(p).name for p in reproduced["source"].pop("paths")] == [
        Path(p).name for p in diagnosis["source"].pop("paths")
    ] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert reproduced == diagnosis


def _step_spans(trace: dict) -> list[dict]:
    return sorted(
        (e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")),
        key=lambda e: e["name"],
    )


def _inside(trace: dict, span: dict, cat: str, name: str) -> int:
    end = span["ts"] + span["dur"]
    return sum(
        1 for e in trace["traceEvents"]
        if e.get("cat") == cat and e.get("name") == name and span["ts"] <= e["ts"] <= end
    )


def test_label_and_module_markers(tmp_path: Path) -> None:
    import bwdiag

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.ones(2, 4)
    # label:NAME — each `record_function("my_step")` block starts a step; 5 blocks = steps 0..4.
    with bwdiag.profile(out=tmp_path / "label", wait=1, warmup=0, active=2,
                        step_on="label:my_step", analyze=False) as prof:
        for _ in range(5):
            with torch.profiler.record_function("my_step"):
                model(x)
    assert prof.result is not None and prof.result.steps_captured == 2
    trace, _ = _load(tmp_path / "label" / "rank0.pt.trace.json.gz")
    spans = _step_spans(trace)
    assert [s["name"] for s in spans] == ["ProfilerStep#1", "ProfilerStep#2"]
    for span in spans:  # the block that opened the step is inside it, with its one addmm
        assert _inside(trace, span, "user_annotation", "my_step") == 1
        assert _inside(trace, span, "cpu_op", "aten::addmm") == 1

    # module:Linear — each forward of the first Linear starts a step (here nested in Sequential).
    with bwdiag.profile(out=tmp_path / "module", wait=2, warmup=1, active=1,
                        step_on="module:Linear", analyze=False) as prof:
        for _ in range(6):
            model(x)
    trace, _ = _load(tmp_path / "module" / "rank0.pt.trace.json.gz")
    spans = _step_spans(trace)
    assert [s["name"] for s in spans] == ["ProfilerStep#3"]
    assert _inside(trace, spans[0], "cpu_op", "aten::addmm") == 1
    assert _inside(trace, spans[0], "cpu_op", "aten::relu") == 1


def test_interrupt_inside_window_saves_what_was_captured(tmp_path: Path) -> None:
    import bwdiag

    model = torch.nn.Linear(4, 4)
    prof = bwdiag.profile(out=tmp_path / "ki", wait=0, warmup=0, active=3, analyze=False)
    with pytest.raises(KeyboardInterrupt):
        with prof:
            model(torch.ones(2, 4))
            prof.step()
            model(torch.ones(2, 4))
            raise KeyboardInterrupt
    trace, _ = _load(tmp_path / "ki" / "rank0.pt.trace.json.gz")
    assert trace["bwdiag"]["note"].startswith(
        "the profile block was interrupted (Ctrl-C) after 1 of 3 active steps"
    )
    assert trace["bwdiag"]["steps_captured"] == 1
    assert len(_ops(trace, "aten::addmm")) == 2  # the complete step and the partial one


def test_time_marker_records_a_wall_clock_window(tmp_path: Path) -> None:
    import signal
    import time

    import bwdiag

    # time:0.1 — every 0.1 s is a step: skip 1, record 1, then the timer and hooks are gone.
    prof = bwdiag.profile(out=tmp_path / "t", wait=1, warmup=0, active=1, step_on="time:0.1",
                          analyze=False)
    trace_file = tmp_path / "t" / "rank0.pt.trace.json.gz"
    with prof:
        deadline = time.monotonic() + 20  # the window closes after ~0.2 s idle; a loaded host is slower
        while time.monotonic() < deadline and not trace_file.exists():
            torch.ones(16, 16).sum()
    assert prof.result is not None and prof.result.steps_captured == 1
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    trace, _ = _load(tmp_path / "t" / "rank0.pt.trace.json.gz")
    (span,) = _step_spans(trace)
    assert span["name"] == "ProfilerStep#1"
    assert 100_000 <= span["dur"] <= 1_000_000  # at least the 0.1 s interval (µs): the timer is re-armed
    # after each boundary's own work, so the step is never shorter; generous above on a busy host


def test_report_failure_after_the_script_keeps_its_exit_status(tmp_path: Path) -> None:
    # After the window the script puts a folder where report.html goes: the analysis cannot write
    # it, says so in bwdiag lines, and the script's own exit status (5) still comes out.
    (tmp_path / "s.py").write_text(textwrap.dedent(
        """
        import os, sys, torch
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            m(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
        os.mkdir("out/report.html")
        print("leaving")
        sys.exit(5)
        """
    ))
    result = _bwdiag_run(tmp_path, "--wait", "0", "--warmup", "0", "--active", "1", "-o", "out", "s.py")
    assert result.returncode == 5
    assert result.stdout == "leaving\n"
    lines = result.stderr.splitlines()
    assert all(line.startswith("bwdiag: ") for line in lines), result.stderr
    assert any(line.startswith("bwdiag: could not finish the report: OutputError") for line in lines)
    assert "bwdiag: traces so far are in out; retry with: bwdiag analyze out" in lines
    assert (tmp_path / "out" / "rank0.pt.trace.json.gz").exists()


def test_a_timer_tick_during_finish_does_nothing(tmp_path: Path, monkeypatch) -> None:
    """Forced SIGALRM ticks while the capture finishes (the race seen under load: a tick landing
    inside finish() ran a step boundary there, closed the profiler twice and imported half-imported
    modules). Finish disarms the timer first and ignores a tick already delivered."""
    import signal

    import bwdiag
    from bwdiag.capture.session import CaptureSession

    original = CaptureSession._add_metadata

    def tick_then_add(self, steps, note):
        for _ in range(3):  # enough ticks to complete the 3-step window if they were obeyed
            self._boundary(1)  # what the SIGALRM handler calls, had the timer still been armed
            signal.raise_signal(signal.SIGALRM)  # and a real tick: must hit the restored default
        original(self, steps, note)

    monkeypatch.setattr(CaptureSession, "_add_metadata", tick_then_add)
    monkeypatch.setattr(signal, "SIGALRM", signal.SIGALRM)
    old = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the default action would kill pytest
    try:
        prof = bwdiag.profile(out=tmp_path / "t", wait=0, warmup=0, active=3, step_on="time:100",
                              analyze=False)
        with prof:
            torch.ones(16, 16).sum()
        assert signal.getsignal(signal.SIGALRM) == signal.SIG_IGN  # bwdiag's handler is gone
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert prof.result is not None and prof.result.steps_captured == 0
    assert prof.result.steps_seen == 0  # the ticks inside finish() were not counted
    trace, _ = _load(tmp_path / "t" / "rank0.pt.trace.json.gz")
    assert trace["bwdiag"]["steps_captured"] == 0
    assert trace["bwdiag"]["note"].startswith("the profile block ended after 0 of 3 active steps")
    assert _step_spans(trace) == [] or all(s["name"] == "ProfilerStep#0" for s in _step_spans(trace))


def test_profile_api_speaks_its_own_words(tmp_path: Path, monkeypatch) -> None:
    """A loop shorter than the window: ``prof.diagnosis`` says why (in API words) instead of being
    None, no folder holding only ``.rank0.done`` is left, and an occupied ``out=`` names force=True."""
    import bwdiag
    from bwdiag.errors import NoDiagnosis

    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(4, 4)
    with bwdiag.profile(out="short") as prof:  # default wait=5: two steps never open the window
        for _ in range(2):
            model(torch.ones(2, 4))
            prof.step()
    with pytest.raises(NoDiagnosis, match=r"^no diagnosis: the profile block ended after 2 steps, before the "
                       r"capture window opened at step 5: nothing was recorded \(lower wait=, or check step_on=\)$"):
        prof.diagnosis.findings
    assert getattr(prof, "diagnosis", None) is None  # still an AttributeError for getattr/hasattr
    assert not (tmp_path / "short").exists()

    with bwdiag.profile(out="full", wait=0, warmup=0, active=1, analyze=False) as prof:
        model(torch.ones(2, 4))
        prof.step()
    with pytest.raises(NoDiagnosis, match="analyze=False"):
        prof.diagnosis
    with pytest.raises(bwdiag.BwdiagError, match=r"pass force=True to overwrite, or choose another folder with out=$"):
        bwdiag.profile(out="full", wait=0, warmup=0, active=1, analyze=False).start()


def test_a_compiled_model_gets_no_warning_from_bwdiags_hooks(tmp_path: Path) -> None:
    """torch.compile warns when global module hooks exist; bwdiag's step-finding hooks are its own
    business: stderr minus bwdiag's lines is python's (empty), and steps are still found."""
    (tmp_path / "c.py").write_text(textwrap.dedent(
        """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        fast = torch.compile(model, backend="eager")  # the warning is in OptimizedModule.__call__
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            fast(torch.ones(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        print("done")
        """
    ))
    plain = subprocess.run([sys.executable, "c.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    ours = _bwdiag_run(tmp_path, "--wait", "2", "--warmup", "1", "--active", "2", "--no-analyze", "-o", "out", "c.py")
    assert plain.returncode == ours.returncode == 0
    assert plain.stderr == ""
    assert [l for l in ours.stderr.splitlines() if not l.startswith("bwdiag: ")] == []
    assert ours.stdout == plain.stdout == "done\n"
    trace, _ = _load(tmp_path / "out" / "rank0.pt.trace.json.gz")
    assert trace["bwdiag"]["steps_captured"] == 2


def test_run_summary_fits_an_80_column_terminal(tmp_path: Path) -> None:
    """The summary is drawn 8 columns narrower than the terminal, so with the ``bwdiag: `` prefix no
    line wraps; no doubled words; an op in several rows shows the shapes that tell them apart."""
    (tmp_path / "t.py").write_text(textwrap.dedent(
        """
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        for _ in range(6):
            m(torch.randn(32, 64)).pow(2).mean().backward()
            opt.step(); opt.zero_grad()
        """
    ))
    env = {**_env(), "COLUMNS": "80"}
    result = subprocess.run([sys.executable, "-m", "bwdiag", "run", "--wait", "1", "--warmup", "1", "--active", "2",
                             "-o", "out", "t.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    summary = [l for l in lines if not l.startswith("bwdiag: warning: ")]  # warnings are one long line each
    assert max(len(l) for l in summary) <= 80, max(summary, key=len)
    assert not any(l.startswith("bwdiag: bwdiag") for l in lines)
    assert not any("(assumed)" in l and "assumed CPU" in l for l in lines)
    top = lines.index(next(l for l in lines if l.startswith("bwdiag: Top cpu ops by time")))
    table = [l for l in lines[top + 3:] if " │ " in l]  # after the title, header and rule lines
    rows = [l.split(" │ ")[0].removeprefix("bwdiag: ").strip() for l in table]
    names = [r.split(" ")[0] for r in rows]
    for row, name in zip(rows, names):  # an op in several rows carries its shapes
        assert names.count(name) == 1 or "[" in row, rows


def test_cupti_is_released_when_the_profiler_stops_unless_the_user_says_otherwise():
    from types import SimpleNamespace

    from bwdiag.capture.session import release_cupti_on_stop

    def fake(cuda: bool):
        return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: cuda))

    env = {}
    assert release_cupti_on_stop(fake(True), env) and env == {"TEARDOWN_CUPTI": "1"}
    env = {"TEARDOWN_CUPTI": "0"}  # the user's (or Inductor's) choice stands
    assert not release_cupti_on_stop(fake(True), env) and env == {"TEARDOWN_CUPTI": "0"}
    env = {}
    assert not release_cupti_on_stop(fake(False), env) and env == {}  # CPU only: no CUPTI


def test_profile_context_manager_times_the_steps_after_its_window(tmp_path: Path) -> None:
    import time as _time

    import bwdiag

    # wait 1, record 2 (steps 1-2), then 5 steps of ~20 ms with no profiler: prof.step() keeps timing them.
    prof = bwdiag.profile(out=tmp_path / "p", wait=1, warmup=0, active=2, analyze=True)
    with prof:
        for _ in range(8):
            _time.sleep(0.02)
            prof.step()
    after = json.loads((tmp_path / "p" / "rank0.clock.json").read_text())["after_window"]
    assert after["ids"] == [3, 4, 5, 6, 7]
    assert all(18_000 <= us <= 200_000 for us in after["host_us"])  # ≈ 20 ms each (loaded host: ≤ 10×)
    assert prof.diagnosis.raw.time.unprofiled_step_ids == (3, 4, 5, 6, 7)
