"""The report context: every number the HTML page shows, as plain JSON-able data.

``build_context`` is the only place where the report decides *what* to show (verdict, roofline
geometry, tables); the template and its JavaScript only decide *how*. Times are µs, rates per
second, percentages ×100, and anything unknown is ``None`` (never zero, never NaN).
"""

from __future__ import annotations

from pathlib import PurePath

from bwdiag._version import __version__
from bwdiag.diagnose.model import Bound, Diagnosis, KernelRow, SpecSource
from bwdiag.report import many_ranks
from bwdiag.report.display import display_tree, humanize
from bwdiag.report.roofline import build_roofline, byte_only, plottable
from bwdiag.report.values import bound_of, jsonable, num
from bwdiag.report.verdict import (BASELINE_TOLERANCE, TIME_LABELS, VERDICT_FINDINGS, build_verdict, models_note,
                                   projected_time, ranked_findings, same_fix_note, same_fix_refs, saving_shown,
                                   unprofiled_scale)

__all__ = ["build_context", "kernel_records", "projected_time", "VERDICT_FINDINGS", "KERNEL_COLUMNS"]

SPEC_SOURCE_NOTES = {
    SpecSource.TABLE.value: "datasheet table shipped with bwdiag (dense peaks)",
    SpecSource.CALIBRATED.value: "measured with `bwdiag calibrate` on the host that recorded the trace",
    SpecSource.USER.value: "given by you (device spec override)",
    SpecSource.ASSUMED.value: "ASSUMED: generic fallback ceilings (device not in the table, or a CPU "
    "trace with no calibration of the host that recorded it: the warnings say which); "
    "pass a device spec to get real percentages",
}


def build_context(diagnosis: Diagnosis) -> dict:
    """Everything the page needs, as plain JSON-able data (see the module docstring).

    Kernel rows are ordered by total time, longest first; ``roofline.points[*].k``,
    ``roofline.bandwidth.marks[*].k`` (the byte-only groups' strip), ``roofline.unplotted[*].k``
    and finding evidence refer to kernels by that index.
    """
    folded = many_ranks.aggregated(diagnosis)
    kernels, spread = page_kernels(diagnosis)
    kernel_rows = _kernel_rows(kernels, spread=spread)
    sections = diagnosis.sections_dict()
    ranks = sorted({k.rank for k in diagnosis.kernels} | set(diagnosis.source.ranks))
    ctx = {
        "schema": diagnosis.schema,
        "bwdiag_version": __version__,
        "title": _title(diagnosis),
        "source": {
            "paths": list(diagnosis.source.paths),
            "ranks": list(diagnosis.source.ranks),
            "trace_kind": diagnosis.source.trace_kind,
            "torch_version": diagnosis.source.torch_version,
            "selection": diagnosis.source.selection.to_dict() if diagnosis.source.selection else None,
        },
        "multi_rank": len(ranks) > 1,
        # Over many_ranks.RANK_DETAIL_MAX ranks, per-rank rows are folded into distributions.
        "ranks_aggregated": folded,
        "rank_count": len(ranks),
        "rank_detail_max": many_ranks.RANK_DETAIL_MAX,
        # What a row of the kernel table is: GPU kernels, or leaf CPU ops in a CPU-only trace.
        "item_label": "CPU op" if diagnosis.source.trace_kind == "cpu" else "Kernel",
        "verdict": build_verdict(diagnosis),
        "device": _device(diagnosis),
        "roofline": build_roofline(diagnosis, kernels),
        "kernels": _columns(kernel_rows),
        # The op column only when it tells something the name does not (in a CPU trace a row's
        # name is its op, so the column would repeat the first one).
        "show_op_column": any(k.op and k.op != k.name for k in kernels),
        "kernel_summary": {
            "groups": len(kernels),
            "launches": sum(k.count for k in kernels),
            "total_us": sum(num(k.total_us) for k in kernels),
            "categories": sorted({k.category for k in kernels}),
            "bounds": [b.value for b in Bound if any(bound_of(k) == b.value for k in kernels)],
        },
        "findings": _findings(diagnosis, kernels),
        "unaddressed": [{"bound": u.bound, "label": TIME_LABELS.get(u.bound, u.bound).lower(), "us": u.us,
                         "pct": u.pct, "why": u.why} for u in diagnosis.unaddressed],
        "whatif": _whatif(diagnosis),
        "communication": _communication(diagnosis, folded),
        "ranks": [] if folded else _ranks(diagnosis),
        "rank_distributions": _rank_distributions(diagnosis) if folded else None,
        "slowest_ranks": many_ranks.slowest_ranks(diagnosis) if folded else None,
        "heat_strip": many_ranks.heat_strip(diagnosis),
        "idle": display_tree("idle", sections["idle"]) if sections["idle"] is not None else None,
        "idle_by_rank": None if folded else _by_rank_tree("idle_by_rank", sections["idle_by_rank"]),
        "straggler": _straggler(diagnosis),
        "comm_fits": [f.to_dict() for f in diagnosis.comm_fits],
        # The other sections, shown generically as display trees (in diagnosis.json's order).
        "sections": [
            {"key": key, "title": humanize(key), "tree": display_tree(key, value)}
            for key, value in _generic_sections(diagnosis, sections, folded)
        ],
        "coverage": {
            "linked_pct": diagnosis.coverage.linked_pct,
            "estimated_pct": diagnosis.coverage.estimated_pct,
            "compute_us": diagnosis.coverage.compute_us,
            "copy_us": diagnosis.coverage.copy_us,
            "copy_estimated_pct": diagnosis.coverage.copy_estimated_pct,
            "collective_us": diagnosis.coverage.collective_us,
            "collective_estimated_pct": diagnosis.coverage.collective_estimated_pct,
            "uncovered": [{"reason": u.reason, "us": u.us, "pct": u.pct}
                          for u in diagnosis.coverage.uncovered],
        },
        "warnings": many_ranks.fold_warnings(diagnosis.warnings) if folded else list(diagnosis.warnings),
    }
    return jsonable(ctx)


