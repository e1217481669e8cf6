"""CUDA/HIP graph replays priced from the capture-time trace (bwdiag/trace/graphs.py).

Two kinds of data: tiny hand-written traces (always run) and the real vLLM decode replay
``tracelens/inference/vllm_decode_full/graph_execution.json.gz`` with a capture trace SYNTHESISED
from its kernel sequence and TraceLens's table of the capture-time op shapes
(tests/data/graph_capture/make_capture.py says how). Expected numbers are worked out here from the
raw events and the capture ops' shapes, never read back from bwdiag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bwdiag import pipeline
from bwdiag.diagnose.activities import gpu_activities
from bwdiag.trace import load_rank, load_traces
from tests.conftest import REPO, raw_events, shared_trace
from tests.data.graph_capture import make_capture

VLLM_DECODE = "tracelens/inference/vllm_decode_full/graph_execution.json.gz"


# -- tiny traces ------------------------------------------------------------------------------
M, K, N, P = 64, 256, 512, 128
GEMM_A, ADD, GEMM_B = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64", \
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", \
    "nvjet_tst_128x64_64x6_1x2_h_bz_coopA_NNN"
DURS = (30.0, 5.0, 20.0)  # per replay: gemm A, add, gemm B


def _exec_trace(replays: int = 2) -> dict:
    ev = []
    for r in range(replays):
        corr, t = 7 + r, 1000.0 * (r + 1)
        ev.append(dict(ph="X", cat="cuda_runtime", name="cudaGraphLaunch", pid=1, tid=1, ts=t, dur=8.0,
                       args=dict(correlation=corr)))
        k = t + 10.0
        for name, dur in zip((GEMM_A, ADD, GEMM_B), DURS):
            ev.append(dict(ph="X", cat="kernel", name=name, pid=0, tid=7, ts=k, dur=dur,
                           args=dict(correlation=corr, device=0, stream=7)))
            k += dur + 1.0
    return {"schemaVersion": 1, "traceEvents": ev}


def _capture_trace(kernel_names: bool = True) -> dict:
    bf = "c10::BFloat16"
    ops = [("aten::mm", [[M, K], [K, N]], [bf, bf], GEMM_A),
           ("aten::add", [[M, N], [M, N], []], [bf, bf, "Scalar"], ADD),
           ("aten::mm", [[M, N], [N, P]], [bf, bf], GEMM_B)]
    ev = [dict(ph="X", cat="cuda_runtime", name="cudaStreamBeginCapture", pid=5, tid=5, ts=10.0, dur=1.0,
               args=dict(correlation=100))]
    t = 20.0
    for i, (name, dims, types, kernel) in enumerate(ops):
        ev.append(dict(ph="X", cat="cpu_op", name=name, pid=5, tid=5, ts=t, dur=10.0,
                       args={"Input Dims": dims, "Input type": types, "External id": 50 + i}))
        args = {"correlation": 101 + i, "External id": 50 + i}
        if kernel_names:
            args["kernel"] = kernel
        ev.append(dict(ph="X", cat="cuda_runtime", name="cudaLaunchKernel", pid=5, tid=5, ts=t + 2.0, dur=3.0,
                       args=args))
        t += 20.0
    ev.append(dict(ph="X", cat="cuda_runtime", name="cudaStreamEndCapture", pid=5, tid=5, ts=t, dur=1.0,
                   args=dict(correlation=200)))
    return {"schemaVersion": 1, "traceEvents": ev}


def _write(doc: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kernel_names", [True, False], ids=["named launches (HIP)", "unnamed launches"])
def test_tiny_each_replay_carries_its_capture_op_cost(tmp_path, kernel_names):
    exe = _write(_exec_trace(replays=2), tmp_path / "exec.json")
    cap = _write(_capture_trace(kernel_names), tmp_path / "cap.json")
    trace = load_rank(exe, graph_capture=[cap])
    acts = gpu_activities(trace).sort_values("ts")
    assert list(acts["link"]) == ["capture"] * 6
    assert list(acts["op_name"]) == ["aten::mm", "aten::add", "aten::mm"] * 2
    # Each replay ran the GEMMs once: each takes the whole 2·M·N·K of its capture op, not half.
    flops = acts["flops"].tolist()
    assert flops[0] == flops[3] == 2 * M * K * N
    assert flops[2] == flops[5] == 2 * M * N * P
    assert trace.link_stats.linked_pct == 100.0
    assert not any("replayed" in w for w in trace.warnings)


def test_tiny_replays_without_capture_warn_once_with_counts(tmp_path):
    exe = _write(_exec_trace(replays=2), tmp_path / "exec.json")
    trace = load_rank(exe)
    total = 2 * sum(DURS)
    notes = [w for w in trace.warnings if "kernel" in w]
    assert len(notes) == 1, notes  # the replay warning, not also the generic unlinked one
    note = notes[0]
    assert f"6 kernels ({total:,.1f} µs, 100.0% of kernel time) were replayed" in note
    assert "2 graph launches" in note
    assert str(tmp_path / "capture_traces") in note
    assert "--profiler-config.capture_torch_profiler True" in note and "--graph-capture FILE" in note
    assert (trace.gpu["op"] < 0).all()


def test_tiny_capture_folder_beside_is_found_and_is_not_a_rank(tmp_path):
    _write(_exec_trace(replays=1), tmp_path / "run" / "exec.json")
    _write(_capture_trace(), tmp_path / "run" / "capture_traces" / "graph_capture_rank_0.1.pt.trace.json")
    traces, warnings = load_traces([tmp_path / "run"])
    assert [t.path.name for t in traces] == ["exec.json"]
    assert (traces[0].gpu["link"] == "capture").all()
    assert not any("replayed" in w for w in warnings)


def test_tiny_graph_capture_reaches_every_rank_in_worker_processes(tmp_path):
    files = [_write(_exec_trace(replays=1), tmp_path / f"rank{r}.json") for r in (0, 1)]
    cap = _write(_capture_trace(), tmp_path / "elsewhere" / "cap.json")
    traces, _ = load_traces(files, graph_capture=[cap], jobs=2)
    assert [t.rank for t in traces] == [0, 1]
    for t in traces:
        assert (t.gpu["link"] == "capture").all()
        assert gpu_activities(t).sort_values("ts")["flops"].iloc[0] == 2 * M * K * N


def test_tiny_missing_graph_capture_file_is_refused(tmp_path):
    exe = _write(_exec_trace(), tmp_path / "exec.json")
    from bwdiag.errors import TraceError

    with pytest.raises(TraceError, match="no such graph-capture trace"):
        load_traces([exe], graph_capture=[tmp_path / "nope.json.gz"])


# -- the real vLLM decode replay ----------------------------------------------------------------
def _raw_kernels(path: Path) -> tuple[list[dict], list[dict]]:
    """(eager kernels, replayed kernels by start) read straight from the file."""
    ev = raw_events(path)["traceEvents"]
    graph_corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"
                  and e["name"] in ("cudaGraphLaunch", "hipGraphLaunch")}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    replay = sorted((e for e in kernels if e["args"].get("correlation") in graph_corr), key=lambda e: e["ts"])
    eager = [e for e in kernels if e["args"].get("correlation") not in graph_corr]
    return eager, replay


def _capture_file(tmp_path: Path, exe: Path, **kw) -> Path:
    out = tmp_path / "capture_traces" / "graph_capture_rank_0.synth.pt.trace.json.gz"
    return make_capture.write(make_capture.build_capture(exe, **kw), out)


def _expected_gemm_flops(names: list[str], tokens: int) -> dict[int, float]:
    """Replay position → 2·M·N·K of its capture op, for every aten::addmm, from OPS' shapes."""
    ops = make_capture.OPS(tokens)
    out = {}
    for role, pos in make_capture.op_instances(names):
        op = ops[role]
        if op["name"] == "aten::addmm":
            (m, k), (k2, n) = op["dims"][1], op["dims"][2]
            assert k == k2
            for p in pos:
                out[p] = 2.0 * m * n * k
    return out


