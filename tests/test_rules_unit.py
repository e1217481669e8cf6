"""Every findings rule on a hand-built context (tests/rule_context.py): a few ops and kernels whose
saving is worked out by hand in the comment above each assertion. No trace is loaded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bwdiag.diagnose.findings import (
    attention,
    batching,
    conversions,
    fusion,
    host,
    kv_cache,
    launch,
    optimizer,
    overlap,
    precision,
    quantization,
)
from bwdiag.diagnose.findings.base import RuleContext
from bwdiag.diagnose.findings.registry import RULES, Rule, check_order, run_rules
from bwdiag.diagnose.model import FindingKind
from tests.rule_context import collective, context, kernel, op, rank

MiB = 1 << 20
F32 = "float"
BF16 = "c10::BFloat16"


def only(results):
    (r,) = results
    return r


def acted_on(result, pos: int = 0) -> list[int]:
    return sorted(int(x) for x in result.acts.get(pos, ()))


# -- fusion ---------------------------------------------------------------------------------------


def _chain_rank():
    """mul(x, y) → add(t0, z) → relu(t1) over 1 Mi-element fp32 tensors (4 MiB each), back to back."""
    n = [1 << 20]
    ops = [op("aten::mul", dims=[n, n], types=[F32, F32]),
           op("aten::add", dims=[n, n], types=[F32, F32]),
           op("aten::relu", dims=[n], types=[F32])]
    acts = [kernel("mul_kernel", op=0, ts=0, dur=12, category="elementwise", bound="memory", bytes=12 * MiB),
            kernel("add_kernel", op=1, ts=12, dur=12, category="elementwise", bound="memory", bytes=12 * MiB),
            kernel("relu_kernel", op=2, ts=24, dur=8, category="elementwise", bound="memory", bytes=8 * MiB)]
    return rank(ops, acts)


def test_fusion_saves_the_intermediates_at_the_achieved_bandwidth():
    ctx = context([_chain_rank()], total_us=100)
    r = only(fusion.fusion(ctx))
    # Unfused: 12 + 12 + 8 = 32 MiB in 12 + 12 + 8 = 32 µs → 1 MiB/µs achieved. The two
    # intermediates (t0, t1: 4 MiB each) are written once and read back once: 2·(4 + 4) = 16 MiB
    # a fused kernel does not move (capped by 32 − 8 MiB first inputs − 4 MiB last output = 20 MiB).
    # 16 MiB ÷ 1 MiB/µs = 16 µs.
    assert r.kind == "fusion"
    assert r.est_saving_us == pytest.approx(16.0)
    assert r.finding.est_saving_pct == pytest.approx(16.0)  # of the 100 µs window
    assert acted_on(r) == [0, 1, 2]


def test_fusion_needs_the_sizes_to_chain():
    """relu reading a 2 MiB tensor cannot consume add's 4 MiB output: the run ends, and mul → add
    alone saves 2·4 MiB of 24 MiB moved in 24 µs = 8 µs."""
    a = _chain_rank()
    a.trace.ops.at[2, "dims"] = [[1 << 19]]
    r = only(fusion.fusion(context([a], total_us=100)))
    assert r.est_saving_us == pytest.approx(8.0)
    assert acted_on(r) == [0, 1]


# -- eager attention, and the claim the fusion rule honours ---------------------------------------


def _attention_rank():
    """bmm(q, kᵀ) → mul(scale) → softmax → bmm(p, v) over an [8, 256, 256] fp32 score tensor (2 MiB)."""
    s = [8, 256, 256]
    ops = [op("aten::bmm", dims=[[8, 256, 64], [8, 64, 256]], types=[F32, F32]),
           op("aten::mul", dims=[s, []], types=[F32, "Scalar"]),
           op("aten::_softmax", dims=[s, [], []], types=[F32, "Scalar", "Scalar"]),
           op("aten::bmm", dims=[s, [8, 256, 64]], types=[F32, F32])]
    bmm = "cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8"  # (tensor cores: no precision advice)
    acts = [kernel(bmm, op=0, ts=0, dur=20, category="gemm", bound="compute", dtype="bf16", tensor=True),
            kernel("mul_kernel", op=1, ts=20, dur=5, category="elementwise", bound="memory", bytes=4 * MiB),
            kernel("softmax_warp_forward", op=2, ts=25, dur=7, category="softmax", bound="memory", bytes=4 * MiB),
            kernel(bmm, op=3, ts=32, dur=20, category="gemm", bound="compute", dtype="bf16", tensor=True)]
    return rank(ops, acts)


def test_attention_saves_the_kernels_between_the_bmms():
    r = only(attention.attention_materialisation(context([_attention_rank()], total_us=100)))
    # Everything between the two bmms only moves the score tensor: mul 5 µs + softmax 7 µs = 12 µs.
    assert r.kind == "fusion" and "attention" in r.title
    assert r.est_saving_us == pytest.approx(12.0)
    assert acted_on(r) == [1, 2]


def test_fusion_alone_would_report_the_attention_chain():
    """Without attention's claim, mul → softmax is an ordinary fusable run: intermediates 2·2 MiB of
    8 MiB moved in 12 µs = 6 µs. (The registry never runs it that way: next test.)"""
    r = only(fusion.fusion(context([_attention_rank()], total_us=100)))
    assert r.est_saving_us == pytest.approx(6.0)


def test_registry_fusion_skips_what_attention_claimed():
    results = run_rules(context([_attention_rank()], total_us=100))
    assert [(r.kind, r.est_saving_us) for r in results] == [("fusion", pytest.approx(12.0))]
    assert "attention" in results[0].title


# -- optimizer ------------------------------------------------------------------------------------


def test_per_parameter_adam_saves_the_bytes_beyond_seven_tensors():
    p = [1 << 18]  # one fp32 parameter of 256 Ki elements: 1 MiB
    ops = [op("Optimizer.step#AdamW.step", ts=0, end=100),
           op("aten::lerp_", dims=[p, p, []], types=[F32, F32, "Scalar"], ts=1, end=2),
           op("aten::mul_", dims=[p, []], types=[F32, "Scalar"], ts=3, end=4),
           op("aten::addcmul_", dims=[p, p, p, []], types=[F32, F32, F32, "Scalar"], ts=5, end=6),
           op("aten::addcdiv_", dims=[p, p, p, []], types=[F32, F32, F32, "Scalar"], ts=7, end=8),
           op("aten::mul", dims=[p, p], types=[F32, F32], ts=200, end=201)]  # after the step: not counted
    acts = [kernel("lerp_kernel", op=1, ts=10, dur=8, category="elementwise", bound="memory", bytes=4 * MiB),
            kernel("mul_kernel", op=2, ts=20, dur=6, category="elementwise", bound="memory", bytes=3 * MiB),
            kernel("addcmul_kernel", op=3, ts=30, dur=8, category="elementwise", bound="memory", bytes=4 * MiB),
            kernel("addcdiv_kernel", op=4, ts=40, dur=6, category="elementwise", bound="memory", bytes=3 * MiB),
            kernel("mul_kernel", op=5, ts=210, dur=50, category="elementwise", bound="memory", bytes=3 * MiB)]
    r = only(optimizer.per_parameter_optimizer(context([rank(ops, acts)], total_us=1000)))
    # Inside the step: 4 + 3 + 4 + 3 = 14 MiB in 28 µs (0.5 MiB/µs). A fused step moves 7 tensors of
    # 1 MiB (one addcdiv_ = one parameter) → saves 7 MiB ÷ 0.5 MiB/µs = 14 µs.
    assert r.est_saving_us == pytest.approx(14.0)
    assert "AdamW" in r.title
    assert acted_on(r) == [0, 1, 2, 3]


# -- batching -------------------------------------------------------------------------------------


def test_small_gemms_save_the_time_above_their_roof():
    ops = [op("aten::mm", dims=[[8, 64], [64, 64]], types=[F32, F32])]
    acts = [kernel("gemv_small", op=0, ts=10 * i, dur=4, category="gemm", bound="latency", flops=65536)
            for i in range(100)]
    a = rank(ops, acts, placement={"gemv_small": {"best_time_s": 100e-6}})  # the group's 100 calls at the roof
    r = only(batching.small_kernels(context([a], total_us=1000)))
    # 100 launches × 4 µs = 400 µs; the same work at the roof takes 100 µs → 300 µs of fixed overhead.
    assert r.kind == "batching"
    assert r.est_saving_us == pytest.approx(300.0)
    assert acted_on(r) == list(range(100))


# -- layout and casts -----------------------------------------------------------------------------


def test_layout_conversions_count_converters_and_transpose_copies():
    ops = [op("aten::conv2d"),
           op("aten::contiguous"),
           op("aten::copy_", dims=[[64, 128], [64, 128]], types=[F32, F32], strides=[[128, 1], [1, 64]], parent=1),
           op("aten::contiguous"),
           op("aten::copy_", dims=[[64, 128], [64, 128]], types=[F32, F32], strides=[[128, 1], [128, 1]], parent=3)]
    acts = [kernel("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", op=0, ts=0, dur=30,
                   category="elementwise", bound="memory"),
            kernel("direct_copy_kernel", op=2, ts=40, dur=20, category="copy", bound="memory"),
            kernel("direct_copy_kernel", op=4, ts=70, dur=25, category="copy", bound="memory")]
    r = only(conversions.layout_conversions(context([rank(ops, acts)], total_us=1000)))
    # The nchwToNhwc kernel (30 µs) and the copy materialising a transposed source (strides [1, 64]:
    # 20 µs); the copy of an already contiguous tensor is not a conversion. 30 + 20 = 50 µs.
    assert r.kind == "layout"
    assert r.est_saving_us == pytest.approx(50.0)
    assert acted_on(r) == [0, 1]


def test_dtype_round_trip_is_both_casts():
    m = [1024, 1024]
    ops = [op("aten::_to_copy", dims=[m], types=[F32]), op("aten::_to_copy", dims=[m], types=[BF16])]
    acts = [kernel("cast_to_bf16", op=0, ts=0, dur=9, category="cast", bound="memory", dtype="bf16"),
            kernel("cast_to_fp32", op=1, ts=9, dur=11, category="cast", bound="memory", dtype="fp32")]
    r = only(conversions.dtype_round_trips(context([rank(ops, acts)], total_us=1000)))
    # fp32 → bf16 → fp32 of the same 1 Mi-element tensor, back to back: 9 + 11 = 20 µs.
    assert r.kind == "cast" and "fp32 ↔ bf16" in r.title
    assert r.est_saving_us == pytest.approx(20.0)


# -- GPU idle: syncs, data loader, host-bound vs launch overhead, pageable copies -----------------

IDLE = {"host_wait_us": 500.0, "gaps": 40, "causes": {"sync_us": 120.0, "data_loader_us": 80.0},
        "top_syncs": [{"name": "cudaStreamSynchronize", "count": 3, "total_us": 120.0}]}


def _launch(short: int) -> dict:
    return {"kernels": 100, "short_kernels": short, "short_kernel_us": 50.0, "cpu_launch_us": 300.0,
            "gpu_busy_us": 400.0, "launch_bound": False, "mean_queue_length": 1.5}


def _idle_ctx(short: int, kind: str = "gpu"):
    return context([rank([], [])], total_us=1000, trace_kind=kind, extras={"idle": IDLE, "launch": _launch(short)})


def test_sync_and_data_loader_are_their_idle_causes():
    ctx = _idle_ctx(short=10)
    sync = only(host.sync_points(ctx))
    loader = only(host.data_loader(ctx))
    assert (sync.est_saving_us, sync.idle_us) == (120.0, 120.0)
    assert "cudaStreamSynchronize: 3×" in " ".join(sync.finding.evidence)
    assert (loader.est_saving_us, loader.idle_us) == (80.0, 80.0)
    assert not host.sync_points(_idle_ctx(short=10, kind="cpu"))


def test_unexplained_host_wait_goes_to_exactly_one_rule():
    # 500 µs host wait − 120 µs syncs − 80 µs data loader = 300 µs nobody explains.
    few_short = _idle_ctx(short=10)  # 10 of 100 kernels under 10 µs: not launch-bound → host_bound
    assert only(host.host_bound(few_short)).est_saving_us == pytest.approx(300.0)
    assert launch.launch_overhead(few_short) == []
    many_short = _idle_ctx(short=80)  # 80 of 100: launch-bound → launch_overhead
    r = only(launch.launch_overhead(many_short))
    assert (r.kind, r.est_saving_us, r.idle_us) == ("launch_overhead", pytest.approx(300.0), pytest.approx(300.0))
    assert host.host_bound(many_short) == []


def test_timeline_rules_silent_without_their_facts():
    bare = context([rank([], [])], total_us=1000)
    assert not (host.sync_points(bare) or host.data_loader(bare) or host.host_bound(bare)
                or launch.launch_overhead(bare))


def test_pageable_copies_save_their_time():
    acts = [kernel("Memcpy HtoD (Pageable -> Device)", ts=0, dur=40, category="memcpy", bound="memory",
                   kind="memcpy", bytes=40e6),
            kernel("Memcpy HtoD (Pinned -> Device)", ts=50, dur=10, category="memcpy", bound="memory",
                   kind="memcpy", bytes=40e6)]
    r = only(host.pageable_memcpy(context([rank([], acts)], total_us=1000)))
    # Only the pageable copy (40 µs) leaves the critical path once pinned and asynchronous.
    assert r.est_saving_us == pytest.approx(40.0)
    assert acted_on(r) == [0]


# -- collectives ----------------------------------------------------------------------------------


def test_exposed_and_latency_dominated_collectives():
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    acts = [kernel(name, ts=10 * i, dur=30, category="communication", bound="communication", stream=20)
            for i in range(100)]
    rows = (collective(name, "all_reduce", count=100, total_us=3000, exposed_us=2500, bytes=1e5),)
    fit = {"collective": "all_reduce", "alpha_us": 20.0, "beta_bytes_per_s": 100e9, "n": 100}
    results = overlap.exposed_collectives(context([rank([], acts)], total_us=10000, collectives=rows,
                                                  extras={"comm_fit": fit}))
    exposed, few = results
    # Overlap can hide at most the exposed 2500 µs.
    assert "Overlap the exposed all_reduce" in exposed.title and exposed.est_saving_us == pytest.approx(2500.0)
    # n½ = α·β = 20 µs · 100 GB/s = 2 MB ≥ 100 kB per call, and α·calls = 2000 µs ≥ half of 3000 µs:
    # 4× bigger buckets pay α for 25 calls instead of 100 → 20 µs · 75 = 1500 µs (under the exposed 2500).
    assert "fewer, bigger" in few.title and few.est_saving_us == pytest.approx(1500.0)
    assert acted_on(exposed) == acted_on(few) == list(range(100))


# -- precision ------------------------------------------------------------------------------------


def test_fp32_gemm_on_vector_units_moves_to_bf16_tensor_cores():
    ops = [op("aten::mm", dims=[[2048, 2048], [2048, 2048]], types=[F32, F32])]
    acts = [kernel("ampere_sgemm_128x64_nn", op=0, ts=0, dur=2000, category="gemm", bound="compute",
                   dtype="fp32", flops=1.95e10, bytes=1e6)]
    a = rank(ops, acts, placement={"ampere_sgemm_128x64_nn": {"pct_of_ceiling": 50.0}})
    r = only(precision.fp32_on_vector_units(context([a], total_us=10000)))
    # In bf16: max(1.95e10 FLOP ÷ 312 TFLOP/s, 1 MB ÷ 2 ÷ 2 TB/s) = 62.5 µs, at today's 50% of the
    # roof 125 µs → 2000 − 125 = 1875 µs.
    assert r.kind == "precision" and "bf16" in r.title
    assert r.est_saving_us == pytest.approx(1875.0)
    assert acted_on(r) == [0]


def test_unshaped_fp32_gemm_is_known_by_its_name():
    """No op, no dtype: real cuBLAS/cuDNN names say fp32 SIMT; without FLOPs the saving is half the
    time (16-bit halves the bytes and doubles the roof at least): (400 + 100) / 2 = 250 µs. The
    cutlass TF32 kernel beside them is on tensor cores already."""
    acts = [kernel("volta_sgemm_64x64_nn", ts=0, dur=400, category="gemm", bound="unknown"),
            kernel("cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1", ts=500, dur=100, category="conv",
                   bound="unknown"),
            kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>", ts=700, dur=300,
                   category="gemm", bound="unknown")]
    r = only(precision.fp32_on_vector_units(context([rank([], acts)], total_us=10000)))
    assert r.est_saving_us == pytest.approx(250.0)
    assert acted_on(r) == [0, 1]


def test_unshaped_fp32_gemm_beside_a_shaped_one():
    """A missing dtype beside known ones: pandas' str column holds NaN there, not None. The name
    fallback still applies: half of the sgemm's 400 µs = 200 µs (the bf16 GEMM is on tensor cores)."""
    ops = [op("aten::mm", dims=[[64, 64], [64, 64]], types=[BF16, BF16])]
    acts = [kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", op=0, ts=0, dur=10, category="gemm",
                   bound="compute", dtype="bf16", tensor=True),
            kernel("volta_sgemm_64x64_nn", ts=100, dur=400, category="gemm", bound="unknown")]
    r = only(precision.fp32_on_vector_units(context([rank(ops, acts)], total_us=10000)))
    assert r.est_saving_us == pytest.approx(200.0)