def _title(d: Diagnosis) -> str:
    names = [PurePath(p).name for p in d.source.paths]
    if not names:
        return "bwdiag report"
    shown = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} more)"
    return f"bwdiag report: {shown}"


# ----------------------------------------------------------------------------------------- device


def _device(d: Diagnosis) -> dict:
    dev = d.device
    peaks = [{"dtype": k, "unit": "peak", "flops": v} for k, v in dev.peak_flops.items()]
    peaks += [{"dtype": k, "unit": "vector", "flops": v} for k, v in dev.vector_flops.items()]
    return {
        "name": dev.name,
        "matched_from": dev.matched_from,
        "kind": dev.kind,
        "spec_source": dev.spec_source,
        "spec_source_note": SPEC_SOURCE_NOTES.get(dev.spec_source, dev.spec_source),
        "assumed": dev.spec_source == SpecSource.ASSUMED.value,
        "peaks": peaks,
        "memory_bandwidth": dev.memory_bandwidth,
        "interconnect_bandwidth": dev.interconnect_bandwidth,
        "sources": list(dev.sources),
        "calibration": _calibration(dev.calibration),
        "trace_host": _host_text(dev.trace_host),
        "accelerator": dev.accelerator,
    }


def _calibration(cal: dict | None) -> dict | None:
    """Which calibration file the ceilings came from, when it was measured, and on which host."""
    if not cal:
        return None
    origin = cal.get("origin")
    return {
        "path": cal.get("path"),
        "where": "embedded in the trace by the bwdiag capture" if origin == "trace" else "this machine's cache",
        "measured_at": cal.get("measured_at"),
        "file_mtime": cal.get("file_mtime"),
        "host": _host_text(cal.get("host")),
        "quick": cal.get("quick"),
    }


