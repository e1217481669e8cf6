"""The verdict at the top of the page: time by bound, what dominates, the top findings and the
step time projected once they are fixed."""

from __future__ import annotations

from typing import Any, Sequence

from bwdiag.units import fmt_time
from bwdiag.diagnose.model import TIME_KEYS, Diagnosis, Finding
from bwdiag.report.values import num

#: Legend labels for ``time.by_bound`` keys (communication there is the *exposed* part).
TIME_LABELS = {
    "compute": "Compute",
    "memory": "Memory",
    "latency": "Latency",
    "communication": "Exposed communication",
    "idle": "Idle",
    "unknown": "Unknown",
}

#: One sentence per dominant bound: what it means for the step.
HEADLINES = {
    "compute": "Compute-bound: most time is in kernels limited by the FLOP/s ceiling",
    "memory": "Memory-bound: most time is in kernels limited by memory bandwidth",
    "latency": "Latency-bound: most time is in kernels too small to fill the device",
    "communication": "Communication-bound: most time is communication not hidden behind compute",
    "idle": "Device idle: most of the time the device waits for the host, input or a sync",
    "unknown": "Mostly unclassified: most time is in kernels bwdiag has no cost estimate for",
}
#: On a CPU-only trace the ops run on the host itself: the same classes, in its words.
CPU_HEADLINES = {
    "compute": "Compute-bound: most time is in ops limited by the CPU's FLOP/s ceiling",
    "memory": "Memory-bound: most time is in ops limited by memory bandwidth",
    "latency": "Latency-bound: most time is in ops too small for their work to outweigh their dispatch",
    "idle": "Between ops: most of the time the main thread runs no op — Python, dispatch, input or waits",
    "unknown": "Mostly unclassified: most time is in ops bwdiag has no cost estimate for",
}

#: Findings named in the verdict and the terminal summary (the rest are counted and listed below).
VERDICT_FINDINGS = 3


def _unprofiled(d: Diagnosis) -> dict:
    """The step with no profiler running (the capture's own clock before its window), and how much
    slower the recorded steps ran: the figure to hold the step time and the savings against."""
    plain = d.time.unprofiled_step_us
    if not plain:
        return {"unprofiled_step_us": None}
    return {"unprofiled_step_us": plain, "unprofiled_step_ids": id_ranges(d.time.unprofiled_step_ids),
            "unprofiled_clock": d.time.unprofiled_clock, "unprofiled_statistic": d.time.unprofiled_statistic,
            "profiler_slowdown": d.time.step_us / plain if d.time.step_us else None}


