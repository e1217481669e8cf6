"""Step time from complete ProfilerStep spans: median and spread, cut steps left out."""

import pandas as pd
import pytest

from bwdiag.diagnose.steps import step_spans


def frame(rows):
    return pd.DataFrame(rows, columns=["name", "side", "ts", "dur"]).assign(pid=0, tid=0)


def steps(side, durs, start=0.0, gap=10.0):
    rows, t = [], start
    for i, d in enumerate(durs):
        rows.append((f"ProfilerStep#{i + 1}", side, t, d))
        t += d + gap
    return rows


def test_median_and_spread_of_complete_steps():
    s = step_spans(frame(steps("cpu", [221.0, 224.0, 230.0])), trace_end_us=2000.0)
    assert s.side == "cpu" and s.step_ids == (1, 2, 3)
    assert s.median_us == 224.0 and s.min_us == 221.0 and s.max_us == 230.0
    assert s.abnormal == () and s.excluded == ()


def test_truncated_last_step_is_left_out():
    rows = steps("cpu", [100.0, 102.0, 98.0, 30.0])
    end = rows[-1][2] + rows[-1][3]  # the last step ends where the trace ends
    s = step_spans(frame(rows), trace_end_us=end)
    assert s.step_ids == (1, 2, 3) and s.median_us == 100.0 and s.excluded == (4,)


def test_short_last_step_the_capture_completed_is_kept():
    # A busy machine: the capture says it completed steps 1..4, so the short last one is a step.
    rows = steps("cpu", [100.0, 102.0, 98.0, 30.0])
    end = rows[-1][2] + rows[-1][3]
    s = step_spans(frame(rows), trace_end_us=end, last_complete=4)
    assert s.step_ids == (1, 2, 3, 4) and s.median_us == 99.0 and s.excluded == ()
    # ...and one past the last completed step is cut whatever its length.
    s = step_spans(frame(rows), trace_end_us=end, last_complete=3)
    assert s.step_ids == (1, 2, 3) and s.excluded == (4,)


def test_short_last_step_inside_the_trace_is_kept():
    rows = steps("cpu", [100.0, 102.0, 98.0, 30.0])
    s = step_spans(frame(rows), trace_end_us=10_000.0)
    assert s.step_ids == (1, 2, 3, 4) and s.median_us == 99.0


def test_abnormal_step_is_kept_and_flagged():
    rows = steps("cpu", [100.0, 100.0, 100.0, 100.0, 200.0])
    end = rows[-1][2] + rows[-1][3]
    s = step_spans(frame(rows), trace_end_us=end)
    assert s.step_ids == (1, 2, 3, 4, 5) and s.median_us == 100.0 and s.max_us == 200.0
    assert s.abnormal == (5,)


def test_gpu_spans_preferred_and_streams_merged():
    rows = steps("cpu", [50.0, 50.0, 50.0])
    rows += [("ProfilerStep#1", "gpu", 5.0, 60.0), ("ProfilerStep#1", "gpu", 20.0, 75.0),  # two streams
             ("ProfilerStep#2", "gpu", 70.0, 80.0), ("ProfilerStep#3", "gpu", 160.0, 90.0)]
    s = step_spans(frame(rows), trace_end_us=1000.0)
    assert s.side == "gpu" and s.durations_us == (90.0, 80.0, 90.0) and s.median_us == 90.0


def test_zero_duration_and_other_annotations_ignored():
    rows = steps("cpu", [100.0, 0.0, 120.0]) + [("forward", "cpu", 0.0, 999.0), ("ProfilerStep#x", "cpu", 0, 5)]
    s = step_spans(frame(rows), trace_end_us=5000.0)
    assert s.step_ids == (1, 3) and s.median_us == pytest.approx(110.0) and s.excluded == (2,)


def test_no_steps():
    assert step_spans(frame([("forward", "cpu", 0.0, 10.0)])) is None
    assert step_spans(frame([])) is None


def test_gpu_span_covering_later_steps_is_set_aside():
    # Kineto of PyTorch 2.11 (H200): one GPU ProfilerStep#1 over the kernels of steps 1-3, none for 2, 3.
    rows = steps("cpu", [50.0, 50.0, 50.0]) + [("ProfilerStep#1", "gpu", 5.0, 165.0)]
    s = step_spans(frame(rows), trace_end_us=1000.0)
    assert s.side == "cpu" and s.durations_us == (50.0, 50.0, 50.0)
    assert "no GPU span for steps 2, 3" in s.note