def _replay_acts(trace) -> "list":
    acts = gpu_activities(trace)
    return acts[acts["name"].isin(set(trace.gpu.loc[trace.gpu["launch_name"] == "hipGraphLaunch", "name"]))
                & (trace.gpu["launch_name"] == "hipGraphLaunch").to_numpy()].sort_values("ts")


def test_real_decode_replay_gemms_priced_from_capture_shapes(tmp_path):
    exe = shared_trace(VLLM_DECODE)
    eager, replay = _raw_kernels(exe)
    assert len(replay) == 421 and len(eager) == 4
    names = [k["name"] for k in replay]
    trace = load_rank(exe, graph_capture=[_capture_file(tmp_path, exe)])
    acts = _replay_acts(trace)
    assert len(acts) == 421 and (acts["link"] == "capture").all()
    expected = _expected_gemm_flops(names, 32)
    assert len(expected) == 72  # qkv, o_proj and router GEMMs of 24 layers
    got = acts["flops"].to_numpy()
    for pos, flops in expected.items():
        assert got[pos] == pytest.approx(flops, rel=1e-12), (pos, names[pos][:60])
    # e.g. the first qkv projection: 32 tokens × 2880 → 5120
    assert got[2] == 2 * 32 * 2880 * 5120
    # every kernel now has an op: linked share from the raw durations
    total = sum(k["dur"] for k in eager + replay)
    d = pipeline.analyze([exe], graph_capture=[tmp_path / "capture_traces"])
    assert d.coverage.linked_pct == pytest.approx(100.0 * total / total)
    assert not any("replayed from a CUDA/HIP graph" in w for w in d.warnings)


