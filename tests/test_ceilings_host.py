"""Whose ceilings: a CPU trace meets this machine's calibration only when it was recorded on this
host; the calibration used is recorded in diagnosis.json and read once per run; accelerator work
filed under other categories than CUDA/HIP's (MTIA's ``mtia_ccp_events``, XPU's ``xpu_runtime``
launches) is device time.

Numbers are worked out here from the raw JSON, never taken from bwdiag's own tables.
"""

from __future__ import annotations

import copy
import gzip
import json
import socket
from pathlib import Path

import numpy as np
import pytest

from bwdiag.pipeline import analyze
from tests.conftest import A100_NCCL, CPU_OPS, raw_events, shared_trace

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"

#: Ceilings written into the test calibrations: round numbers no machine or table entry has.
BANDWIDTH = 12.5e12  # far above any CPU: the ops never beat it (a beaten roof gives pct None)
FP32 = 75.0e12


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_record(tmp_path_factory):
    """One calibration file exactly as ``bwdiag calibrate --quick`` writes it (private cache)."""
    from bwdiag.hardware.calibrate import cache_path, calibrate, device_identity

    cache = tmp_path_factory.mktemp("xdg-real")
    patcher = pytest.MonkeyPatch()
    patcher.setenv("XDG_CACHE_HOME", str(cache))
    try:
        calibrate("cpu", quick=True)
        path = cache_path(device_identity("cpu"))
        return json.loads(path.read_text("utf-8"))
    finally:
        patcher.undo()


def _write_calibration(record: dict, bandwidth: float, fp32: float, created: str) -> Path:
    """Write ``record`` with these ceilings into the current $XDG_CACHE_HOME; its path."""
    from bwdiag.hardware.calibrate import cache_path, device_identity

    rec = copy.deepcopy(record)
    rec["created"] = created
    rec["entry"]["memory_bandwidth"] = bandwidth
    rec["entry"]["vector_flops"] = {"fp32": fp32, "fp64": fp32 / 2}
    path = cache_path(device_identity("cpu"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec), "utf-8")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch, real_record):
    """A private cache holding a calibration of this host with the ceilings above."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = _write_calibration(real_record, BANDWIDTH, FP32, "2026-01-02T03:04:05+00:00")
    return path


def _cpu_trace_here(path: Path) -> Path:
    """A plain torch.profiler CPU trace recorded on this machine (not by bwdiag)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1 << 20)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            (x * 2.0) + x
    prof.export_chrome_trace(str(path))
    return path


def _rewrite(src: Path, dst: Path, edit) -> Path:
    doc = raw_events(src)
    edit(doc)
    opener = gzip.open if dst.suffix == ".gz" else open
    with opener(dst, "wt") as fh:
        json.dump(doc, fh)
    return dst


def _ceiling_warnings(d) -> list[str]:
    return [w for w in d.warnings if w.startswith("device ceilings")]


# -- whose calibration -------------------------------------------------------------------------


@pytest.mark.parametrize("rel", [CPU_ONLY, CPU_OPS])
def test_foreign_cpu_trace_is_assumed_even_with_a_calibration_cached(rel, cache):
    """hta's CPU traces come from other hosts and record no host: the cached calibration of this
    machine must not be used; the warning says why and how to override."""
    trace = shared_trace(rel)
    meta = {k: v for k, v in raw_events(trace).items() if k != "traceEvents"}
    assert "host_name" not in meta and "bwdiag" not in meta  # the premise: no host facts at all
    d = analyze([trace])
    assert d.source.trace_kind == "cpu"
    assert d.device.spec_source == "assumed" and d.device.calibration is None
    assert d.device.memory_bandwidth != BANDWIDTH
    (warning,) = _ceiling_warnings(d)
    assert str(cache) in warning and "records no host name or CPU" in warning
    assert "--device-spec" in warning


def test_override_still_applies_to_a_foreign_cpu_trace(cache, tmp_path):
    spec = tmp_path / "host.json"
    spec.write_text(json.dumps({"memory_bandwidth": 3.0e10, "vector_flops": {"fp32": 4.0e11}}))
    d = analyze([shared_trace(CPU_ONLY)], device_spec=spec)
    assert d.device.spec_source == "user" and d.device.memory_bandwidth == 3.0e10
    assert d.device.peak_flops["fp32"] == 4.0e11


