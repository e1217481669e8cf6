"""Two diagnoses side by side: the ``diff.json`` document (schema ``bwdiag/diff@1``).

Pure functions of two :class:`~bwdiag.diagnose.model.Diagnosis` objects (no trace, no pandas), so a
diff of two bwdiag output folders needs nothing but their ``diagnosis.json`` files.

Units. Every time is **per median complete step** when both runs have complete steps (a window
total ``x`` becomes ``x × step_us ÷ window_us``, as ``Finding.est_saving_per_step_us`` is made), else
per analysed window (``"unit": "window"``); kernel-group times are the mean over ranks.

Noise rule (:mod:`bwdiag.diff.noise`). A change of the median step is *beyond the noise* when
``|Δmedian| > noise``. With eight or more ordinary steps on each side (steps over 1.5× the median
are events — a checkpoint, a recompilation — not noise) the noise is the larger of 3 standard errors
of the medians' difference and the drift either run shows within itself; with fewer, half the
larger range of the two runs' steps. With one recorded step on both sides the noise is unknown
(``noise_known: false``) and taken as 0. ``--fail-if-slower PCT`` fails when
``Δmedian > noise + PCT% × median_before``.

Findings. Each finding of BEFORE is looked for in AFTER (same kind and the same title with its
numbers blanked out; else the only finding of that kind on both sides). Its status compares the
saving bwdiag still predicts in AFTER with the one it predicted in BEFORE: ``resolved`` when under
20 % of it remains (or the finding is gone), ``still there`` from 80 %, ``partly`` between. The
*realised* saving is measured where the finding acts: on idle time for host-side findings (host,
data loader, syncs, launches), on exposed communication for overlap findings, else on the kernel
groups its evidence names (see :func:`_acts_on`), else on the step (the headline's steps; several
findings measured there each name the others in ``shared_with``: they share one change); and always on
the step too.
``graph_predicted_us`` is the dependency-graph what-if's saving for the finding alone (the trace
re-timed with the fix applied), a prediction of the step's change: ``realised_on_step_over_graph``
compares the two (null in diagnoses written before the graph model). A finding whose fix also resolves
others (``Finding.same_fix``: one ``torch.compile`` covering their code) whose changes show in AFTER
carries ``fix_predicted_us``, the set's saving re-timed together, and ``realised_on_step_over_fix``.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from bwdiag._version import __version__
from bwdiag.diagnose.model import TIME_KEYS, Diagnosis, Finding, KernelRow
from bwdiag.diff import noise as step_noise
from bwdiag.hardware.host import oversubscribed

SCHEMA = "bwdiag/diff@1"

#: A finding whose remaining predicted saving is below this share of the original is resolved.
RESOLVED_BELOW = 0.2
#: ... and from this share on it is still there (between: partly).
STILL_THERE_FROM = 0.8
#: Below this share of BEFORE's kernel time found again in AFTER, the runs likely ran other shapes.
MIN_MATCHED_SHARE = 0.5
#: Finding kinds whose saving is GPU idle time (the host, the input pipeline, syncs, launches).
IDLE_KINDS = frozenset({"host_bound", "data_loader", "sync", "launch_overhead"})
#: Width of kernel names in finding evidence (``diagnose.findings.helpers.kernel_label``).
LABEL_WIDTH = 60
#: Kernel groups listed in diff.json beyond which only totals are kept.
MAX_GROUPS = 200
#: Steps each capture must have timed without the profiler for the verdict to compare those.
MIN_UNPROFILED_STEPS = 3


def compare(before: Diagnosis, after: Diagnosis, *, before_meta: dict | None = None,
            after_meta: dict | None = None) -> dict[str, Any]:
    """The ``diff.json`` document comparing ``before`` with ``after`` (see the module docstring)."""
    per_step = _has_steps(before) and _has_steps(after)
    sb, sa = _scale(before, per_step), _scale(after, per_step)
    step = _step_section(before, after, per_step)
    groups_b, groups_a = _groups(before, sb), _groups(after, sa)
    kernels = _kernel_section(groups_b, groups_a)
    runs, unfair, notes = _runs_section(before, after, kernels)
    time = _time_section(before, after, sb, sa)
    on_step = _step_change(before, step)
    findings = _with_fix(_shared_step([_finding_row(f, before, after, groups_b, groups_a, time, on_step, per_step)
                                       for f in before.findings]), before.findings, per_step)
    doc = {
        "schema": SCHEMA,
        "bwdiag_version": __version__,
        "before": {**(before_meta or {}), "paths": list(before.source.paths)},
        "after": {**(after_meta or {}), "paths": list(after.source.paths)},
        "unit": "step" if per_step else "window",
        "runs": runs,
        "warnings": unfair,
        "notes": notes,
        "step": step,
        "time": time,
        "kernels": kernels,
        "findings": findings,
    }
    doc["headline"] = headline(doc)
    return doc


def gate(doc: dict[str, Any], pct: float) -> dict[str, Any]:
    """The ``--fail-if-slower PCT`` verdict: AFTER's step slower than BEFORE's by more than the
    noise plus ``pct`` % of BEFORE's step, on the steps the headline compares (``headline``)."""
    h = headline(doc)
    limit = h["noise_us"] + pct / 100.0 * h["before_us"]
    return {"fail_if_slower_pct": pct, "limit_us": limit, "failed": h["delta_us"] > limit, "on": h["source"]}


