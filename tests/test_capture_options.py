"""Capture options, output folder rules and the stderr filter: pure Python, no torch."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from bwdiag.capture.folder import (
    default_out_dir,
    prepare_out_dir,
    rank_trace_name,
    unique_default,
    wait_for_ranks,
    write_done_marker,
)
from bwdiag.capture.options import CaptureOptions, StepMarker, StepOn
from bwdiag.capture.quiet import _replay
from bwdiag.errors import BwdiagError, OutputError


def test_step_marker_parsing() -> None:
    assert StepMarker.parse("auto") == StepMarker(StepOn.AUTO)
    assert StepMarker.parse(" Optimizer ") == StepMarker(StepOn.OPTIMIZER)
    assert StepMarker.parse("module:GPT") == StepMarker(StepOn.MODULE, "GPT")
    assert StepMarker.parse("label:decode step") == StepMarker(StepOn.LABEL, "decode step")
    assert StepMarker.parse("time:0.25").seconds == 0.25
    assert str(StepMarker.parse("module:GPT")) == "module:GPT"
    for bad in ("epoch", "module", "module:", "time:abc", "time:0", "time:inf", "optimizer:x"):
        with pytest.raises(BwdiagError):
            StepMarker.parse(bad)
    with pytest.raises(TypeError):
        StepMarker.parse(3)  # type: ignore[arg-type]


def test_options_validated_at_construction() -> None:
    opts = CaptureOptions(wait=5, warmup=2, active=3)
    assert opts.last_step == 9  # steps 0-4 skipped, 5-6 warm-up, 7-9 recorded
    assert opts.schedule_dict()["first_recorded_step"] == 7
    with pytest.raises(BwdiagError, match="active must be >= 1"):
        CaptureOptions(active=0)
    with pytest.raises(BwdiagError, match="wait must be >= 0"):
        CaptureOptions(wait=-1)
    with pytest.raises(TypeError, match="warmup must be an int"):
        CaptureOptions(warmup=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CaptureOptions(active=True)  # a bool is not a step count
    with pytest.raises(TypeError):
        CaptureOptions(with_stack="yes")  # type: ignore[arg-type]


def test_default_folder_name_and_uniqueness(tmp_path: Path) -> None:
    when = datetime(2026, 3, 4, 5, 6, 7).timestamp()
    assert default_out_dir("train.py", when, base=tmp_path).name == "bwdiag-train-20260304-050607"
    assert default_out_dir("examples/my train.py", when, base=tmp_path).name == "bwdiag-my-train-20260304-050607"
    assert default_out_dir("pkg.sub.main_mod", when, base=tmp_path).name == "bwdiag-main_mod-20260304-050607"
    assert default_out_dir("tool/__main__.py", when, base=tmp_path).name == "bwdiag-tool-20260304-050607"
    first = default_out_dir("train.py", when, base=tmp_path)
    first.mkdir()
    assert unique_default(first).name == first.name + "-2"


def test_prepare_out_dir_rules(tmp_path: Path) -> None:
    out = prepare_out_dir(tmp_path / "a" / "b", rank=1, analyses=False, force=False)
    assert out.is_dir() and not list(out.iterdir())  # the write probe is removed
    (out / rank_trace_name(1)).write_text("old")
    with pytest.raises(OutputError, match="rank1.pt.trace.json.gz"):
        prepare_out_dir(out, rank=1, analyses=False, force=False)
    prepare_out_dir(out, rank=0, analyses=False, force=False)  # another rank's file is not ours
    prepare_out_dir(out, rank=1, analyses=False, force=True)
    assert not (out / rank_trace_name(1)).exists()  # --force removes the stale trace up front
    (out / "diagnosis.json").write_text("{}")
    with pytest.raises(OutputError, match="diagnosis.json"):
        prepare_out_dir(out, rank=0, analyses=True, force=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="not a folder"):
        prepare_out_dir(blocker, rank=0, analyses=True, force=False)


def test_wait_for_ranks_reads_only_finished_fresh_ranks(tmp_path: Path) -> None:
    since = time.time()
    (tmp_path / rank_trace_name(0)).write_bytes(b"x")
    write_done_marker(tmp_path, 0, {"trace": rank_trace_name(0)})
    stale = tmp_path / ".rank2.done"  # left by an earlier run: older than this one
    stale.write_text("{}")
    os.utime(stale, (since - 3600, since - 3600))
    said: list[str] = []

    def rank1_finishes_later() -> None:
        time.sleep(0.3)
        (tmp_path / rank_trace_name(1)).write_bytes(b"y")
        write_done_marker(tmp_path, 1, {"trace": rank_trace_name(1)})

    thread = threading.Thread(target=rank1_finishes_later)
    thread.start()
    traces, missing = wait_for_ranks(tmp_path, 3, since=since, timeout_s=1.0, say=said.append, poll_s=0.05)
    thread.join()
    assert [p.name for p in traces] == [rank_trace_name(0), rank_trace_name(1)]
    assert missing == [2]
    assert said == ["waiting for rank(s) 1, 2 to finish (up to 1 s)"]
    assert json.loads((tmp_path / ".rank1.done").read_text()) == {"trace": rank_trace_name(1)}


def test_native_profiler_lines_filtered(capfd: pytest.CaptureFixture[str]) -> None:
    _replay(
        b"USDT:2026-12-02 10:07:43 8159:8159 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        b"STAGE:2026-12-02 10:08:14 8797:8797 SyncActivityProfilerHandler.cpp:51] Completed Stage\n"
        b"[W1202 10:07:43.518218015 CuptiActivityProfiler.cpp:1234] buffer full\n"
        b"epoch 3 loss 2.0\n"
    )
    err = capfd.readouterr().err
    assert err == (
        "bwdiag: torch: [W1202 10:07:43.518218015 CuptiActivityProfiler.cpp:1234] buffer full\n"
        "epoch 3 loss 2.0\n"
    )


def test_import_bwdiag_is_cheap() -> None:
    import subprocess
    import sys

    code = "import sys, bwdiag; bwdiag.profile; print('torch' in sys.modules, 'pandas' in sys.modules)"
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