def test_cpu_trace_recorded_here_uses_the_calibration_and_records_it(cache, tmp_path):
    trace = _cpu_trace_here(tmp_path / "here.json")
    assert raw_events(trace)["host_name"] == socket.gethostname()  # Kineto names the host
    d = analyze([trace])
    assert d.device.spec_source == "calibrated"
    assert d.device.memory_bandwidth == BANDWIDTH and d.device.peak_flops["fp32"] == FP32
    cal = d.device.calibration
    assert cal["path"] == str(cache) and cal["origin"] == "local"
    assert cal["measured_at"] == "2026-01-02T03:04:05+00:00"
    assert cal["values"]["memory_bandwidth"] == BANDWIDTH
    assert cal["values"]["vector_flops"] == {"fp32": FP32, "fp64": FP32 / 2}
    assert cal["host"]["hostname"] == socket.gethostname()
    assert d.device.trace_host["hostname"] == socket.gethostname()
    assert _ceiling_warnings(d) == []
    # the JSON carries the same record
    doc = d.to_dict()
    assert doc["device"]["calibration"]["path"] == str(cache)
    # a memory-bound op's % of ceiling is against the calibrated bandwidth
    mul = next(k for k in d.kernels if k.op == "aten::mul" and k.bound == "memory")
    assert mul.pct_of_ceiling == pytest.approx(100 * mul.bytes / (mul.total_us / 1e6) / BANDWIDTH)


def test_same_trace_named_for_another_host_is_assumed(cache, tmp_path):
    here = _cpu_trace_here(tmp_path / "here.json")
    other = _rewrite(here, tmp_path / "other.json", lambda doc: doc.update(host_name="mtia-host-07"))
    d = analyze([other])
    assert d.device.spec_source == "assumed" and d.device.calibration is None
    (warning,) = _ceiling_warnings(d)
    assert "'mtia-host-07'" in warning and repr(socket.gethostname()) in warning


# -- traces bwdiag captures ---------------------------------------------------------------------


def _capture(out: Path) -> Path:
    import torch

    import bwdiag

    model = torch.nn.Linear(64, 64)
    with bwdiag.profile(out=out, wait=0, warmup=0, active=2, analyze=False) as prof:
        for _ in range(3):
            model(torch.ones(32, 64))
            prof.step()
    (trace,) = sorted(out.glob("*.json.gz"))
    return trace


def test_capture_records_host_and_its_calibration(cache, tmp_path):
    from bwdiag.hardware.host import cpu_name as _cpu_name

    trace = _capture(tmp_path / "cap")
    meta = raw_events(trace)["bwdiag"]
    assert meta["host"] == {"hostname": socket.gethostname(), "cpu": _cpu_name(),
                            "cores": __import__("os").cpu_count()}
    assert meta["calibrated"]["file"] == str(cache)
    assert meta["calibrated"]["entry"]["memory_bandwidth"] == BANDWIDTH
    d = analyze([trace])
    assert d.device.spec_source == "calibrated" and d.device.calibration["origin"] == "local"
    assert d.device.memory_bandwidth == BANDWIDTH


def test_captured_elsewhere_uses_the_calibration_embedded_by_its_host(cache, tmp_path, real_record):
    """A bwdiag capture from another host carries that host's calibration: it is used, not ours."""
    trace = _capture(tmp_path / "cap")

    def elsewhere(doc):
        doc["host_name"] = "node-b"
        doc["bwdiag"]["host"]["hostname"] = "node-b"
        doc["bwdiag"]["calibrated"]["host"]["hostname"] = "node-b"
        doc["bwdiag"]["calibrated"]["entry"]["memory_bandwidth"] = 2 * BANDWIDTH
        doc["bwdiag"]["calibrated"]["created"] = "2025-05-05T05:05:05+00:00"

    foreign = _rewrite(trace, tmp_path / "foreign.pt.trace.json.gz", elsewhere)
    d = analyze([foreign])
    assert d.device.spec_source == "calibrated"
    assert d.device.memory_bandwidth == 2 * BANDWIDTH  # node-b's, not this machine's BANDWIDTH
    cal = d.device.calibration
    assert cal["origin"] == "trace" and cal["measured_at"] == "2025-05-05T05:05:05+00:00"
    assert cal["host"]["hostname"] == "node-b"
    (warning,) = _ceiling_warnings(d)
    assert "'node-b'" in warning and "does not apply" in warning

    # without the embedded calibration, the same foreign trace is assumed
    bare = _rewrite(foreign, tmp_path / "bare.pt.trace.json.gz",
                    lambda doc: doc["bwdiag"].update(calibrated=None))
    d = analyze([bare])
    assert d.device.spec_source == "assumed" and d.device.calibration is None


