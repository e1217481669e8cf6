"""The page of a job with many ranks: per-rank rows aggregated, so one file stays small at 1024 ranks.

Up to :data:`RANK_DETAIL_MAX` ranks the page lists every rank's rows as they are. Above it, what
grows with the rank count is folded (``diagnosis.json`` keeps every per-rank row either way):

* the kernel table: one row per kernel group across ranks (:func:`merge_kernels`), with the number
  of ranks it ran on and the spread of its per-rank time;
* the collectives: one row per collective kind and kernel (:func:`merge_collectives`), times per rank;
* the per-rank tables (ranks, idle by rank, launches by rank): distributions over the ranks
  (:func:`distribution`), the :data:`TOP_SLOW` slowest ranks and why (:func:`slowest_ranks`);
* step durations: a rank × step heat strip (:func:`heat_strip`), shown for any multi-rank job.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from typing import Iterable, Sequence

from bwdiag.diagnose.model import CollectiveRow, Diagnosis, KernelRow, RankSummary
from bwdiag.report.values import num

#: Most ranks whose rows the page lists one by one; above it they are aggregated.
RANK_DETAIL_MAX = 16
#: Slowest ranks listed with their reasons.
TOP_SLOW = 10
#: Quantiles of a distribution row (0 = the least, 100 = the most).
QUANTILES = (0, 25, 50, 75, 100)
#: Bars of a distribution's histogram.
HIST_BINS = 24


def aggregated(d: Diagnosis) -> bool:
    """Whether the page aggregates per-rank rows (more than :data:`RANK_DETAIL_MAX` ranks)."""
    return len(_rank_ids(d)) > RANK_DETAIL_MAX


def _rank_ids(d: Diagnosis) -> set[int]:
    return set(d.source.ranks) | {r.rank for r in d.ranks}


# ---------------------------------------------------------------------------------- kernel groups


def _group_key(k: KernelRow) -> tuple:
    return (k.name, k.category, k.op, k.module, k.shapes, k.dtype)


def merge_kernels(kernels: Iterable[KernelRow]) -> tuple[list[KernelRow], dict[int, dict]]:
    """One row per kernel group across ranks, and per merged row (by ``id``) its rank spread.

    A merged row sums count, time, FLOPs and bytes over its ranks (FLOPs/bytes stay ``None`` when a
    rank's are unknown) and recomputes the rates from the sums; its ``rank`` is the rank where the
    group took longest, whose bound and ceiling it keeps. Its % of ceiling is the time-weighted mean
    of the ranks' (exact when their ceilings are the same, as for one group on one device).
    The spread: ``{"ranks": n, "rank_min_us", "rank_max_us", "slowest_rank"}``.
    """
    groups: dict[tuple, list[KernelRow]] = {}
    for k in kernels:
        groups.setdefault(_group_key(k), []).append(k)
    merged, spread = [], {}
    for rows in groups.values():
        longest = max(rows, key=lambda k: (num(k.total_us), -k.rank))
        total = sum(num(k.total_us) for k in rows)
        count = sum(k.count for k in rows)
        flops = _sum_known(k.flops for k in rows)
        nbytes = _sum_known(k.bytes for k in rows)
        weighted = [(k.pct_of_ceiling, num(k.total_us)) for k in rows if k.pct_of_ceiling is not None]
        weight = sum(w for _, w in weighted)
        row = dataclasses.replace(
            longest, count=count, total_us=total, flops=flops, bytes=nbytes,
            intensity=flops / nbytes if flops is not None and nbytes else longest.intensity,
            achieved_flops_per_s=flops / (total * 1e-6) if flops is not None and total > 0 else None,
            achieved_bytes_per_s=nbytes / (total * 1e-6) if nbytes is not None and total > 0 else None,
            pct_of_ceiling=sum(p * w for p, w in weighted) / weight if weight > 0 else (
                longest.pct_of_ceiling if len(rows) == 1 else None),
            mean_us=total / count if count else 0.0,
        )
        merged.append(row)
        per_rank: dict[int, float] = {}
        for k in rows:
            per_rank[k.rank] = per_rank.get(k.rank, 0.0) + num(k.total_us)
        spread[id(row)] = {"ranks": len(per_rank), "rank_min_us": min(per_rank.values()),
                           "rank_max_us": max(per_rank.values()), "slowest_rank": longest.rank}
    return merged, spread


def _sum_known(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


# ------------------------------------------------------------------------------------ collectives


def merge_collectives(collectives: Sequence[CollectiveRow], n_ranks: int) -> list[dict]:
    """One row per (collective, kernel, dtype, group size) across ranks: calls summed, time and
    exposed time per rank (the mean over ``n_ranks``), bandwidths from the summed bytes and time,
    and the spread of per-rank time (least, most, and the rank of the most)."""
    groups: dict[tuple, list[CollectiveRow]] = {}
    for c in collectives:
        groups.setdefault((c.collective, c.name, c.dtype, c.group_size), []).append(c)
    out = []
    for (kind, name, dtype, size), rows in groups.items():
        longest = max(rows, key=lambda c: (num(c.total_us), -c.rank))
        total = sum(num(c.total_us) for c in rows)
        calls = sum(c.count for c in rows)
        sized = [c for c in rows if c.bytes is not None]
        algbw = busbw = pct = None
        sized_us = sum(num(c.total_us) for c in sized)
        if sized and sized_us > 0:
            algbw = sum(c.bytes * c.count for c in sized) / (sized_us * 1e-6)
            ref = next((c for c in sized if c.algbw and c.busbw is not None), None)
            if ref is not None:
                busbw = algbw * ref.busbw / ref.algbw
                if ref.pct_of_link is not None and ref.busbw:
                    pct = busbw * ref.pct_of_link / ref.busbw
        out.append({
            "name": name, "collective": kind, "dtype": dtype, "group_size": size,
            "ranks": len({c.rank for c in rows}), "count": calls,
            "total_us": total / n_ranks, "exposed_us": sum(num(c.exposed_us) for c in rows) / n_ranks,
            "bytes": sum(c.bytes * c.count for c in sized) / sum(c.count for c in sized) if sized else None,
            "algbw": algbw, "busbw": busbw, "pct_of_link": pct, "regime": longest.regime,
            "rank_min_us": min(num(c.total_us) for c in rows), "rank_max_us": num(longest.total_us),
            "slowest_rank": longest.rank,
        })
    return sorted(out, key=lambda r: (-r["total_us"], r["collective"], r["name"]))


# -------------------------------------------------------------------------------- distributions


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values``, linear between order statistics (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def distribution(label: str, by_rank: dict[int, float], *, unit: str = "time") -> dict | None:
    """One row of a distribution table: the quantiles over ranks, and which rank is least and most.
    None when no rank has the value."""
    if not by_rank:
        return None
    values = list(by_rank.values())
    least = min(by_rank, key=lambda r: (by_rank[r], r))
    most = max(by_rank, key=lambda r: (by_rank[r], -r))
    return {"label": label, "unit": unit, "ranks": len(values),
            "quantiles": [quantile(values, q) for q in QUANTILES],
            "least_rank": least, "most_rank": most}


def histogram(by_rank: dict[int, float], bins: int = HIST_BINS) -> dict | None:
    """Counts of ranks in ``bins`` equal bins from the least to the most value, as bar heights
    (% of the fullest bin). None for fewer than two ranks."""
    if len(by_rank) < 2:
        return None
    lo, hi = min(by_rank.values()), max(by_rank.values())
    counts = [0] * bins
    for v in by_rank.values():
        i = bins - 1 if hi <= lo else min(bins - 1, int((v - lo) / (hi - lo) * bins))
        counts[i] += 1
    top = max(counts)
    return {"lo": lo, "hi": hi, "counts": counts, "heights": [100.0 * c / top for c in counts]}


def median_step(r: RankSummary) -> float | None:
    """The rank's median complete step (µs), None without steps."""
    return statistics.median(r.step_durations_us) if r.step_durations_us else None


def rank_distributions(d: Diagnosis) -> list[dict]:
    """Distribution rows of the per-rank summary, idle causes and launch facts over the ranks."""
    ranks = d.ranks
    fields = [("Median step", {r.rank: median_step(r) for r in ranks}),
              ("Analysed window", {r.rank: r.total_us for r in ranks}),
              ("Busy", {r.rank: r.busy_us for r in ranks}),
              ("Compute", {r.rank: r.compute_us for r in ranks}),
              ("Communication", {r.rank: r.communication_us for r in ranks}),
              ("Exposed communication", {r.rank: r.exposed_communication_us for r in ranks}),
              ("Idle", {r.rank: r.idle_us for r in ranks})]
    fields += [(f"Idle: {label}", {i.rank: getattr(i, key) for i in d.idle_by_rank})
               for key, label in (("host_wait_us", "waiting for the host"),
                                  ("kernel_wait_us", "between kernels"), ("other_us", "other"))]
    rows = [distribution(label, {r: v for r, v in values.items() if v is not None}) for label, values in fields]
    rows.append(distribution("Kernels", {r.rank: float(r.kernels) for r in ranks}, unit="count"))
    if d.straggler is not None and d.straggler.wait_us_by_rank:
        rows.append(distribution("Waiting at matched collectives",
                                 {w.rank: w.wait_us for w in d.straggler.wait_us_by_rank}))
    return [r for r in rows if r is not None]


# ---------------------------------------------------------------------------------- slowest ranks


def slowest_ranks(d: Diagnosis, k: int = TOP_SLOW) -> dict | None:
    """The ``k`` slowest ranks and why: by median step (ranks with step markers), else by busy time.

    The reason is the part of the rank's time furthest above the median rank's — compute, exposed
    communication or idle (with the host's share of that idle) — in µs and as a ratio; a rank the
    others waited for at collectives (``straggler``) says so.
    """
    ranks = list(d.ranks)
    if len(ranks) < 2:
        return None
    stepped = [r for r in ranks if r.step_durations_us]
    by = "median step" if len(stepped) == len(ranks) else "busy time"
    key = median_step if by == "median step" else (lambda r: r.busy_us)
    order = sorted(ranks, key=lambda r: (-num(key(r)), -r.compute_us, r.rank))
    med = {name: statistics.median(num(getattr(r, name)) for r in ranks)
           for name in ("compute_us", "exposed_communication_us", "idle_us")}
    med_key = statistics.median(num(key(r)) for r in ranks)
    host_wait = {i.rank: i.host_wait_us for i in d.idle_by_rank}
    waits = {w.rank: w.wait_us for w in d.straggler.wait_us_by_rank} if d.straggler else {}
    rows = []
    for r in order[:k]:
        rows.append({"rank": r.rank, "value_us": key(r),
                     "vs_median_pct": 100.0 * (num(key(r)) - med_key) / med_key if med_key > 0 else None,
                     "why": _why(r, med, host_wait.get(r.rank), d.straggler, waits.get(r.rank))})
    return {"by": by, "median_us": med_key, "rows": rows}


_PARTS = (("compute_us", "compute"), ("exposed_communication_us", "exposed communication"), ("idle_us", "idle"))


def _why(r: RankSummary, med: dict[str, float], host_wait: float | None, straggler, wait: float | None) -> str:
    from bwdiag.units import fmt_time

    excess = {name: num(getattr(r, name)) - med[name] for name, _ in _PARTS}
    name, label = max(_PARTS, key=lambda p: excess[p[0]])
    parts = []
    if excess[name] > 0:
        part = (f"{label} {fmt_time(num(getattr(r, name)))} vs {fmt_time(med[name])} on the median rank "
                f"(+{fmt_time(excess[name])})")
        if name == "idle_us" and host_wait is not None and num(getattr(r, name)) > 0:
            part += f", {100.0 * host_wait / num(getattr(r, name)):.0f}% of it waiting for the host"
        parts.append(part)
    else:
        parts.append("no part of its time is above the median rank's")
    if straggler is not None and straggler.rank == r.rank:
        parts.append(f"the straggler: the others waited {fmt_time(straggler.made_others_wait_us)} for it "
                     f"at {straggler.arrived_last_calls} of {straggler.matched_calls} matched collectives")
    elif wait is not None and straggler is not None:
        parts.append(f"waited {fmt_time(wait)} at matched collectives")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------- heat strip


def heat_strip(d: Diagnosis) -> dict | None:
    """Step durations per rank and step for the page's rank × step heat strip, None without steps
    on at least two ranks.

    ``ranks``: the ranks in order; ``steps``: the union of their step ids; ``values[i][j]``: rank
    ``ranks[i]``'s step ``steps[j]`` in µs, rounded to 0.1 µs (``None`` where that rank did not
    complete the step); ``median_us``: the median of all values, the colour scale's middle.
    """
    ranks = sorted((r for r in d.ranks if r.step_durations_us), key=lambda r: r.rank)
    if len(ranks) < 2:
        return None
    steps = sorted({s for r in ranks for s in r.step_ids})
    col = {s: j for j, s in enumerate(steps)}
    values, flat = [], []
    for r in ranks:
        row: list[float | None] = [None] * len(steps)
        for s, us in zip(r.step_ids, r.step_durations_us):
            row[col[s]] = round(us, 1)
            flat.append(us)
        values.append(row)
    slowest = max(((r.rank, s, us) for r in ranks for s, us in zip(r.step_ids, r.step_durations_us)),
                  key=lambda t: (t[2], -t[0]))
    return {"ranks": [r.rank for r in ranks], "steps": steps, "values": values,
            "median_us": statistics.median(flat), "min_us": min(flat), "max_us": max(flat),
            "slowest": {"rank": slowest[0], "step": slowest[1], "us": slowest[2]}}


# ---------------------------------------------------------------------------------------- warnings

_FILE_PREFIX = re.compile(r"^(?:skipped unreadable rank file: )?\S+?\.json(?:\.gz)?:\s")
_NUMBER = re.compile(r"\d[\d,.]*")


def fold_warnings(warnings: Sequence[str]) -> list[str]:
    """Per-file warnings that say the same thing (but for the file name and its numbers) once, with
    how many files they were given for: 1024 ranks would otherwise list 1024 copies."""
    groups: dict[str, list[str]] = {}
    for w in warnings:
        m = _FILE_PREFIX.match(w)
        key = _NUMBER.sub("#", w[m.end():] if m else w) if m else w
        groups.setdefault(key, []).append(w)
    out = []
    for items in groups.values():
        if len(items) == 1:
            out.append(items[0])
        else:
            more = len(items) - 1
            out.append(f"{items[0]} (and {more:,} more file{'s' if more > 1 else ''} with this warning, "
                       "their figures differing; all of them are in diagnosis.json)")
    return out