def test_tf32_kernel_is_not_on_vector_units():
    ops = [op("aten::mm", dims=[[2048, 2048], [2048, 2048]], types=[F32, F32])]
    acts = [kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>", op=0, ts=0,
                   dur=2000, category="gemm", bound="compute", dtype="tf32", tensor=True, flops=1.95e10)]
    assert precision.fp32_on_vector_units(context([rank(ops, acts)], total_us=10000)) == []


def test_compute_bound_bf16_gemm_moves_to_fp8():
    ops = [op("aten::mm", dims=[[8192, 8192], [8192, 8192]], types=[BF16, BF16])]
    acts = [kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", op=0, ts=0, dur=1250, category="gemm",
                   bound="compute", dtype="bf16", tensor=True, flops=1e12, bytes=1e6)]
    a = rank(ops, acts, placement={"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n": {"pct_of_ceiling": 80.0}})
    dev = {"peak_flops": {"bf16": 1e15, "fp8": 2e15}, "vector_flops": {}, "memory_bandwidth": 3e12}
    r = only(precision.bf16_to_fp8(context([a], total_us=10000, device=dev)))
    # 1e12 FLOP at the 2 PFLOP/s fp8 peak = 500 µs (bytes: 1 MB ÷ 3 TB/s ≪), at today's 80% → 625 µs:
    # 1250 − 625 = 625 µs.
    assert r.est_saving_us == pytest.approx(625.0)


