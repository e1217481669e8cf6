"""What ``--annotated-trace`` writes back into a trace, as plain data per rank.

For every activity row bwdiag priced (kernels, memcpys, memsets; on a CPU-only trace the leaf ops),
the ``args.bwdiag`` object of its raw event: bound, the ceiling and % of ceiling of its kernel group
(the figures of that group's row in ``diagnosis.json``'s ``kernels``), its own FLOPs and bytes, the
group's label, and the ids of the findings that act on it. Plus a counter of time by bound per bin
of the window (the same attribution as ``time.by_bound``: every instant to the highest-priority
bound running then, idle when nothing runs) and, per finding, the span of what it acts on.

Finding ids are ``F1``, ``F2`` … in the order of ``diagnosis.json``'s ``findings`` (the report's
Findings list, ``#finding-N``). Which activities a finding acts on is what its rule claimed
(``RuleResult.acts``): the rules are pure, so they are run again here, only when an annotated trace
is asked for, rather than kept on the default path.

:mod:`bwdiag.report.annotated_trace` pairs these with the raw events (:mod:`bwdiag.trace.keys`) and
writes the file. No DataFrame leaves this module.
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bwdiag.diagnose.model import Diagnosis
from bwdiag.diagnose.timeline import PRIORITY, covered_within, merged_runs
from bwdiag.trace.events import _MISSING
from bwdiag.trace.keys import gpu_key, op_key

#: Bins of the time-by-bound counter over each rank's window.
COUNTER_BINS = 100
#: Counter series, in the order the timeline gives time away (idle last).
COUNTER_KEYS = tuple(b.value for b in PRIORITY) + ("idle",)


@dataclass(frozen=True)
class FindingSpan:
    """One finding as a slice on one rank: ``start_us``/``end_us`` relative to the trace's t0."""

    id: str
    kind: str
    title: str
    start_us: float
    end_us: float
    activities: int  # activity rows it acts on in this rank (0: it acts on idle time or the window)
    args: dict[str, Any]


@dataclass(frozen=True)
class RankAnnotations:
    """Everything one rank's annotated file adds; times are µs relative to ``t0_us``."""

    path: Path
    rank: int
    t0_us: float
    is_gpu: bool
    #: event key (:mod:`bwdiag.trace.keys`) -> the ``args.bwdiag`` objects of the rows with that key, in order
    rows: dict[tuple, list[dict[str, Any]]]
    #: (bin start, {bound: % of the bin}) and the window's end
    counter: tuple[tuple[float, dict[str, float]], ...]
    window: tuple[float, float]
    findings: tuple[FindingSpan, ...]


def finding_ids(diagnosis: Diagnosis) -> list[str]:
    """``F1`` … in the order of the diagnosis' findings (the report's numbering)."""
    return [f"F{i + 1}" for i in range(len(diagnosis.findings))]


def annotations(diagnosis: Diagnosis, analyses: Sequence, results: Sequence | None = None) -> list[RankAnnotations]:
    """The annotations of every analysed rank (``analyses``: ``build.RankAnalysis`` per rank;
    ``results``: the findings rules' ``RuleResult`` s when the caller kept them, else the rules run again)."""
    acts_of = _finding_acts(diagnosis, analyses, results)
    ids = finding_ids(diagnosis)
    out = []
    for pos, a in enumerate(analyses):
        on_rank = {i: rows.get(pos, np.zeros(0, dtype=int)) for i, (rows, _) in acts_of.items()}
        out.append(_rank(diagnosis, a, ids, on_rank, {i: whole for i, (_, whole) in acts_of.items()}))
    return out