def headline(doc: dict[str, Any]) -> dict[str, Any]:
    """The comparison the verdict states: the steps both captures timed without the profiler when each
    timed at least ``MIN_UNPROFILED_STEPS`` (what the script runs at; the profiler's own cost differs
    between runs whose fixes change the number of ops it records), else the recorded steps."""
    s = doc["step"]
    u = s.get("unprofiled")
    if u and u.get("verdict"):
        return {"source": "unprofiled", **{k: u[k] for k in ("before_us", "after_us", "delta_us", "delta_pct",
                                                             "noise_us", "beyond_noise", "verdict", "clock")},
                "noise_method": u.get("noise_method"),
                "noise_known": True, "steps": [u["steps_before"], u["steps_after"]]}
    return {"source": "recorded", "before_us": s["before"]["median_us"], "after_us": s["after"]["median_us"],
            "delta_us": s["delta_us"], "delta_pct": s["delta_pct"], "noise_us": s["noise_us"],
            "beyond_noise": s["beyond_noise"], "verdict": s["verdict"], "clock": None,
            "noise_known": s["noise_known"], "noise_method": s.get("noise_method"),
            "steps": [s["before"]["steps"], s["after"]["steps"]]}


# ------------------------------------------------------------------------------------ the step

def _step_change(before: Diagnosis, step: dict[str, Any]) -> dict[str, Any]:
    """The step's change a finding's realised saving is measured on when no narrower measure applies:
    the headline's (the unprofiled steps when both captures timed enough of them), given — like every
    saving bwdiag predicts — as its share of BEFORE's profiled step (Δ unprofiled × profiled ÷
    unprofiled step), so that it compares with the prediction. A fused AdamW measured on the recorded
    steps read −2.5 ms where the unprofiled steps, the headline, said +10.7 ms."""
    h = headline({"step": step})
    t = before.time
    if h["source"] == "unprofiled" and t.step_us and t.unprofiled_step_us:
        return {"delta_us": h["delta_us"] * t.step_us / t.unprofiled_step_us, "source": "unprofiled"}
    return {"delta_us": step["delta_us"], "source": "recorded"}



def _has_steps(d: Diagnosis) -> bool:
    return bool(d.time.step_us) and bool(d.time.total_us)