# -- quantization ---------------------------------------------------------------------------------


def test_weight_only_int8_halves_the_weight_reads():
    x, w = [1, 4096], [4096, 4096]
    ops = [op("aten::linear", dims=[x, w], types=[BF16, BF16])]
    per_call = 4096 * 4096 * 2 + 8192 + 8192  # weight 32 MiB + input and output rows, 8 KiB each
    acts = [kernel("gemv_bf16", op=0, ts=100 * i, dur=100, category="gemm", bound="memory", dtype="bf16",
                   tensor=True, bytes=per_call) for i in range(10)]
    r = only(quantization.weight_only_quantization(context([rank(ops, acts)], total_us=10000)))
    # int8 weights read 16 MiB instead of 32 MiB of each call's 33,570,816 B; at today's bandwidth the
    # 10 × 100 µs = 1000 µs shrink by 16,777,216 / 33,570,816 → 499.76 µs saved.
    assert r.kind == "quantization"
    assert r.est_saving_us == pytest.approx(1000 * 16777216 / 33570816)


def test_kv_cache_in_8_bits_halves_a_bf16_cache():
    q, kv = [1, 32, 1, 128], [1, 32, 4096, 128]
    ops = [op("aten::scaled_dot_product_attention", dims=[q, kv, kv], types=[BF16, BF16, BF16])]
    cache = 2 * 32 * 4096 * 128 * 2  # K and V, 16 Mi elements each, 2 bytes: 64 MiB per call
    acts = [kernel("flash_decode_kernel", op=0, ts=100 * i, dur=100, category="attention", bound="memory",
                   dtype="bf16", tensor=True, bytes=cache) for i in range(4)]
    r = only(kv_cache.kv_cache_quantization(context([rank(ops, acts)], total_us=10000)))
    # One query row over a 4096-long cache (decode); the call's bytes are all K+V. 8 bits read half of
    # the bf16 cache: 4 × 100 µs × ½ = 200 µs.
    assert r.est_saving_us == pytest.approx(200.0)


