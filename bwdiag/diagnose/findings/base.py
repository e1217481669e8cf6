"""What a findings rule receives (:class:`RuleContext`) and what it returns (:class:`RuleResult`).

A rule is a pure function ``rule(ctx) -> list[RuleResult]``: it reads the context and builds its
results with :meth:`RuleContext.finding`, which pairs each finding with *what it acts on* — the
activities (per rank) or the GPU idle time it would remove. Those claims are plain data: the
registry (:mod:`.registry`) hands the claims of the rules a rule declares it ``skips`` to that rule
(:meth:`RuleContext.claimed`), and the what-if (:mod:`.whatif`) combines findings without counting
the same kernel twice or saving more time than a bound class holds.

This module is also the one place in ``findings/`` that reads or writes ``diagnosis.extras``: the
timeline facts rules need come through :attr:`RuleContext.idle`, :attr:`RuleContext.launch` and
:attr:`RuleContext.comm_fit` as small typed views, and :func:`with_findings` writes the results back.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from bwdiag.diagnose.findings.helpers import fmt_time
from bwdiag.diagnose.model import Diagnosis, Finding, FindingKind
from bwdiag.diagnose.names import name_matches

#: A finding whose saving is under this share of the window is noise, not advice ...
MIN_SAVING_PCT = 0.5
#: ... unless it is at least this share of the device's busy time (a trace that is mostly idle
#: must not hide kernel-level fixes).
MIN_SAVING_BUSY_PCT = 2.0

_TRAINING = re.compile(r"[Bb]ackward|Optimizer\.step|autograd::engine")


@dataclass(frozen=True, eq=False)
class RuleResult:
    """One finding and what its saving comes out of.

    ``acts``: rank position -> row positions in that rank's ``activities`` (the kernels the fix
    removes or speeds up); ``idle_us``: GPU idle time (mean per rank) the fix removes instead.
    ``kind``, ``title`` and ``est_saving_us`` read through to the finding.
    """

    finding: Finding
    acts: Mapping[int, np.ndarray] = field(default_factory=dict)
    idle_us: float = 0.0

    @property
    def kind(self) -> str:
        return self.finding.kind

    @property
    def title(self) -> str:
        return self.finding.title

    @property
    def est_saving_us(self) -> float:
        return self.finding.est_saving_us


# -- timeline facts (typed views of diagnosis.extras) ---------------------------------------------


@dataclass(frozen=True)
class SyncSite:
    """A host call the GPU waited on (``.item()``, ``cudaStreamSynchronize`` …)."""

    name: Any
    count: Any
    total_us: float


@dataclass(frozen=True)
class IdleFacts:
    """GPU idle time by cause (µs, mean per rank): :func:`bwdiag.diagnose.idle.idle_breakdown`."""

    host_wait_us: float  # the GPU waiting for the host to issue work
    gaps: float  # idle gaps counted (a mean over ranks: may be fractional)
    sync_us: float  # host-wait explained by synchronisation
    data_loader_us: float  # host-wait inside DataLoader __next__
    top_syncs: tuple[SyncSite, ...] = ()
    sync_in_data_loader_us: float = 0.0  # the part of sync_us inside DataLoader __next__ (both see it)


@dataclass(frozen=True)
class LaunchFacts:
    """Kernel-launch facts (mean per rank): :func:`bwdiag.diagnose.launch.launch_stats`."""

    kernels: float
    short_kernels: float  # kernels under 10 µs
    short_kernel_us: float
    cpu_launch_us: float  # launch API calls on the host
    gpu_busy_us: float
    launch_bound: bool
    mean_queue_length: float | None


@dataclass(frozen=True)
class CommFit:
    """The collective latency/bandwidth fit ``t = α + n/β`` with the most points."""

    alpha_us: float
    beta_bytes_per_s: float
    collective: str | None  # None: fitted over every collective


def _idle_facts(idle: Any) -> IdleFacts | None:
    if not isinstance(idle, dict):
        return None
    causes = idle.get("causes") or {}
    tops = tuple(SyncSite(s.get("name"), s.get("count"), float(s.get("total_us") or 0))
                 for s in idle.get("top_syncs") or [])
    return IdleFacts(float(idle.get("host_wait_us") or 0.0), idle.get("gaps") or 0,
                     float(causes.get("sync_us") or 0.0), float(causes.get("data_loader_us") or 0.0), tops,
                     float(causes.get("sync_in_data_loader_us") or 0.0))


def _launch_facts(launch: Any) -> LaunchFacts | None:
    if not isinstance(launch, dict):
        return None
    return LaunchFacts(launch.get("kernels") or 0, launch.get("short_kernels") or 0,
                       float(launch.get("short_kernel_us") or 0), float(launch.get("cpu_launch_us") or 0),
                       float(launch.get("gpu_busy_us") or 0), bool(launch.get("launch_bound")),
                       launch.get("mean_queue_length"))


def _comm_fit(fit: Any) -> CommFit | None:
    if not isinstance(fit, dict) or not fit.get("alpha_us") or not fit.get("beta_bytes_per_s"):
        return None
    return CommFit(float(fit["alpha_us"]), float(fit["beta_bytes_per_s"]), fit.get("collective"))


def with_findings(diagnosis: Diagnosis, findings: Sequence[Finding], projection: dict | None) -> Diagnosis:
    """The diagnosis with its findings and, when there are any, the what-if projection
    (``{"projected_us", "whatif"}``) in ``extras``."""
    extras = dict(diagnosis.extras)
    if projection:
        extras.update(projection)
    return dataclasses.replace(diagnosis, findings=tuple(findings), extras=extras)


# -- the context ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleContext:
    """Everything a rule reads: the typed diagnosis, the per-rank tables, and the results of the
    rules it declared (in the registry) that it skips."""

    diagnosis: Diagnosis  # roofline + timeline facts (typed)
    analyses: Sequence  # build.RankAnalysis per rank: activities, groups (DataFrames), trace.ops
    #: rule name -> that rule's results, for the rules this one ``skips`` (filled by the registry)
    prior: Mapping[str, tuple[RuleResult, ...]] = field(default_factory=dict)

    # -- timeline facts: the only reads of ``diagnosis.extras`` in findings/ --

    @property
    def idle(self) -> IdleFacts | None:
        """GPU idle by cause; None on CPU traces (or when the timeline did not measure it)."""
        return _idle_facts(self.diagnosis.extras.get("idle"))

    @property
    def launch(self) -> LaunchFacts | None:
        """Kernel-launch facts; None on CPU traces."""
        return _launch_facts(self.diagnosis.extras.get("launch"))

    @property
    def comm_fit(self) -> CommFit | None:
        """The collective α/β fit, None without one (or with α or β zero)."""
        return _comm_fit(self.diagnosis.extras.get("comm_fit"))

    # -- the window and its units --

    @property
    def total_us(self) -> float:
        return self.diagnosis.time.total_us

    @property
    def ranks(self) -> int:
        return max(1, len(self.analyses))

    @property
    def is_cpu(self) -> bool:
        return self.diagnosis.source.trace_kind == "cpu"

    def pct(self, saving_us: float) -> float:
        """``saving_us`` as a share of the analysed window (mean per rank), in percent."""
        return 100.0 * saving_us / self.total_us if self.total_us > 0 else 0.0

    @property
    def step_scale(self) -> float | None:
        """Median step ÷ window (per rank): turns a window total into a per-step figure.

        ``None`` when the trace has no complete profiler step. Rules compute savings over the
        analysed window (which may hold partial steps); scaling by the window's share of one median
        step keeps "saves" comparable with "Step" and "Projected".
        """
        step, total = self.diagnosis.time.step_us, self.total_us
        return step / total if step and total > 0 else None

    def per_step(self, saving_us: float) -> str:
        """A window total with its unit: ``"1.2 ms over the window (400 µs per step)"`` — the
        evidence's arithmetic is over the window, the per-step figure is what "saves" shows."""
        scale = self.step_scale
        text = f"{fmt_time(saving_us)} over the window"
        return text if scale is None else f"{text} ({fmt_time(saving_us * scale)} per step)"

    def times(self, count: float) -> str:
        """A repeat count with its unit: ``"×15 in the window, ≈5 per step"``."""
        text = f"×{count:,.0f} in the window"
        scale = self.step_scale
        per = round(count * scale) if scale is not None else 0
        if per >= 1 and per == round(count):  # the window is one step
            return f"×{per:,} per step"
        return text + (f", ≈{per:,} per step" if per >= 1 else "")

    @property
    def busy_us(self) -> float:
        """Time the device (or CPU thread) was running something, mean per rank."""
        ranks = self.diagnosis.ranks
        return sum(r.busy_us for r in ranks) / len(ranks) if ranks else self.total_us

    @property
    def is_training(self) -> bool:
        """Whether the trace has a backward pass or an optimizer step."""
        for a in self.analyses:
            if name_matches(a.trace.ops["name"], _TRAINING).any():
                return True
        return False

    def worth_reporting(self, saving_us: float) -> bool:
        """A saving large enough to be advice: ``MIN_SAVING_PCT`` of the window, or
        ``MIN_SAVING_BUSY_PCT`` of the busy time."""
        if saving_us <= 0:
            return False
        busy = self.busy_us
        return self.pct(saving_us) >= MIN_SAVING_PCT or (busy > 0 and 100 * saving_us / busy >= MIN_SAVING_BUSY_PCT)

    # -- claims --

    def claimed(self, pos: int) -> set[int]:
        """Activity rows (of rank position ``pos``) that the results of the skipped rules act on."""
        return {int(r) for results in self.prior.values() for res in results for r in res.acts.get(pos, ())}

    def finding(self, kind: FindingKind, title: str, saving_us: float, evidence: Iterable[str], fix: str,
                acts: Mapping[int, Sequence[int]] | None = None, idle_us: float = 0.0) -> RuleResult:
        """A finding (``saving_us`` is the mean per rank) with what it acts on."""
        f = Finding(kind.value, title, float(saving_us), float(self.pct(saving_us)), tuple(str(e) for e in evidence), fix)
        return RuleResult(f, {r: np.asarray(v, dtype=int) for r, v in (acts or {}).items()}, float(idle_us))


__all__ = [
    "MIN_SAVING_BUSY_PCT", "MIN_SAVING_PCT", "CommFit", "IdleFacts", "LaunchFacts", "RuleContext", "RuleResult",
    "SyncSite", "with_findings",
]