def _host_text(host: dict | None) -> str | None:
    if not host:
        return None
    parts = [str(host["hostname"])] if host.get("hostname") else []
    if host.get("cpu"):
        parts.append(str(host["cpu"]) + (f" ({host['cores']} cores)" if host.get("cores") else ""))
    return ", ".join(parts) or None


# ---------------------------------------------------------------------------------------- kernels


#: Columns of ``ctx["kernels"]``; rows are lists in this order (names are not repeated per row,
#: which keeps pages of traces with thousands of kernel groups small).
KERNEL_COLUMNS = (
    "name", "rank", "category", "op", "module", "shapes", "dtype", "count", "total_us",
    "mean_us", "share_pct", "flops", "bytes", "intensity", "achieved_flops_per_s",
    "achieved_bytes_per_s", "attainable_flops_per_s", "bound", "ceiling", "pct_of_ceiling",
    "plotted", "ranks", "rank_min_us", "rank_max_us",
)


def kernel_records(ctx: dict) -> list[dict]:
    """The page's kernel table (columns + rows) back as one dict per group, as its JS rebuilds it."""
    columns = ctx["kernels"]["columns"]
    return [dict(zip(columns, row)) for row in ctx["kernels"]["rows"]]


def _columns(rows: list[dict]) -> dict:
    return {"columns": list(KERNEL_COLUMNS), "rows": [[r[c] for c in KERNEL_COLUMNS] for r in rows]}


def sorted_kernels(diagnosis: Diagnosis) -> list[KernelRow]:
    """The kernel groups by total time, longest first (the page's and the terminal's order)."""
    return sorted(diagnosis.kernels, key=lambda k: (-num(k.total_us), k.rank, k.name))


def page_kernels(diagnosis: Diagnosis) -> tuple[list[KernelRow], dict[int, dict]]:
    """The kernel groups the page and the terminal list, longest first, and their rank spread:
    each rank's rows, or one row per group across ranks when there are many
    (:func:`~bwdiag.report.many_ranks.merge_kernels`; diagnosis.json keeps the per-rank rows)."""
    if not many_ranks.aggregated(diagnosis):
        return sorted_kernels(diagnosis), {}
    merged, spread = many_ranks.merge_kernels(diagnosis.kernels)
    return sorted(merged, key=lambda k: (-num(k.total_us), k.rank, k.name)), spread


def top_kernel_rows(diagnosis: Diagnosis, n: int) -> list[dict]:
    """The ``n`` longest kernel groups as row dicts (shares of all kernel time), for the terminal;
    merged across ranks as the page merges them when there are many."""
    kernels, _ = page_kernels(diagnosis)
    return _kernel_rows(kernels[:n], total=sum(num(k.total_us) for k in kernels))


def _kernel_rows(kernels: list[KernelRow], total: float | None = None,
                 spread: dict[int, dict] | None = None) -> list[dict]:
    """Row dicts of the kernel table; ``spread``: per merged row (by ``id``) the ranks it ran on and
    its least and most per-rank time (:func:`~bwdiag.report.many_ranks.merge_kernels`)."""
    spread = spread or {}
    if total is None:
        total = sum(num(k.total_us) for k in kernels)
    rows = []
    for k in kernels:
        mean = k.mean_us if k.mean_us else (num(k.total_us) / k.count if k.count else None)
        rows.append({
            "name": k.name, "rank": k.rank, "category": k.category, "op": k.op,
            "module": k.module, "shapes": k.shapes, "dtype": k.dtype, "count": k.count,
            "total_us": k.total_us, "mean_us": mean,
            "share_pct": 100.0 * num(k.total_us) / total if total > 0 else None,
            "flops": k.flops, "bytes": k.bytes, "intensity": k.intensity,
            "achieved_flops_per_s": k.achieved_flops_per_s,
            "achieved_bytes_per_s": k.achieved_bytes_per_s,
            "attainable_flops_per_s": k.attainable_flops_per_s,
            "bound": bound_of(k), "ceiling": k.ceiling, "pct_of_ceiling": k.pct_of_ceiling,
            # A mark on the page's chart: a roofline point or one on the bandwidth strip.
            "plotted": plottable(k) or byte_only(k),
            "ranks": spread.get(id(k), {}).get("ranks"),
            "rank_min_us": spread.get(id(k), {}).get("rank_min_us"),
            "rank_max_us": spread.get(id(k), {}).get("rank_max_us"),
        })
    return rows


