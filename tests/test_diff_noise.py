"""The diff's noise rule (bwdiag.diff.noise), on step lists whose answer is worked out by hand."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bwdiag.diff import noise

# √(π/2) × 1.4826 = 1.85820: standard error of a median per MAD·/√n (normal data)
SE_PER_MAD = 1.2533141 * 1.4826


def test_few_steps_take_half_the_larger_range():
    # 3 and 2 steps: ranges 4 and 2 → ±2
    assert noise.noise([10.0, 12.0, 14.0], [9.0, 11.0]) == {"noise_us": 2.0, "method": "half range"}
    # 7 steps is still "few"
    assert noise.noise([1.0] * 6 + [3.0], [1.0] * 9)["method"] == "half range"


# 30 steps alternating 100/104/96, the first one 120 (a slow first step, under 1.5× the median):
# median 100 and MAD 4 (nine |0|, twenty |4|, one |20|); both halves' medians are 100 (no drift).
BEFORE = [120.0, 104.0, 96.0] + [100.0, 104.0, 96.0] * 9
AFTER = [x - 8.0 for x in BEFORE]


def test_a_steady_speed_up_over_thirty_steps_is_beyond_the_noise():
    se = SE_PER_MAD * 4 / 30 ** 0.5  # 1.3571
    expected = 3 * (2 * se * se) ** 0.5  # 5.757
    got = noise.noise(BEFORE, AFTER)
    assert got["method"] == "median error" and got["drift_us"] == 0.0
    assert got["noise_us"] == pytest.approx(expected, rel=1e-4) and got["noise_us"] == pytest.approx(5.757, abs=1e-3)
    # the 8 µs shift is beyond it; half the range ((120 − 96) / 2 = 12) would have called it no change
    assert 8.0 > got["noise_us"] and noise.half_range(BEFORE) == 12.0


def test_a_run_that_drifts_within_itself_widens_the_noise():
    # first half around 100, second half around 110: drift 10. The other run is steady.
    drifting = [100.0, 104.0, 96.0] * 5 + [110.0, 114.0, 106.0] * 5
    steady = [100.0, 104.0, 96.0] * 10
    # drifting: median 105, MAD 5 → se 1.6963; steady: se 1.3571 → 3·√(se²+se²) = 6.517 < drift 10
    got = noise.noise(drifting, steady)
    assert got["drift_us"] == 10.0
    assert got["scatter_us"] == pytest.approx(3 * ((SE_PER_MAD * 5) ** 2 + (SE_PER_MAD * 4) ** 2) ** 0.5 / 30 ** 0.5,
                                              rel=1e-4)
    assert got["method"] == "drift" and got["noise_us"] == 10.0


def test_events_are_not_noise():
    # a 200 µs checkpoint step among 100 µs ones (over 1.5× the median) is left out
    assert noise.ordinary([100.0, 200.0, 101.0]) == [100.0, 101.0]
    assert noise.ordinary([100.0, 200.0, 101.0], step_us=150.0) == [100.0, 200.0, 101.0]


def test_the_verdict_on_thirty_unprofiled_steps(tmp_path):
    """End to end: two diagnoses whose unprofiled steps are BEFORE and AFTER (ms): faster, by 3
    standard errors of the medians; half the range would have said no change."""
    trace = Path(__file__).resolve().parents[1] / "sample_traces" / "decode_kv_cache_cpu"
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sides = {}
    for name, steps in (("before", BEFORE), ("after", AFTER)):
        side = tmp_path / name
        shutil.copytree(out, side)
        doc = json.loads((side / "diagnosis.json").read_text())
        doc["time"].update(unprofiled_step_us=sorted(steps)[14] / 2 + sorted(steps)[15] / 2,
                           unprofiled_step_durations_us=[s * 1000 for s in steps],
                           unprofiled_step_ids=list(range(100, 130)), unprofiled_clock="host")
        doc["time"]["unprofiled_step_us"] *= 1000
        (side / "diagnosis.json").write_text(json.dumps(doc))
        sides[name] = side
    proc = subprocess.run([sys.executable, "-m", "bwdiag", "diff", str(sides["before"]), str(sides["after"]),
                           "-o", str(tmp_path / "d")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads((tmp_path / "d" / "diff.json").read_text())
    u = diff["step"]["unprofiled"]
    assert u["before_us"] == 100_000 and u["after_us"] == 92_000
    assert u["noise_method"] == "median error" and u["noise_us"] == pytest.approx(5757, abs=1)
    assert u["verdict"] == "faster" and diff["headline"]["source"] == "unprofiled"
    said = " ".join(proc.stdout.split())  # the terminal wraps long lines
    assert "Faster, beyond the noise: unprofiled step 100 ms → 92 ms (−8 ms, −8.0%)" in said
    assert "noise ±5.76 ms (3 standard errors of the medians' difference, 30 and 30 steps" in said
