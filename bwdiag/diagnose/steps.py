"""Step time from complete ``ProfilerStep#N`` spans (median and spread, never window ÷ count).

GPU-side spans (``gpu_user_annotation``) are preferred when the trace has them and they are
consistent with the CPU side: they measure what the device did per step; otherwise the CPU-side
``user_annotation`` spans are used. Several spans with the same step name (one per stream on the GPU
side) are merged into one [first start, last end]. Consistent means: the GPU side has a span for every
CPU step, none starts before its CPU step began (a kernel cannot run before it is launched), and no
two of them overlap by more than half the shorter one (the device runs the steps in order). Kineto
of PyTorch 2.11 (seen on an H200, December 2026) writes a GPU ``ProfilerStep#7`` spanning the kernels
of steps 7–9 and none, or tiny ones, for steps 8 and 9: the device's 17 ms where the steps took 8 ms
each on the host; such spans are set aside, with a note saying so.

A step is left out when it has no positive duration, or when it is cut: it ends at (or beyond) the
last event of the rank — a truncated trace or a Ctrl-C salvages its duration up to the end — and is
shorter than half the median of the other steps. A last step that ends at the trace end but is of
ordinary length is kept; a long one is kept and flagged abnormal (> 1.5× the median), not hidden.
When the capture says how many steps it completed (``bwdiag run`` / ``bwdiag.profile`` write
``steps_captured`` and ``first_recorded_step`` into the trace's ``bwdiag`` metadata), steps past the
last completed one are cut whatever their length: a Ctrl-C late in a step leaves a span of ordinary
length that is not a step; and the steps it completed are kept whatever their length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
ABNORMAL_RATIO = 1.5
CUT_RATIO = 0.5
#: When at least this share of the complete steps is over ABNORMAL_RATIO × the median, the slow steps
#: are a pattern (a DataLoader whose workers fall behind every other step, a periodic sync), not
#: outliers: the step time is then the mean, what the steps take on average, rather than the median
#: of the fast ones. Two or more slow steps that take this share of the steps' time are a pattern too
#: (the 10 steps a DataLoader script timed unprofiled: 3 of 29–31 ms among 2–7 ms ones, 76 % of the time).
PATTERN_SHARE = 1 / 3


def slow_steps_are_a_pattern(durs) -> bool:
    """Whether the steps over ``ABNORMAL_RATIO`` × their median are a pattern (see ``PATTERN_SHARE``),
    so that the step time is their mean rather than their median."""
    durs = np.asarray(durs, dtype=float)
    if len(durs) < 3:
        return False
    slow = durs[durs > ABNORMAL_RATIO * float(np.median(durs))]
    return len(slow) >= PATTERN_SHARE * len(durs) or (len(slow) >= 2 and slow.sum() >= PATTERN_SHARE * durs.sum())


@dataclass(frozen=True)
class StepSpans:
    side: str  # "gpu" | "cpu": which ProfilerStep spans were measured
    step_ids: tuple[int, ...]  # complete steps, in order
    durations_us: tuple[float, ...]  # one per step id
    median_us: float
    min_us: float
    max_us: float
    abnormal: tuple[int, ...]  # step ids longer than ABNORMAL_RATIO × median
    excluded: tuple[int, ...] = ()  # step ids left out (cut or without duration)
    note: str = ""  # why the GPU-side spans were set aside, when they were
    statistic: str = "median"  # what median_us holds: "median", or "mean" when slow steps are a pattern


def _spans(annotations: pd.DataFrame, side: str) -> pd.DataFrame:
    rows = annotations.loc[annotations["side"] == side, ["name", "ts", "dur"]]
    ids = rows["name"].astype(str).str.extract(_STEP.pattern, expand=False)
    rows = rows.assign(step=ids).dropna(subset=["step"])
    if rows.empty:
        return rows
    rows = rows.assign(step=rows["step"].astype(int), end=rows["ts"] + rows["dur"].fillna(0.0))
    merged = rows.groupby("step").agg(ts=("ts", "min"), end=("end", "max"))
    merged["dur"] = merged["end"] - merged["ts"]
    return merged.sort_index()


def step_spans(annotations: pd.DataFrame, trace_end_us: float | None = None,
               last_complete: int | None = None) -> StepSpans | None:
    """The complete ProfilerStep spans of one rank, or None when it has none.

    ``trace_end_us`` is the end of the rank's last event (same time base as ``annotations``); without
    it the last span end stands in for it. ``last_complete``: the highest step id the capture
    completed, when it says so (see :func:`last_complete_step`).
    """
    if annotations is None or annotations.empty:
        return None
    gpu, cpu = _spans(annotations, "gpu"), _spans(annotations, "cpu")
    side, spans, note = ("gpu", gpu, "") if len(gpu) else ("cpu", cpu, "")
    if len(gpu) and len(cpu):
        problem = _inconsistent(gpu, cpu)
        if problem:
            side, spans = "cpu", cpu
            note = f"GPU-side ProfilerStep spans set aside ({problem}): step times from the CPU-side spans"
    if spans.empty:
        return None
    spans = spans[np.isfinite(spans["dur"]) & (spans["dur"] > 0)]
    if last_complete is not None:
        spans = spans[spans.index <= last_complete]
    all_ids = set(_spans(annotations, side).index)
    if spans.empty:
        return None
    end = float(trace_end_us) if trace_end_us is not None else float(spans["end"].max())
    keep = np.ones(len(spans), dtype=bool)
    durs = spans["dur"].to_numpy(float)
    ends = spans["end"].to_numpy(float)
    tol = 1e-6 * max(1.0, abs(end))
    for i in np.flatnonzero(ends >= end - tol):
        if last_complete is not None and spans.index[i] <= last_complete:
            continue  # the capture completed this step: short on a busy machine, not cut
        others = np.delete(durs, i)
        if len(others) and durs[i] < CUT_RATIO * float(np.median(others)):
            keep[i] = False
    spans = spans[keep]
    durs = spans["dur"].to_numpy(float)
    med = float(np.median(durs))
    ids = tuple(int(s) for s in spans.index)
    abnormal = tuple(i for i, d in zip(ids, durs) if d > ABNORMAL_RATIO * med)
    statistic = "median"
    if slow_steps_are_a_pattern(durs):
        med, abnormal, statistic = float(np.mean(durs)), (), "mean"
    return StepSpans(side, ids, tuple(float(d) for d in durs), med, float(durs.min()), float(durs.max()),
                     abnormal, tuple(sorted(all_ids - set(ids))), note, statistic)


def _inconsistent(gpu: pd.DataFrame, cpu: pd.DataFrame) -> str:
    """Why the GPU-side step spans cannot stand for the steps ("" when they can); see the module doc."""
    missing = sorted(set(cpu.index) - set(gpu.index))
    if missing:
        return f"no GPU span for step{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
    shared = gpu.index.intersection(cpu.index)
    early = [int(i) for i in shared if gpu.at[i, "ts"] < cpu.at[i, "ts"] - 1.0]
    if early:
        return f"step {early[0]} starts on the GPU before the host began it"
    starts, ends, durs = (gpu[c].to_numpy(float) for c in ("ts", "end", "dur"))
    for i in range(len(gpu) - 1):
        overlap = min(ends[i], ends[i + 1]) - max(starts[i], starts[i + 1])
        if overlap > 0.5 * min(durs[i], durs[i + 1]):
            return f"steps {gpu.index[i]} and {gpu.index[i + 1]} overlap on the GPU"
    return ""


def last_complete_step(metadata: dict) -> int | None:
    """The last step bwdiag's own capture completed (from the trace's ``bwdiag`` metadata), or None."""
    meta = (metadata or {}).get("bwdiag")
    if not isinstance(meta, dict):
        return None
    first = (meta.get("schedule") or {}).get("first_recorded_step")
    done = meta.get("steps_captured")
    if isinstance(first, int) and isinstance(done, int) and not isinstance(done, bool):
        return first + done - 1
    return None


def trace_end_us(tables) -> float | None:
    """The end of the last timed event in a rank's tables (kernels, ops, runtime, annotations)."""
    ends = []
    for frame in (tables.gpu, tables.ops, tables.runtime, tables.annotations):
        if frame is not None and len(frame) and "ts" in frame and "dur" in frame:
            e = (frame["ts"] + frame["dur"].fillna(0.0)).max()
            if np.isfinite(e):
                ends.append(float(e))
    return max(ends) if ends else None


