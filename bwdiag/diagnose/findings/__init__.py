"""Findings: small rules that turn roofline and timeline facts into fixes ranked by time saved.

Each rule is a function ``rule(ctx: RuleContext) -> list[Finding]`` registered in ``RULES``; a rule
that has no evidence returns nothing.
"""

from __future__ import annotations

import dataclasses

from bwdiag.diagnose.findings.base import RULES, RuleContext
from bwdiag.diagnose.model import Diagnosis


def add_findings(diagnosis: Diagnosis, analyses) -> Diagnosis:
    """Run every rule and return the diagnosis with its findings sorted by estimated saving."""
    ctx = RuleContext(diagnosis, analyses)
    findings = [f for rule in RULES for f in rule(ctx)]
    findings.sort(key=lambda f: -f.est_saving_us)
    return dataclasses.replace(diagnosis, findings=tuple(findings))
