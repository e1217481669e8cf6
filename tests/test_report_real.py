"""The report context from real traces, checked against numbers read straight from the trace
files (a plain gzip+json read, independent of bwdiag's loader) and against the diagnosis rows."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from bwdiag.diagnose.model import TIME_KEYS
from bwdiag.report import build_context, render_html, render_json
from bwdiag.report.context import kernel_records
from tests.report_fixtures import (
    A100_TRAIN, CPU_ONLY, H100_QWEN, real_diagnosis, trace_path,
)


def _trace_kernels(relpath: str) -> list[tuple[str, float]]:
    """(name, duration µs) of every GPU kernel event in the trace file."""
    with gzip.open(trace_path(relpath), "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    return [(e["name"], float(e["dur"])) for e in events
            if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]


def _check_kernel_table_matches_trace(relpath: str, launches: int, total_us: float):
    d = real_diagnosis(relpath)
    ctx = build_context(d)
    trace = _trace_kernels(relpath)
    assert (len(trace), sum(t for _, t in trace)) == pytest.approx((launches, total_us))
    summary = ctx["kernel_summary"]
    assert summary["launches"] == launches
    assert summary["total_us"] == pytest.approx(total_us, rel=1e-9)
    # Per kernel name, the table's groups add up to that name's launches and time in the trace.
    want_n, want_t = defaultdict(int), defaultdict(float)
    for name, dur in trace:
        want_n[name] += 1
        want_t[name] += dur
    got_n, got_t = defaultdict(int), defaultdict(float)
    for row in kernel_records(ctx):
        got_n[row["name"]] += row["count"]
        got_t[row["name"]] += row["total_us"]
    assert dict(got_n) == dict(want_n)
    assert got_t == pytest.approx(dict(want_t), rel=1e-9)
    return d, ctx


def _check_roofline(d, ctx):
    with_estimates = [k for k in d.kernels
                      if k.flops is not None and k.bytes is not None and k.flops > 0 and k.bytes > 0]
    points = ctx["roofline"]["points"]
    assert len(points) == len(with_estimates)
    assert len(points) + len(ctx["roofline"]["unplotted"]) == len(d.kernels)
    records = kernel_records(ctx)
    assert sorted(records[p["k"]]["total_us"] for p in points) == sorted(
        k.total_us for k in with_estimates)
    for p in points:
        assert p["x"] == records[p["k"]]["intensity"] and p["y"] == records[p["k"]]["achieved_flops_per_s"]
    bw = d.device.memory_bandwidth
    for roof in ctx["roofline"]["roofs"]:
        assert roof["ridge"] == pytest.approx(roof["flops"] / bw)
    assert {r["flops"] for r in ctx["roofline"]["roofs"]} == (
        set(d.device.peak_flops.values()) | set(d.device.vector_flops.values())) - {0.0}


def _check_verdict(d, ctx):
    v = ctx["verdict"]
    assert [b["us"] for b in v["bars"]] == [d.time.by_bound.get(k, 0.0) for k in TIME_KEYS]
    assert sum(b["us"] for b in v["bars"]) == pytest.approx(d.time.total_us, rel=1e-6)
    savings = sorted((f.est_saving_us for f in d.findings), reverse=True)
    assert [f["saving_us"] for f in v["top_findings"]] == savings[:3]
    if d.findings:
        assert d.time.total_us - sum(savings) <= v["projected_us"] + 1e-6
        assert 0 <= v["projected_us"] <= d.time.total_us
    else:
        assert v["projected_us"] is None


def test_a100_training_context():
    # 6,080 kernels, 401,445 µs of kernel time (integer µs trace), 80 NCCL kernels 190,345 µs.
    d, ctx = _check_kernel_table_matches_trace(A100_TRAIN, 6080, 401445.0)
    _check_roofline(d, ctx)
    _check_verdict(d, ctx)
    nccl = sum(r["total_us"] for r in kernel_records(ctx) if r["name"].startswith("ncclKernel"))
    assert nccl == pytest.approx(190345.0)
    assert ctx["device"]["name"] == d.device.name and "A100" in d.device.name
    assert len(render_html(d).encode()) < 5_000_000
    json.loads(render_json(d))


def test_h100_qwen_context():
    # 1,465 kernels, 45,432.698 µs of kernel time (float µs trace).
    d, ctx = _check_kernel_table_matches_trace(H100_QWEN, 1465, 45432.698)
    _check_roofline(d, ctx)
    _check_verdict(d, ctx)
    assert ctx["communication"]["rows"] == []


def test_cpu_trace_context():
    d = real_diagnosis(CPU_ONLY)
    ctx = build_context(d)
    assert _trace_kernels(CPU_ONLY) == []
    assert ctx["source"]["trace_kind"] == "cpu"
    assert ctx["roofline"]["points"] == [] and ctx["roofline"]["extent"] is None
    _check_verdict(d, ctx)
    json.loads(render_json(d))
