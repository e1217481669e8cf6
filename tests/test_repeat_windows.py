"""torch.profiler's ``repeat=2`` writes two windows of one process: one rank, not two (issue 16 item 11)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from bwdiag.trace import find_trace_files, load_traces
from tests.conftest import shared_trace


def _two_windows(folder: Path) -> list[Path]:
    model = torch.nn.Linear(32, 32)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(str(folder)), record_shapes=True) as prof:
        for _ in range(10):
            model(torch.randn(8, 32)).sum().backward()
            prof.step()
    return sorted(folder.iterdir())


def test_two_windows_of_one_process_are_one_rank(tmp_path):
    files = _two_windows(tmp_path / "tb")
    assert len(files) == 2  # <host>_<pid>.<ns>.pt.trace.json, one per cycle
    traces, warnings = load_traces(find_trace_files([tmp_path / "tb"]))
    assert len(traces) == 1 and traces[0].rank == 0
    last = max(files, key=lambda p: int(p.name.split(".")[1]))  # the handler's time_ns
    assert traces[0].path == last
    (note,) = [w for w in warnings if "profiling windows of one process" in w]
    assert note.startswith(f"{last.name}: 2 profiling windows") and min(files).name in note
    assert not any("treated as rank" in w for w in warnings)


def test_windows_of_two_processes_stay_two_ranks(tmp_path):
    files = _two_windows(tmp_path / "tb")
    # the same recording, as if a second process (another pid) had written the earlier window
    doc = json.loads(files[0].read_text())
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    for e in doc["traceEvents"]:
        if e.get("pid") == pid:
            e["pid"] = pid + 1
    files[0].write_text(json.dumps(doc))
    traces, warnings = load_traces(find_trace_files([tmp_path / "tb"]))
    assert sorted(t.rank for t in traces) == [0, 1]
    assert not any("profiling windows of one process" in w for w in warnings)


def test_a_file_given_twice_is_one_rank():
    # The A100 AlexNet trace names no host, so only the path can tell it is the same file.
    path = shared_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    traces, warnings = load_traces(find_trace_files([path, path.parent / ".." / "alexnet" / path.name]))
    assert len(traces) == 1
    assert not any("both claim rank" in w for w in warnings)