# -- the registry ---------------------------------------------------------------------------------


def test_every_rule_registered_once_in_order():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) == 20
    assert names.index("fsdp_sharding") == names.index("comm_volume") + 1
    assert names.index("comm_volume") == names.index("overlap") + 1
    assert names.index("fusion") > max(names.index(s) for s in ("attention", "optimizer", "layout", "cast"))
    check_order(RULES)


def test_a_skip_must_name_an_earlier_rule():
    noop = lambda ctx: []  # noqa: E731
    with pytest.raises(ValueError, match="must run before it"):
        check_order((Rule("b", noop, skips=("a",)), Rule("a", noop)))
    with pytest.raises(ValueError, match="twice"):
        check_order((Rule("a", noop), Rule("a", noop)))


def test_rules_run_in_order_and_see_only_what_they_skip():
    ctx = context([_chain_rank()], total_us=100)
    seen = []

    def claim(ctx):
        seen.append(("claim", dict(ctx.prior)))
        return [ctx.finding(FindingKind.OTHER, "claims rows 0-1", 1.0, [], "fix", acts={0: [0, 1]})]

    def bystander(ctx):
        seen.append(("bystander", dict(ctx.prior)))
        return []

    def skipper(ctx):
        seen.append(("skipper", ctx.claimed(0)))
        return []

    results = run_rules(ctx, (Rule("claim", claim), Rule("bystander", bystander), Rule("skipper", skipper,
                                                                                         skips=("claim",))))
    assert [s[0] for s in seen] == ["claim", "bystander", "skipper"]
    assert seen[0][1] == {} and seen[1][1] == {}  # nobody sees claims it did not ask for
    assert seen[2][1] == {0, 1}
    assert [r.title for r in results] == ["claims rows 0-1"]
    assert ctx.prior == {}  # the caller's context is left alone


