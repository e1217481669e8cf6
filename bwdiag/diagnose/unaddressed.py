"""Time no finding addresses: an explicit statement for every large class of lost time.

A reader takes the findings for the whole story. So each time class (compute, memory, latency,
communication, idle, unknown) that holds at least ``MIN_SHARE_PCT`` of the window and that the
findings leave mostly unclaimed (the what-if's per-class claims, :mod:`.findings.whatif`) gets one
sentence saying what that time is and why bwdiag proposes nothing for it — in the terminal, the report
and ``diagnosis.json`` (``unaddressed``). A window with no findings at all is measured the same way.
"""

from __future__ import annotations

from bwdiag.diagnose.model import TIME_KEYS, Diagnosis, UnaddressedTime
from bwdiag.units import fmt_time

#: A class below this share of the window is not worth a statement.
MIN_SHARE_PCT = 10.0
#: A class whose findings claim at least this share of it is addressed.
ADDRESSED_SHARE = 0.5
#: Kernels under this share of their ceiling (time-weighted) are overhead-bound, not roof-bound.
FAR_BELOW_PCT = 5.0


def unaddressed(d: Diagnosis, unclaimed_us: dict[str, float] | None) -> tuple[UnaddressedTime, ...]:
    """The statements for ``d``; ``unclaimed_us``: per class, what the findings left (the what-if's
    ``left``), or None when there are no findings (everything is unclaimed)."""
    total = d.time.total_us
    if total <= 0:
        return ()
    out = []
    for key in TIME_KEYS:
        held = float(d.time.by_bound.get(key, 0.0))
        left = held if unclaimed_us is None else float(unclaimed_us.get(key, held))
        if 100.0 * held / total < MIN_SHARE_PCT or left < (1.0 - ADDRESSED_SHARE) * held or left <= 0:
            continue
        out.append(UnaddressedTime(key, left, 100.0 * left / total, _why(d, key, left)))
    return tuple(sorted(out, key=lambda u: -u.us))  # the largest first, as the findings


def _why(d: Diagnosis, key: str, left_us: float) -> str:
    cpu = d.source.trace_kind == "cpu"
    if key == "idle":
        if cpu:
            return ("the main thread does no op's work: sleeps, I/O, waiting on other threads or processes, "
                    "or Python the profiler records no op for; py-spy or cProfile shows which")
        t = d.time
        if t.unprofiled_step_us and t.step_us and t.total_us > 0:
            scale = t.step_us / t.total_us
            busy = (t.total_us - t.by_bound.get("idle", 0.0)) * scale
            real = max(0.0, t.unprofiled_step_us - busy)
            if real < 0.5 * left_us * scale:
                return (f"mostly the profiler's own cost: without it the step takes {fmt_time(t.unprofiled_step_us)} "
                        f"and the device is busy {fmt_time(busy)} of it, so at most {fmt_time(real)} per step of "
                        "this idle is the script's")
        idle = d.idle
        if idle is not None and idle.other_us >= 0.5 * left_us:
            return (f"the GPU waits {fmt_time(idle.other_us)} with its next work already launched: on another "
                    "stream's event or on other ranks (a pipeline bubble, a collective waiting for a slower "
                    "peer); one rank's trace cannot show what it waits for: analyse the ranks together")
        if idle is not None and idle.host_wait_us >= 0.5 * left_us:
            return ("the GPU waits for the host, in gaps no sync, data loader or op's own host work explains: "
                    "profile the host side (py-spy record --native) to see what runs there")
        return "the GPU idles between kernels for reasons the trace does not record"
    if key == "communication":
        return ("exposed collectives that no overlap or volume fix reaches (a last bucket with nothing left to "
                "overlap, a collective waiting for a slower rank)")
    if key == "unknown":
        return (f"kernels with no cost estimate ({d.coverage.estimated_pct:.0f}% of compute-kernel time has "
                "one): their bound is unknown, so no roofline fix is proposed for them")
    if key == "latency":
        return "kernels too small to fill the device that no batching or graph-capture finding reaches"
    bound = "FLOP/s" if key == "compute" else "memory bandwidth"
    placed = [k for k in d.kernels if k.bound == key and k.pct_of_ceiling is not None and k.total_us]
    time = sum(k.total_us for k in placed)
    pct = sum(k.pct_of_ceiling * k.total_us for k in placed) / time if time > 0 else None
    if pct is not None and pct >= 50.0:
        return (f"{key}-bound kernels at {pct:.0f}% of their {bound} ceiling (time-weighted): only doing less "
                "work (smaller shapes, lower precision, fewer passes) shortens them")
    if pct is not None and pct < FAR_BELOW_PCT:
        return (f"{key}-bound kernels at {pct:.1f}% of their {bound} ceiling (time-weighted): per-op overhead "
                "(dispatch, allocation, tiny shapes), not the roof, sets their time; larger batches or fewer, "
                "bigger ops shorten them")
    at = f" at {pct:.0f}% of their {bound} ceiling (time-weighted)" if pct is not None else ""
    return (f"{key}-bound kernels{at} that no finding has a fix for: the kernel table shows which shapes "
            "and ops hold the time")
