"""What-if: the projected window if the top findings were applied, with savings that cannot overlap.

Findings are taken largest first. Each finding's saving is scaled down by the share of its
activities an earlier finding already claimed (the same kernel is never saved twice), then split
over the bound classes its activities sit in (by their time) and capped by what each class has
left — idle time for findings that act on GPU idle. The projected window is the total minus what
survives: :func:`project` returns it with the per-finding detail as a ``model.WhatIf``
(:func:`~bwdiag.diagnose.findings.base.with_findings` stores it with the diagnosis).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.model import TIME_KEYS, AppliedFinding, WhatIf

#: How many findings the projection applies (the report lists the top ones first).
PROJECTED_FINDINGS = 10


def project(ctx: RuleContext, results: Sequence[RuleResult]) -> WhatIf:
    """The what-if of the top results (already sorted by saving), each drawing on the activities or
    idle time it acts on."""
    total = ctx.total_us
    left = {k: float(ctx.diagnosis.time.by_bound.get(k, 0.0)) for k in TIME_KEYS}
    claimed: dict[int, set[int]] = defaultdict(set)
    applied, saved = [], 0.0
    for result in results[:PROJECTED_FINDINGS]:
        f = result.finding
        by_class = _by_class(ctx, result, claimed)
        want = f.est_saving_us * by_class.pop("_fresh_share", 1.0)
        weight = sum(by_class.values())
        take = 0.0
        for key, part in by_class.items():
            share = want * part / weight if weight > 0 else 0.0
            got = min(share, left.get(key, 0.0))
            left[key] = left.get(key, 0.0) - got
            take += got
        if weight <= 0:  # nothing known about where it acts: cap by the window only
            take = min(want, total - saved)
        take = min(take, max(0.0, total - saved))
        saved += take
        applied.append(AppliedFinding(f.kind, f.title, float(f.est_saving_us), float(take),
                                      bool(take < f.est_saving_us - 1e-6)))
    projected = float(max(0.0, total - saved))
    return WhatIf(tuple(applied), total, float(saved), projected,
                  float(total / projected) if projected > 0 else None)


def _by_class(ctx: RuleContext, result: RuleResult, claimed: dict[int, set[int]]) -> dict[str, float]:
    """µs (mean per rank) of the finding's not-yet-claimed activities per bound class, plus idle;
    ``_fresh_share`` is the share of its activity time no earlier finding claimed."""
    out: dict[str, float] = defaultdict(float)
    fresh = whole = 0.0
    for pos, rows in result.acts.items():
        if not len(rows):
            continue
        a = ctx.analyses[pos]
        rows = np.unique(rows)
        dur = a.activities["dur"].to_numpy(float)[rows]
        bound = a.activities["bound"].to_numpy(dtype=object)[rows]
        new = np.array([r not in claimed[pos] for r in rows])
        whole += dur.sum()
        fresh += dur[new].sum()
        for b, d in zip(bound[new], dur[new]):
            out[b if b in TIME_KEYS else "unknown"] += d / ctx.ranks
        claimed[pos].update(rows.tolist())
    if result.idle_us:
        out["idle"] += result.idle_us
    shares = dict(out)
    if whole > 0:
        shares["_fresh_share"] = (fresh + result.idle_us * ctx.ranks) / (whole + result.idle_us * ctx.ranks)
    return shares