def test_registry_on_the_chain_reports_fusion_only():
    """The whole registry on the 3-op chain: fusion's 16 µs, nothing else fires."""
    results = run_rules(context([_chain_rank()], total_us=100))
    assert [(r.kind, r.est_saving_us) for r in results] == [("fusion", pytest.approx(16.0))]


def test_results_are_plain_data():
    r = only(fusion.fusion(context([_chain_rank()], total_us=100)))
    assert dataclasses.is_dataclass(r) and isinstance(r.acts[0], np.ndarray)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.idle_us = 1.0


# -- one op's own host work ------------------------------------------------------------------------


def _slow_op_ctx(unprofiled_us=None, first_call=False):
    from bwdiag.diagnose.findings import host_ops  # noqa: F401

    # The GPU runs a 90 µs kernel, then waits: the next kernel is launched at 5090, near the end of a
    # 5 ms cuDNN attention call on the host (its own work: it has no child op); an aten::linear follows.
    ops = [op("aten::_cudnn_attention_forward", ts=100, end=5100), op("aten::linear", ts=5100, end=5150)]
    if not first_call:  # an earlier, quick call of the same op: the slow one is not its first
        ops.append(op("aten::_cudnn_attention_forward", ts=-300, end=-290))
    k1 = kernel("k1", ts=0, dur=90, category="elementwise", bound="memory")
    k2 = kernel("cudnn_sdpa_fprop", op=0, ts=5120, dur=50, category="attention", bound="memory")
    k1["launch_ts"], k2["launch_ts"] = -10.0, 5090.0
    ctx = context([rank(ops, [k1, k2])], total_us=5200, step_us=5200, busy_us=140,
                  extras={"idle": {"host_wait_us": 5030.0, "gaps": 1,
                                   "causes": {"sync_us": 0.0, "data_loader_us": 0.0, "pageable_memcpy_us": 0.0}}})
    if unprofiled_us is not None:
        import dataclasses
        time = dataclasses.replace(ctx.diagnosis.time, unprofiled_step_us=unprofiled_us, unprofiled_clock="device")
        ctx = RuleContext(dataclasses.replace(ctx.diagnosis, time=time), ctx.analyses)
    return ctx


