"""Map per rank, reduce per job: the analysis split so that no process holds more than one rank's events.

The **map**, :func:`summarize_rank`, diagnoses one loaded rank on its own — activities, roofline,
timeline, and the findings rules run on that rank alone (each rule sees a one-rank context whose
diagnosis is the rank's own) — and keeps only its :class:`~bwdiag.diagnose.digest.RankDigest`.
The **reduce**, :func:`reduce`, builds the job's ``Diagnosis`` from the digests: it drops earlier
profiling windows of one process, assigns ranks, resolves the job's device, assembles the
per-rank facts (:func:`~bwdiag.diagnose.assemble.assemble`) and merges the ranks' findings.

Findings across ranks: the ranks' findings of one kind and title (numbers in the title ignored:
"Capture the 1,024 small launches" and "... 1,020 ..." are one finding) become one finding whose
saving is the mean over *all* the job's ranks (a rank without it saves nothing), with the evidence
of the rank where it saves most and a line saying on how many ranks it was found; findings under
the job's reporting threshold are dropped. The what-if is the mean over ranks of what each rank's
own what-if applied of each of the job's top findings. The dependency graph's figures (each
finding's ``graph_saving_us``, the what-if's ``graph_*``) are merged the same way, and the job's
findings are ranked by the saving the views show (:func:`~bwdiag.diagnose.findings.ranked`). With one rank the map's findings and
what-if are the job's, unchanged: a single-file analysis gives the same numbers as before the split.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from bwdiag.diagnose.assemble import accelerator_of, assemble, job_device
from bwdiag.diagnose.build import diagnose_with_digests
from bwdiag.diagnose.digest import RankDigest, RankFinding, spec_key
from bwdiag.diagnose.findings import add_findings, ranked
from bwdiag.diagnose.findings.base import RuleContext, RuleResult, with_findings
from bwdiag.diagnose.findings.whatif import PROJECTED_FINDINGS
from bwdiag.diagnose.model import TIME_KEYS, AppliedFinding, Diagnosis, Finding, WhatIf
from bwdiag.errors import TraceError
from bwdiag.trace.load import RankTrace, assign_ranks
from bwdiag.trace.windows import one_window_per_process, process_key

_NUMBER = re.compile(r"\d[\d,.]*")




class RankMap:
    """What the map hands back for one rank: its digest, and (``keep=True``, in-process engines only)
    the full analysis and the rules' results that ``--annotated-trace`` needs."""

    __slots__ = ("digest", "analysis", "results")

    def __init__(self, digest: RankDigest, analysis=None, results: list[RuleResult] | None = None):
        self.digest, self.analysis, self.results = digest, analysis, results


def summarize_rank(trace: RankTrace, *, device_spec: Path | None = None, keep: bool = False,
                   job_ranks: int | None = None) -> RankMap:
    """The map: diagnose one rank on its own and summarise it (see the module docstring).

    A rank the trace does not name (-1) is diagnosed as rank 0 until :func:`reduce` assigns its
    number. ``keep``: also hand back the analysis (its DataFrames) and the rules' results.
    ``job_ranks``: how many rank files the job has (``RuleContext.job_ranks``: rules that weigh a
    fact of the job, such as the cores its ranks share, see the whole job, not this one rank).
    """
    named, process = trace.rank, process_key(trace)  # the process key says -1 for an unnamed rank
    if trace.rank < 0:
        trace.rank = 0
    diagnosis, (analysis,), (digest,) = diagnose_with_digests([trace], device_spec=device_spec)
    results: list[RuleResult] = []
    diagnosis = add_findings(diagnosis, [analysis], results_out=results,
                             job_ranks=job_ranks if job_ranks and job_ranks > 1 else None)
    applied = diagnosis.whatif.findings if diagnosis.whatif is not None else ()
    digest.named_rank, digest.process = named, process
    # diagnosis.findings are the results' findings, in their order, with the per-step savings set
    digest.findings = tuple(
        RankFinding(f, float(r.idle_us), float(applied[i].applied_us) if i < len(applied) else None,
                    applied[i].graph_applied_us if i < len(applied) else None)
        for i, (f, r) in enumerate(zip(diagnosis.findings, results, strict=True)))
    digest.whatif = diagnosis.whatif
    return RankMap(digest, analysis, results) if keep else RankMap(digest)


