"""Findings: small rules that turn roofline and timeline facts into fixes ranked by time saved.

The rules, their order and what each skips are listed in :mod:`.registry` (``RULES``; its docstring
says how to add one). Each rule is a pure function of a :class:`~.base.RuleContext` returning
:class:`~.base.RuleResult` s (a finding and what it acts on). After the rules, the what-if
(:mod:`.whatif`) combines their savings into ``Diagnosis.whatif`` (its ``projected_us`` is the
projected window).
"""

from __future__ import annotations

import dataclasses

from bwdiag.diagnose.findings.base import RuleContext, RuleResult, with_findings
from bwdiag.diagnose.findings.registry import RULES, Rule, run_rules
from bwdiag.diagnose.findings.whatif import graph_project, project, with_graph
from bwdiag.diagnose.model import Diagnosis

__all__ = ["RULES", "Rule", "RuleContext", "RuleResult", "add_findings", "graph_project", "project", "run_rules"]


def add_findings(diagnosis: Diagnosis, analyses, results_out: list | None = None,
                 job_ranks: int | None = None) -> Diagnosis:
    """Run every rule; return the diagnosis with its findings sorted by estimated saving and the
    what-if projection. ``results_out``, when given, receives the sorted ``RuleResult`` s (what each
    finding acts on: ``--annotated-trace`` marks those activities). ``job_ranks``: the job's rank
    count when ``analyses`` is one rank of it (the map of :mod:`bwdiag.diagnose.reduce`)."""
    ctx = RuleContext(diagnosis, analyses, job_ranks=job_ranks)
    results = run_rules(ctx)
    results.sort(key=lambda r: -r.finding.est_saving_us)
    if results_out is not None:
        results_out.extend(results)
    projection = project(ctx, results) if results else None
    graph = graph_project(ctx, results) if results else None
    findings = [r.finding for r in results]
    scale = ctx.step_scale
    if graph is not None:
        findings = [dataclasses.replace(f, graph_saving_us=g) for f, g in zip(findings, graph.savings)]
        projection = with_graph(projection, graph)
    if scale is not None:
        findings = [dataclasses.replace(f, est_saving_per_step_us=f.est_saving_us * scale,
                                        graph_saving_per_step_us=None if f.graph_saving_us is None
                                        else f.graph_saving_us * scale) for f in findings]
    return with_findings(diagnosis, findings, projection)