def build_verdict(d: Diagnosis) -> dict:
    """Time by bound, the dominant bound and its headline, top findings and the projection."""
    total = num(d.time.total_us)
    bars = []
    for key in TIME_KEYS:
        us = num(d.time.by_bound.get(key, 0.0))
        bars.append(
            {"key": key, "label": TIME_LABELS[key], "us": us,
             "pct": 100.0 * us / total if total > 0 else 0.0}
        )
    dominant = max(bars, key=lambda b: b["us"]) if total > 0 else None
    findings = ranked_findings(d)
    projected = projected_time(d)
    step_us = d.time.step_us
    verdict: dict[str, Any] = {
        "total_us": total,
        "steps": d.time.steps,
        "step_us": step_us,
        "step_min_us": d.time.step_min_us,
        "step_max_us": d.time.step_max_us,
        "step_source": d.time.step_source,
        "step_statistic": d.time.step_statistic,
        # several ranks: the step is the median over ranks of each rank's median (or mean) step
        "step_ranks": len(set(d.source.ranks)),
        "step_ids": id_ranges(d.time.step_ids),
        "steps_excluded": id_ranges(d.time.steps_excluded),
        **_unprofiled(d),
        "abnormal_steps": [
            {"step": i, "ratio": (dur / step_us) if step_us else None}
            for i, dur in _abnormal(d)
        ],
        "bars": bars,
        "dominant": dominant["key"] if dominant else None,
        "dominant_pct": dominant["pct"] if dominant else None,
        **_headline(d, bars, dominant),
        "top_findings": [
            {"kind": f.kind, "title": f.title, "saving_us": f.saving_us,
             "saving_pct": f.saving_pct, **saving_shown(f, unprofiled_scale(d))}
            for f in findings[:VERDICT_FINDINGS]
        ],
        "more_findings": max(0, len(findings) - VERDICT_FINDINGS),
        "projected_us": projected,
        "projected_model": d.whatif.model if projected is not None else None,
        "projected_step_us": None,
        "saving_pct": None,
        "speedup": None,
    }
    # The projection starts from the graph's baseline window where the profiler's cost was taken out
    # of the host side first (WhatIf.graph_base_us), else from the analysed window.
    base = total
    if projected is not None and d.whatif.model == "graph" and d.whatif.graph_base_us:
        base = float(d.whatif.graph_base_us)
    from_baseline = total > 0 and base < total * (1.0 - BASELINE_TOLERANCE)  # not a re-timing's rounding
    base = base if from_baseline else total
    verdict["projected_base_step_us"] = step_us * base / total if step_us and from_baseline else None
    verdict["projected_from"] = "profiler_baseline" if from_baseline else None
    if projected is not None and total > 0:
        verdict["saving_pct"] = 100.0 * (base - projected) / base
        verdict["speedup"] = base / projected if projected > 0 else None
        if step_us:
            verdict["projected_step_us"] = step_us * projected / total
        unprofiled = d.time.unprofiled_step_us
        if not from_baseline and step_us and unprofiled and d.source.trace_kind == "cpu":
            # On a CPU trace the profiler slows the ops as well as the host between them: the
            # recorded step's shares carry over to the script run without the profiler, its µs do not.
            verdict["projected_base_step_us"] = float(unprofiled)
            verdict["projected_step_us"] = float(unprofiled) * projected / total
            verdict["projected_from"] = "shares"
    return verdict


#: A graph baseline window within this relative distance of the analysed window is that window (the
#: re-timing's rounding), not a baseline with the profiler's cost taken out.
BASELINE_TOLERANCE = 1e-6

#: A kernel group under this share of its roof is not limited by that roof: per-op overhead
#: (dispatch, launch, shapes too small to fill the device) is, whatever class it is placed in.
FAR_BELOW_ROOF_PCT = 5.0
#: Two classes closer than this (percentage points of the window) are a tie even with steady steps.
MIN_NOISE_POINTS = 2.0


def step_noise_pct(d: Diagnosis) -> float | None:
    """Run-to-run noise of the recorded steps: half their range over the median, in percent
    (None with fewer than two complete steps)."""
    t = d.time
    if not t.step_us or (t.steps or 0) < 2 or t.step_min_us is None or t.step_max_us is None:
        return None
    return 100.0 * (t.step_max_us - t.step_min_us) / (2.0 * t.step_us)


def _headline(d: Diagnosis, bars: list[dict], dominant: dict | None) -> dict:
    """The dominant class's sentence, qualified when it does not tell the whole story: the runner-up
    within the steps' run-to-run noise (the verdict would flip between runs), or most of the
    dominant time far below its roof (overhead, not the roof, sets the time).

    ``headline_base`` is the sentence, ``headline_notes`` the qualifiers, ``headline`` both joined.
    """
    if dominant is None:
        return {"headline": "No time in the analysed window", "headline_base": "No time in the analysed window",
                "headline_notes": []}
    cpu = d.source.trace_kind == "cpu"
    base = (CPU_HEADLINES if cpu else HEADLINES).get(dominant["key"], HEADLINES[dominant["key"]])
    notes: list[str] = []
    ranked = sorted(bars, key=lambda b: -b["us"])
    if len(ranked) > 1 and ranked[1]["us"] > 0:
        second = ranked[1]
        noise = step_noise_pct(d)
        # a share moves with the step: the steps' spread, in points of this share, is its noise
        points = max(MIN_NOISE_POINTS, (noise or 0.0) * dominant["pct"] / 100.0)
        if dominant["pct"] - second["pct"] < points:
            why = f"steps vary ±{noise:.0f}%" if noise else "too close to call"
            notes.append(f"but {second['label'].lower()} ({second['pct']:.1f}%) is within the run-to-run "
                         f"noise of it ({dominant['pct']:.1f}%; {why}): the two are a tie")
    if dominant["key"] in ("compute", "memory"):
        placed = [k for k in d.kernels if k.bound == dominant["key"]]
        total = sum(num(k.total_us) for k in placed)
        far = sum(num(k.total_us) for k in placed
                  if k.pct_of_ceiling is not None and k.pct_of_ceiling < FAR_BELOW_ROOF_PCT)
        if total > 0 and far / total >= 0.5:
            roof = "its roof" if d.device.spec_source != "assumed" else "its (assumed) roof"
            notes.append(f"yet {100.0 * far / total:.0f}% of that time runs at under "
                         f"{FAR_BELOW_ROOF_PCT:.0f}% of {roof}: per-op overhead (dispatch, launches, small "
                         "shapes) sets the time, not the roof")
    return {"headline": " — ".join([base, *notes]), "headline_base": base, "headline_notes": notes}


