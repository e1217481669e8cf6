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