def test_overlapping_gpu_spans_are_set_aside():
    # ...and in the decode trace: GPU #1 runs to the end, #2 and #3 are tiny spans inside it.
    rows = steps("cpu", [50.0, 50.0, 50.0]) + [("ProfilerStep#1", "gpu", 5.0, 165.0),
                                               ("ProfilerStep#2", "gpu", 62.0, 2.0), ("ProfilerStep#3", "gpu", 122.0, 2.0)]
    s = step_spans(frame(rows), trace_end_us=1000.0)
    assert s.side == "cpu" and s.median_us == 50.0 and "steps 1 and 2 overlap" in s.note


def test_gpu_span_before_its_host_step_is_set_aside():
    rows = steps("cpu", [50.0, 50.0]) + [("ProfilerStep#1", "gpu", 5.0, 40.0), ("ProfilerStep#2", "gpu", 45.0, 40.0)]
    s = step_spans(frame(rows), trace_end_us=1000.0)  # CPU step 2 begins at 60: its kernels cannot run at 45
    assert s.side == "cpu" and "step 2 starts on the GPU before the host began it" in s.note


def test_unprofiled_step_from_the_captures_clock():
    from bwdiag.diagnose.steps import unprofiled_step

    meta = {"bwdiag": {"unprofiled_steps": {"ids": [1, 2, 3, 4], "host_us": [900.0, 500.0, 520.0, 480.0],
                                            "device_us": [800.0, 410.0, 430.0, 400.0]}}}
    u = unprofiled_step(meta)  # the device clock, over the last three steps
    assert (u.median_us, u.step_ids, u.clock) == (410.0, (2, 3, 4), "device")
    meta["bwdiag"]["unprofiled_steps"]["device_us"] = None  # CUDA not used, or events not complete
    assert unprofiled_step(meta).median_us == 500.0 and unprofiled_step(meta).clock == "host"
    assert unprofiled_step({"bwdiag": {"unprofiled_steps": None}}) is None
    assert unprofiled_step({}) is None
    assert unprofiled_step({"bwdiag": {"unprofiled_steps": {"ids": [1], "host_us": ["x"]}}}) is None


def test_slow_steps_that_are_a_pattern_give_the_mean():
    # A DataLoader whose two workers fall behind every other step (the new-user run: 5.99, 29.4, 4.41 ms):
    # one slow step in three is a pattern, and what a step costs on average is the mean.
    s = step_spans(frame(steps("cpu", [5990.0, 29400.0, 4410.0])), trace_end_us=100_000.0)
    assert s.statistic == "mean" and s.median_us == pytest.approx((5990 + 29400 + 4410) / 3)
    assert s.abnormal == ()
    # One slow step in five stays an outlier: the median, flagged.
    s = step_spans(frame(steps("cpu", [100.0, 100.0, 100.0, 100.0, 200.0])), trace_end_us=10_000.0)
    assert s.statistic == "median" and s.median_us == 100.0 and s.abnormal == (5,)


def test_slow_unprofiled_steps_that_are_a_pattern_give_the_mean():
    from bwdiag.diagnose.steps import unprofiled_step

    # The new-user DataLoader script's clock file (steps 10–19 after the window, ms): three slow steps of
    # ten, under a third of them but 76 % of the time — a pattern: the mean, 11.92 ms, not the 4.53 ms median.
    host = [4332.6, 2312.7, 2916.8, 3120.8, 29372.6, 4428.6, 31401.2, 4639.2, 29971.2, 6706.4]
    u = unprofiled_step({"bwdiag_clock": {"after_window": {"ids": list(range(10, 20)), "host_us": host,
                                                           "device_us": None}}})
    assert u.statistic == "mean" and u.median_us == pytest.approx(sum(host) / 10)
    # Slow steps right after the window are the profiler stopping, not a pattern: a compiled decode loop's
    # clock (µs) settles by step 13 — 674 > 1.5 × 413, the median of the steps after it — and those
    # leading steps are left out: the median of steps 13–19, 413 µs (its own clock said 377 µs).
    settling = [1682.0, 1015.0, 674.0, 478.0, 458.0, 413.0, 475.0, 391.0, 379.0, 374.0]
    u = unprofiled_step({"bwdiag_clock": {"after_window": {"ids": list(range(10, 20)), "host_us": settling}}})
    assert u.statistic == "median" and u.step_ids == tuple(range(13, 20)) and u.median_us == 413.0
    # One slow step of ten, even a long one, stays an outlier; two slow ones under a third of the time too.
    one = [1000.0] * 9 + [5000.0]
    two = [1000.0] * 8 + [1600.0, 1600.0]
    for values in (one, two):
        u = unprofiled_step({"bwdiag_clock": {"after_window": {"ids": list(range(10, 20)), "host_us": values}}})
        assert u.statistic == "median" and u.median_us == 1000.0
    # The recorded steps follow the same rule: 2 of 7 slow (under a third) holding 78 % of the time → the mean.
    s = step_spans(frame(steps("cpu", [1000.0, 1000.0, 9000.0, 1000.0, 9000.0, 1000.0, 1000.0])),
                   trace_end_us=100_000.0)
    assert s.statistic == "mean" and s.median_us == pytest.approx(23000.0 / 7)


