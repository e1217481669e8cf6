"""Build a SYNTHESISED capture-time trace for the real vLLM decode replay in
``../shared/traces/tracelens/inference/vllm_decode_full/graph_execution.json.gz``.

Why synthesised: the real capture trace vLLM wrote beside that execution trace
(AMD-AGI/TraceLens ``tests/traces/inference/vllm_decode_full/capture_traces/
graph_capture_rank_0.1773709742341309550.pt.trace.json.gz``) is a binary gzip that could not be
retrieved here. What *could* be read is TraceLens's own analysis of that execution trace merged with
that capture trace, ``tests/traces/inference/vllm_decode_full/perf_csvs/ops_unique_args.csv``
(commit d90f5c1a, MIT licence): for every capture-time op it lists the name, ``Input Dims``,
``Input type``, ``Input Strides``, ``Concrete Inputs`` and the kernels the op launched. The model is
GPT-OSS (24 layers, hidden 2880, 64 query / 8 KV heads of 64, 32 experts top-4, vocab 201088),
decoding 32 tokens. ``OPS`` below restates those rows, with the token count ``T`` as a parameter.

How: the replayed kernel sequence is read from the real execution trace (the kernels carrying the
``hipGraphLaunch``'s correlation id, by start time); each kernel is given the op role its name
implies (``role_of``: the GEMM kernels by position in the layer, the two fused-add RMSNorms by the
kernel before them), consecutive kernels of a multi-kernel op (MoE: 3, routing: 3, 3-D attention: 2)
are grouped into one op instance, and the capture trace is written the way vLLM's capture profiler
records it: a ``capture_<T>_FULL`` annotation around ``hipStreamBeginCapture`` … one ``cpu_op``
(with its shapes) per op instance, inside it one launch call per kernel (``args.kernel`` = the kernel
name, correlation ids of its own) … ``hipStreamEndCapture``. No kernel runs during a stream capture,
so the file has no GPU events.

``python make_capture.py EXEC_TRACE OUT`` writes one file; the tests call :func:`build_capture`.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

BF16 = "c10::BFloat16"
RMS_EPS = "1.0000000000000001e-05"


def OPS(T: int) -> dict[str, dict]:
    """Capture-time ops of one decode step of T tokens (from TraceLens's ops_unique_args.csv)."""
    gemm_s = ["Scalar", "Scalar"]
    return {
        "embed": dict(name="triton_poi_fused_0",
                      dims=[[T], [201088, 2880], [131072, 64], [T, 2880], [131072, 64]],
                      types=["int", BF16, "float", BF16, BF16],
                      strides=[[1], [2880, 1], [64, 1], [2880, 1], [64, 1]], concrete=[""] * 5),
        "rms_norm": dict(name="aiter::rms_norm", dims=[[T, 2880], [2880], [], []],
                         types=[BF16, BF16, "Scalar", "Scalar"], strides=[[2880, 1], [1], [], []],
                         concrete=["", "", RMS_EPS, "0"]),
        "qkv": dict(name="aten::addmm", dims=[[5120], [T, 2880], [2880, 5120], [], []],
                    types=[BF16, BF16, BF16, *gemm_s], strides=[[1], [2880, 1], [1, 2880], [], []],
                    concrete=["", "", "", "1", "1"]),
        "to_copy": dict(name="triton_poi_fused__to_copy_1", dims=[[131072, 64], [131072, 64], []],
                        types=["float", BF16, "Scalar"], strides=[[64, 1], [64, 1], []],
                        concrete=["", "", "8388608"]),
        "rope": dict(name="_C::rotary_embedding", dims=[[T], [T, 4096], [T, 512], [], [131072, 64], []],
                     types=["long int", BF16, BF16, "Scalar", BF16, "Scalar"],
                     strides=[[1], [5120, 1], [5120, 1], [], [64, 1], []], concrete=["", "", "", "64", "", "True"]),
        "kv_cache": dict(name="_C_cache_ops::reshape_and_cache_flash",
                         dims=[[T, 8, 64], [T, 8, 64], [224304, 32, 8, 64], [224304, 32, 8, 64], [T], [], [], []],
                         types=[BF16, BF16, BF16, BF16, "long int", "", "float", "float"],
                         strides=[[5120, 64, 1], [5120, 64, 1], [16384, 512, 64, 1], [16384, 512, 64, 1], [1],
                                  [], [], []], concrete=[""] * 8),
        "attention": dict(name="vllm::unified_attention_with_output",
                          dims=[[T, 64, 64], [T, 8, 64], [T, 8, 64], [T, 64, 64], [], [], [], [0]],
                          types=[BF16, BF16, BF16, BF16, "", "", "", BF16],
                          strides=[[5120, 64, 1], [5120, 64, 1], [5120, 64, 1], [4096, 64, 1], [], [], [], [1]],
                          concrete=[""] * 8),
        "o_proj": dict(name="aten::addmm", dims=[[2880], [T, 4096], [4096, 2880], [], []],
                       types=[BF16, BF16, BF16, *gemm_s], strides=[[1], [4096, 1], [1, 4096], [], []],
                       concrete=["", "", "", "1", "1"]),
        "norm_attn": dict(name="aiter::rmsnorm2d_fwd_with_add_ck", dims=[[T, 2880]] * 4 + [[2880], [], []],
                          types=[BF16] * 5 + ["Scalar", "Scalar"],
                          strides=[[2880, 1], [2880, 1], [2880, 1], [2880, 1], [1], [], []],
                          concrete=[""] * 5 + [RMS_EPS, "0"]),
        "norm_moe": dict(name="aiter::rmsnorm2d_fwd_with_add_ck", dims=[[T, 2880]] * 4 + [[2880], [], []],
                         types=[BF16] * 5 + ["Scalar", "Scalar"],
                         strides=[[2880, 1], [3072, 1], [2880, 1], [2880, 1], [1], [], []],
                         concrete=[""] * 5 + [RMS_EPS, "0"]),
        "router": dict(name="aten::addmm", dims=[[32], [T, 2880], [2880, 32], [], []],
                       types=[BF16, BF16, BF16, *gemm_s], strides=[[1], [2880, 1], [1, 2880], [], []],
                       concrete=["", "", "", "1", "1"]),
        "pad": dict(name="triton_poi_fused_constant_pad_nd_moe_forward_0", dims=[[T, 2880], [T, 3072], []],
                    types=[BF16, BF16, "Scalar"], strides=[[2880, 1], [3072, 1], []],
                    concrete=["", "", str(T * 3072)]),
        "topk": dict(name="TopK", dims=[[T, 32], [], [], [], [], [], []],
                     types=[BF16, "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
                     strides=[[32, 1], [], [], [], [], [], []], concrete=["", "4", "True", "1", "True", "", ""]),
        "routing": dict(name="SortTokens", dims=[[T, 4], [T, 4], []], types=[BF16, "short int", "Scalar"],
                        strides=[[4, 1], [4, 1], []], concrete=["", "", str(T)]),
        "moe": dict(name="vllm::moe_forward", dims=[[T, 3072], [T, 32], [], []], types=[BF16, BF16, "", ""],
                    strides=[[3072, 1], [32, 1], [], []], concrete=[""] * 4),
    }


# Kernels that open a multi-kernel op, and the kernels that continue it.
_FIRST_OF = {"_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu": "moe", "_sum_bitmatrix_rows": "routing",
             "kernel_unified_attention_3d": "attention"}
_CONTINUES = {"_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1": "moe", "_finalize_matmul_scatter_bf16": "moe",
              "_combined_routing_memset": "routing", "_combined_routing_compute": "routing",
              "reduce_segments": "attention"}


def role_of(name: str, prev: str | None) -> str:
    """The op role of a replayed kernel, given the role of the kernel before it."""
    if name in _FIRST_OF:
        return _FIRST_OF[name]
    if name in _CONTINUES:
        return _CONTINUES[name]
    if name == "triton_poi_fused_0":
        return "embed"
    if name.startswith("_ZN7ck_tile") and "Rmsnorm2dFwd" in name:
        if "FusedAddEnumE0" in name:
            return "rms_norm"
        return "norm_attn" if prev == "o_proj" else "norm_moe"
    if name.startswith("Cijk_"):  # hipBLASLt GEMMs: qkv after a norm, o_proj after attention, router after
        return {"rms_norm": "qkv", "norm_moe": "qkv", "attention": "o_proj", "norm_attn": "router"}[prev]
    for prefix, role in (("triton_poi_fused__to_copy_1", "to_copy"), ("void vllm::rotary_embedding", "rope"),
                         ("void vllm::reshape_and_cache_flash", "kv_cache"), ("kernel_unified_attention_2d",
                                                                              "attention"),
                         ("triton_poi_fused_constant_pad_nd", "pad"), ("_topk_forward", "topk")):
        if name.startswith(prefix):
            return role
    raise ValueError(f"no op role for kernel {name[:80]}")


def replay_kernels(exec_trace: Path) -> list[dict]:
    """The kernels of the execution trace's graph replay, in start order."""
    with gzip.open(exec_trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["name"].endswith("GraphLaunch"))
    corr = launch["args"]["correlation"]
    return sorted((e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") == corr),
                  key=lambda e: e["ts"])


def op_instances(names: list[str]) -> list[tuple[str, list[int]]]:
    """(role, kernel positions) of each capture-time op, in order."""
    out: list[tuple[str, list[int]]] = []
    prev = None
    for i, n in enumerate(names):
        role = role_of(n, prev)
        if n in _CONTINUES and out and out[-1][0] == role:
            out[-1][1].append(i)
        else:
            out.append((role, [i]))
        prev = role
    return out


def _launch_api(name: str) -> str:
    if name.startswith("Cijk_"):
        return "hipExtModuleLaunchKernel"
    if name.startswith(("triton_", "_", "kernel_unified", "reduce_segments")) and not name.startswith("_ZN"):
        return "hipModuleLaunchKernel"
    return "hipLaunchKernel"


def capture_segment(names: list[str], tokens: int, t0: float, corr0: int, ext0: int) -> tuple[list[dict], float]:
    """Events of one ``capture_<tokens>_FULL`` stream capture of the kernel sequence ``names``."""
    ops = OPS(tokens)
    pid = tid = 851
    ev: list[dict] = []
    t = t0 + 5.0
    ev.append(dict(ph="X", cat="cuda_runtime", name="hipStreamBeginCapture", pid=pid, tid=tid, ts=t, dur=2.0,
                   args=dict(correlation=corr0, cid=1)))
    t += 5.0
    corr, ext = corr0 + 1, ext0
    for role, pos in op_instances(names):
        op = ops[role]
        start = t
        launches = []
        t += 3.0
        for i in pos:
            launches.append(dict(ph="X", cat="cuda_runtime", name=_launch_api(names[i]), pid=pid, tid=tid, ts=t,
                                 dur=4.0, args={"External id": ext, "correlation": corr, "kernel": names[i]}))
            corr += 1
            t += 6.0
        ev.append(dict(ph="X", cat="cpu_op", name=op["name"], pid=pid, tid=tid, ts=start, dur=t - start,
                       args={"External id": ext, "Record function id": 0, "Input Dims": op["dims"],
                             "Input type": op["types"], "Input Strides": op["strides"],
                             "Concrete Inputs": op["concrete"]}))
        ev.extend(launches)
        ext += 1
        t += 2.0
    ev.append(dict(ph="X", cat="cuda_runtime", name="hipStreamEndCapture", pid=pid, tid=tid, ts=t, dur=3.0,
                   args=dict(correlation=corr, cid=2)))
    t += 10.0
    ev.insert(0, dict(ph="X", cat="user_annotation", name=f"capture_{tokens}_FULL", pid=pid, tid=tid, ts=t0,
                      dur=t - t0, args={"External id": ext0 - 1}))
    return ev, t


def build_capture(exec_trace: Path, sizes=(32,), names: list[str] | None = None) -> dict:
    """The capture trace document: one ``capture_<n>_FULL`` segment per size in ``sizes``, each
    capturing ``names`` (default: the execution trace's replayed kernel sequence)."""
    names = names if names is not None else [k["name"] for k in replay_kernels(exec_trace)]
    events: list[dict] = []
    t = 1_000_000.0
    for k, size in enumerate(sizes):
        seg, t = capture_segment(names, size, t, corr0=10_000 * (k + 1), ext0=100_000 * (k + 1))
        events.extend(seg)
        t += 1000.0
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
            "traceName": "SYNTHESISED by tests/data/graph_capture/make_capture.py (not a recorded trace)",
            "traceEvents": events}


def write(doc: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    return out


if __name__ == "__main__":
    write(build_capture(Path(sys.argv[1])), Path(sys.argv[2]))
