"""Across ranks: who the others wait for in collectives.

Rank clocks are not synchronised across nodes, so start times are not compared. A collective ends
at about the same moment on every rank, so the rank that arrives last spends the least time in it;
every other rank's extra time in that call is time spent waiting for it. The k-th call of the same
collective kernel on each rank is matched by order.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from bwdiag.diagnose.model import RankWait, Straggler


def straggler(comm_by_rank: dict[int, pd.DataFrame]) -> Straggler | None:
    """The rank others wait for most, and how long it made them wait (µs).

    ``comm_by_rank`` maps rank → its collective activities (columns name, ts, dur), any order.
    """
    if len(comm_by_rank) < 2:
        return None
    per_rank = {r: df.sort_values("ts") for r, df in comm_by_rank.items() if len(df)}
    if len(per_rank) < 2:
        return None
    names = set.intersection(*(set(df["name"]) for df in per_rank.values()))
    last_count: Counter[int] = Counter()
    waited_on: Counter[int] = Counter()
    wait_by_rank: Counter[int] = Counter()
    calls = 0
    for name in sorted(names):
        seqs = {r: df.loc[df["name"] == name, "dur"].to_numpy(float) for r, df in per_rank.items()}
        n = min(len(v) for v in seqs.values())
        if n == 0:
            continue
        ranks = sorted(seqs)
        mat = np.stack([seqs[r][:n] for r in ranks])  # ranks × calls
        last = mat.argmin(axis=0)  # the rank that spent least time arrived last
        extra = mat - mat.min(axis=0)
        for call in range(n):
            r_last = ranks[last[call]]
            last_count[r_last] += 1
            waited_on[r_last] += float(extra[:, call].sum())
        for i, r in enumerate(ranks):
            wait_by_rank[r] += float(extra[i].sum())
        calls += n
    if not calls:
        return None
    rank, cost = waited_on.most_common(1)[0]
    return Straggler(rank=int(rank), made_others_wait_us=float(cost), arrived_last_calls=int(last_count[rank]),
                     matched_calls=int(calls),
                     wait_us_by_rank=tuple(RankWait(int(r), float(w)) for r, w in sorted(wait_by_rank.items())))
