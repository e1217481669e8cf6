"""Findings: small rules that turn roofline and timeline facts into fixes ranked by time saved.

The rules, their order and what each skips are listed in :mod:`.registry` (``RULES``; its docstring
says how to add one). Each rule is a pure function of a :class:`~.base.RuleContext` returning
:class:`~.base.RuleResult` s (a finding and what it acts on). After the rules, the what-if
(:mod:`.whatif`) re-times each finding alone on the dependency graph, ranks the findings by the saving
the views show (:func:`ranked`) and projects the top ones together in that order into
``Diagnosis.whatif``.
"""

from __future__ import annotations

import dataclasses

from bwdiag.diagnose.findings.base import RuleContext, RuleResult, with_findings
from bwdiag.diagnose.findings.registry import RULES, Rule, run_rules
from bwdiag.diagnose.findings.compile_costs import dropout_draws
from bwdiag.diagnose.findings.helpers import fmt_time
from bwdiag.diagnose.findings.same_fix import compile_scope, same_fix_sets
from bwdiag.diagnose.findings.whatif import (graph_alone, graph_project, graph_together, project, together_savings,
                                             with_graph)
from bwdiag.diagnose.model import Diagnosis

__all__ = ["RULES", "Rule", "RuleContext", "RuleResult", "add_findings", "graph_project", "project", "ranked",
           "run_rules"]


def add_findings(diagnosis: Diagnosis, analyses, results_out: list | None = None,
                 job_ranks: int | None = None) -> Diagnosis:
    """Run every rule; return the diagnosis with its findings ranked by the saving the views show
    (:attr:`~bwdiag.diagnose.model.Finding.saving_us`: the dependency graph's where there is one,
    else the rule's) and the what-if of the top ones, in that order. ``results_out``, when given,
    receives the ``RuleResult`` s in the same order (what each finding acts on:
    ``--annotated-trace`` marks those activities). ``job_ranks``: the job's rank count when
    ``analyses`` is one rank of it (the map of :mod:`bwdiag.diagnose.reduce`)."""
    ctx = RuleContext(diagnosis, analyses, job_ranks=job_ranks)
    results = run_rules(ctx)
    results.sort(key=lambda r: -r.finding.est_saving_us)
    alone = graph_alone(ctx, results) if results else None
    if alone is not None:
        # the share of the window the projection starts from, as the what-if takes it (with_graph):
        # with several ranks the graph's own window (first to last event of the job) is not the
        # diagnosis' mean rank window, and a finding's share must be of the latter
        base = alone.base_in(ctx.total_us)
        results = [dataclasses.replace(r, finding=dataclasses.replace(
                       r.finding, graph_saving_us=g, graph_saving_pct=100.0 * g / base if base > 0 else None))
                   for r, g in zip(results, alone.savings)]
    order = ranked([r.finding for r in results])
    results = [results[i] for i in order]
    if alone is not None:
        alone = alone.reordered(order)
    results = _with_same_fix(ctx, results, alone)
    results = _with_eager_draws(ctx, results)
    if results_out is not None:
        results_out.extend(results)
    projection = project(ctx, results) if results else None
    graph = graph_together(alone) if alone is not None else None
    if graph is not None:
        projection = with_graph(projection, graph)
    findings = [r.finding for r in results]
    scale = ctx.step_scale
    if scale is not None:
        findings = [dataclasses.replace(f, est_saving_per_step_us=f.est_saving_us * scale,
                                        graph_saving_per_step_us=None if f.graph_saving_us is None
                                        else f.graph_saving_us * scale,
                                        fix_saving_per_step_us=None if f.fix_saving_us is None
                                        else f.fix_saving_us * scale) for f in findings]
    return with_findings(diagnosis, findings, projection)


def _with_same_fix(ctx: RuleContext, results: list[RuleResult], alone) -> list[RuleResult]:
    """``results`` with, on each finding whose fix also resolves others (:mod:`.same_fix`), their titles
    and the saving of the set applied together (:func:`~.whatif.together_savings`)."""
    sets = same_fix_sets([r.finding.fix for r in results], ctx.is_training)
    if not any(sets):
        return results
    savings = together_savings(ctx, results, sets, alone)
    return [r if not others or saving is None else dataclasses.replace(r, finding=dataclasses.replace(
                r.finding, same_fix=tuple(results[j].finding.title for j in others),
                fix_saving_us=float(saving[0]), fix_saving_pct=float(saving[1])))
            for r, others, saving in zip(results, sets, savings)]


def _with_eager_draws(ctx: RuleContext, results: list[RuleResult]) -> list[RuleResult]:
    """``results`` with, on a CPU training trace whose dropout Inductor would draw slower than eager did
    (:mod:`.compile_costs`), every fix that compiles the step keeping eager's draws: a second line
    that sets ``fallback_random`` and the evidence line that says why (the saving, which counts the
    draws as eager's, stands)."""
    draws = dropout_draws(ctx)
    if draws is None:
        return results

    def with_line(fix: str) -> str:  # right under the compile line, before the fix's comments
        first, *rest = fix.splitlines()
        return "\n".join([first, draws.fix_line(), *rest])
    return [dataclasses.replace(r, finding=dataclasses.replace(
                r.finding, fix=with_line(r.finding.fix),
                evidence=(*r.finding.evidence, draws.line(fmt_time, ctx.per_step))))
            if compile_scope(r.finding.fix) is not None else r for r in results]


def ranked(findings) -> list[int]:
    """Positions of ``findings`` largest shown saving first (``Finding.saving_us``); ties keep the
    rule's estimate's order (a stable sort of findings already sorted by it)."""
    return sorted(range(len(findings)), key=lambda i: -findings[i].saving_us)
