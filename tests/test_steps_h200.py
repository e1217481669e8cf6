"""Step time on real H200 traces (PyTorch 2.11, sample_traces/*_h200): Kineto there writes GPU-side
ProfilerStep spans that do not describe the steps (one span over three steps' kernels, or tiny spans
inside it), so the step time must come from the CPU-side spans — worked out here straight from the JSON.
"""

import gzip
import json
import statistics

import pytest

from conftest import SAMPLE_TRACES
from bwdiag.pipeline import analyze


def cpu_step_spans_us(path):
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted(e["dur"] for e in events
                  if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#"))


@pytest.mark.parametrize("name", ["train_transformer_h200", "decode_kv_cache_h200"])
def test_step_time_is_the_host_steps(name):
    trace = SAMPLE_TRACES / name / "rank0.pt.trace.json.gz"
    spans = cpu_step_spans_us(trace)
    assert len(spans) == 3
    d = analyze([trace])
    assert d.time.steps == 3 and d.time.step_source == "cpu"
    assert d.time.step_us == pytest.approx(statistics.median(spans), rel=1e-6)
    assert any("GPU-side ProfilerStep spans set aside" in w for w in d.warnings)


def test_unprofiled_steps_on_the_device_clock():
    trace = SAMPLE_TRACES / "train_transformer_h200" / "rank0.pt.trace.json.gz"
    with gzip.open(trace, "rt") as f:
        timed = json.load(f)["bwdiag"]["unprofiled_steps"]
    assert timed["ids"] == [1, 2, 3, 4] and timed["device_us"] is not None
    d = analyze([trace])
    assert d.time.unprofiled_clock == "device" and d.time.unprofiled_step_ids == (2, 3, 4)
    assert d.time.unprofiled_step_us == pytest.approx(statistics.median(timed["device_us"][-3:]))
    # The projection starts from the unprofiled step: the graph's host side scaled down to it.
    base_step = d.whatif.graph_base_us * d.time.step_us / d.time.total_us
    assert base_step == pytest.approx(d.time.unprofiled_step_us, rel=0.01)
    assert d.time.unprofiled_step_us < 0.6 * d.time.step_us  # the profiler more than doubled this step


def test_cudnn_planning_is_the_decode_finding():
    # Measured on the same H200 (interleaved plain runs, medians): 46.1 ms/token with cuDNN attention,
    # 3.0 ms/token with sdpa_kernel(FLASH_ATTENTION): 93 % saved.
    d = analyze([SAMPLE_TRACES / "decode_kv_cache_h200" / "rank0.pt.trace.json.gz"])
    top = d.findings[0]
    assert top.title.startswith("Attention plans a new cuDNN graph every call") and "FLASH_ATTENTION" in top.fix
    assert 0.85 * d.time.unprofiled_step_us <= top.saving_per_step_us <= d.time.unprofiled_step_us
    assert not any(f.kind == "launch_overhead" and f.saving_pct > 10 for f in d.findings)
    after = analyze([SAMPLE_TRACES / "decode_kv_cache_h200_flash" / "rank0.pt.trace.json.gz"])
    assert not any("cuDNN" in f.title for f in after.findings)