def _abnormal(d: Diagnosis) -> list[tuple[int, float]]:
    """(step id, duration µs) of the abnormal steps (the longest step's when one is not known)."""
    durs = dict(zip(d.time.step_ids, d.time.step_durations_us))
    return [(i, durs.get(i, d.time.step_max_us or 0.0)) for i in d.time.abnormal_steps]


def id_ranges(ids) -> str | None:
    """ProfilerStep numbers as ranges: ``(3, 4, 5, 7)`` → ``"#3–5, #7"``; ``None`` when empty."""
    ids = sorted({int(i) for i in ids})
    if not ids:
        return None
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"#{a}" if a == b else f"#{a}–{b}" for a, b in runs)


def ranked_findings(d: Diagnosis) -> list[Finding]:
    """The findings in the order every view lists them: largest shown saving first
    (:attr:`~bwdiag.diagnose.model.Finding.saving_us`, as ``diagnose.findings.ranked`` stores them;
    sorted again, stably, so a hand-made or older diagnosis reads the same way)."""
    return sorted(d.findings, key=lambda f: -num(f.saving_us))


def saving_shown(f: Finding, scale: float = 1.0) -> dict:
    """The saving a reader compares with "Step" and "Projected" (the dependency graph's where the
    finding has one: :attr:`~bwdiag.diagnose.model.Finding.saving_us`): per median step when the
    trace has complete steps, else the window total — with its unit, so no figure is read in the
    wrong one — and which model it comes from (``saving_model``: ``graph`` or ``rule``).
    ``scale``: :func:`unprofiled_scale` (a CPU trace's per-step µs in the unprofiled step's terms)."""
    per_step = f.saving_per_step_us
    if per_step is not None:
        return {"saving_shown_us": per_step * scale, "saving_unit": "per step", "saving_model": f.saving_model}
    return {"saving_shown_us": f.saving_us, "saving_unit": "over the window", "saving_model": f.saving_model}


def unprofiled_scale(d: Diagnosis) -> float:
    """Unprofiled step ÷ recorded step on a CPU trace whose capture timed its steps unprofiled (the
    views apply the recorded shares to the unprofiled step: per-step savings too, so that none reads
    larger than the step the script runs), else 1. GPU traces' graph savings are already re-timed from
    the unprofiled baseline (``WhatIf.graph_base_us``)."""
    t = d.time
    if d.source.trace_kind == "cpu" and t.unprofiled_step_us and t.step_us:
        return float(t.unprofiled_step_us / t.step_us)
    return 1.0


#: Rule and graph figures further apart than this share (of the larger) are both said (:func:`models_note`).
MODELS_DIFFER = 0.10