def _scale(d: Diagnosis, per_step: bool) -> float:
    """Multiplier from a window total (mean per rank) to the unit of the diff."""
    return d.time.step_us / d.time.total_us if per_step else 1.0


def _side_step(d: Diagnosis, per_step: bool) -> dict[str, Any]:
    t = d.time
    if not per_step:
        return {"median_us": t.total_us, "statistic": "window", "min_us": t.total_us, "max_us": t.total_us, "spread_us": 0.0,
                "steps": t.steps or 0, "durations_us": [], "step_ids": [], "abnormal_steps": []}
    durations = [x for x in t.step_durations_us if x is not None]
    lo = min(durations) if durations else (t.step_min_us if t.step_min_us is not None else t.step_us)
    hi = max(durations) if durations else (t.step_max_us if t.step_max_us is not None else t.step_us)
    # The noise is the spread of the ordinary steps: a step the diagnosis flags as abnormal (over
    # 1.5x the median: a checkpoint, a recompilation) is an event, not run-to-run noise.
    abnormal = set(t.abnormal_steps)
    ordinary = [x for i, x in zip(t.step_ids, durations) if i not in abnormal] if len(t.step_ids) == len(durations) \
        else durations
    spread = (max(ordinary) - min(ordinary)) if ordinary else hi - lo
    # median_us: the step time as the diagnosis states it (``statistic``: the median, or the mean
    # when slow steps are a pattern)
    return {"median_us": t.step_us, "statistic": t.step_statistic, "min_us": lo, "max_us": hi, "spread_us": spread,
            "steps": t.steps or len(durations), "durations_us": durations, "step_ids": list(t.step_ids),
            "abnormal_steps": sorted(abnormal), "_ordinary": ordinary or [lo, hi]}


def _step_section(before: Diagnosis, after: Diagnosis, per_step: bool) -> dict[str, Any]:
    b, a = _side_step(before, per_step), _side_step(after, per_step)
    delta = a["median_us"] - b["median_us"]
    rule = step_noise.noise(b.pop("_ordinary"), a.pop("_ordinary"))
    noise = rule["noise_us"]
    noise_known = per_step and max(b["steps"], a["steps"]) > 1
    beyond = abs(delta) > noise
    verdict = "no change" if not beyond else ("slower" if delta > 0 else "faster")
    return {
        "before": b,
        "after": a,
        "delta_us": delta,
        "delta_pct": 100.0 * delta / b["median_us"] if b["median_us"] else None,
        "speedup": b["median_us"] / a["median_us"] if a["median_us"] else None,
        "noise_us": noise,
        "noise_known": noise_known,
        "noise_method": rule["method"],
        "noise_rule": step_noise.RULE,
        "beyond_noise": beyond,
        "verdict": verdict,
        "unprofiled": _unprofiled(before, after),
    }


def _unprofiled(before: Diagnosis, after: Diagnosis) -> dict[str, Any] | None:
    """Both runs' steps with no profiler running (the captures' own clock before their windows), when
    both captures timed them: the change the user's script sees, without the profiler's cost."""
    b, a = before.time.unprofiled_step_us, after.time.unprofiled_step_us
    if not b or not a:
        return None
    out = {"before_us": b, "after_us": a, "delta_us": a - b, "delta_pct": 100.0 * (a - b) / b,
           "clock": before.time.unprofiled_clock if before.time.unprofiled_clock == after.time.unprofiled_clock
           else "mixed"}
    db, da = before.time.unprofiled_step_durations_us, after.time.unprofiled_step_durations_us
    if min(len(db), len(da)) >= MIN_UNPROFILED_STEPS and out["clock"] != "mixed":
        # the same noise rule as the recorded steps'
        rule = step_noise.noise(step_noise.ordinary(db, b), step_noise.ordinary(da, a))
        noise = rule["noise_us"]
        beyond = abs(a - b) > noise
        out.update(noise_us=noise, noise_method=rule["method"], beyond_noise=beyond, steps_before=len(db),
                   steps_after=len(da),
                   verdict="no change" if not beyond else ("slower" if a > b else "faster"))
    return out


