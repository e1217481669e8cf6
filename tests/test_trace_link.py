"""Loading and linking on real traces, checked against a brute-force reading of the same files."""

from __future__ import annotations

import gzip
import json

import pytest

from bwdiag.trace import load_rank, load_traces
from tests.conftest import A100_NCCL, A100_TRAIN, H100_BERT, H100_QWEN, raw_events, shared_trace, shared_trace_names

LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _brute_force_links(doc: dict) -> dict[int, str | None]:
    """correlation → name of the innermost cpu_op enclosing its launch (O(n²), independent of bwdiag)."""
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
    out = {}
    for e in ev:
        if e.get("cat") not in GPU_CATS:
            continue
        corr = e["args"].get("correlation")
        launch = launches.get(corr)
        if launch is None:
            out[corr] = None
            continue
        enclosing = [o for o in ops if o["pid"] == launch["pid"] and o["tid"] == launch["tid"]
                     and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"]]
        # innermost: the latest start; ties → the shortest
        out[corr] = max(enclosing, key=lambda o: (o["ts"], -o["dur"]))["name"] if enclosing else None
    return out


def test_bert_every_activity_links_to_the_innermost_enclosing_op():
    path = shared_trace(H100_BERT)
    expected = _brute_force_links(raw_events(path))
    trace = load_rank(path)
    gpu = trace.gpu
    assert len(gpu) == 61  # 60 kernels + 1 memcpy in the file
    got = {int(c): (trace.ops.at[o, "name"] if o >= 0 else None) for c, o in zip(gpu["correlation"], gpu["op"])}
    assert got == expected
    assert trace.link_stats.linked_pct == pytest.approx(100.0)


def test_qwen_spillover_from_before_the_window_is_dropped_and_the_rest_links():
    path = shared_trace(H100_QWEN)
    doc = raw_events(path)
    ev = doc["traceEvents"]
    launch_corr = {e["args"]["correlation"] for e in ev if e.get("cat") in LAUNCH_CATS}
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    launched = [e for e in gpu if e["args"]["correlation"] in launch_corr]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in LAUNCH_CATS}
    first_launch = min(launch_ts[e["args"]["correlation"]] for e in launched)
    spill = [e for e in gpu if e["args"]["correlation"] not in launch_corr and e["ts"] < first_launch]
    trace = load_rank(path)
    assert trace.link_stats.orphans_dropped == len(spill) == 509
    assert trace.link_stats.orphans_dropped_us == pytest.approx(sum(e["dur"] for e in spill))
    assert len(trace.gpu) == len(gpu) - len(spill)
    assert trace.link_stats.linked_pct >= 85.0
    assert any("spill-over" in w for w in trace.warnings)
    # with_modules traces give a module path to the ops that launched kernels
    linked_ops = trace.ops.loc[trace.gpu.loc[trace.gpu["op"] >= 0, "op"].unique()]
    assert linked_ops["module"].notna().mean() > 0.9
    assert linked_ops["module"].dropna().str.startswith("Qwen2Model_0").all()


def test_a100_training_trace_links_through_correlation_not_external_id():
    # In this (2023) trace a kernel's External id is its correlation id, not its op's id.
    path = shared_trace(A100_TRAIN)
    trace = load_rank(path)
    assert trace.rank == 0
    gpu = trace.gpu
    assert (gpu["link"] != "ext_id").all()
    # torch.compile'd GEMMs link to the compiled region (no shapes), eager ones to aten::addmm.
    gemm = gpu[gpu["name"].str.contains("cutlass_80_tensorop_s1688gemm") & (gpu["op"] >= 0)]
    assert set(trace.ops.loc[gemm["op"], "name"]) == {"CompiledFunction", "CompiledFunctionBackward", "aten::addmm", "aten::mm"}


def test_folder_of_ranks_reads_rank_from_distributed_info(tmp_path):
    a = shared_trace("hta/timeline_analysis/sampled_rank-0.json.gz")
    b = shared_trace("hta/trace_filter/sampled_rank-1.json.gz")
    (tmp_path / "x.json.gz").symlink_to(b)  # file name says nothing; distributedInfo.rank says 1
    (tmp_path / "y.json.gz").symlink_to(a)
    traces, warnings = load_traces([tmp_path])
    assert [t.rank for t in traces] == [0, 1]
    assert [t.path.name for t in traces] == ["y.json.gz", "x.json.gz"]


def test_two_files_claiming_one_rank_are_both_kept_with_a_warning(tmp_path):
    # Two processes (another pid) whose files both say rank 0. (The same file twice is read once, and
    # two files of one process are its profiling windows: see tests/test_repeat_windows.py.)
    a = shared_trace(A100_NCCL)
    (tmp_path / "one.json.gz").symlink_to(a)
    doc = json.loads(gzip.decompress(a.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("pid"), int) and e.get("cat") != "kernel":
            e["pid"] += 100000
    (tmp_path / "two.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    traces, warnings = load_traces([tmp_path])
    assert sorted(t.rank for t in traces) == [0, 1]
    assert any("both claim rank 0" in w for w in warnings)


@pytest.mark.parametrize("rel", shared_trace_names())
def test_every_shared_trace_loads(rel):
    trace = load_rank(shared_trace(rel))
    assert trace.rank >= -1
    assert len(trace.ops) or len(trace.gpu)
