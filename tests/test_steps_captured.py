"""Step time of captured runs against the step the script measures itself (perf_counter).

Each script trains a small MLP and sleeps 0.2 s per step, timing every step from the return of one
``optimizer.step()`` to the call of the next (``bwdiag run`` puts its step boundaries inside
``optimizer.step()``; the profiler's own start and export there, slow on a loaded host, are
bwdiag's overhead, not the step's) into a JSON file. The diagnosis' step must be within 10 % of the median the script measured — for a full run,
for a run interrupted inside its last recorded step, for a trace cut in half, and for an
unmodified 8-step script under the default schedule (one complete step recorded, one cut).
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch

    steps, stop_in = int(sys.argv[1]), int(sys.argv[2])  # stop_in: raise Ctrl-C inside this step
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    times, last = [], None
    try:
        for i in range(steps):
            loss = model(x).square().mean()
            loss.backward()
            time.sleep(0.1)
            if i == stop_in:
                raise KeyboardInterrupt
            time.sleep(0.1)
            before = time.perf_counter()
            opt.step()  # bwdiag's step marker runs in here: starting/stopping the profiler is its cost
            opt.zero_grad()
            if last is not None:
                # step i: from the return of step i-1's opt.step() to the call of its own
                times.append((i, (before - last) * 1e6))
            last = time.perf_counter()
    finally:
        with open("steps.json", "w") as f:
            json.dump(times, f)
    print("done")
    """
)


def _run(tmp_path: Path, steps: int, stop_in: int, *schedule: str) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "bwdiag", "run", *schedule, "-o", "out", "train.py", str(steps), str(stop_in)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    return proc, {i: us for i, us in json.loads((tmp_path / "steps.json").read_text())}


def _median(measured: dict, step_ids: list[int]) -> float:
    """The script's own median over the steps the diagnosis used (the machine may be busy: compare
    like with like, not with steps outside the window)."""
    return statistics.median(measured[i] for i in step_ids)


def _diagnosis(path: Path) -> dict:
    return json.loads(path.read_text())


def test_sleeping_steps_match_the_scripts_own_timing(tmp_path: Path) -> None:
    proc, measured = _run(tmp_path, 6, -1, "--wait", "1", "--warmup", "1", "--active", "3")
    assert proc.returncode == 0, proc.stderr
    t = _diagnosis(tmp_path / "out" / "diagnosis.json")["time"]
    assert t["steps"] == 3 and t["step_ids"] == [2, 3, 4]
    assert t["step_us"] == pytest.approx(_median(measured, t["step_ids"]), rel=0.10)
    assert statistics.median(measured.values()) >= 200_000  # the script did sleep 0.2 s per step


def test_interrupted_run_counts_only_complete_steps(tmp_path: Path) -> None:
    # Ctrl-C half-way through the third recorded step (step 4): steps 2 and 3 are complete.
    proc, measured = _run(tmp_path, 6, 4, "--wait", "1", "--warmup", "1", "--active", "3")
    plain = subprocess.run([sys.executable, "train.py", "6", "4"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=240)
    assert proc.returncode == plain.returncode != 0  # exits as `python train.py` does
    t = _diagnosis(tmp_path / "out" / "diagnosis.json")["time"]
    assert t["steps"] == 2 and t["step_ids"] == [2, 3] and t["steps_excluded"] == [4]
    assert t["step_us"] == pytest.approx(_median(measured, t["step_ids"]), rel=0.10)


def test_trace_cut_in_half_still_gives_the_step(tmp_path: Path) -> None:
    proc, measured = _run(tmp_path, 8, -1, "--wait", "1", "--warmup", "1", "--active", "5", "--no-analyze")
    assert proc.returncode == 0, proc.stderr
    raw = gzip.decompress((tmp_path / "out" / "rank0.pt.trace.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    out = tmp_path / "cut-report"
    res = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(cut), "-o", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    t = _diagnosis(out / "diagnosis.json")["time"]
    assert t["steps"] >= 1 and max(t["step_ids"]) < 6  # the second half of the window is gone
    assert t["step_us"] == pytest.approx(_median(measured, t["step_ids"]), rel=0.10)


def test_unmodified_8_step_script_under_the_default_schedule(tmp_path: Path) -> None:
    # wait 5, warmup 2, active 3: steps 7.. are recorded, and the script ends after step 7.
    proc, measured = _run(tmp_path, 8, -1)
    assert proc.returncode == 0, proc.stderr
    t = _diagnosis(tmp_path / "out" / "diagnosis.json")["time"]
    assert t["steps"] == 1 and t["step_ids"] == [7]
    assert t["step_us"] == pytest.approx(measured[7], rel=0.10)


def test_unprofiled_steps_match_the_scripts_own_timing(tmp_path: Path) -> None:
    # Steps 0-3 run with no profiler (timed 1-3, in the trace), 4 warms it up, 5-6 are recorded, and
    # 7-10 run after the window (each ends in an optimizer step: all four timed, beside the trace in
    # rank0.clock.json): the steady ones win.
    proc, measured = _run(tmp_path, 11, -1, "--wait", "4", "--warmup", "1", "--active", "2")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    t = _diagnosis(out / "diagnosis.json")["time"]
    after = json.loads((out / "rank0.clock.json").read_text())["after_window"]
    assert after["ids"] == [7, 8, 9, 10] and after["device_us"] is None  # a CPU run: no CUDA events
    assert t["unprofiled_step_ids"] == [7, 8, 9, 10] and t["unprofiled_clock"] == "host"
    assert t["unprofiled_step_us"] == pytest.approx(_median(measured, [7, 8, 9, 10]), rel=0.10)
    assert "Unprofiled" in proc.stderr and "without the profiler" in proc.stderr
    # Without the clock file (a trace copied alone) the steps before the window stand in.
    (out / "rank0.clock.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(out), "-o", str(tmp_path / "again")],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    t = _diagnosis(tmp_path / "again" / "diagnosis.json")["time"]
    assert t["unprofiled_step_ids"] == [1, 2, 3]
    assert t["unprofiled_step_us"] == pytest.approx(_median(measured, [1, 2, 3]), rel=0.10)