def _finding_acts(diagnosis: Diagnosis, analyses: Sequence,
                  results: Sequence | None) -> dict[int, tuple[dict[int, np.ndarray], bool]]:
    """finding position -> (rank position -> activity rows it acts on, whether it acts on no rows at all).

    Results are paired with the diagnosis' findings by kind, title and saving, so a finding the
    diagnosis does not list (or lists in another order) cannot take another's activities."""
    if results is None:
        from bwdiag.diagnose.findings import RuleContext, run_rules

        bare = dataclasses.replace(diagnosis, findings=(), whatif=None)
        results = run_rules(RuleContext(bare, analyses))
    positions: dict[tuple, list[int]] = {}
    for i, f in enumerate(diagnosis.findings):
        positions.setdefault((f.kind, f.title, f.est_saving_us), []).append(i)
    out: dict[int, tuple[dict[int, np.ndarray], bool]] = {}
    for r in results:
        free = positions.get((r.finding.kind, r.finding.title, r.finding.est_saving_us))
        if not free:  # a result the diagnosis does not list
            continue
        rows = {int(p): np.unique(np.asarray(v, dtype=int)) for p, v in r.acts.items() if len(v)}
        out[free.pop(0)] = (rows, not rows)
    return out


def _rank(diagnosis: Diagnosis, a, ids: list[str], acts: dict[int, np.ndarray],
          no_rows: dict[int, bool]) -> RankAnnotations:
    t = a.trace
    frame = a.activities
    n = len(frame)
    keys = _row_keys(a)
    by_row: dict[int, list[str]] = {}
    for i, rows in sorted(acts.items()):
        for r in rows.tolist():
            by_row.setdefault(r, []).append(ids[i])
    groups = a.groups
    g_bound = groups["bound"].to_dict() if n else {}
    g_ceiling = groups["ceiling"].to_dict() if n and "ceiling" in groups else {}
    g_pct = groups["pct_of_ceiling"].to_dict() if n and "pct_of_ceiling" in groups else {}
    g_count = groups["count"].to_dict() if n else {}
    g_total = groups["total_us"].to_dict() if n else {}
    labels = {g: _label(row) for g, row in groups.iterrows()} if n else {}
    rows: dict[tuple, list[dict[str, Any]]] = {}
    gid = frame["group"].to_numpy() if n else np.zeros(0, dtype=int)
    cols = {c: _plain_column(frame[c]) for c in ("bound", "category", "dtype", "flops", "bytes")} if n else {}
    g_ceiling, g_pct, g_count, g_total, g_bound = (
        {g: _plain(v) for g, v in d.items()} for d in (g_ceiling, g_pct, g_count, g_total, g_bound))
    for i in range(n):
        key = keys[i]
        if key is None:
            continue
        g = int(gid[i])
        entry = {
            "bound": cols["bound"][i],
            "ceiling": g_ceiling.get(g),
            "pct_of_ceiling": g_pct.get(g),
            "flops": cols["flops"][i],
            "bytes": cols["bytes"][i],
            "category": cols["category"][i],
            "dtype": cols["dtype"][i],
            "group": labels.get(g),
            "group_count": g_count.get(g),
            "group_total_us": g_total.get(g),
            "findings": by_row.get(i, []),
        }
        if entry["bound"] is None:
            entry["bound"] = g_bound.get(g)
        rows.setdefault(key, []).append(entry)
    window = _window(frame)
    return RankAnnotations(t.path, t.rank, t.tables.t0_us, t.is_gpu, rows, _counter(frame, window), window,
                           _spans(diagnosis, frame, ids, acts, no_rows, window))


def _row_keys(a) -> list[tuple | None]:
    """The raw-event key of each activity row (None for rows no event stands for: a compiled
    region's unrecorded remainder, a capture-time op)."""
    frame, t = a.activities, a.trace
    if not len(frame):
        return []
    names, ts, dur = frame["name"].tolist(), frame["ts"].to_numpy(float), frame["dur"].to_numpy(float)
    if t.is_gpu:
        stream = frame["stream"].astype("Int64").fillna(_MISSING).to_numpy(dtype=np.int64)
        return [gpu_key(n, s, d, st) for n, s, d, st in zip(names, ts, dur, stream)]
    ops = t.ops
    pid, tid = ops["pid"].to_dict(), ops["tid"].to_dict()
    out: list[tuple | None] = []
    for n, s, d, o in zip(names, ts, dur, frame["op"].tolist()):
        if o is None or (isinstance(o, float) and math.isnan(o)) or int(o) not in pid:
            out.append(None)
        else:
            out.append(op_key(n, s, d, pid[int(o)], tid[int(o)]))
    return out


