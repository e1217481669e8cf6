"""What every findings rule receives, and the registry of rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bwdiag.diagnose.model import Diagnosis, Finding


@dataclass(frozen=True)
class RuleContext:
    diagnosis: Diagnosis  # roofline + timeline facts (typed)
    analyses: list  # list[build.RankAnalysis]: per-rank activities and groups (DataFrames)

    @property
    def total_us(self) -> float:
        return self.diagnosis.time.total_us


Rule = Callable[[RuleContext], list[Finding]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    """Register a findings rule."""
    RULES.append(fn)
    return fn
