"""Hand-built Diagnosis objects for the report tests (numbers worked out by hand in comments).

A100-SXM4-80GB ceilings (dense, NVIDIA A100 datasheet): bf16/fp16 tensor 312 TFLOP/s, tf32 156,
fp64 tensor 19.5, fp32 vector 19.5; HBM2e 2,039 GB/s; NVLink 300 GB/s per direction.
"""

from __future__ import annotations

import functools

from bwdiag.diagnose.model import (
    AppliedFinding,
    Coverage,
    CollectiveRow,
    DeviceInfo,
    Diagnosis,
    Finding,
    IdleBreakdown,
    KernelRow,
    RankSummary,
    Source,
    TimeBreakdown,
    WhatIf,
)
from bwdiag.pipeline import analyze
from tests.conftest import SHARED_TRACES, shared_trace

HOSTILE = "</script><img src=x onerror=alert(1)>"

A100 = DeviceInfo(
    name="NVIDIA A100-SXM4-80GB",
    kind="gpu",
    spec_source="table",
    peak_flops={"fp64": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12},
    memory_bandwidth=2.039e12,
    interconnect_bandwidth=300e9,
    matched_from="NVIDIA A100-SXM4-80GB",
    vector_flops={"fp32": 19.5e12},
    sources=("NVIDIA A100 Tensor Core GPU datasheet (dense)",),
)


def kernel(name, *, total_us, count, flops=None, bytes_=None, bound, ceiling, roof=None,
           category="gemm", op=None, module=None, shapes=None, rank=0, dtype=None):
    """A KernelRow whose derived fields follow from the group totals (flops, bytes in total)."""
    secs = total_us * 1e-6
    intensity = flops / bytes_ if flops and bytes_ else None
    achieved_f = flops / secs if flops is not None else None
    achieved_b = bytes_ / secs if bytes_ is not None else None
    attainable = None
    pct = None
    if roof is not None and intensity is not None:
        attainable = min(roof, A100.memory_bandwidth * intensity)
        pct = 100.0 * achieved_f / attainable
    elif bytes_ and bound == "memory":
        pct = 100.0 * achieved_b / A100.memory_bandwidth
    return KernelRow(
        name=name, rank=rank, category=category, count=count, total_us=total_us, flops=flops,
        bytes=bytes_, intensity=intensity, achieved_flops_per_s=achieved_f,
        achieved_bytes_per_s=achieved_b, bound=bound, ceiling=ceiling, pct_of_ceiling=pct, op=op,
        shapes=shapes, dtype=dtype, module=module, attainable_flops_per_s=attainable,
        mean_us=total_us / count,
    )


# 2*2048^3 FLOPs per GEMM x 100 calls = 1.718e12; bytes 3*2048*2048*2 x 100 = 2.517e9 -> 682.7 FLOP/B.
GEMM = kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", total_us=8000.0,
              count=100, flops=2 * 2048**3 * 100, bytes_=3 * 2048 * 2048 * 2 * 100, bound="compute",
              ceiling="bf16 tensor", roof=312e12, op="aten::mm", module="model.layers.0.mlp",
              shapes="[[2048, 2048], [2048, 2048]]", dtype="bf16")
# add of two 16M-element fp32 tensors: 16.78e6 FLOPs, 3*4*16.78e6 = 201 MB per call, x 40 calls.
ADD = kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
             total_us=4000.0, count=40, flops=16777216 * 40, bytes_=3 * 4 * 16777216 * 40,
             bound="memory", ceiling="memory", roof=19.5e12, category="elementwise", op="aten::add",
             module="model.layers.0", shapes="[[4096, 4096], [4096, 4096]]", dtype="fp32")
COPY = kernel("void at::native::elementwise_kernel<128, 2, copy_kernel>", total_us=1000.0,
              count=10, flops=0, bytes_=2 * 4 * 16777216 * 10, bound="memory", ceiling="memory",
              category="copy", op="aten::copy_", module="model", dtype="fp32")
TRITON = kernel("triton_poi_fused_add_mul_0", total_us=600.0, count=200, bound="unknown",
                ceiling="unknown", category="triton")
HOSTILE_K = kernel(HOSTILE, total_us=400.0, count=4, flops=4e9, bytes_=4e8, bound="latency",
                   ceiling="launch latency", roof=19.5e12, category="elementwise", op=HOSTILE,
                   module=HOSTILE, shapes=HOSTILE)
NCCL = kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
              total_us=3000.0, count=8, bound="communication", ceiling="interconnect",
              category="communication", op="nccl:all_reduce")

FINDINGS = (
    Finding(kind="fusion", title="Fuse the elementwise chain in model.layers.0",
            est_saving_us=3000.0, est_saving_pct=15.0, evidence=(ADD.name, "model.layers.0"),
            fix="model = torch.compile(model)"),
    Finding(kind="overlap", title="Overlap the gradient all-reduce with backward",
            est_saving_us=2500.0, est_saving_pct=12.5, evidence=(NCCL.name,),
            fix="DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=True)"),
    Finding(kind="fusion", title=f"Fuse the tiny kernels launched by {HOSTILE}",
            est_saving_us=2500.0, est_saving_pct=12.5, evidence=(HOSTILE,),
            fix=f"# {HOSTILE}\ntorch.compile(model, mode='max-autotune')"),
    Finding(kind="quantization", title="Run the MLP GEMMs in fp8", est_saving_us=500.0,
            est_saving_pct=2.5, evidence=(GEMM.name,), fix="import transformer_engine"),
)