def models_note(f: Finding, host_wait_share: float | None = None) -> str | None:
    """One plain line giving both savings when the rule's own estimate and the dependency graph's
    differ by more than ``MODELS_DIFFER`` (None otherwise, or without a graph figure), in the unit
    the finding's saving is shown in, with a reason where the finding's kind and the diagnosis
    say one: ``host_wait_share`` is the share of the window the GPU idled waiting for the host."""
    if f.graph_saving_us is None:
        return None
    per_step = f.est_saving_per_step_us is not None and f.graph_saving_per_step_us is not None
    rule = f.est_saving_per_step_us if per_step else f.est_saving_us
    graph = f.graph_saving_per_step_us if per_step else f.graph_saving_us
    big = max(abs(rule), abs(graph))
    if big <= 0 or abs(rule - graph) <= MODELS_DIFFER * big:
        return None
    unit = "per step" if per_step else "over the window"
    line = (f"The rule's own estimate is {fmt_time(rule)} {unit}; re-timed on the dependency graph "
            f"(host order, launches, streams, syncs) {fmt_time(graph)}")
    why = _why_models_differ(f, rule, graph, host_wait_share)
    return line + (f", {why}." if why else ".")


#: What the findings a fix also resolves must add to its own saving (a share of it) to be said as a figure.
SAME_FIX_ADDS = 0.01


def same_fix_note(f: Finding, titles: Sequence[str], scale: float = 1.0) -> str | None:
    """One line naming the other findings this finding's fix also resolves (``Finding.same_fix``) and
    what the fix saves with them (``Finding.fix_saving_us``), in the unit its own saving is shown in;
    ``titles``: the listed findings in order, to give each one's number. None for most findings."""
    if not f.same_fix or f.fix_saving_us is None:
        return None
    named = same_fix_refs(f, titles)
    per_step = f.fix_saving_per_step_us is not None and f.saving_per_step_us is not None
    saving = f.fix_saving_per_step_us * scale if per_step else f.fix_saving_us
    unit = "per step" if per_step else "over the window"
    pct = f" ({f.fix_saving_pct:.1f}%)" if f.fix_saving_pct is not None else ""
    how = "re-timed on the dependency graph" if f.graph_saving_us is not None else "without counting a kernel twice"
    if f.fix_saving_us <= num(f.saving_us) * (1.0 + SAME_FIX_ADDS) + 1e-6:  # the others' time hides behind this one's
        return (f"The same fix also resolves {named}; together they save no more than this finding alone ({how}).")
    return (f"The same fix also resolves {named}: applied, it saves {fmt_time(saving)} {unit}{pct} with "
            f"{'it' if len(f.same_fix) == 1 else 'them'} ({how}); the list counts each finding once.")


def same_fix_refs(f: Finding, titles: Sequence[str]) -> str:
    """The findings ``f``'s fix also resolves, by their number in ``titles`` (the listed findings in
    order; a title not listed is quoted)."""
    pos = {t: i for i, t in enumerate(titles, 1)}
    return ", ".join(f"#{pos[t]}" if t in pos else f"\"{t}\"" for t in f.same_fix)


#: Kinds whose saving is host or idle time rather than kernel time (as ``diff.compare.IDLE_KINDS``).
_HOST_SIDE = frozenset({"host_bound", "data_loader", "sync", "launch_overhead"})


def _why_models_differ(f: Finding, rule: float, graph: float, host_wait_share: float | None) -> str | None:
    """Why the graph's figure differs, from what the finding's kind and the diagnosis say: "because"
    where it follows from how the graph applies the fix, "likely because" where it is a reading of
    the diagnosis' idle figures; None where neither says."""
    host_side = str(f.kind) in _HOST_SIDE
    if graph > rule:
        return "because the work that waited on it starts earlier too" if host_side else None
    if host_side:
        return "because only part of that host time delays the device: the rest overlaps device work"
    if host_wait_share is not None and host_wait_share >= 0.10:
        return (f"likely because the GPU waits for the host ({100 * host_wait_share:.0f}% of the window): "
                "shorter kernels mostly lengthen that wait")
    return ("because the time it removes overlaps other work the step still waits for (another stream, "
            "the host or other ranks)")


def projected_time(d: Diagnosis) -> float | None:
    """The window's time once the findings are fixed: the what-if of the findings
    (:mod:`bwdiag.diagnose.findings.whatif`, which knows how findings overlap), re-timed on the
    dependency graph where it was (:attr:`~bwdiag.diagnose.model.WhatIf.shown_projected_us`);
    ``None`` without one."""
    given = d.shown_projected_us
    return float(given) if given is not None and d.findings else None
