"""Write small GPU rank traces of a many-rank job whose step times are known by construction.

Each rank file holds ``steps`` CPU ``ProfilerStep#N`` spans of the duration ``step_us(rank, step)``
gives; in each step one ``aten::mm`` launches one GEMM kernel (``kernel_us(rank)`` long) through
``cudaLaunchKernel``, linked by External id and correlation, and a ``ncclDevKernel_AllReduce`` of
``comm_us`` follows it. A short op after the last step keeps that step complete (a step that ends
at the trace end is cut). Ranks are named ``node{rank // per_node}_rank{rank}.pt.trace.json.gz``
and carry ``distributedInfo`` and a ``hostname``, as a job spread over nodes writes them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Callable

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920, "computeMajor": 8,
        "computeMinor": 0, "numSms": 108}


def rank_events(rank: int, steps: int, step_us: Callable[[int, int], float], kernel_us: float,
                comm_us: float) -> list[dict]:
    """The events of one rank: steps 1..``steps`` back to back from t = 1000 µs."""
    ev: list[dict] = []
    t = 1000.0
    corr = 1
    for s in range(1, steps + 1):
        d = float(step_us(rank, s))
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": t, "dur": d})
        op_ts = t + 10.0
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": op_ts, "dur": 40.0,
                   "args": {"External id": corr, "Input Dims": [[1024, 1024], [1024, 1024]],
                            "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": op_ts + 5.0, "dur": 8.0, "args": {"correlation": corr, "External id": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
                   "pid": 0, "tid": 7, "ts": op_ts + 20.0, "dur": kernel_us,
                   "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7}})
        corr += 1
        c_ts = op_ts + 20.0 + kernel_us + 5.0
        ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": c_ts - 15.0,
                   "dur": 10.0, "args": {"External id": corr}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": c_ts - 12.0, "dur": 5.0, "args": {"correlation": corr, "External id": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                   "tid": 7, "ts": c_ts, "dur": comm_us,
                   "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7}})
        corr += 1
        t += d
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "pid": 1, "tid": 1, "ts": t + 50.0, "dur": 5.0,
               "args": {"External id": corr}})
    return ev


def write_job(folder: Path, ranks: int, *, steps: int = 3, step_us: Callable[[int, int], float],
              kernel_us: Callable[[int], float] = lambda r: 300.0, comm_us: float = 100.0,
              per_node: int = 8) -> list[Path]:
    """Write ``ranks`` rank files into ``folder``; returns their paths in rank order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        host = f"node{r // per_node}"
        doc = {"schemaVersion": 1, "deviceProperties": [A100],
               "distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks},
               "hostname": host,
               "traceEvents": rank_events(r, steps, step_us, kernel_us(r), comm_us)}
        path = folder / f"{host}_rank{r}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode(), compresslevel=1))
        paths.append(path)
    return paths