def test_slow_host_op_claims_the_wait_inside_its_own_time():
    from bwdiag.diagnose.findings import host_ops

    ctx = _slow_op_ctx()
    r = only(host_ops.slow_host_work(ctx))
    # The gap runs 90 → 5120 (host wait: the kernel ending it was launched at 5090); the op covers
    # 100 → 5100 of it: 5000 µs. "Python between kernels" keeps the other 30 µs of the wait.
    assert r.kind == "host_bound" and r.est_saving_us == pytest.approx(5000.0)
    assert "cuDNN" in r.finding.title and "SDPBackend.FLASH_ATTENTION" in r.finding.fix
    assert only(host.host_bound(ctx)).est_saving_us == pytest.approx(30.0)


def test_host_wait_the_unprofiled_run_cannot_have_is_the_profilers():
    from bwdiag.diagnose.findings import host_ops

    # Unprofiled, the step takes 1200 µs with 140 µs of device work: at most 1060 µs of wait is real.
    r = only(host_ops.slow_host_work(_slow_op_ctx(unprofiled_us=1200.0)))
    assert r.est_saving_us == pytest.approx(1200.0 - 140.0)
    assert any("profiler's own cost" in e for e in r.finding.evidence)


def test_a_slow_first_call_is_named_as_initialisation():
    from bwdiag.diagnose.findings import host_ops

    r = only(host_ops.slow_host_work(_slow_op_ctx(first_call=True)))
    assert r.est_saving_us == pytest.approx(5000.0)
    assert "first call waits on one-off initialisation" in r.finding.title and "--wait" in r.finding.fix


def test_wrappers_own_time_is_not_an_ops_work():
    from bwdiag.diagnose.findings import helpers

    # The same timeline with the slow span an autograd engine node: Python between kernels, not one op's work.
    ctx = _slow_op_ctx()
    a = ctx.analyses[0]
    a.trace.ops.loc[0, "name"] = "autograd::engine::evaluate_function: MulBackward0"
    a.__dict__.pop("_slow_host_ops", None)
    assert helpers.slow_host_ops(a) == []
