"""Findings on CPU workloads the project records itself (tests/data/make_cpu_traces.py).

Savings are checked by hand against the raw trace: durations of the named ops, bytes from shapes.
On a CPU-only trace, GPU-only advice (CUDA graphs, tensor cores, collectives overlap) never appears.
"""

from __future__ import annotations

import gzip
import json

import pytest

from tests.findings_helpers import DATA, analysed, by_kind

# host_bound is not GPU-only: on a CPU trace it is the Python / dispatch time between ops (dispatch.py).
GPU_ONLY = {"launch_overhead", "overlap", "precision", "quantization", "sync", "memcpy"}


def _raw_events(name: str) -> list[dict]:
    with gzip.open(DATA / name, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _raw_ops(name: str) -> list[dict]:
    return [e for e in _raw_events(name) if e.get("cat") == "cpu_op"]


def _dur(name: str, *ops: str) -> float:
    return sum(e["dur"] for e in _raw_ops(name) if e["name"] in ops)


def test_elementwise_chain_is_fusion_first():
    name = "cpu_elementwise_chain.json.gz"
    d, _ = analysed(DATA / name)
    assert d.source.trace_kind == "cpu"
    top = d.findings[0]
    assert top.kind == "fusion"
    # the recorder runs the chain once in each of 3 ProfilerSteps: counts and savings say their unit
    assert "mul → add → tanh → mul → sigmoid" in top.title and "(×3 in the window, ≈1 per step)" in top.title
    assert d.time.steps == 3
    assert top.est_saving_per_step_us == pytest.approx(top.est_saving_us / 3, rel=0.1)
    # Per step, T = 1024·1024·4 bytes: mul 3T, add 3T, tanh 2T, mul 3T, sigmoid 2T = 13T moved;
    # a fused loop skips writing and re-reading the 4 intermediates: 8T saved, so it still moves 5T — on
    # a CPU thread at the best bandwidth an op of the run reached — and also evaluates tanh and sigmoid,
    # one after the other.
    # With no calibration of the trace's host, their arithmetic is their eager time beyond twice their
    # bytes at the run's best bandwidth. Worked out per step from the raw events:
    t = 1024 * 1024 * 4
    nbytes = {"aten::mul": 3 * t, "aten::add": 3 * t, "aten::tanh": 2 * t, "aten::sigmoid": 2 * t}
    steps = sorted((e for e in _raw_events(name) if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert len(steps) == 3
    expected = 0.0
    for step in steps:
        chain = [e for e in _raw_ops(name) if e["name"] in nbytes and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        assert len(chain) == 5
        us = sum(e["dur"] for e in chain)
        best = max(nbytes[e["name"]] / e["dur"] for e in chain)  # bytes per µs
        arithmetic = sum(max(0.0, e["dur"] - 2 * nbytes[e["name"]] / best) for e in chain
                         if e["name"] in ("aten::tanh", "aten::sigmoid"))
        expected += max(0.0, us - (5 * t / best + arithmetic))
    assert top.est_saving_us == pytest.approx(expected, rel=1e-6)
    chain_us = _dur(name, *nbytes)
    assert expected < chain_us * 8 / 13  # the bandwidth alone said more
    assert f"move {3 * 13 * t / 1e6:.0f} MB" in top.evidence[1]  # 164 MB over the three steps
    assert "torch.compile" in top.fix and "C++" in top.fix
    assert not GPU_ONLY & {f.kind for f in d.findings}
    assert not by_kind(d, "layout") and not by_kind(d, "cast")


def test_eager_attention_is_reported_once():
    name = "cpu_attention.json.gz"
    d, _ = analysed(DATA / name)
    (att,) = [f for f in d.findings if "attention" in f.title]
    assert att.kind == "fusion" and d.findings[0] is att
    # The kernels between the two bmms only move the [8, 256, 256] fp32 score tensor: div and softmax.
    assert att.est_saving_us == pytest.approx(_dur(name, "aten::div", "aten::softmax"), rel=1e-6)
    assert "bmm → div → softmax → bmm" in att.evidence[0] and "f32[8, 256, 256]" in att.evidence[0]
    assert "scaled_dot_product_attention" in att.fix
    # div → softmax is not reported a second time as a plain elementwise chain.
    assert [f for f in by_kind(d, "fusion") if f is not att] == []
    assert not GPU_ONLY & {f.kind for f in d.findings}


def test_cast_round_trip_and_materialised_permute():
    name = "cpu_conversions.json.gz"
    d, _ = analysed(DATA / name)
    (cast,) = by_kind(d, "cast")
    (layout,) = by_kind(d, "layout")
    assert cast.title == "Remove fp32 ↔ bf16 round trips"
    assert cast.est_saving_us == pytest.approx(_dur(name, "aten::to"), rel=1e-6)  # both casts, 3 steps
    assert "1,048,576-element" in cast.evidence[0]
    assert layout.est_saving_us == pytest.approx(_dur(name, "aten::contiguous"), rel=1e-6)
    assert "3 copies materialising a transpose/permute" in layout.evidence[0]
    assert not by_kind(d, "fusion")
    assert [f.est_saving_us for f in d.findings] == sorted((f.est_saving_us for f in d.findings), reverse=True)


def test_whatif_on_cpu_chain():
    d, _ = analysed(DATA / "cpu_elementwise_chain.json.gz")
    w = d.sections_dict()["whatif"]
    (only,) = w["findings"]
    assert only["applied_us"] == pytest.approx(d.findings[0].est_saving_us)  # within the memory class
    assert d.sections_dict()["projected_us"] == pytest.approx(d.time.total_us - only["applied_us"])
    assert w["speedup"] == pytest.approx(d.time.total_us / d.sections_dict()["projected_us"])


def test_per_parameter_adamw_gets_fused_step():
    name = "cpu_adamw.json.gz"
    d, _ = analysed(DATA / name)
    (opt,) = [f for f in d.findings if "AdamW" in f.title]
    assert opt.kind == "fusion" and d.findings[0] is opt
    assert "fused=True" in opt.fix and "torch.optim.AdamW" in opt.fix
    # Parameters: W1 [1024, 512], b1 [1024], W2 [512, 1024], b2 [512]; fp32; three steps.
    p = 1024 * 512 + 1024 + 512 * 1024 + 512
    fused = 3 * 7 * p * 4
    assert f"= {fused / 1e6:.1f} MB" in opt.evidence[-1]  # 88.2 MB
    assert "12 parameter updates" in opt.evidence[0]
    # No second report of the same kernels as plain elementwise chains: the one other fusion finding is
    # the loss's square → mean over the [64, 512] output, no parameter's shape.
    others = [f for f in by_kind(d, "fusion") if f is not opt]
    assert [f.title for f in others] == ["Fuse 2 ops (square → mean) (×3 in the window, ≈1 per step)"]
    assert "a chain of 2 ops over f32[64, 512]" in others[0].evidence[0]
