"""Where a rank's wall time goes: time by bound, exposed communication, idle.

Every instant of the analysed window is given to one class, so the classes add up to the window:
the highest-priority bound among the activities running then (compute > memory > latency > unknown >
communication), or idle when nothing runs. Communication therefore only collects time when nothing
else runs — which is exactly the exposed communication.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bwdiag.diagnose.model import Bound

PRIORITY = (Bound.COMPUTE, Bound.MEMORY, Bound.LATENCY, Bound.UNKNOWN, Bound.COMMUNICATION)


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by the union of intervals [starts[i], ends[i])."""
    run_start, run_end = merged_runs(starts, ends)
    return float(np.sum(run_end - run_start))


@dataclass(frozen=True)
class RankTime:
    window_us: float
    by_bound: dict[str, float]
    busy_us: float
    communication_us: float  # union of collective time
    exposed_communication_us: float
    overlap_pct: float | None


def rank_time(activities: pd.DataFrame, bounds: np.ndarray) -> RankTime:
    """Attribute a rank's window to bounds. ``bounds`` holds a Bound value per activity row."""
    if activities.empty:
        return RankTime(0.0, {k: 0.0 for k in ("compute", "memory", "latency", "communication", "idle", "unknown")},
                        0.0, 0.0, 0.0, None)
    ts = activities["ts"].to_numpy(dtype=float)
    end = activities["end"].to_numpy(dtype=float)
    window = float(end.max() - ts.min())
    by_bound: dict[str, float] = {}
    covered = 0.0
    chosen = np.zeros(len(ts), dtype=bool)
    for bound in PRIORITY:
        chosen |= bounds == bound.value
        now = union_length(ts[chosen], end[chosen])
        by_bound[bound.value] = max(0.0, now - covered)
        covered = now
    by_bound["idle"] = max(0.0, window - covered)

    is_comm = bounds == Bound.COMMUNICATION.value
    comm = union_length(ts[is_comm], end[is_comm])
    compute_kernels = ~is_comm & (activities["kind"].to_numpy() != "memcpy") & (activities["kind"].to_numpy() != "memset")
    other = union_length(ts[compute_kernels], end[compute_kernels])
    both = union_length(ts[compute_kernels | is_comm], end[compute_kernels | is_comm])
    exposed = max(0.0, both - other)
    overlap = 100.0 * (comm - exposed) / comm if comm > 0 else None
    order = ("compute", "memory", "latency", "communication", "idle", "unknown")
    return RankTime(window, {k: by_bound[k] for k in order}, covered, comm, exposed, overlap)


def merged_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint runs (run_starts, run_ends)."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new_run = np.empty(len(s), dtype=bool)
    new_run[0] = True
    new_run[1:] = s[1:] > reach[:-1]
    run_id = np.cumsum(new_run) - 1
    return s[new_run], pd.Series(reach).groupby(run_id).max().to_numpy()


def covered_within(starts: np.ndarray, ends: np.ndarray, runs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """For each interval, how much of it the disjoint ``runs`` cover."""
    rs, re_ = runs
    if len(rs) == 0 or len(starts) == 0:
        return np.zeros(len(starts))
    # Covered length up to time t = sum of full runs ending before t + partial run containing t.
    cum = np.concatenate([[0.0], np.cumsum(re_ - rs)])

    def covered_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(rs, t, side="right")  # runs starting at or before t
        partial = np.where(k > 0, np.clip(t - rs[np.maximum(k - 1, 0)], 0, None)
                           - np.clip(t - re_[np.maximum(k - 1, 0)], 0, None), 0.0)
        return cum[np.maximum(k - 1, 0)] * (k > 0) + partial

    return covered_until(ends) - covered_until(starts)
