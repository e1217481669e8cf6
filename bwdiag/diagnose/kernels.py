"""Group activities into kernel groups and pin each group to the roofline ceiling that limits it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bwdiag.diagnose.model import Bound, KernelRow
from bwdiag.diagnose.roofline import place
from bwdiag.hardware import DeviceSpec
from bwdiag.hardware.spec import SpecSource

GROUP_KEYS = ["kind", "name", "op_name", "shapes", "dtype", "category"]


def group_activities(acts: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel group with count, time and summed estimates; adds a ``group`` id to ``acts``."""
    keys = acts[GROUP_KEYS].astype(object).where(acts[GROUP_KEYS].notna(), "")
    gid = keys.groupby(GROUP_KEYS, sort=False).ngroup()
    acts["group"] = gid.to_numpy()
    g = acts.groupby("group", sort=True)
    first = keys.groupby(gid.to_numpy(), sort=True).first()  # "" (not NaN) where the key is missing
    out = g.agg(
        module=("module", "first"),
        tensor=("tensor", "max"), count=("dur", "size"), total_us=("dur", "sum"), mean_us=("dur", "mean"),
        blocks=("blocks", "min"),
    )
    for col in GROUP_KEYS:
        out[col] = [v if v != "" else None for v in first[col].to_numpy()]
    # An estimate is known for the group only when every member has one: never a partial sum.
    out["flops"] = g["flops"].sum(min_count=1).where(g["flops"].count() == out["count"])
    out["bytes"] = g["bytes"].sum(min_count=1).where(g["bytes"].count() == out["count"])
    return out


def place_groups(groups: pd.DataFrame, spec: DeviceSpec) -> pd.DataFrame:
    """Add roofline placement columns (bound, ceiling, intensity, achieved, pct) to the groups."""
    cols: dict[str, list] = {k: [] for k in ("bound", "ceiling", "intensity", "achieved_flops_per_s",
                                               "achieved_bytes_per_s", "pct_of_ceiling", "attainable_flops_per_s",
                                               "best_time_s")}
    for row in groups.itertuples():
        if row.category == "communication":
            vals = (Bound.COMMUNICATION.value, "interconnect", None, None, _rate(row.bytes, row.total_us), None,
                    None, None)
        else:
            blocks = None if pd.isna(row.blocks) else int(row.blocks)
            p = place(_opt(row.flops), _opt(row.bytes), row.total_us / 1e6, spec, row.dtype,
                      tensor=bool(row.tensor), mean_duration_s=row.mean_us / 1e6, grid_blocks=blocks)
            vals = (p.bound.value, p.ceiling, p.intensity, p.achieved_flops_per_s, p.achieved_bytes_per_s,
                    p.pct_of_ceiling, p.attainable_flops_per_s, p.best_time_s)
        for k, v in zip(cols, vals):
            cols[k].append(v)
    out = groups.copy()
    for k, v in cols.items():
        out[k] = pd.Series(v, index=groups.index, dtype=object)
    return out


def kernel_rows(groups: pd.DataFrame, rank: int) -> list[KernelRow]:
    rows = []
    for g in groups.itertuples():
        rows.append(
            KernelRow(
                name=g.name, rank=rank, category=g.category, count=int(g.count), total_us=float(g.total_us),
                flops=_opt(g.flops), bytes=_opt(g.bytes), intensity=_opt(g.intensity),
                achieved_flops_per_s=_opt(g.achieved_flops_per_s), achieved_bytes_per_s=_opt(g.achieved_bytes_per_s),
                bound=g.bound, ceiling=g.ceiling, pct_of_ceiling=_opt(g.pct_of_ceiling),
                op=g.op_name or None, shapes=g.shapes or None, dtype=g.dtype or None, module=g.module or None,
                attainable_flops_per_s=_opt(g.attainable_flops_per_s), mean_us=float(g.mean_us),
            )
        )
    return sorted(rows, key=lambda r: -r.total_us)


def _opt(value) -> float | None:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _rate(amount, total_us) -> float | None:
    amount = _opt(amount)
    return amount / (total_us / 1e6) if amount is not None and total_us > 0 else None


#: A group measured above this share of its roof cannot have done the estimated work in that time.
ABOVE_ROOF_PCT = 120.0
#: On a CPU, an op this far above its roof did not do the work at all: it dispatched it elsewhere.
DISPATCH_PCT = 1000.0

CACHE_CEILING = "cache (above the memory roof)"
LOW_ROOF_CEILING = "above the CPU roof (ceilings too low)"
DISPATCH_CEILING = "dispatch (work not done on this CPU)"
UNKNOWN_ESTIMATE_CEILING = "estimate above the roof"


def flag_above_roof(groups: pd.DataFrame, spec: DeviceSpec) -> dict[str, int]:
    """Re-class groups that beat their roof; returns how many, by the ceiling label given.

    A memory-bound group above the DRAM/HBM roof read its data from cache (a 13 MB copy fits the
    A100's 40 MB L2; a 256 kB optimizer tensor fits a CPU's L2): still memory-bound, against a
    roof the table does not hold. A compute-bound CPU op above its roof means the calibrated GEMM
    rate was measured low (a busy machine): the bound stands, the percentage does not. On a GPU,
    beating the compute roof means the estimate does not describe what ran: bound unknown. On a
    CPU-side trace of a GPU job (no device activity recorded), ops "run" ten times faster than the
    CPU could do their work because they only dispatched it: their time is dispatch overhead.
    """
    if groups.empty or "pct_of_ceiling" not in groups:
        return {}
    pct = pd.to_numeric(groups["pct_of_ceiling"], errors="coerce").to_numpy()
    above = pct > ABOVE_ROOF_PCT
    if not above.any():
        return {}
    memory = above & (groups["bound"] == Bound.MEMORY.value).to_numpy()
    compute = above & ~memory
    groups.loc[memory, "ceiling"] = CACHE_CEILING
    if spec.kind == "cpu":
        groups.loc[compute, "ceiling"] = LOW_ROOF_CEILING
        # Only against measured or given ceilings: ten times an *assumed* CPU's roof may just be a
        # bigger CPU than the assumption, not work dispatched elsewhere.
        dispatch = (pct > DISPATCH_PCT) if spec.spec_source is not SpecSource.ASSUMED else np.zeros_like(above)
        groups.loc[dispatch, "bound"] = Bound.LATENCY.value
        groups.loc[dispatch, "ceiling"] = DISPATCH_CEILING
    else:
        groups.loc[compute, "bound"] = Bound.UNKNOWN.value
        groups.loc[compute, "ceiling"] = UNKNOWN_ESTIMATE_CEILING
    groups.loc[above, "pct_of_ceiling"] = None
    return {k: int(v) for k, v in groups.loc[above, "ceiling"].value_counts().items()}
