"""What a findings rule receives (:class:`RuleContext`) and what it returns (:class:`RuleResult`).

A rule is a pure function ``rule(ctx) -> list[RuleResult]``: it reads the context and builds its
results with :meth:`RuleContext.finding`, which pairs each finding with *what it acts on* — the
activities (per rank) or the GPU idle time it would remove. Those claims are plain data: the
registry (:mod:`.registry`) hands the claims of the rules a rule declares it ``skips`` to that rule
(:meth:`RuleContext.claimed`), and the what-if (:mod:`.whatif`) combines findings without counting
the same kernel twice or saving more time than a bound class holds.

This module is also the one place in ``findings/`` that reads the diagnosis' timeline sections: the
facts rules need come through :attr:`RuleContext.idle`, :attr:`RuleContext.launch` and
:attr:`RuleContext.comm_fit` (model records), and :func:`with_findings` writes the results back.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from bwdiag.diagnose.findings.helpers import fmt_time
from bwdiag.hardware.threads import trace_threads
from bwdiag.diagnose.unaddressed import unaddressed
from bwdiag.diagnose.model import CommFit, Diagnosis, Finding, FindingKind, IdleBreakdown, LaunchStats, WhatIf
from bwdiag.diagnose.names import name_matches

#: A finding whose saving is under this share of the window is noise, not advice ...
MIN_SAVING_PCT = 0.5
#: ... unless it is at least this share of the device's busy time (a trace that is mostly idle
#: must not hide kernel-level fixes).
MIN_SAVING_BUSY_PCT = 2.0

#: What a finding's ``idle_us`` stands for in the dependency graph (:attr:`RuleResult.effect`).
EFFECTS = ("host_gaps", "syncs", "loader")

_TRAINING = re.compile(r"[Bb]ackward|Optimizer\.step|autograd::engine")


@dataclass(frozen=True, eq=False)
class RuleResult:
    """One finding and what its saving comes out of.

    ``acts``: rank position -> row positions in that rank's ``activities`` (the kernels the fix
    removes or speeds up); ``idle_us``: GPU idle time (mean per rank) the fix removes instead.
    ``effect``: how the dependency-graph what-if (:mod:`.whatif`) applies ``idle_us`` — one of
    ``EFFECTS``; None (the default) takes it from the finding's kind: a sync finding frees the
    host from its synchronising waits, a data-loader finding removes host time inside DataLoader
    spans, any other removes host time between ops while the device idled. ``acts`` are always
    shortened so that together they lose the finding's saving (less ``idle_us``).
    ``kind``, ``title`` and ``est_saving_us`` read through to the finding.
    """

    finding: Finding
    acts: Mapping[int, np.ndarray] = field(default_factory=dict)
    idle_us: float = 0.0
    effect: str | None = None

    @property
    def kind(self) -> str:
        return self.finding.kind

    @property
    def title(self) -> str:
        return self.finding.title

    @property
    def est_saving_us(self) -> float:
        return self.finding.est_saving_us


def with_findings(diagnosis: Diagnosis, findings: Sequence[Finding], projection: WhatIf | None) -> Diagnosis:
    """The diagnosis with its findings and, when there are any, the what-if projection."""
    done = dataclasses.replace(diagnosis, findings=tuple(findings), whatif=projection)
    return dataclasses.replace(done, unaddressed=unaddressed(done, projection.unclaimed_us if projection else None))


# -- the context ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleContext:
    """Everything a rule reads: the typed diagnosis, the per-rank tables, and the results of the
    rules it declared (in the registry) that it skips."""

    diagnosis: Diagnosis  # roofline + timeline facts (typed)
    analyses: Sequence  # build.RankAnalysis per rank: activities, groups (DataFrames), trace.ops
    #: rule name -> that rule's results, for the rules this one ``skips`` (filled by the registry)
    prior: Mapping[str, tuple[RuleResult, ...]] = field(default_factory=dict)
    #: ranks in the whole job when the context holds fewer (``bwdiag analyze`` runs the rules on one
    #: rank at a time, in the map); None: the job is ``analyses``
    job_ranks: int | None = None

    # -- timeline facts (the diagnosis' typed sections; the one place findings/ reads them) --

    @property
    def idle(self) -> IdleBreakdown | None:
        """GPU idle by cause; None on CPU traces (or when the timeline did not measure it)."""
        return self.diagnosis.idle

    @property
    def launch(self) -> LaunchStats | None:
        """Kernel-launch facts; None on CPU traces."""
        return self.diagnosis.launch

    @property
    def comm_fit(self) -> CommFit | None:
        """The collective α/β fit, None without one (or with α or β zero)."""
        fit = self.diagnosis.comm_fit
        return fit if fit is not None and fit.alpha_us and fit.beta_bytes_per_s else None

    def comm_fit_for(self, collective: str) -> CommFit | None:
        """The α/β fit of one collective kind (``all_reduce``, ...), None without one (β zero)."""
        return next((f for f in self.diagnosis.comm_fits if f.collective == collective and f.beta_bytes_per_s), None)

    # -- the window and its units --

    @property
    def total_us(self) -> float:
        return self.diagnosis.time.total_us

    @property
    def ranks(self) -> int:
        """Ranks in this context: the divisor of every mean per rank."""
        return max(1, len(self.analyses))

    @property
    def ranks_in_job(self) -> int:
        """Ranks in the whole job (``job_ranks``, else :attr:`ranks`): for facts of the job rather
        than means, such as how many ranks share the recording host's cores."""
        return self.job_ranks or self.ranks

    @property
    def host_cores(self) -> int | None:
        """The cores of the host that recorded the trace (``device.trace_host.cores``: a bwdiag
        capture's ``os.cpu_count()``), None when the trace does not say."""
        cores = (self.diagnosis.device.trace_host or {}).get("cores")
        return cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else None

    @property
    def frameworks(self) -> frozenset[str]:
        """Training frameworks a bwdiag capture saw the script use (``lightning``, ``hf_trainer``): a
        fix then names their switch, not a function the user never wrote."""
        found: set[str] = set()
        for a in self.analyses:
            meta = (getattr(a.trace, "metadata", None) or {}).get("bwdiag")
            if isinstance(meta, dict) and isinstance(meta.get("frameworks"), list):
                found.update(str(f) for f in meta["frameworks"])
        return frozenset(found)

    @property
    def torch_threads(self) -> int | None:
        """The intra-op thread count a bwdiag capture recorded (``torch.get_num_threads()`` when it
        wrote the trace; the largest among the ranks), None when no capture said."""
        return trace_threads([getattr(a.trace, "metadata", None) or {} for a in self.analyses])

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

    @property
    def recorded_stretch(self) -> float:
        """How much longer the recorded steps ran than the script's without the profiler: the mean of
        the window's complete steps ÷ the unprofiled step (a CPU trace `bwdiag run` timed after the
        window; else 1).

        The views turn a window total into the plain script's step by ``unprofiled ÷ window``
        (:meth:`per_step`), which takes every microsecond of the window to be recorded time. A cost
        worked out at the plain script's speed — a compiled loop's calibrated arithmetic — is that many
        times longer in the window's terms. The mean, not the median: a slow first step (the chain's
        page faults, 17 ms against 8.4) is in the window's total and in the eager ops it counts."""
        t = self.diagnosis.time
        durations = [d for d in t.step_durations_us if d and d > 0]
        if not (self.is_cpu and t.unprofiled_step_us and t.unprofiled_step_us > 0 and (durations or t.step_us)):
            return 1.0
        recorded = sum(durations) / len(durations) if durations else float(t.step_us)
        return recorded / t.unprofiled_step_us

    def per_step(self, saving_us: float, *, measured: bool = False) -> str:
        """A window total with its unit: ``"1.2 ms over the window (400 µs per step)"`` — the
        evidence's arithmetic is over the window, the per-step figure is what "saves" shows.
        ``measured``: a time measured in the trace (gaps, not a saving): per profiled step."""
        scale = self.step_scale
        text = f"{fmt_time(saving_us)} over the window"
        if scale is None:
            return text
        t = self.diagnosis.time
        if measured and self.is_cpu and t.unprofiled_step_us:
            return f"{text} ({fmt_time(saving_us * scale)} per profiled step)"
        if self.is_cpu and t.unprofiled_step_us and t.step_us:
            # the views show a CPU trace's shares on the step the script runs without the profiler
            # (report.verdict.unprofiled_scale): the evidence's per-step figure is the one "saves" shows
            plain = saving_us * scale * t.unprofiled_step_us / t.step_us
            return f"{text} ({fmt_time(plain)} per step as run without the profiler)"
        return f"{text} ({fmt_time(saving_us * scale)} per step)"

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
    "EFFECTS", "MIN_SAVING_BUSY_PCT", "MIN_SAVING_PCT", "RuleContext", "RuleResult", "with_findings",
]