def _settling(durations: list[float]) -> int:
    """How many leading steps to leave out: while a step is over ``ABNORMAL_RATIO`` × the median of
    the steps after it (at most half the steps). The steps right after the profiler stops pay for it
    stopping — caches, allocator, a compiled graph's guards re-checked: a compiled decode loop timed
    1682, 1015, 674, 478, … 374 µs after its window against its own 377 µs median — which is not a
    pattern of the run (a DataLoader's slow steps recur), but a settling."""
    k = 0
    while k < len(durations) // 2 and durations[k] > ABNORMAL_RATIO * float(np.median(durations[k + 1:])):
        k += 1
    return k


#: How many of the last timed steps before the capture window make the unprofiled step time.
UNPROFILED_STEPS = 3


@dataclass(frozen=True)
class UnprofiledSteps:
    """The run's own clock on steps before the profiler started (see ``bwdiag.capture.clock``)."""

    median_us: float  # the median of the steps, or their mean when ``statistic`` says so
    step_ids: tuple[int, ...]
    clock: str  # "device" (CUDA events) | "host" (perf_counter)
    statistic: str = "median"  # "mean" when slow steps are a pattern (as for the recorded steps)
    durations_us: tuple[float, ...] = ()  # each of ``step_ids``' time


def unprofiled_step(metadata: dict) -> UnprofiledSteps | None:
    """The step with no profiler running, from a ``bwdiag`` capture's own clock: the median of the
    steps it timed after its window (``rank<k>.clock.json``, read into ``metadata["bwdiag_clock"]``:
    the steady state), else of the last :data:`UNPROFILED_STEPS` it timed before the window; the
    device clock when it has one. None when there are none (another tool's trace, ``--wait`` below 2
    and no clock file, or a file written before bwdiag timed them)."""
    clock = (metadata or {}).get("bwdiag_clock")
    after = clock.get("after_window") if isinstance(clock, dict) else None
    found = _median_of(after, None, settle=True) if isinstance(after, dict) else None
    if found is not None:
        return found
    meta = (metadata or {}).get("bwdiag")
    timed = meta.get("unprofiled_steps") if isinstance(meta, dict) else None
    return _median_of(timed, UNPROFILED_STEPS) if isinstance(timed, dict) else None