def test_an_oversubscribed_recording_host_is_named():
    from types import SimpleNamespace

    from bwdiag.diagnose.assemble import _busy_host_warnings

    def digest(load1, cores):
        return SimpleNamespace(metadata={"bwdiag": {"host_load": {"load1": load1, "cores": cores}}})

    (w,) = _busy_host_warnings([digest(1.5, 2), digest(4.8, 2)])
    assert "load average 4.8 on 2 cores" in w
    assert _busy_host_warnings([digest(2.9, 2), SimpleNamespace(metadata={})]) == []  # within cores + 1


def test_a_window_that_slowed_while_the_plain_steps_did_not_is_named():
    from bwdiag.diagnose.steps import slowed_window

    plain = (26000.0, 25500.0, 27000.0, 26500.0, 25800.0, 26200.0, 30000.0, 25900.0)
    # the transformer window of 7 Dec 2026: median (60806 + 63821) / 2 = 62313.5 = 1.411 × 44163
    w = slowed_window((44163.0, 60806.0, 63821.0, 66306.0), plain)
    assert w is not None and "44.2, 60.8, 63.8, 66.3 ms" in w and "1.41×" in w and "8 steps" in w
    assert "25.7–27.9 ms" in w  # np.percentile(plain, 10) = 25710, (…, 90) = 27900 by linear interpolation
    # a capture minutes later: 30.7 / 28.0 — the profiler's even cost, nothing named
    assert slowed_window((28674.0, 28020.0, 30759.0, 32579.0), plain) is None
    assert slowed_window((10000.0, 13900.0, 13900.0), plain) is None  # median 1.39× the fastest
    assert slowed_window((10000.0, 14100.0, 14100.0), plain) is not None  # 1.41×
    # a DataLoader falling behind every other step: the plain steps show the same pattern, not named
    pattern = (3000.0, 30000.0, 3000.0, 30000.0, 3000.0, 30000.0)
    assert slowed_window((3000.0, 30000.0, 30000.0, 3000.0, 30000.0), pattern) is None
    assert slowed_window((44163.0, 60806.0, 63821.0), plain[:4]) is None  # too few plain steps to judge
    assert slowed_window((44163.0, 60806.0), plain) is None  # too few recorded ones


def test_the_slowed_sample_window_is_named_from_its_trace_and_clock():
    """sample_traces/transformer_cpu_window_slowed: a real capture whose window slowed (benchmarks/whatif.py,
    7 Dec 2026). The warning's figures are the trace's ProfilerStep spans and the clock file's steps, read
    here by hand."""
    import gzip
    import json

    import numpy as np

    from conftest import SAMPLE_TRACES

    from bwdiag.pipeline import analyze

    folder = SAMPLE_TRACES / "transformer_cpu_window_slowed"
    events = json.loads(gzip.open(folder / "rank0.pt.trace.json.gz").read())["traceEvents"]
    spans = sorted((e["ts"], e["dur"]) for e in events
                   if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    assert len(spans) == 4
    durs = [d for _, d in spans]
    assert np.median(durs) / min(durs) > 1.8  # 32.6 ms, then three of about 60 ms
    plain = json.loads((folder / "rank0.clock.json").read_text())["after_window"]["host_us"]
    d = analyze([folder])
    (w,) = [w for w in d.warnings if w.startswith("the recorded window slowed down")]
    assert ", ".join(f"{x / 1e3:.1f}" for x in durs) + " ms" in w
    kept = len(d.time.unprofiled_step_durations_us)
    assert kept >= len(plain) - 3 and f"{kept} steps timed without the profiler" in w
    assert d.time.unprofiled_step_us < 0.5 * d.time.step_us  # 26.5 ms plain against 59.7 ms recorded
