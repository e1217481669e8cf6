"""Findings: small rules that turn roofline and timeline facts into fixes ranked by time saved.

Each rule is a function ``rule(ctx: RuleContext) -> list[Finding]`` registered in ``RULES`` (the
modules below register theirs on import); a rule that has no evidence returns nothing. After the
rules, the what-if (:mod:`.whatif`) combines their savings into ``Diagnosis.whatif`` (whose
``projected_us`` is the projected window).
"""

from __future__ import annotations

import dataclasses

# Import order is rule order: rules that claim specific kernels (eager attention, optimizer steps,
# layout and cast conversions) run before the generic fusion rule, which skips what they claimed.
from bwdiag.diagnose.findings import (  # noqa: F401, I001  (importing registers the rules)
    attention,
    optimizer,
    batching,
    conversions,
    fusion,
    host,
    launch,
    overlap,
    precision,
    quantization,
    kv_cache,
)
from bwdiag.diagnose.findings.base import RULES, RuleContext
from bwdiag.diagnose.findings.whatif import project
from bwdiag.diagnose.model import Diagnosis


def add_findings(diagnosis: Diagnosis, analyses) -> Diagnosis:
    """Run every rule; return the diagnosis with its findings sorted by estimated saving and the
    what-if projection."""
    ctx = RuleContext(diagnosis, analyses)
    findings = [f for rule in RULES for f in rule(ctx)]
    findings.sort(key=lambda f: -f.est_saving_us)
    whatif = project(ctx, findings) if findings else None
    scale = ctx.step_scale
    if scale is not None:
        findings = [dataclasses.replace(f, est_saving_per_step_us=f.est_saving_us * scale) for f in findings]
    return dataclasses.replace(diagnosis, findings=tuple(findings), whatif=whatif)