def test_real_decode_replay_without_capture_says_how_to_get_it():
    exe = shared_trace(VLLM_DECODE)
    eager, replay = _raw_kernels(exe)
    total = sum(k["dur"] for k in eager + replay)
    replay_us = sum(k["dur"] for k in replay)
    d = pipeline.analyze([exe])
    notes = [w for w in d.warnings if "kernels (" in w]
    assert len(notes) == 1, notes
    assert notes[0].startswith(
        f"{exe.name}: 421 kernels ({replay_us / 1e3:,.2f} ms, {100 * replay_us / total:.1f}% of kernel time) "
        "were replayed from a CUDA/HIP graph (1 graph launch)")
    assert f"none in {exe.parent / 'capture_traces'}/" in notes[0]
    assert "--profiler-config.capture_torch_profiler True" in notes[0] and "--graph-capture FILE" in notes[0]
    assert d.coverage.linked_pct == pytest.approx(100.0 * sum(k["dur"] for k in eager) / total)


def test_real_partial_match_aligns_what_matches_and_warns_about_the_rest(tmp_path):
    exe = shared_trace(VLLM_DECODE)
    eager, replay = _raw_kernels(exe)
    names = [k["name"] for k in replay]
    captured = list(names[:-20])
    captured[100] = "some_kernel_the_replay_never_ran"
    # op roles are those of the true sequence (the renamed launch keeps its op)
    doc = make_capture.build_capture(exe, names=names[:-20])
    launches = [e for e in doc["traceEvents"] if e.get("args", {}).get("kernel") is not None]
    launches[100]["args"]["kernel"] = captured[100]
    cap = make_capture.write(doc, tmp_path / "cap.json.gz")

    trace = load_rank(exe, graph_capture=[cap])
    acts = _replay_acts(trace)
    unaligned = [100] + list(range(401, 421))
    link = acts["link"].tolist()
    assert [i for i, x in enumerate(link) if x != "capture"] == unaligned
    expected = _expected_gemm_flops(names, 32)
    got = acts["flops"].to_numpy()
    for pos, flops in expected.items():
        if pos not in unaligned:
            assert got[pos] == pytest.approx(flops, rel=1e-12)
    total = sum(k["dur"] for k in eager + replay)
    lost = sum(replay[i]["dur"] for i in unaligned)
    notes = [w for w in trace.warnings if "replayed" in w]
    assert len(notes) == 1
    assert notes[0].startswith(f"{exe.name}: 21 kernels ({lost:,.1f} µs, {100 * lost / total:.1f}% of kernel time)")
    assert "400 others were aligned with their capture-time ops" in notes[0] and cap.name in notes[0]
    # the loader's share counts every GPU activity (the 9 eager memcpys are linked too)
    copies = sum(e["dur"] for e in raw_events(exe)["traceEvents"] if e.get("cat") == "gpu_memcpy")
    assert trace.link_stats.linked_pct == pytest.approx(100.0 * (total + copies - lost) / (total + copies))


@pytest.mark.parametrize("sizes,tokens", [((64, 32), 32), ((32, 64), 32), ((64,), 64)],
                         ids=["32 of 64+32", "32 of 32+64", "padded up to 64"])
def test_real_capture_size_follows_the_execute_annotation(tmp_path, sizes, tokens):
    """The replay runs inside ``execute_32_context_0(...)_generation_32(...)``: of captures with the
    same kernels, the 32-token one prices it; with only a 64-token capture, vLLM padded up to it."""
    exe = shared_trace(VLLM_DECODE)
    names = [k["name"] for k in _raw_kernels(exe)[1]]
    trace = load_rank(exe, graph_capture=[_capture_file(tmp_path, exe, sizes=sizes)])
    got = _replay_acts(trace)["flops"].to_numpy()
    for pos, flops in _expected_gemm_flops(names, tokens).items():
        assert got[pos] == pytest.approx(flops, rel=1e-12)
    assert not any("several captured graphs" in w for w in trace.warnings)


def test_real_cli_finds_capture_traces_beside_and_takes_graph_capture(tmp_path):
    exe = shared_trace(VLLM_DECODE)
    run = tmp_path / "run"
    run.mkdir()
    (run / exe.name).symlink_to(exe)
    cap = _capture_file(run, exe)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args, out in (([str(run / exe.name)], "beside"), ([str(exe), "--graph-capture", str(cap)], "option")):
        done = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", *args, "--out", str(tmp_path / out)],
                              capture_output=True, text=True, env=env, cwd=REPO)
        assert done.returncode == 0, done.stderr
        doc = json.loads((tmp_path / out / "diagnosis.json").read_text())
        assert doc["coverage"]["linked_pct"] == 100.0
        assert not any("replayed" in w for w in doc["warnings"])