# The what-if of FINDINGS (as findings/whatif.py caps each by the time it acts on): fusion 3000 from
# memory+latency (5000), overlap 2500 from exposed communication (3000), the second fusion 2000 of its
# 2500 (2000 left), fp8 500 from compute: 8000 of 20000 µs saved -> 12000 µs.
WHATIF = WhatIf(
    findings=(AppliedFinding("fusion", FINDINGS[0].title, 3000.0, 3000.0, False),
              AppliedFinding("overlap", FINDINGS[1].title, 2500.0, 2500.0, False),
              AppliedFinding("fusion", FINDINGS[2].title, 2500.0, 2000.0, True),
              AppliedFinding("quantization", FINDINGS[3].title, 500.0, 500.0, False)),
    total_us=20000.0, saved_us=8000.0, projected_us=12000.0, speedup=20000.0 / 12000.0)

# total 20 ms: compute 8 + memory 4 + latency 1 + exposed comm 3 + idle 3 + unknown 1.
TIME = TimeBreakdown(
    total_us=20000.0,
    by_bound={"compute": 8000.0, "memory": 4000.0, "latency": 1000.0, "communication": 3000.0,
              "idle": 3000.0, "unknown": 1000.0},
    exposed_communication_us=3000.0, communication_overlap_pct=0.0, steps=4, step_us=5000.0,
)

RANKS = (
    RankSummary(rank=0, total_us=20000.0, busy_us=17000.0, compute_us=14000.0,
                communication_us=3000.0, exposed_communication_us=3000.0, idle_us=3000.0,
                kernels=362),
    RankSummary(rank=1, total_us=20000.0, busy_us=15000.0, compute_us=13000.0,
                communication_us=3000.0, exposed_communication_us=2000.0, idle_us=5000.0,
                kernels=362),
)


def gpu_diagnosis(**changes) -> Diagnosis:
    """A two-rank A100 training diagnosis with every section of the report populated."""
    base = dict(
        source=Source(paths=("traces/rank0.json.gz", "traces/rank1.json.gz"), ranks=(0, 1),
                      trace_kind="gpu", torch_version="2.4.0"),
        device=A100,
        time=TIME,
        kernels=(ADD, GEMM, COPY, TRITON, HOSTILE_K, NCCL),
        collectives=(
            CollectiveRow(name=NCCL.name, rank=0, collective="all_reduce", count=8,
                          total_us=3000.0, exposed_us=3000.0, bytes=100e6, algbw=266.7e9,
                          busbw=266.7e9, pct_of_link=88.9, group_size=2, dtype="bf16"),
        ),
        findings=FINDINGS,
        whatif=WHATIF,
        coverage=Coverage(linked_pct=83.5, estimated_pct=78.25),
        warnings=("rank1.json.gz: closing ] missing; read the 1,204 complete events",),
        ranks=RANKS,
        # Both ranks: 3 ms idle = 2 ms host wait + 600 µs kernel wait + 400 µs other, in 50 gaps.
        idle_by_rank=tuple(IdleBreakdown(host_wait_us=2000.0, kernel_wait_us=600.0, other_us=400.0,
                                         gaps=50, rank=r) for r in (0, 1)),
    )
    base.update(changes)
    return Diagnosis(**base)


def cpu_diagnosis() -> Diagnosis:
    """A CPU-only trace: no kernels, no findings, assumed ceilings."""
    return Diagnosis(
        source=Source(paths=("cpu.json.gz",), ranks=(0,), trace_kind="cpu"),
        device=DeviceInfo(name="CPU", kind="cpu", spec_source="assumed", peak_flops={},
                          memory_bandwidth=100e9, interconnect_bandwidth=None),
        time=TimeBreakdown(total_us=1500.0, by_bound={"unknown": 1500.0},
                           exposed_communication_us=0.0, communication_overlap_pct=None),
        kernels=(), collectives=(), findings=(),
        coverage=Coverage(linked_pct=0.0, estimated_pct=0.0), warnings=(),
    )


# ------------------------------------------------------------------------------ real traces

A100_TRAIN = "hta/negative_queue_length_values_check/rank0.json.gz"
H100_QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
CPU_ONLY = "hta/rank_non_gpu/rank_non_gpu.json.gz"


trace_path = shared_trace  # a shared real trace; skips when absent, fails under CI (tests/conftest.py)


@functools.lru_cache(maxsize=None)
def _analyze(relpath: str) -> Diagnosis:
    return analyze([str(SHARED_TRACES / relpath)])


def real_diagnosis(relpath: str) -> Diagnosis:
    """The pipeline's diagnosis of a shared trace, analysed once per test session."""
    trace_path(relpath)
    return _analyze(relpath)