# --------------------------------------------------------------------------------------- findings


def _findings(d: Diagnosis, kernels: list[KernelRow]) -> list[dict]:
    exact = {k.name for k in kernels} | {k.module for k in kernels if k.module} | {
        k.op for k in kernels if k.op}
    modules = [k.module for k in kernels if k.module]

    def linkable(text: str) -> bool:
        """Evidence naming a kernel, op or module of the table (a module may be named by a
        prefix or by another instance of the repeated layer the group's first call ran in)."""
        if text in exact:
            return True
        return bool(text) and not any(c.isspace() for c in text) and any(
            text in m for m in modules)

    out = []
    idle, total = d.idle, num(d.time.total_us)
    host_wait = num(idle.host_wait_us) / total if idle is not None and total > 0 else None
    scale = unprofiled_scale(d)  # a CPU trace: per-step µs of the unprofiled step, as the projection
    listed = ranked_findings(d)
    titles = [f.title for f in listed]
    for f in listed:
        rule = f.est_saving_per_step_us * scale if f.saving_per_step_us is not None else f.est_saving_us
        out.append({
            "kind": f.kind,
            "kind_label": humanize(f.kind),
            "title": f.title,
            "saving_us": f.saving_us,
            "saving_pct": f.saving_pct,
            **saving_shown(f, scale),
            # both models' figures in one line when they differ (None when they agree)
            "models_note": models_note(f, host_wait),
            "rule_saving_shown_us": rule,
            # the other findings its fix resolves and what the fix saves with them (None for most)
            "same_fix_note": same_fix_note(f, titles, scale),
            "same_fix_refs": same_fix_refs(f, titles) if f.same_fix else None,
            "fix_saving_shown_us": (None if f.fix_saving_us is None else f.fix_saving_per_step_us * scale
                                    if f.fix_saving_per_step_us is not None and f.saving_per_step_us is not None
                                    else f.fix_saving_us),
            "evidence": [{"text": e, "find": e if linkable(e) else None} for e in f.evidence],
            "fix": f.fix,
        })
    return out


# ----------------------------------------------------------------------------------------- what-if