def reduce(maps: Sequence[RankMap], failures: Sequence[str] = (), *, device_spec: Path | None = None,
           results_out: list | None = None) -> tuple[Diagnosis, list]:
    """The job's diagnosis from the ranks' maps (in file order) and the ranks that could not be read
    (``failures``: one message each, naming the file and why). Returns the diagnosis and, when the
    maps kept them, the ranks' analyses in the diagnosis' rank order (else ``[]``); ``results_out``
    receives the merged ``RuleResult`` s (maps made with ``keep=True`` only).

    Every rank missing: the one error, or all of them, as a ``TraceError``.
    """
    if not maps:
        raise TraceError(failures[0] if len(failures) == 1 else "no readable trace: " + "; ".join(failures))
    warnings = [f"skipped unreadable rank file: {e}" for e in failures]
    by_digest = {id(m.digest): m for m in maps}
    digests = one_window_per_process([m.digest for m in maps], warnings,
                                     key=lambda d: d.process, start=lambda d: d.start_ns)
    for d in digests:
        d.rank = d.named_rank
    assign_ranks(digests, warnings)
    for d in digests:
        warnings.extend(d.load_warnings)
    ordered = sorted(digests, key=lambda d: d.rank)
    maps = [by_digest[id(d)] for d in ordered]
    digests = [d if d.summary.rank == d.rank else d.with_rank(d.rank) for d in ordered]

    trace_kind = "gpu" if any(d.is_gpu for d in digests) else "cpu"
    first = next((d for d in digests if d.is_gpu), digests[0])
    spec, spec_warnings = job_device(first.device_properties, trace_kind, [d.metadata for d in digests],
                                     accelerator_of(d.accelerators for d in digests), device_spec)
    warnings.extend(spec_warnings)
    job_key = spec_key(spec)
    warnings.extend(f"{d.path.name}: rank {d.rank} is placed against its own device ({d.spec_name}), "
                    f"not the job's ({spec.name})" for d in digests if d.spec_key != job_key)
    diagnosis = assemble(digests, spec, warnings)
    findings, members = merge_findings(diagnosis, digests)
    projection = merge_whatif(diagnosis, findings, members, digests)
    if results_out is not None and all(m.results is not None for m in maps):
        results_out.extend(_merged_results(findings, members, maps, len(digests)))
    analyses = [m.analysis for m in maps] if all(m.analysis is not None for m in maps) else []
    return with_findings(diagnosis, findings, projection), analyses


def _key(f: Finding) -> tuple[str, str]:
    return str(f.kind), _NUMBER.sub("#", f.title)


def merge_findings(diagnosis: Diagnosis, digests: Sequence[RankDigest]
                   ) -> tuple[list[Finding], list[list[tuple[int, int]]]]:
    """The job's findings from the ranks' (module docstring), largest saving first, and for each the
    (rank position, index in that rank's findings) it was merged from."""
    n = len(digests)
    if n == 1:
        found = [f.finding for f in digests[0].findings]
        return found, [[(0, i)] for i in range(len(found))]
    groups: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for pos, d in enumerate(digests):
        for i, rf in enumerate(d.findings):
            groups.setdefault(_key(rf.finding), []).append((pos, i))
    ctx = RuleContext(diagnosis, ())
    total, scale = ctx.total_us, ctx.step_scale
    merged: list[tuple[Finding, list[tuple[int, int]]]] = []
    for members in groups.values():
        savings = [digests[p].findings[i].finding.est_saving_us for p, i in members]
        saving = float(sum(savings) / n)
        graphs = [digests[p].findings[i].finding.graph_saving_us for p, i in members]
        graph = float(sum(graphs) / n) if all(g is not None for g in graphs) else None
        # Under the job's threshold: dropped, unless its ranks report it with no saving on purpose
        # (a finding that names a problem and says why no saving is claimed).
        if not ctx.worth_reporting(saving) and any(s > 0 for s in savings):
            continue
        best_pos, best_i = members[int(np.argmax(savings))]
        best = digests[best_pos].findings[best_i].finding
        ranks = len({p for p, _ in members})
        note = (f"found on {ranks} of {n} ranks; the figures above are rank {digests[best_pos].rank}'s "
                f"(where it saves most), the saving is the mean over all {n} ranks")
        merged.append((dataclasses.replace(
            best, est_saving_us=saving, est_saving_pct=float(100.0 * saving / total) if total > 0 else 0.0,
            evidence=(*best.evidence, note),
            est_saving_per_step_us=saving * scale if scale is not None else None, graph_saving_us=graph,
            # the share of the job's mean window, as the merged what-if takes it (not the best rank's own)
            graph_saving_pct=float(100.0 * graph / total) if graph is not None and total > 0 else None,
            graph_saving_per_step_us=graph * scale if graph is not None and scale is not None else None), members))
    merged.sort(key=lambda fm: -fm[0].est_saving_us)
    merged = [merged[i] for i in ranked([f for f, _ in merged])]
    return [f for f, _ in merged], [m for _, m in merged]


