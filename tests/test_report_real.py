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


_GPU_CATS = ("kernel", "Kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_WORDS = ("Launch", "Memcpy", "Memset")


def _trace_activities(relpath: str) -> tuple[list[tuple[str, float]], int]:
    """(name, duration µs) of every GPU activity (kernel, memcpy, memset) in the trace file that
    starts at or after the first recorded launch call, and how many started before it.

    Activities that ran before any launch recorded in the trace are spill-over from before the
    profiling window; bwdiag leaves them out and says so in a warning.
    """
    with gzip.open(trace_path(relpath), "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    launches = [e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and e.get("ph") == "X"
                and any(w in e["name"] for w in _LAUNCH_WORDS)]
    first = min(launches, default=float("inf"))
    acts = [e for e in events if e.get("cat") in _GPU_CATS and e.get("ph") == "X"]
    kept = [(e["name"], float(e["dur"])) for e in acts if e["ts"] >= first]
    return kept, len(acts) - len(kept)


def _check_kernel_table_matches_trace(relpath: str, launches: int, total_us: float, spill: int):
    d = real_diagnosis(relpath)
    ctx = build_context(d)
    trace, before = _trace_activities(relpath)
    assert (len(trace), sum(t for _, t in trace), before) == pytest.approx((launches, total_us, spill))
    if spill:
        assert any(f"{spill} GPU activities" in w for w in ctx["warnings"])
    summary = ctx["kernel_summary"]
    assert summary["launches"] == launches
    assert summary["total_us"] == pytest.approx(total_us, rel=1e-9)
    # Per name, the table's groups add up to that name's launches and time in the trace.
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
    # Shares of table time are each group's time over the sum of the diagnosis rows.
    rows_total = sum(k.total_us for k in d.kernels)
    for row in kernel_records(ctx)[:20]:
        assert row["share_pct"] == pytest.approx(100 * row["total_us"] / rows_total)
    return d, ctx


def _check_roofline(d, ctx):
    with_estimates = [k for k in d.kernels
                      if k.flops is not None and k.bytes is not None and k.flops > 0 and k.bytes > 0]
    byte_only = [k for k in d.kernels if k.bytes and not k.flops and k.achieved_bytes_per_s
                 and k.bound.value != "communication"]
    points = ctx["roofline"]["points"]
    marks = ctx["roofline"]["bandwidth"]["marks"]
    assert len(points) == len(with_estimates)
    assert len(marks) == len(byte_only)
    # Every group is a point, a mark on the bandwidth strip, or listed as not on the chart.
    assert len(points) + len(marks) + len(ctx["roofline"]["unplotted"]) == len(d.kernels)
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
    # Issue 14: the verdict shows and ranks by the dependency graph's saving where a finding has one.
    shown = sorted((f.est_saving_us if f.graph_saving_us is None else f.graph_saving_us for f in d.findings),
                   reverse=True)
    assert [f["saving_us"] for f in v["top_findings"]] == shown[:3]
    if d.findings:
        w = d.whatif
        # the subtraction never saves more than the rules' estimates together ...
        rule = sorted((f.est_saving_us for f in d.findings), reverse=True)
        assert d.time.total_us - sum(rule) <= w.projected_us + 1e-9 * d.time.total_us
        # ... and the headline is the graph's projection where it re-timed the findings (on a graph
        # the top findings together may save more than alone, so no such bound holds for it)
        assert v["projected_us"] == (w.projected_us if w.graph_projected_us is None else w.graph_projected_us)
        assert 0 <= v["projected_us"] <= d.time.total_us
    else:
        assert v["projected_us"] is None


def test_a100_training_context():
    # 6,080 kernels + 1,390 memcpys + 277 memsets; 4 memsets ran before the first launch call:
    # 7,743 activities, 449,757 µs (integer-µs trace).
    d, ctx = _check_kernel_table_matches_trace(A100_TRAIN, 7743, 449757.0, 4)
    _check_roofline(d, ctx)
    _check_verdict(d, ctx)
    # All 80 NCCL kernels (190,345 µs) are inside the window, none on the roofline.
    records = kernel_records(ctx)
    nccl = [r for r in records if r["name"].startswith("ncclKernel")]
    assert sum(r["count"] for r in nccl) == 80
    assert sum(r["total_us"] for r in nccl) == pytest.approx(190345.0)
    assert not any(r["plotted"] for r in nccl)
    assert "A100" in ctx["device"]["name"]
    assert ctx["verdict"]["steps"] == d.time.steps
    assert len(render_html(d).encode()) < 5_000_000
    json.loads(render_json(d))


def test_h100_qwen_context():
    # 1,465 kernels + 241 memsets + 1 memcpy; 509 ran before the first launch call (spill-over):
    # 1,198 activities, 31,905.473 µs (float-µs trace).
    d, ctx = _check_kernel_table_matches_trace(H100_QWEN, 1198, 31905.473, 509)
    _check_roofline(d, ctx)
    _check_verdict(d, ctx)
    assert ctx["communication"]["rows"] == []
    assert "H100" in ctx["device"]["name"]


def test_h100_qwen_byte_only_groups_are_on_the_strip():
    # From diagnosis.json itself: the groups with bytes and no FLOPs (null or 0) that are not
    # collectives: 15 of the 38 groups, 7,318.41 µs of the 31,905.473 µs kernel time (22.9 %).
    d = real_diagnosis(H100_QWEN)
    rows = json.loads(render_json(d))["kernels"]
    byte_only = [r for r in rows if r["bytes"] and not r["flops"] and r["bound"] != "communication"]
    assert (len(byte_only), len(rows)) == (15, 38)
    assert sum(r["total_us"] for r in byte_only) == pytest.approx(7318.41)
    strip = build_context(d)["roofline"]["bandwidth"]
    assert len(strip["marks"]) == 15
    assert strip["us"] == pytest.approx(7318.41)
    assert strip["pct_of_kernel_time"] == pytest.approx(100 * 7318.41 / 31905.473)
    records = kernel_records(build_context(d))
    assert sorted((records[m["k"]]["name"], m["x"]) for m in strip["marks"]) == sorted(
        (r["name"], r["achieved_bytes_per_s"]) for r in byte_only)
    bw = d.device.memory_bandwidth
    for m in strip["marks"]:
        assert m["pct"] == pytest.approx(100 * m["x"] / bw)
    # Nothing is left "not on the chart": every group has a FLOP or a byte estimate.
    assert build_context(d)["roofline"]["unplotted"] == []


def test_cpu_trace_context():
    d = real_diagnosis(CPU_ONLY)
    ctx = build_context(d)
    assert _trace_activities(CPU_ONLY) == ([], 0)
    # Each row of a CPU trace is a leaf op named by itself: no second "Op" column.
    assert all(k.op == k.name for k in d.kernels) and ctx["show_op_column"] is False
    assert ctx["source"]["trace_kind"] == "cpu" and ctx["item_label"] == "CPU op"
    assert ctx["device"]["spec_source"] == "assumed" and ctx["device"]["assumed"]
    _check_roofline(d, ctx)  # leaf CPU ops against the host's (assumed) ceilings
    _check_verdict(d, ctx)
    assert ctx["kernel_summary"]["launches"] == sum(k.count for k in d.kernels)
    json.loads(render_json(d))