def test_calibration_rewritten_after_capture_is_not_used_silently(cache, tmp_path, real_record):
    trace = _capture(tmp_path / "cap")  # embeds the 2026-01-02 calibration
    _write_calibration(real_record, 3 * BANDWIDTH, FP32, "2026-06-07T08:09:10+00:00")
    d = analyze([trace])
    assert d.device.memory_bandwidth == 3 * BANDWIDTH  # the file's current measurement ...
    assert d.device.calibration["measured_at"] == "2026-06-07T08:09:10+00:00"
    (warning,) = _ceiling_warnings(d)  # ... and the change is said
    assert "rewritten since the trace was captured" in warning
    assert "2026-01-02T03:04:05+00:00" in warning and "2026-06-07T08:09:10+00:00" in warning


def test_calibration_rewritten_during_the_analysis_does_not_change_it(cache, tmp_path, real_record,
                                                                      monkeypatch):
    """Another process re-calibrates while ranks are analysed: the run keeps the snapshot it read."""
    import bwdiag.diagnose.build as build

    trace = _cpu_trace_here(tmp_path / "here.json")
    original = build.analyze_rank
    calls = []

    def rewrite_then_analyze(t, spec):
        if not calls:
            _write_calibration(real_record, 10 * BANDWIDTH, 10 * FP32, "2027-01-01T00:00:00+00:00")
        calls.append(spec)
        return original(t, spec)

    monkeypatch.setattr(build, "analyze_rank", rewrite_then_analyze)
    # two ranks of one job (one recording, distributedInfo ranks 0 and 1): both analysed after the rewrite
    ranks = [_rewrite(trace, tmp_path / f"rank{r}.json", lambda d, r=r: d.update(distributedInfo={"rank": r}))
             for r in (0, 1)]
    during = analyze(ranks)
    assert len(calls) == 2 and all(s.memory_bandwidth == BANDWIDTH for s in calls)
    assert during.device.memory_bandwidth == BANDWIDTH
    assert during.device.calibration["measured_at"] == "2026-01-02T03:04:05+00:00"
    mul = next(k for k in during.kernels if k.op == "aten::mul" and k.bound == "memory")
    assert mul.pct_of_ceiling == pytest.approx(100 * mul.bytes / (mul.total_us / 1e6) / BANDWIDTH)
    # the rewrite really happened: the next run reads the new file
    monkeypatch.setattr(build, "analyze_rank", original)
    after = analyze([trace])
    assert after.device.memory_bandwidth == 10 * BANDWIDTH
    assert after.device.calibration["measured_at"] == "2027-01-01T00:00:00+00:00"


def test_calibration_is_read_once_per_run(cache, tmp_path, monkeypatch):
    import bwdiag.hardware.calibrate as calibrate

    trace = _cpu_trace_here(tmp_path / "here.json")
    reads = []
    real = calibrate.read_calibration
    monkeypatch.setattr(calibrate, "read_calibration", lambda *a, **k: reads.append(a) or real(*a, **k))
    analyze([trace, trace])
    assert len(reads) == 1


def test_calibration_file_records_its_host(real_record):
    from bwdiag.hardware.host import cpu_name as _cpu_name

    assert real_record["host"]["hostname"] == socket.gethostname()
    assert real_record["host"]["cpu"] == _cpu_name()


