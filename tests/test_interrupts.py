"""Ctrl-C and SIGTERM during ``bwdiag analyze``: one line, the shell's status, no worker left behind,
no output written (issue 16, items 2 and 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_trace
from tests.test_speed_loader import A100_NCCL, _generator

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """12 shifted copies of the 2-rank A100 DDP trace (~9 MB gzip): parsed by worker processes, and
    long enough to analyse that a signal lands mid-run."""
    gen = _generator()
    out = tmp_path_factory.mktemp("big") / "big.json.gz"
    gen.write_trace(gen.load(shared_trace(A100_NCCL)), 12, out, rank=0, world=2)
    return out


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the analyze process and whatever it forked)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _interrupt(big_trace: Path, tmp_path: Path, send) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bwdiag", "analyze", str(big_trace), "-o", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_session_members(proc.pid)) < 2:  # wait for the parse workers
            assert proc.poll() is None, f"analyze ended before its workers started: {proc.communicate()}"
            assert time.monotonic() < deadline, "no worker process started"
            time.sleep(0.02)
        time.sleep(0.2)
        send(proc)
        _, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _session_members(proc.pid) == [], "a worker outlived bwdiag analyze"
    finally:  # a failing run leaves nothing behind either
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
    return proc.returncode, err, out


def test_sigterm_ends_analyze_and_its_workers(big_trace, tmp_path):
    rc, err, out = _interrupt(big_trace, tmp_path, lambda p: p.send_signal(signal.SIGTERM))
    assert rc == 143
    assert err.strip().splitlines() == ["bwdiag: terminated (SIGTERM): stopped, no output written"]
    assert not out.exists()


def test_ctrl_c_is_one_line_and_status_130(big_trace, tmp_path):
    # A terminal's Ctrl-C goes to the whole foreground process group, workers included.
    rc, err, out = _interrupt(big_trace, tmp_path, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert rc == 130
    assert err.strip().splitlines() == ["bwdiag: interrupted (Ctrl-C): stopped, no output written"]
    assert not out.exists()


def test_a_killed_analyze_takes_its_workers_with_it(big_trace, tmp_path):
    # kill -9 runs no handler at all: the workers die with their parent (PR_SET_PDEATHSIG).
    rc, _, out = _interrupt(big_trace, tmp_path, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    assert not out.exists()
