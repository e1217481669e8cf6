"""CPU ops that beat their roof: what the warning says depends on where the roof came from
(issue 16 item 4: no GPU suggestion on an assumed CPU, no "re-run calibrate" right after one)."""

from __future__ import annotations

import json

from bwdiag.diagnose.kernels import DISPATCH_CEILING, LOW_ROOF_CEILING
from bwdiag.pipeline import analyze
from tests.conftest import shared_trace

RANK_NON_GPU = "hta/rank_non_gpu/rank_non_gpu.json.gz"  # a CPU-only trace from another host


def _above(d) -> list[str]:
    return [w for w in d.warnings if "beat" in w or "ten times faster" in w]


def test_against_the_assumed_cpu_nothing_is_dispatched_elsewhere():
    d = analyze([shared_trace(RANK_NON_GPU)])
    assert d.device.spec_source == "assumed"
    assert not any(k.ceiling == DISPATCH_CEILING for k in d.kernels)
    assert any(k.ceiling == LOW_ROOF_CEILING for k in d.kernels)
    words = " ".join(_above(d))
    assert "ten times faster" not in words and "GPU" not in words and "re-run" not in words
    assert "beat the compute roof of the assumed CPU: the host is faster than the generic assumption" in words
    assert not any(w.startswith("CPU-only trace: CPU ops are placed") for w in d.warnings)  # said once


def test_against_given_ceilings_ten_times_faster_is_dispatch(tmp_path):
    # A CPU of 1 GFLOP/s and 1 GB/s: the recorded ops "run" far beyond it, which only dispatching
    # elsewhere explains; the ceilings were given, so no calibration advice either.
    spec = tmp_path / "slow.json"
    spec.write_text(json.dumps({"name": "slow CPU", "kind": "cpu", "vector_flops": {"fp32": 1e9},
                                "memory_bandwidth": 1e9}))
    d = analyze([shared_trace(RANK_NON_GPU)], device_spec=spec)
    assert d.device.spec_source == "user"
    words = " ".join(_above(d))
    assert "finish ten times faster than this CPU could do their work" in words
    assert "re-run" not in words
    assert any(k.bound == "latency" and k.ceiling == DISPATCH_CEILING for k in d.kernels)