# ---------------------------------------------------------------------------- time by bound


def _time_section(before: Diagnosis, after: Diagnosis, sb: float, sa: float) -> dict[str, Any]:
    def pair(b: float | None, a: float | None) -> dict[str, float | None]:
        b = None if b is None else b * sb
        a = None if a is None else a * sa
        return {"before_us": b, "after_us": a,
                "delta_us": None if a is None or b is None else a - b}

    by_bound = {k: pair(before.time.by_bound.get(k, 0.0), after.time.by_bound.get(k, 0.0))
                for k in TIME_KEYS}
    return {
        "total": pair(before.time.total_us, after.time.total_us),
        "by_bound": by_bound,
        "exposed_communication": pair(before.time.exposed_communication_us,
                                      after.time.exposed_communication_us),
        "idle": by_bound["idle"],
    }


# ------------------------------------------------------------------------------ kernel groups


def group_key(row: KernelRow) -> tuple:
    """Groups match across runs by (op, shapes, dtype, module): a kernel renamed by a compiler
    or a library update is still the same op on the same shapes. Without a launching op, by name."""
    if row.op:
        return ("op", row.op, row.shapes or "", row.dtype or "", row.module or "")
    return ("name", row.name)


def _groups(d: Diagnosis, scale: float) -> dict[tuple, dict[str, Any]]:
    ranks = max(1, len(set(d.source.ranks)) or len({r.rank for r in d.kernels}))
    out: dict[tuple, dict[str, Any]] = {}
    for row in d.kernels:
        g = out.setdefault(group_key(row), {"us": 0.0, "calls": 0, "names": [], "rows": []})
        g["us"] += row.total_us * scale / ranks
        g["calls"] += row.count
        if row.name not in g["names"]:
            g["names"].append(row.name)
        g["rows"].append(row)
    return out


def _key_dict(key: tuple) -> dict[str, str | None]:
    if key[0] == "op":
        return {"op": key[1], "shapes": key[2] or None, "dtype": key[3] or None, "module": key[4] or None}
    return {"name": key[1]}


def _kernel_section(gb: dict, ga: dict) -> dict[str, Any]:
    rows = []
    for key in {**gb, **ga}:
        b, a = gb.get(key), ga.get(key)
        b_us, a_us = (b["us"] if b else 0.0), (a["us"] if a else 0.0)
        rows.append({
            "key": _key_dict(key),
            "names_before": b["names"] if b else [],
            "names_after": a["names"] if a else [],
            "before_us": b_us,
            "after_us": a_us,
            "delta_us": a_us - b_us,
            "calls_before": b["calls"] if b else 0,
            "calls_after": a["calls"] if a else 0,
            "status": "matched" if a and b else ("vanished" if b else "new"),
        })
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["delta_us"], str(r["key"])))
    total_b = sum(g["us"] for g in gb.values())
    total_a = sum(g["us"] for g in ga.values())
    matched_b = sum(gb[k]["us"] for k in gb if k in ga)
    return {
        "before_us": total_b,
        "after_us": total_a,
        "matched_share_of_before_pct": 100.0 * matched_b / total_b if total_b else None,
        "counts": {s: sum(r["status"] == s for r in rows) for s in ("matched", "new", "vanished")},
        "groups": rows[:MAX_GROUPS],
        "groups_left_out": max(0, len(rows) - MAX_GROUPS),
    }


# ------------------------------------------------------------------------------------ the runs


def _host_load(d: Diagnosis) -> dict[str, Any] | None:
    """``{load1, cores}`` of the host as the capture window opened (bwdiag captures only), else None."""
    host = d.device.trace_host or {}
    load, cores = host.get("load1"), host.get("cores")
    if isinstance(load, (int, float)) and isinstance(cores, int) and cores > 0:
        return {"load1": float(load), "cores": cores}
    return None


