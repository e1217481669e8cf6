"""Findings on real GPU traces, with savings worked out by hand from shapes, durations and datasheets."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bwdiag.diagnose.findings.chains import fusable_runs
from bwdiag.diagnose.model import CommFit
from tests.conftest import A100_TRAIN, H100_BERT, H100_QWEN, raw_events, shared_trace
from tests.findings_helpers import analysed, by_kind, raw_kernels

V100 = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
BACKWARD_TF32 = "hta/call_stack/backward_thread.json"


def _check_sorted_and_pct(d):
    # ranked by the saving the views show (issue 14): the dependency graph's where it re-timed one
    savings = [f.est_saving_us if f.graph_saving_us is None else f.graph_saving_us for f in d.findings]
    assert savings == sorted(savings, reverse=True)
    for f in d.findings:
        assert f.est_saving_pct == pytest.approx(100 * f.est_saving_us / d.time.total_us)
        assert f.evidence and f.fix


# --- fusion: the Qwen RMSNorm chains ---------------------------------------------------------------

def test_qwen_rmsnorm_chain_bytes_by_hand():
    d, analyses = analysed(shared_trace(H100_QWEN))
    a = analyses[0]
    runs = fusable_runs(a.activities, a.trace.ops)
    # Layer 0's post-attention norm: residual add, then HF's Qwen2RMSNorm in fp32 and back to bf16.
    run = next(r for r in runs if a.activities["module"].iloc[r.rows[1]].endswith("Qwen2DecoderLayer_0.Qwen2RMSNorm_1"))
    assert list(a.activities["op_name"].iloc[run.rows].str.removeprefix("aten::")) == [
        "add", "copy_", "pow", "mean", "add", "rsqrt", "mul", "copy_", "mul"]
    n = 16 * 559 * 1024  # elements of the hidden state
    bf16, f32, row = 2 * n, 4 * n, 4 * 16 * 559  # bytes: a bf16 / fp32 hidden state, the fp32 per-row stat
    moved = [3 * bf16, f32 + bf16, 2 * f32, f32 + row, 2 * row, 2 * row, 2 * f32 + row, bf16 + f32, 2 * 1024 + 2 * bf16]
    assert run.bytes == sum(moved) == 384_880_256
    # Intermediates written and read back: add→bf16, copy_→f32, pow→f32, mean/add/rsqrt→row, mul→f32, copy_→bf16.
    assert run.saved_bytes == 2 * (bf16 + f32 + f32 + 3 * row + f32 + bf16) == 293_291_648
    durations = [18.144, 30.049, 26.144, 15.232, 1.632, 1.600, 33.696, 18.464, 25.664]  # µs, read off the trace
    assert run.time_us == pytest.approx(sum(durations), abs=1e-3)
    assert run.saving_us == pytest.approx(293_291_648 / 384_880_256 * 170.625, rel=1e-4)  # 130.0 µs


def test_qwen_fusion_is_the_top_finding():
    d, _ = analysed(shared_trace(H100_QWEN))
    _check_sorted_and_pct(d)
    top = d.findings[0]
    assert top.kind == "fusion"
    assert "Qwen2RMSNorm_*" in top.title and "(×48 per step)" in top.title  # the trace holds one ProfilerStep  # two norms in each of 24 layers
    # Module paths as the kernel table shows them (a group's first module), so the report links them.
    assert "Qwen2Model_0.Qwen2DecoderLayer_0.Qwen2RMSNorm_0" in top.evidence
    from bwdiag.report.context import build_context
    (card,) = [f for f in build_context(d)["findings"] if f["title"] == top.title]
    assert any(e["find"] == "Qwen2Model_0.Qwen2DecoderLayer_0.Qwen2RMSNorm_0" for e in card["evidence"])
    assert "torch.compile" in top.fix and "RMSNorm" in top.fix
    # The rotary-embedding chains of every attention block are fusion findings too.
    assert any("Qwen2Attention_*" in f.title for f in by_kind(d, "fusion"))
    # bf16 GEMMs on tensor cores: no fp32 precision finding, but fp8 as a further step on H100.
    precision = by_kind(d, "precision")
    assert [f.title.startswith("Move compute-bound bf16") for f in precision] == [True]
    assert "float8" in precision[0].fix  # inference trace: torchao fp8 quantize_


def test_qwen_layout_copies_before_sdpa():
    d, analyses = analysed(shared_trace(H100_QWEN))
    (layout,) = by_kind(d, "layout")
    a = analyses[0]
    acts = a.activities
    # Each of the 24 attention blocks: q, k, v made contiguous for SDPA and the output transposed back.
    chain = [(acts["op_name"].iat[i], acts["shapes"].iat[i]) for i in range(len(acts))
             if acts["op_name"].iat[i] == "aten::copy_" and acts["category"].iat[i] == "copy"]
    assert len(chain) == 96
    expected = sum(acts["dur"].iat[i] for i in range(len(acts))
                   if acts["op_name"].iat[i] == "aten::copy_" and acts["category"].iat[i] == "copy")
    assert layout.est_saving_us == pytest.approx(expected)
    assert "scaled_dot_product_attention" in layout.fix


# --- overlap: the A100 training rank's exposed SendRecv ---------------------------------------------

def _exposed_by_hand(raw: dict) -> float:
    """NCCL kernel time not covered by any other kernel, from the raw events."""
    kernels = raw_kernels(raw)
    nccl = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()]
    other = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower())
    merged: list[list[float]] = []
    for s, e in other:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    exposed = 0.0
    for s, e in nccl:
        covered = sum(max(0.0, min(e, me) - max(s, ms)) for ms, me in merged if me > s and ms < e)
        exposed += (e - s) - covered
    return exposed


def test_a100_exposed_sendrecv_is_an_overlap_finding():
    path = shared_trace(A100_TRAIN)
    d, _ = analysed(path)
    _check_sorted_and_pct(d)
    (overlap,) = by_kind(d, "overlap")
    assert "send_recv" in overlap.title
    assert overlap.est_saving_us == pytest.approx(_exposed_by_hand(raw_events(path)))  # 187,792 µs
    assert overlap.est_saving_us == pytest.approx(187_792.0)
    assert "ncclKernel_SendRecv" in overlap.evidence[1]
    assert "isend" in overlap.fix or "ScheduleInterleaved1F1B" in overlap.fix
    # Its GEMMs are cutlass tf32 (tensorop_s1688): already on tensor cores, so no precision finding.
    assert not by_kind(d, "precision")


def test_a100_whatif_caps_overlap_by_the_communication_class():
    d, _ = analysed(shared_trace(A100_TRAIN))
    comm = d.time.by_bound["communication"]  # exposed SendRecv time the timeline gave to communication
    applied = {w["title"]: w for w in d.sections_dict()["whatif"]["findings"]}
    overlap = applied["Overlap the exposed send_recv with compute"]
    assert overlap["applied_us"] == pytest.approx(min(187_792.0, comm))
    assert overlap["capped"] is (comm < 187_792.0)
    saved = sum(w["applied_us"] for w in d.sections_dict()["whatif"]["findings"])
    assert d.sections_dict()["projected_us"] == pytest.approx(d.time.total_us - saved)


# --- precision -----------------------------------------------------------------------------------

def test_tf32_gemm_gets_no_precision_finding():
    d, analyses = analysed(shared_trace(BACKWARD_TF32))
    assert analyses[0].activities["name"].str.contains("tensorop_s1688gemm").any()
    assert not d.findings  # one tf32 GEMM at 31% of its roof: nothing to fix


def test_v100_sgemm_and_scudnn_kernels_get_fp16_autocast():
    path = shared_trace(V100)
    d, _ = analysed(path)
    (precision,) = by_kind(d, "precision")
    assert "fp16 autocast" in precision.title  # V100: fp16 tensor cores, no bf16/tf32
    assert "torch.float16" in precision.fix and "GradScaler" in precision.fix
    # No shapes in this trace: every fp32 SIMT kernel is counted at the ≥2× lower bound (half its time).
    simt = re.compile(r"sgemm|scudnn", re.I)
    by_hand = sum(e["dur"] for e in raw_kernels(raw_events(path)) if simt.search(e["name"])) / 2
    assert precision.est_saving_us == pytest.approx(by_hand, rel=1e-6)
    assert "15.7 TFLOP/s" in precision.evidence[0] and "125 TFLOP/s" in precision.evidence[0]


# --- BERT on H100: launch-bound, the LM head is weight-bound ------------------------------------------

def test_bert_lm_head_weight_only_quantization_by_hand():
    d, _ = analysed(shared_trace(H100_BERT))
    (quant,) = by_kind(d, "quantization")
    # addmm(bias bf16[30522], x bf16[141, 512], W bf16[512, 30522]) -> bf16[141, 30522], one call of 41.28 µs.
    weight = 512 * 30522 * 2
    moved = 30522 * 2 + 141 * 512 * 2 + weight + 141 * 30522 * 2
    assert quant.est_saving_us == pytest.approx(41.28 * (weight / 2) / moved, rel=1e-4)  # 16.10 µs
    assert "int4 saves 24.2 µs" in quant.evidence[2]  # 41.28 × (¾ W) / moved
    assert "int8_weight_only" in quant.fix and "quantize_(model" in quant.fix
    assert any("BertLMPredictionHead_0.Linear_25" in e for e in quant.evidence)


def test_bert_is_launch_bound():
    path = shared_trace(H100_BERT)
    d, _ = analysed(path)
    top = d.findings[0]
    assert top.kind == "launch_overhead"
    short = sum(1 for e in raw_kernels(raw_events(path)) if e["dur"] < 10)
    assert short == 58
    assert top.evidence[0].startswith("58 of 60 kernels run under 10 µs")
    idle = d.sections_dict()["idle"]
    causes = idle["causes"]
    assert top.est_saving_us == pytest.approx(
        idle["host_wait_us"] - causes["sync_us"] - causes["data_loader_us"] - causes["pageable_memcpy_us"])
    assert 'mode="reduce-overhead"' in top.fix and "CUDAGraph" in top.fix
    assert not by_kind(d, "host_bound")  # the same wait is not claimed twice


def test_bert_small_gemms_batching():
    d, analyses = analysed(shared_trace(H100_BERT))
    (batching,) = by_kind(d, "batching")
    # The 17 addmm [141, 512] x [512, 512] kernels: at the H100 roof each takes
    # max(2·141·512·512 / 989.4e12, bytes / 3.35e12) with bytes = (512 + 2·141·512 + 512·512)·2.
    flops = 2 * 141 * 512 * 512
    nbytes = (512 + 2 * 141 * 512 + 512 * 512) * 2
    best = max(flops / 989.4e12, nbytes / 3.35e12) * 1e6
    g = analyses[0].groups
    row = g[(g["shapes"] == "bf16[512], bf16[141, 512], bf16[512, 512]") & (g["category"] == "gemm")].iloc[0]
    assert row["count"] == 17
    assert float(row["best_time_s"]) * 1e6 == pytest.approx(17 * best, rel=1e-6)
    assert "×17 per step, mean 5.81 µs" in batching.evidence[1]  # one ProfilerStep in the trace
    assert 0 < batching.est_saving_us < sum(float(x) for x in g.loc[g["bound"] == "latency", "total_us"])


def test_whatif_never_exceeds_a_bound_class():
    for rel in (H100_QWEN, H100_BERT):
        d, _ = analysed(shared_trace(rel))
        w = d.sections_dict()["whatif"]
        assert 0 < d.sections_dict()["projected_us"] < d.time.total_us
        assert w["saved_us"] == pytest.approx(sum(x["applied_us"] for x in w["findings"]))
        for x in w["findings"]:
            assert 0 <= x["applied_us"] <= x["est_saving_us"] + 1e-9
        assert np.isclose(w["projected_us"], d.sections_dict()["projected_us"])


# --- host side: AlexNet benchmark (syncs, pageable copies), 2-rank DDP (layout, α-bound all-reduce) ----

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
DDP_CONV = "hta/nccl_parser_config/nccl_data.json.gz"


def test_alexnet_pageable_copies_sync_and_host_wait():
    path = shared_trace(ALEXNET)
    d, _ = analysed(path)
    raw = [e for e in raw_events(path)["traceEvents"] if e.get("ph") == "X"]
    pageable = [e for e in raw if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]]
    (memcpy,) = by_kind(d, "memcpy")
    assert len(pageable) == 16
    assert memcpy.est_saving_us == pytest.approx(sum(e["dur"] for e in pageable))  # 55.5 ms
    assert "pin_memory()" in memcpy.fix and "non_blocking=True" in memcpy.fix
    idle = d.sections_dict()["idle"]
    (sync,) = by_kind(d, "sync")
    assert sync.est_saving_us == pytest.approx(idle["causes"]["sync_us"])
    assert any(e.startswith("cudaDeviceSynchronize: 5×") for e in sync.evidence)
    assert ".item()" in sync.fix
    # The first calls of cudnn_convolution spend seconds on the host (cuDNN's algorithm search) while the
    # GPU waits: their own finding; what is left of the host wait is Python between kernels.
    conv_calls = [e for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::cudnn_convolution"]
    conv_host = sum(e["dur"] for e in conv_calls if e["dur"] >= 1000)
    slow = [f for f in by_kind(d, "host_bound") if f.title.startswith("Convolutions wait on cuDNN")]
    assert len(slow) == 1 and 0.7 * conv_host <= slow[0].est_saving_us <= conv_host
    assert "benchmark" in slow[0].fix
    own_work = sum(f.est_saving_us for f in by_kind(d, "host_bound") if "own host work" in f.title or f in slow)
    (host,) = [f for f in by_kind(d, "host_bound") if f.title == "The GPU waits on Python between kernels"]
    assert host.est_saving_us == pytest.approx(idle["host_wait_us"] - idle["causes"]["sync_us"]
                                               - idle["causes"]["data_loader_us"] - own_work, abs=1.0)
    assert not by_kind(d, "launch_overhead")
    _check_sorted_and_pct(d)


def test_ddp_conv_layout_kernels_and_latency_bound_allreduce():
    path = shared_trace(DDP_CONV)
    d, _ = analysed(path)
    convert = [e for e in raw_kernels(raw_events(path)) if re.search("nchwToNhwc|nhwcToNchw", e["name"])]
    (layout,) = by_kind(d, "layout")
    assert len(convert) == 633
    assert layout.est_saving_us == pytest.approx(sum(e["dur"] for e in convert))
    assert layout.fix.startswith("model = model.to(memory_format=torch.channels_last)")
    # The α+β fit gives α = 2.8 ms per all-reduce: peers waiting on each other, not link latency,
    # so no bucketing advice (see test_bucketing_advice_from_a_plausible_fit for the positive case).
    assert d.sections_dict()["comm_fit"]["alpha_us"] > 1000
    assert not [f for f in by_kind(d, "overlap") if "fewer, bigger" in f.title]
    (exposed,) = [f for f in by_kind(d, "overlap") if "exposed all_reduce" in f.title]
    assert exposed.est_saving_us == pytest.approx(sum(c.exposed_us for c in d.collectives
                                                      if c.collective == "all_reduce"))
    assert "gradient_as_bucket_view=True" in exposed.fix


def test_bucketing_advice_from_a_plausible_fit():
    """The B200 serving rank's 73 all-reduces of ~5 MB, given a plausible NVLink fit (α = 20 µs,
    β = 300 GB/s: n½ = 6 MB): α·calls is over half their time, so fewer, bigger calls pay α less often.
    The fit is supplied here (the trace has too few message sizes for one)."""
    import dataclasses

    from bwdiag.diagnose.findings import add_findings

    d, analyses = analysed(shared_trace("tracelens/b200/eager_trace.json.gz"))
    fit = CommFit(collective="all_reduce", alpha_us=20.0, beta_bytes_per_s=300e9, n=73, sizes=2)
    base = dataclasses.replace(d, findings=(), whatif=None, comm_fits=(fit,))
    d2 = add_findings(base, analyses)
    (few,) = [f for f in by_kind(d2, "overlap") if "fewer, bigger" in f.title]
    rows = [c for c in d.collectives if c.collective == "all_reduce" and c.count > 1]
    assert sorted((c.count, c.bytes) for c in rows) == [(36, 5455872.0), (37, 5114880.0)]
    # 73 calls: 4× bigger buckets save α·(73 − 73/4) = 20 µs · 54.75, under their exposed time.
    assert few.est_saving_us == pytest.approx(min(20.0 * 73 * 0.75, sum(c.exposed_us for c in rows)))
    assert few.est_saving_us == pytest.approx(1095.0)
    (exposed,) = [f for f in by_kind(d2, "overlap") if "exposed all_reduce" in f.title]
    # Both act on the same all-reduce kernels: the what-if counts them once.
    w = {x.title: x for x in d2.whatif.findings}
    both = w[exposed.title].applied_us + w[few.title].applied_us
    assert both <= max(exposed.est_saving_us, few.est_saving_us) + 1e-6


def test_vllm_decode_lm_head_is_weight_bound():
    """gpt-oss decode on MI300X: the LM head mm [32, 2880] x [2880, 201088] reads a 1.16 GB weight per token."""
    path = shared_trace("tracelens/inference/vllm_decode_full/graph_execution.json.gz")
    d, _ = analysed(path)
    (quant,) = by_kind(d, "quantization")
    (kernel,) = [e for e in raw_kernels(raw_events(path)) if "MT448x32x64" in e["name"]]
    weight = 2880 * 201088 * 2
    moved = 32 * 2880 * 2 + weight + 32 * 201088 * 2
    assert quant.est_saving_us == pytest.approx(kernel["dur"] * (weight / 2) / moved, rel=1e-6)  # 137 µs
    assert "weight 1.16 GB of 1.17 GB per call" in quant.evidence[1]
    assert "LogitsProcessor_0" in quant.evidence[3]