def _median_of(timed: dict, last: int | None, settle: bool = False) -> UnprofiledSteps | None:
    """The median of ``timed``'s steps (its last ``last`` ones), device clock first. ``settle``: the
    steps right after the capture window are left out while they are slow (:func:`_settling`)."""
    if not isinstance(timed.get("ids"), list):
        return None
    ids = timed["ids"] if last is None else timed["ids"][-last:]
    for clock in ("device", "host"):
        values = timed.get(f"{clock}_us")
        if isinstance(values, list) and len(values) == len(timed["ids"]) and ids:
            try:
                chosen = [float(v) for v in values[-len(ids):]]
                chosen_ids = tuple(int(i) for i in ids)
            except (TypeError, ValueError):
                return None
            if all(np.isfinite(v) and v > 0 for v in chosen):
                if settle:
                    k = _settling(chosen)
                    chosen, chosen_ids = chosen[k:], chosen_ids[k:]
                med = float(np.median(chosen))
                # A DataLoader falling behind every other step: the recorded steps' rule (a pattern
                # of slow steps is the step, so the mean), applied to the steps timed unprofiled.
                if slow_steps_are_a_pattern(chosen):
                    return UnprofiledSteps(float(np.mean(chosen)), chosen_ids, clock, "mean", tuple(chosen))
                return UnprofiledSteps(med, chosen_ids, clock, "median", tuple(chosen))
    return None


#: A recorded window whose median step is this many times its fastest one slowed down as it ran …
WINDOW_SLOWDOWN = 1.4
#: … when the steps run after it without the profiler kept within this ratio (median ÷ 10th percentile).
PLAIN_STEADY = 1.2


def slowed_window(recorded: tuple[float, ...], plain: tuple[float, ...]) -> str | None:
    """A warning when the recorded steps slowed down while the profiler ran and the steps timed
    without it did not, else None. Seen on the 2-core dev VM (7 Dec 2026): the transformer's window
    ran 44, 61, 64, 66 ms a step where the 30 steps after it ran 25–30 ms, its memory-bound ops 5–7×
    slower than in a capture minutes later (28–33 ms): a host that slows while recording, not the
    profiler's own cost, which is the same every step. Op times, achieved bandwidths and every saving
    priced from them then read slower than the script runs. ``recorded``/``plain``: the complete
    recorded steps' and the unprofiled steps' durations (µs)."""
    if len(recorded) < 3 or len(plain) < 5:
        return None
    fastest, median = min(recorded), float(np.median(recorded))
    plain_median, plain_low = float(np.median(plain)), float(np.percentile(plain, 10))
    if fastest <= 0 or plain_low <= 0 or median < WINDOW_SLOWDOWN * fastest or plain_median >= PLAIN_STEADY * plain_low:
        return None
    steps = ", ".join(f"{us / 1e3:.1f}" for us in recorded)
    return (f"the recorded window slowed down as it ran: its steps took {steps} ms (the median {median / fastest:.2f}× "
            f"the fastest) while the {len(plain)} steps timed without the profiler took "
            f"{plain_low / 1e3:.1f}–{float(np.percentile(plain, 90)) / 1e3:.1f} ms (10th–90th percentile): the host "
            f"slowed while recording (other work, memory pressure, CPU clocks), so op times, achieved bandwidths and "
            f"the savings priced from them read slower than the script runs — record again before acting on them")