def _world(d: Diagnosis) -> int:
    return len(set(d.source.ranks)) or 1


def _runs_section(before: Diagnosis, after: Diagnosis, kernels: dict) -> tuple[dict, list[str], list[str]]:
    def side(d: Diagnosis) -> dict[str, Any]:
        return {"device": d.device.name, "device_kind": d.device.kind, "spec_source": str(d.device.spec_source),
                "trace_kind": str(d.source.trace_kind), "torch_version": d.source.torch_version,
                "world_size": _world(d), "ranks": list(d.source.ranks), "steps": d.time.steps or 0,
                "host_load": _host_load(d)}

    b, a = side(before), side(after)
    unfair, notes = [], []
    busy = [(name, s["host_load"]) for name, s in (("BEFORE", b), ("AFTER", a)) if oversubscribed(s["host_load"])]
    if busy:
        said = " and ".join(f"{name} with a load average of {load['load1']:.1f} on {load['cores']} cores"
                            for name, load in busy)
        unfair.append(f"busy host: {said} was recorded while the host was oversubscribed; its op and step times "
                      "include waiting for a CPU, so part of the change may be the host's, not the code's")
    if b["device"] != a["device"] or b["device_kind"] != a["device_kind"]:
        unfair.append(f"other device: BEFORE ran on {b['device']}, AFTER on {a['device']}; "
                      "the change mixes the code's and the hardware's")
    if b["trace_kind"] != a["trace_kind"]:
        unfair.append(f"other trace kind: BEFORE is a {b['trace_kind']} trace, AFTER a {a['trace_kind']} trace")
    if b["world_size"] != a["world_size"]:
        unfair.append(f"other world size: BEFORE has {b['world_size']} rank(s), AFTER {a['world_size']}; "
                      "per-rank work and communication are not comparable")
    elif sorted(b["ranks"]) != sorted(a["ranks"]):
        notes.append(f"other ranks: BEFORE has ranks {b['ranks']}, AFTER {a['ranks']}; groups are matched "
                     "across them as the mean over each run's ranks")
    share = kernels["matched_share_of_before_pct"]
    if share is not None and kernels["after_us"] and share < 100 * MIN_MATCHED_SHARE:
        unfair.append(f"only {share:.0f}% of BEFORE's kernel time is in groups (op, shapes, dtype, module) "
                      "found in AFTER: other shapes, batch size or model?")
    if b["torch_version"] != a["torch_version"] and b["torch_version"] and a["torch_version"]:
        notes.append(f"torch {b['torch_version']} before, {a['torch_version']} after")
    if not (_has_steps(before) and _has_steps(after)):
        notes.append("one of the runs has no complete profiler step: times are per analysed window")
    elif max(before.time.steps or 0, after.time.steps or 0) <= 1:
        notes.append("one complete step on each side: the run-to-run noise is unknown")
    return {"before": b, "after": a}, unfair, notes


# ------------------------------------------------------------------------------------ findings