def _whatif(d: Diagnosis) -> dict | None:
    """The what-if for people: the top findings applied together, the step before and after, and
    per finding its own saving beside the part the projection counted (and why it is less).

    ``model`` says which what-if the figures come from (:attr:`~bwdiag.diagnose.model.WhatIf.model`):
    ``graph`` — each finding's own saving is its dependency-graph re-timing alone and the part counted
    is what the graph's window loses when it is applied after the findings above it; ``rule`` — the
    rule's estimates and the subtraction capped per time class. Figures are per median step where
    the trace has complete steps (window figures × step ÷ window, as
    :func:`~bwdiag.report.verdict.saving_shown`), else over the analysed window.
    """
    w = d.whatif
    if w is None or not w.findings or not w.total_us or w.total_us <= 0:
        return None
    step = d.time.step_us
    scale = step / w.total_us if step else 1.0
    graph = w.model == "graph"
    ranked = ranked_findings(d)
    by_title: dict[tuple, int] = {}
    alone: dict[tuple, float] = {}
    for i, f in enumerate(ranked):
        by_title.setdefault((f.kind, f.title), i + 1)
        alone.setdefault((f.kind, f.title), num(f.saving_us))
    rows = []
    for pos, a in enumerate(w.findings):
        if graph:
            est, applied = alone.get((a.kind, a.title), num(a.est_saving_us)), num(a.graph_applied_us)
            capped = applied < est - max(1e-6, 0.01 * abs(est))
            reason = _graph_reason(pos, est, applied) if capped else None
        else:
            est, applied, capped = num(a.est_saving_us), num(a.applied_us), bool(a.capped)
            reason = _rule_reason(pos, applied) if capped else None
        rows.append({
            "finding": by_title.get((a.kind, a.title)),  # its place in the Findings list (#finding-N)
            "kind": a.kind,
            "kind_label": humanize(a.kind),
            "title": a.title,
            "saving_us": est * scale,
            "applied_us": applied * scale,
            "applied_pct": 100.0 * applied / est if est > 0 else None,
            "capped": capped,
            "cap_reason": reason,
        })
    per_step = bool(step)
    saved, base = w.shown_saved_us, w.shown_base_us
    if base >= w.total_us * (1.0 - BASELINE_TOLERANCE):  # no profiler baseline (a re-timing's rounding)
        base, saved = w.total_us, w.total_us - w.shown_projected_us if w.model == "graph" else saved
    unprofiled = d.time.unprofiled_step_us
    shares = bool(per_step and unprofiled and base == w.total_us and d.source.trace_kind == "cpu")
    return {
        "model": w.model,
        "n": len(w.findings),
        "of": len(d.findings),
        "per_step": per_step,
        "unit": "per step" if per_step else "over the window",
        # from the unprofiled step where the graph took the profiler's cost out first (WhatIf.graph_base_us)
        "from_unprofiled": base < w.total_us,
        "before_us": base * scale,
        "after_us": w.shown_projected_us * scale,
        "saved_us": saved * scale,
        "saved_pct": 100.0 * saved / base if base > 0 else None,
        "speedup": w.shown_speedup,
        # the other model's projection, for the one line that names both
        "rule_after_us": num(w.projected_us) * scale,
        "recorded_us": step if per_step else w.total_us,  # what the subtraction starts from
        # a CPU trace: the recorded step's shares applied to the step timed without the profiler
        "unprofiled_before_us": float(unprofiled) if shares else None,
        "unprofiled_after_us": float(unprofiled) * w.shown_projected_us / w.total_us if shares else None,
        "claimed_us": sum(r["saving_us"] for r in rows),
        "capped": sum(1 for r in rows if r["capped"]),
        "rows": rows,
    }


def _rule_reason(pos: int, applied: float) -> str:
    """Why the subtraction counts less of a finding than its estimate."""
    if applied <= 0:
        return ("nothing left to save: findings above it already claim its time, or the "
                "time class it acts on is used up")
    if pos == 0:
        return "capped by the time class it acts on (its estimate is more than that class holds)"
    return ("overlapping time: part of it is already saved by findings above it, or "
            "capped by what its time class has left")


def _graph_reason(pos: int, alone: float, applied: float) -> str:
    """Why the dependency graph counts less of a finding, applied after those above it, than alone."""
    if pos == 0:  # the first is applied alone: the graph's figures differ only by rounding
        return "re-timed together with nothing: the same as alone"
    if applied <= 0:
        return ("nothing left to save once the findings above it are applied: the step then waits on "
                "something else (the host, another stream or other ranks)")
    return ("less once the findings above it are applied: they save part of the same time, or the "
            "step then waits on something else")


# ---------------------------------------------------------------------------------- communication


def _communication(d: Diagnosis, folded: bool = False) -> dict:
    rows = sorted(d.collectives, key=lambda c: (-num(c.total_us), c.rank, c.name))
    n_ranks = max(1, len({c.rank for c in rows}))
    return {
        # Folded (many ranks): one row per collective across ranks, times per rank.
        "aggregated": folded,
        "rows": many_ranks.merge_collectives(rows, n_ranks) if folded else [
            {"name": c.name, "rank": c.rank, "collective": c.collective, "count": c.count,
             "total_us": c.total_us, "exposed_us": c.exposed_us, "bytes": c.bytes,
             "algbw": c.algbw, "busbw": c.busbw, "pct_of_link": c.pct_of_link,
             "group_size": c.group_size, "dtype": c.dtype,
             "regime": c.regime}
            for c in rows
        ],
        # Like ``time``, the totals are per rank (the mean when there are several).
        "total_us": sum(num(c.total_us) for c in rows) / n_ranks,
        "per_rank_mean": n_ranks > 1,
        "exposed_us": d.time.exposed_communication_us,
        "overlap_pct": d.time.communication_overlap_pct,
        "link_bandwidth": d.device.interconnect_bandwidth,
    }