def _label(group) -> str:
    """The kernel group as the report names it: op, shapes, dtype and category (the event's own
    name is the kernel's)."""
    parts = [group.get("op_name"), group.get("shapes"), group.get("dtype"), group.get("category")]
    text = " · ".join(str(p) for p in parts if p not in (None, "") and not _nan(p))
    return text or str(group.get("name"))


def _window(frame) -> tuple[float, float]:
    if not len(frame):
        return (0.0, 0.0)
    return (float(frame["ts"].min()), float(frame["end"].max()))


def _counter(frame, window: tuple[float, float]) -> tuple[tuple[float, dict[str, float]], ...]:
    """Time by bound per bin, as % of the bin: the timeline's priority attribution bin by bin, so
    the bins add up to the rank's ``time.by_bound``."""
    start, end = window
    if not len(frame) or end <= start:
        return ()
    edges = np.linspace(start, end, COUNTER_BINS + 1)
    lo, hi = edges[:-1], edges[1:]
    width = hi - lo
    ts, te = frame["ts"].to_numpy(float), frame["end"].to_numpy(float)
    bounds = frame["bound"].to_numpy(dtype=object)
    chosen = np.zeros(len(ts), dtype=bool)
    covered = np.zeros(COUNTER_BINS)
    series: dict[str, np.ndarray] = {}
    for bound in PRIORITY:
        chosen |= bounds == bound.value
        now = covered_within(lo, hi, merged_runs(ts[chosen], te[chosen]))
        series[bound.value] = np.maximum(0.0, now - covered)
        covered = now
    series["idle"] = np.maximum(0.0, width - covered)
    out = []
    for k in range(COUNTER_BINS):
        w = float(width[k])
        out.append((float(lo[k]), {b: (100.0 * float(series[b][k]) / w if w > 0 else 0.0) for b in COUNTER_KEYS}))
    return tuple(out)


def _spans(diagnosis: Diagnosis, frame, ids: list[str], acts: dict[int, np.ndarray], no_rows: dict[int, bool],
           window: tuple[float, float]) -> tuple[FindingSpan, ...]:
    out = []
    ts, te = (frame["ts"].to_numpy(float), frame["end"].to_numpy(float)) if len(frame) else (None, None)
    for i, f in enumerate(diagnosis.findings):
        rows = acts.get(i, np.zeros(0, dtype=int))
        if len(rows):
            start, end = float(ts[rows].min()), float(te[rows].max())
            where = f"the {len(rows):,} activities it acts on (args.bwdiag.findings of each names it)"
        elif no_rows.get(i, True):  # acts on idle time, or on no particular activity: the whole window
            start, end = window
            where = "the whole window: it acts on idle time or the window, not on particular activities"
        else:  # acts on other ranks' activities only
            continue
        args = {
            "id": ids[i], "kind": f.kind, "title": f.title,
            "est_saving_us": _plain(f.est_saving_us), "est_saving_pct": _plain(f.est_saving_pct),
            "est_saving_per_step_us": _plain(f.est_saving_per_step_us),
            "graph_saving_us": _plain(f.graph_saving_us), "graph_saving_per_step_us": _plain(f.graph_saving_per_step_us),
            # the saving the report shows and ranks by (the graph's where there is one)
            "saving_us": _plain(f.saving_us), "saving_model": f.saving_model,
            "fix": f.fix, "evidence": list(f.evidence), "spans": where,
        }
        out.append(FindingSpan(ids[i], str(f.kind), f.title, start, end, int(len(rows)), args))
    return tuple(out)


def _plain_column(series) -> list:
    """:func:`_plain` of every value of a column, each distinct value converted once."""
    values = series.tolist()
    seen: dict = {}
    out = []
    for v in values:
        try:
            got = seen[v]
        except KeyError:
            got = seen[v] = _plain(v)
        except TypeError:  # unhashable
            got = _plain(v)
        out.append(got)
    return out


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _plain(value):
    """A JSON-ready scalar: numpy numbers as Python ones, NaN and pandas' NA as None."""
    if value is None:
        return None
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, (int, str)):
        return value
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return str(value)