def test_old_calibration_file_without_host_matches_by_cpu_and_this_hostname(tmp_path, monkeypatch,
                                                                            real_record):
    """Files written before ``host`` existed name only their CPU: they are this machine's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = {k: v for k, v in real_record.items() if k != "host"}
    _write_calibration(old, BANDWIDTH, FP32, "2025-01-01T00:00:00+00:00")
    here = _cpu_trace_here(tmp_path / "here.json")
    assert analyze([here]).device.spec_source == "calibrated"
    other = _rewrite(here, tmp_path / "other.json", lambda doc: doc.update(host_name="elsewhere"))
    assert analyze([other]).device.spec_source == "assumed"


# -- accelerator categories --------------------------------------------------------------------


def _as_mtia(doc):
    """Re-file a CUDA trace's device work and launches as MTIA's categories."""
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["cat"] = "mtia_ccp_events"
        elif e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["cat"] = "mtia_runtime"
    doc.pop("deviceProperties", None)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -np.inf
    for s, e in sorted(intervals):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def test_mtia_device_events_are_busy_time(tmp_path):
    src = shared_trace(ALEXNET)
    mtia = _rewrite(src, tmp_path / "mtia.json.gz", _as_mtia)
    doc = raw_events(mtia)
    device = [e for e in doc["traceEvents"] if e.get("ph") == "X"
              and e.get("cat") in ("mtia_ccp_events", "gpu_memcpy", "gpu_memset")]
    assert sum(e["cat"] == "mtia_ccp_events" for e in device) == 79
    busy = _union([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in device])
    window = max(float(e["ts"]) + float(e["dur"]) for e in device) - min(float(e["ts"]) for e in device)

    d = analyze([mtia])
    assert d.source.trace_kind == "gpu" and d.device.accelerator == "mtia"
    assert d.device.spec_source == "assumed"
    assert any("MTIA" in w for w in _ceiling_warnings(d))
    (rank,) = d.ranks
    assert rank.kernels == len(device)
    assert rank.busy_us == pytest.approx(busy, abs=1e-3)
    assert d.time.total_us == pytest.approx(window, abs=1e-3)
    assert d.time.by_bound["idle"] == pytest.approx(window - busy, abs=1e-3)
    assert d.sections_dict()["idle"]["idle_us"] == pytest.approx(window - busy, abs=1e-3)
    # MTIA launches link the device events to their ops, as CUDA's do
    cuda = analyze([src])
    assert d.coverage.linked_pct == pytest.approx(cuda.coverage.linked_pct)
    assert d.coverage.linked_pct > 90


def test_mtia_collectives_count_for_overlap(tmp_path):
    src = shared_trace(A100_NCCL)
    cuda = analyze([src])
    mtia = analyze([_rewrite(src, tmp_path / "mtia.json.gz", _as_mtia)])
    assert mtia.device.accelerator == "mtia"
    assert cuda.time.communication_overlap_pct is not None
    assert mtia.time.communication_overlap_pct == pytest.approx(cuda.time.communication_overlap_pct)
    assert mtia.time.exposed_communication_us == pytest.approx(cuda.time.exposed_communication_us)
    assert mtia.time.by_bound["idle"] == pytest.approx(cuda.time.by_bound["idle"])


def test_xpu_runtime_launches_link_kernels(tmp_path):
    """XPU kernels are ``kernel`` events, launched from ``xpu_runtime``: the launches must link."""
    src = shared_trace(ALEXNET)

    def as_xpu(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                e["cat"] = "xpu_runtime"

    xpu = analyze([_rewrite(src, tmp_path / "xpu.json.gz", as_xpu)])
    cuda = analyze([src])
    assert xpu.device.accelerator == "xpu"
    assert xpu.coverage.linked_pct == pytest.approx(cuda.coverage.linked_pct) and xpu.coverage.linked_pct > 90
    assert xpu.sections_dict()["idle"]["host_wait_us"] == pytest.approx(cuda.sections_dict()["idle"]["host_wait_us"])
    assert not any("ignored events" in w for w in xpu.warnings)


def test_report_names_the_calibration_and_the_trace_host(cache, tmp_path):
    from bwdiag.report.context import build_context
    from bwdiag.report.html import render_html

    d = analyze([_cpu_trace_here(tmp_path / "here.json")])
    dev = build_context(d)["device"]
    assert dev["calibration"]["path"] == str(cache)
    assert dev["calibration"]["measured_at"] == "2026-01-02T03:04:05+00:00"
    assert dev["calibration"]["where"] == "this machine's cache"
    assert dev["trace_host"] == socket.gethostname()
    page = render_html(d)
    assert 'id="calibration"' in page and str(cache) in page

    foreign = analyze([shared_trace(CPU_ONLY)])
    dev = build_context(foreign)["device"]
    assert dev["calibration"] is None and dev["assumed"] and dev["trace_host"] is None
    assert 'id="calibration"' not in render_html(foreign)