def _normal_title(title: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", title).strip().lower()


def _predicted(f: Finding, per_step: bool) -> float:
    if per_step and f.est_saving_per_step_us is not None:
        return f.est_saving_per_step_us
    return f.est_saving_us


def _graph_predicted(f: Finding, per_step: bool) -> float | None:
    """The dependency-graph what-if's saving for this finding alone (None in files without it)."""
    if per_step and f.graph_saving_per_step_us is not None:
        return f.graph_saving_per_step_us
    return f.graph_saving_us


#: A fusion finding's chain in its evidence: "a chain of 3 ops over f32[8, 128, 128] (…): dropout → add → layer_norm".
_CHAIN = re.compile(r"chain of \d+ ops over (\S+?\[[^\]]*\]).*?: ([^:]+→[^:]+)$")


def _chain_of(f: Finding) -> tuple[str, str] | None:
    """(shape, ops) of the chain a fusion finding names, or None: the same chain keeps them when its
    title changes (module names are gone once torch.compile runs: bwdiag skips module annotations)."""
    for line in f.evidence:
        m = _CHAIN.search(line)
        if m:
            return m.group(1), re.sub(r"\s+", " ", m.group(2)).strip()
    return None


def _match_finding(f: Finding, after: Diagnosis) -> Finding | None:
    """BEFORE's finding ``f`` in AFTER: the same kind and title (numbers aside), else the same chain of
    ops over the same shape, else the one finding of its kind — unless both name chains that differ, or
    their titles start with another word (a chain's "Fuse …" is not the optimizer's "Use a fused AdamW
    step …", though both are fusion findings)."""
    same_kind = [g for g in after.findings if g.kind == f.kind]
    for g in same_kind:
        if _normal_title(g.title) == _normal_title(f.title):
            return g
    chain = _chain_of(f)
    if chain is not None:
        for g in same_kind:
            if _chain_of(g) == chain:
                return g
    if (len(same_kind) == 1 and not (chain is not None and _chain_of(same_kind[0]) not in (None, chain))
            and f.title.split()[:1] == same_kind[0].title.split()[:1]):
        return same_kind[0]
    return None


def _label(name: str) -> str:
    return name if len(name) <= LABEL_WIDTH else name[: LABEL_WIDTH - 1] + "…"


def _acts_on(evidence: Iterable[str], groups: dict[tuple, dict]) -> list[tuple]:
    """The kernel groups a finding's evidence names.

    A group is named by ``(op, shapes)`` in a line; by one of its kernels' labels (the name cut as
    the findings cut it) not followed by a parenthesis, or followed by the group's own ``(op`` …;
    or, for a chain of ops (``a → b → c``), when its module is one of the evidence's lines and its
    op (without ``aten::``) is a link of the chain.
    """
    lines = list(evidence)
    modules = {line.strip() for line in lines}
    chain = set()
    for line in lines:
        if "→" in line:
            chain.update(w.strip(" .,:;()…") for w in re.split(r"→|:", line))
    found = []
    for key, g in groups.items():
        op, shapes, module = (key[1], key[2], key[4]) if key[0] == "op" else (None, None, None)
        if op and module and module in modules and op.removeprefix("aten::") in chain:
            found.append(key)
            continue
        own = (f"({op})", f"({op}, {shapes})" if shapes else f"({op})", f"({op}):") if op else ()
        for line in lines:
            if op and shapes and f"({op}, {shapes})" in line:
                break
            if any(_label_named(line, _label(name), own) for name in g["names"]):
                break
        else:
            continue
        found.append(key)
    return found


def _reshaped(keys: list[tuple], ga: dict[tuple, dict]) -> bool:
    """Whether none of the op groups ``keys`` is in AFTER but each op of them is, at other shapes: the
    change moved the work to new groups, and their before − after is not the finding's doing."""
    ops = [k for k in keys if k[0] == "op"]
    if not ops or len(ops) != len(keys) or any(k in ga for k in ops):
        return False
    after_ops = {k[1] for k in ga if k[0] == "op"}
    return all(k[1] in after_ops for k in ops)


def _label_named(line: str, label: str, own: tuple[str, ...]) -> bool:
    at = line.find(label)
    while at >= 0:
        rest = line[at + len(label):].lstrip()
        if not rest.startswith("(") or any(rest.startswith(o) for o in own):
            return True
        at = line.find(label, at + 1)
    return False


def _shared_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows measured on the step each hold the whole step's change: where several are, each says how
    many share it (``shared_with``: the others' titles), so a reader does not add them up."""
    on_step = [r for r in rows if r["measured_on"].startswith("the step")]
    for r in rows:
        mine = any(o is r for o in on_step)
        r["shared_with"] = [o["title"] for o in on_step if o is not r] if mine and len(on_step) > 1 else []
        if r["shared_with"]:
            r["measured_on"] += f" — the same change as {len(r['shared_with'])} other finding(s) measured there"
    return rows


def _with_fix(rows: list[dict[str, Any]], findings: Iterable[Finding], per_step: bool) -> list[dict[str, Any]]:
    """Each row of a finding whose fix also resolves others (``Finding.same_fix``) gets what BEFORE
    predicted for the fix as applied (``fix_predicted_us``: the set re-timed together) when at least one
    of those others is no longer "still there" in AFTER (``fix_applied_with``: their titles) — one change
    resolved several findings, so the step's change is compared with the set's saving
    (``realised_on_step_over_fix``), not the finding's alone. None where the fix covers no other finding
    or none of them changed."""
    status = {r["title"]: r["status"] for r in rows}
    for r, f in zip(rows, findings):
        applied = [t for t in f.same_fix if status.get(t, "resolved") != "still there"]
        fix = f.fix_saving_per_step_us if per_step and f.fix_saving_per_step_us is not None else f.fix_saving_us
        if not applied or fix is None:
            r.update(fix_predicted_us=None, fix_applied_with=[], realised_on_step_over_fix=None)
            continue
        r.update(fix_predicted_us=fix, fix_applied_with=applied,
                 realised_on_step_over_fix=r["realised_on_step_us"] / fix if fix > 0 else None)
    return rows


def _finding_row(f: Finding, before: Diagnosis, after: Diagnosis, gb: dict, ga: dict,
                 time: dict, step: dict, per_step: bool) -> dict[str, Any]:
    """One finding of BEFORE in AFTER; ``step``: :func:`_step_change`."""
    on_step = "the step" + (" (its unprofiled steps, as a share of the profiled one)" if step["source"] == "unprofiled"
                            else "")
    predicted = _predicted(f, per_step)
    graph = _graph_predicted(f, per_step)
    later = _match_finding(f, after)
    remaining = _predicted(later, per_step) if later is not None else 0.0
    share = remaining / predicted if predicted > 0 else (1.0 if later is not None else 0.0)
    status = ("resolved" if later is None or share < RESOLVED_BELOW
              else "still there" if share >= STILL_THERE_FROM else "partly")
    keys = _acts_on(f.evidence, gb)
    kind = str(f.kind)
    if kind in IDLE_KINDS:  # the saving is idle time, whatever kernels the evidence names
        measured_on = "idle time"
        realised = -time["idle"]["delta_us"]
    elif kind == "overlap":  # hiding a collective saves its exposed part, not its time
        measured_on = "exposed communication"
        realised = -time["exposed_communication"]["delta_us"]
    elif keys and not _reshaped(keys, ga):
        measured_on = f"{len(keys)} kernel group(s) named in its evidence"
        realised = sum(gb[k]["us"] for k in keys) - sum(ga[k]["us"] for k in keys if k in ga)
    elif keys:  # every group it names is gone and its ops run at other shapes (a batch-size fix): not comparable
        measured_on = f"{on_step}: the groups it names run at other shapes in AFTER"
        realised = -step["delta_us"]
    else:
        measured_on = on_step
        realised = -step["delta_us"]
    return {
        "kind": kind,
        "title": f.title,
        "status": status,
        "predicted_us": predicted,
        "remaining_predicted_us": remaining,
        "after_title": later.title if later is not None else None,
        "realised_us": realised,
        "measured_on": measured_on,
        "groups": [_key_dict(k) for k in keys],
        "realised_on_step_us": -step["delta_us"],
        "realised_over_predicted": realised / predicted if predicted > 0 else None,
        # The graph model predicts the step: compare it with what the step gained.
        "graph_predicted_us": graph,
        "realised_on_step_over_graph": -step["delta_us"] / graph if graph is not None and graph > 0 else None,
    }