def _ranks(d: Diagnosis) -> list[dict]:
    if len(d.ranks) < 2:
        return []
    longest = max(num(r.total_us) for r in d.ranks) or 1.0
    shortest = min(num(r.total_us) for r in d.ranks)
    most_idle = max(d.ranks, key=lambda r: num(r.idle_us)).rank
    out = []
    for r in sorted(d.ranks, key=lambda r: r.rank):
        total = num(r.total_us)
        overlapped = max(0.0, num(r.communication_us) - num(r.exposed_communication_us))
        other_busy = max(0.0, num(r.busy_us) - num(r.exposed_communication_us))
        out.append({
            "rank": r.rank, "total_us": r.total_us, "busy_us": r.busy_us,
            "compute_us": r.compute_us, "communication_us": r.communication_us,
            "exposed_communication_us": r.exposed_communication_us, "idle_us": r.idle_us,
            "kernels": r.kernels,
            "idle_pct": 100.0 * num(r.idle_us) / total if total > 0 else None,
            "overlapped_us": overlapped,
            # Widths (% of the longest rank) of the stacked bar: busy, exposed comm, idle.
            "bar": {
                "busy": 100.0 * other_busy / longest,
                "communication": 100.0 * num(r.exposed_communication_us) / longest,
                "idle": 100.0 * num(r.idle_us) / longest,
            },
            "most_idle": r.rank == most_idle and num(r.idle_us) > 0,
            "longest": total == longest and longest > shortest,
        })
    return out


def _rank_distributions(d: Diagnosis) -> dict:
    """The per-rank tables of a many-rank job as distributions, with a histogram of the rank time
    the slowest-rank list sorts by."""
    rows = many_ranks.rank_distributions(d)
    steps = {r.rank: many_ranks.median_step(r) for r in d.ranks}
    by_step = all(v is not None for v in steps.values()) and bool(steps)
    values = steps if by_step else {r.rank: r.busy_us for r in d.ranks}
    return {"quantiles": list(many_ranks.QUANTILES), "rows": rows,
            "histogram": many_ranks.histogram(values), "histogram_of": "median step" if by_step else "busy time"}


def _by_rank_tree(key: str, records: list[dict]) -> dict | None:
    """Per-rank records (``idle_by_rank``) as a table, one row per rank; None for one rank."""
    if len(records) < 2:
        return None
    return display_tree(key, {r["rank"]: {k: v for k, v in r.items() if k != "rank"} for r in records})


def _generic_sections(d: Diagnosis, sections: dict, folded: bool = False) -> list[tuple[str, object]]:
    """(key, plain value) of the sections without a place of their own on the page (folded: the
    per-rank launch rows are left to the rank distributions and diagnosis.json)."""
    out: list[tuple[str, object]] = []
    if sections["launch"] is not None:
        out.append(("launch", sections["launch"]))
    if len(sections["launch_by_rank"]) > 1 and not folded:
        out.append(("launch_by_rank", {r["rank"]: {k: v for k, v in r.items() if k != "rank"}
                                       for r in sections["launch_by_rank"]}))
    if sections["compiled"] is not None:
        out.append(("compiled", sections["compiled"]))
    if d.time.step_durations_us:
        out.append(("step_durations_us", dict(zip(d.time.step_ids, d.time.step_durations_us))))
    return out


def _straggler(d: Diagnosis) -> dict | None:
    """The rank the others waited for at matched collectives."""
    s = d.straggler
    if s is None:
        return None
    return {
        "rank": s.rank,
        "made_others_wait_us": s.made_others_wait_us,
        "arrived_last_calls": s.arrived_last_calls,
        "matched_calls": s.matched_calls,
    }