def merge_whatif(diagnosis: Diagnosis, findings: Sequence[Finding], members: Sequence[list[tuple[int, int]]],
                 digests: Sequence[RankDigest]) -> WhatIf | None:
    """The job's what-if: for each of its top findings, the mean over ranks of what the rank's own
    what-if applied of it (ranks where it was not projected apply nothing)."""
    if not findings:
        return None
    if len(digests) == 1:
        return digests[0].whatif
    n, total = len(digests), diagnosis.time.total_us
    # the graph's figures only when every rank that projected findings re-timed them on its graph
    whatifs = [d.whatif for d in digests if d.whatif is not None]
    with_graph = bool(whatifs) and all(w.graph_projected_us is not None for w in whatifs)
    applied, saved, graph_saved = [], 0.0, 0.0
    for f, mem in list(zip(findings, members))[:PROJECTED_FINDINGS]:
        take = sum(digests[p].findings[i].applied_us or 0.0 for p, i in mem) / n
        take = float(min(take, max(0.0, total - saved)))
        saved += take
        graph_take = None
        if with_graph:
            graph_take = sum(digests[p].findings[i].graph_applied_us or 0.0 for p, i in mem) / n
            graph_take = float(min(graph_take, max(0.0, total - graph_saved)))
            graph_saved += graph_take
        applied.append(AppliedFinding(f.kind, f.title, float(f.est_saving_us), take,
                                      bool(take < f.est_saving_us - 1e-6), graph_take))
    projected = float(max(0.0, total - saved))
    # per class, what the findings leave: each rank's own what-if (a rank without one leaves all its time)
    unclaimed = {k: sum(_unclaimed(d).get(k, 0.0) for d in digests) / n for k in TIME_KEYS}
    out = WhatIf(tuple(applied), total, float(saved), projected, float(total / projected) if projected > 0 else None,
                 unclaimed_us=unclaimed)
    if not with_graph:
        return out
    graph_projected = float(max(0.0, total - graph_saved))
    return dataclasses.replace(out, graph_projected_us=graph_projected, graph_saved_us=float(graph_saved),
                               graph_speedup=float(total / graph_projected) if graph_projected > 0 else None)


def _unclaimed(digest) -> dict[str, float]:
    """Per time class, what a rank's findings leave unclaimed: its what-if's, else all of its time."""
    w = digest.whatif
    if w is not None and w.unclaimed_us:
        return w.unclaimed_us
    rank_time = getattr(digest, "time", None)
    return dict(getattr(rank_time, "by_bound", None) or {})


def _merged_results(findings, members, maps, n: int) -> list[RuleResult]:
    """One ``RuleResult`` per job finding: the activities its ranks' results act on, keyed by rank
    position, and their idle time as a mean over ranks."""
    if n == 1:
        return list(maps[0].results)
    out = []
    for f, mem in zip(findings, members):
        acts = {p: maps[p].results[i].acts.get(0, np.array([], dtype=int)) for p, i in mem}
        idle = sum(maps[p].results[i].idle_us for p, i in mem) / n
        out.append(RuleResult(f, acts, float(idle)))
    return out
