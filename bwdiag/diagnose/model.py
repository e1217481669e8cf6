"""The diagnosis: plain, typed data handed from ``diagnose`` to ``report`` (never a DataFrame).

Field names follow the ``diagnosis.json`` contract in DESIGN.md; fields may be added, never
renamed. ``None`` means unknown (no estimate), never zero. Every record is a frozen dataclass whose
fields are brought to their types once, when it is built (:mod:`bwdiag.diagnose.records`: NaN →
``None``, strings → enums), so ``Diagnosis.from_dict(d.to_dict()) == d``.

Schema ``bwdiag/diagnosis@2`` carries what ``@1`` kept in a free-form ``extras`` object as typed
sections at the top level (``idle``, ``launch``, ``comm_fits``, ``straggler``, ``compiled``,
``whatif`` …); :meth:`Diagnosis.from_dict` reads ``@1`` files too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bwdiag.costs.model import Category
from bwdiag.hardware.spec import SpecSource  # defined with the ceilings; part of the model by name
from bwdiag.diagnose.records import Record, RecordError, mean_record, plain, register_enum

SCHEMA = "bwdiag/diagnosis@2"
#: Older schemas :meth:`Diagnosis.from_dict` reads.
READABLE_SCHEMAS = ("bwdiag/diagnosis@1", SCHEMA)

#: Which what-if model every view shows and ranks findings by (issue 14): True — the dependency
#: graph's re-timing (``Finding.graph_saving_us``, ``WhatIf.graph_projected_us``) wherever a finding
#: or what-if carries it, else the rule's own estimate and the subtraction; False — always the rule's.
#: The one switch: :func:`shown` reads it, and every view goes through the properties that call it.
SHOW_GRAPH_MODEL = True


def shown(rule: float | None, graph: float | None) -> float | None:
    """The figure a view shows of a (rule, dependency graph) pair: see :data:`SHOW_GRAPH_MODEL`."""
    return graph if SHOW_GRAPH_MODEL and graph is not None else rule


class _Text(str, Enum):
    """A ``str`` enum that prints and formats as its value (``f"{Bound.MEMORY}"`` is ``memory``)."""

    __str__ = str.__str__
    __format__ = str.__format__


class Bound(_Text):
    """The ceiling class that limits a kernel (or a slice of the timeline)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    COMMUNICATION = "communication"
    UNKNOWN = "unknown"


#: Keys of ``time.by_bound``: the kernel bounds plus GPU idle time.
TIME_KEYS = ("compute", "memory", "latency", "communication", "idle", "unknown")


class FindingKind(_Text):
    """What kind of change a finding proposes (``Finding.kind``)."""

    FUSION = "fusion"
    QUANTIZATION = "quantization"
    PRECISION = "precision"
    OVERLAP = "overlap"
    LAUNCH_OVERHEAD = "launch_overhead"
    BATCHING = "batching"
    LAYOUT = "layout"
    CAST = "cast"
    HOST_BOUND = "host_bound"
    DATA_LOADER = "data_loader"
    SYNC = "sync"
    MEMCPY = "memcpy"
    OTHER = "other"


class TraceKind(_Text):
    """What the traces recorded: GPU (or other accelerator) work, or CPU ops only."""

    GPU = "gpu"
    CPU = "cpu"


class Regime(_Text):
    """What dominates a collective's time: the per-call cost, or moving its bytes."""

    LATENCY = "latency"
    BANDWIDTH = "bandwidth"


register_enum(TraceKind, None)  # no fallback: a trace kind this version does not know is an error
register_enum(Regime, None)  # an unknown regime reads as unknown (None)
register_enum(Bound, Bound.UNKNOWN)
register_enum(FindingKind, FindingKind.OTHER)
register_enum(SpecSource, SpecSource.ASSUMED)
register_enum(Category, Category.OTHER)


@dataclass(frozen=True)
class SelectedRank(Record):
    """One rank ``--ranks`` / ``--sample`` picked, and why."""

    rank: int
    why: str


@dataclass(frozen=True)
class RankSelection(Record):
    """Which rank files of the job were analysed (``bwdiag analyze --ranks`` / ``--sample``)."""

    how: str  # the option as given, e.g. "--sample 16"
    files: int  # rank files found before selecting
    ranks: tuple[SelectedRank, ...] = ()


@dataclass(frozen=True)
class Source(Record):
    paths: tuple[str, ...]
    ranks: tuple[int, ...]
    trace_kind: TraceKind
    torch_version: str | None = None
    selection: RankSelection | None = None  # None: every rank file found was analysed


@dataclass(frozen=True)
class DeviceInfo(Record):
    name: str
    kind: str  # "gpu" | "cpu"
    spec_source: SpecSource
    peak_flops: dict[str, float]  # dtype -> dense FLOP/s on the fastest unit for that dtype
    memory_bandwidth: float  # B/s
    interconnect_bandwidth: float | None  # B/s per GPU, one direction
    matched_from: str | None = None  # the name as the trace spelled it
    vector_flops: dict[str, float] = field(default_factory=dict)  # non-tensor-core peaks
    sources: tuple[str, ...] = ()
    #: The calibration used (spec_source "calibrated", or "user" on top of one): ``{path, origin
    #: ("local" | "trace"), measured_at, file_mtime, host: {hostname, cpu, cores}, quick,
    #: torch_version, values: {memory_bandwidth, vector_flops, tensor_flops}}``; None when none was.
    calibration: dict[str, Any] | None = None
    #: The host the trace says it was recorded on (``{hostname, cpu, cores}``; None when it says
    #: nothing) and whether the calibration cache of this machine applied to it.
    trace_host: dict[str, Any] | None = None
    #: Accelerator activity categories found besides CUDA/HIP kernels (e.g. ``mtia_ccp_events``).
    accelerator: str | None = None


@dataclass(frozen=True)
class TimeBreakdown(Record):
    total_us: float  # mean per rank of the analysed window
    by_bound: dict[str, float]  # TIME_KEYS -> µs, summing to total_us
    exposed_communication_us: float
    communication_overlap_pct: float | None  # None when there is no communication
    steps: int | None = None  # complete ProfilerStep spans measured (first rank with steps)
    step_us: float | None = None  # MEDIAN complete step (median over ranks' medians); None without steps
    #                               (the MEAN when step_statistic says so: slow steps that are a pattern)
    step_min_us: float | None = None
    step_max_us: float | None = None
    step_ids: tuple[int, ...] = ()  # the complete steps measured (ProfilerStep#N numbers)
    abnormal_steps: tuple[int, ...] = ()  # step ids longer than 1.5x the median (kept, flagged)
    step_source: str | None = None  # "gpu" | "cpu": which ProfilerStep spans were measured
    steps_excluded: tuple[int, ...] = ()  # step ids left out: cut by the trace end or without duration
    step_durations_us: tuple[float, ...] = ()  # each of ``step_ids``' duration (first rank with steps)
    #: the same steps with no profiler running: the median of the last steps a bwdiag capture timed
    #: before its window (median over ranks; None when the trace does not hold them)
    unprofiled_step_us: float | None = None
    unprofiled_step_ids: tuple[int, ...] = ()
    unprofiled_clock: str | None = None  # "device" (CUDA events) | "host" (perf_counter)
    #: "median" of the steps timed unprofiled, or "mean" when their slow steps are a pattern
    #: (``steps.slow_steps_are_a_pattern``, as for the recorded steps)
    unprofiled_statistic: str | None = None
    unprofiled_step_durations_us: tuple[float, ...] = ()  # each of ``unprofiled_step_ids``' time (first rank)
    #: "median" of the complete steps, or "mean" when the slow ones are a pattern (a third or more of
    #: them, or two or more holding a third of the time, over 1.5× the
    #: median (a DataLoader falling behind every other step: a pattern, not outliers)
    step_statistic: str = "median"


@dataclass(frozen=True)
class KernelRow(Record):
    """One kernel group: same rank, kernel name, launching op and input shapes."""

    name: str
    rank: int
    category: Category
    count: int
    total_us: float
    flops: float | None
    bytes: float | None
    intensity: float | None
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    bound: Bound
    ceiling: str  # which roof applies, e.g. "bf16 tensor", "memory", "launch latency"
    pct_of_ceiling: float | None
    op: str | None = None
    shapes: str | None = None
    dtype: str | None = None
    module: str | None = None
    attainable_flops_per_s: float | None = None  # the roof's height at this intensity
    mean_us: float = 0.0


@dataclass(frozen=True)
class CollectiveRow(Record):
    name: str
    rank: int
    collective: str
    count: int
    total_us: float
    exposed_us: float
    bytes: float | None  # message size per call
    algbw: float | None  # B/s
    busbw: float | None  # B/s
    pct_of_link: float | None
    group_size: int | None = None
    dtype: str | None = None
    regime: Regime | None = None  # None: unknown (no message size)


@dataclass(frozen=True)
class Finding(Record):
    kind: FindingKind
    title: str
    est_saving_us: float  # over the analysed window (mean per rank)
    est_saving_pct: float  # of the window, so also of one step
    evidence: tuple[str, ...]
    fix: str
    #: the saving in one median profiler step (window saving × step ÷ window); None without steps
    est_saving_per_step_us: float | None = None
    #: the saving the dependency-graph what-if (``diagnose.depgraph``) projects for this fix alone:
    #: the trace re-timed with what the finding acts on changed (over the window, mean per rank);
    #: None where no graph was built (older files, no activities)
    graph_saving_us: float | None = None
    graph_saving_per_step_us: float | None = None  # the same in one median profiler step
    #: the graph saving as a share of the window it was re-timed from (``WhatIf.graph_base_us``)
    graph_saving_pct: float | None = None
    #: the titles of the other findings this finding's fix also resolves (one ``torch.compile`` that
    #: covers their compile targets too: ``diagnose.findings.same_fix``); empty for most findings
    same_fix: tuple[str, ...] = ()
    #: the saving of this finding and ``same_fix`` applied together — what applying this fix saves
    #: (re-timed on the dependency graph where there is one, else the what-if's subtraction; over
    #: the window, mean per rank); None when ``same_fix`` is empty
    fix_saving_us: float | None = None
    fix_saving_per_step_us: float | None = None  # the same in one median profiler step
    fix_saving_pct: float | None = None  # the same as a share of the window the saving is taken from

    # -- the saving every view shows and ranks by (:func:`shown`: the graph's where it has one) --

    @property
    def saving_model(self) -> str:
        """``"graph"`` when the shown saving is the dependency graph's, else ``"rule"``."""
        return "graph" if SHOW_GRAPH_MODEL and self.graph_saving_us is not None else "rule"

    @property
    def saving_us(self) -> float:
        """The saving shown, over the analysed window (mean per rank)."""
        return float(shown(self.est_saving_us, self.graph_saving_us))

    @property
    def saving_per_step_us(self) -> float | None:
        """The saving shown, in one median profiler step (None without complete steps)."""
        if self.saving_model == "graph":
            return self.graph_saving_per_step_us
        return self.est_saving_per_step_us

    @property
    def saving_pct(self) -> float:
        """The saving shown as a share of the window (so also of one step), in percent."""
        if self.saving_model == "rule":
            return self.est_saving_pct
        if self.graph_saving_pct is not None:
            return float(self.graph_saving_pct)
        est = self.est_saving_us
        # est_saving_pct = 100 * est / window: the window is est / pct (unknown when both are 0)
        if est and self.est_saving_pct:
            return float(self.est_saving_pct * self.saving_us / est)
        return 0.0


@dataclass(frozen=True)
class UncoveredShare(Record):
    """One reason compute-kernel time has no FLOP/byte estimate (see ``diagnose.uncovered``)."""

    reason: str
    us: float  # summed over ranks
    pct: float  # of all compute-kernel time


@dataclass(frozen=True)
class Coverage(Record):
    """What share of each kind of device time the diagnosis can price.

    *Compute kernels* are every kernel (or, on a CPU trace, leaf op) that is neither a copy
    (memcpy/memset) nor a collective: ``linked_pct`` and ``estimated_pct`` count those alone, so a
    trace whose copies carry byte counts but whose GEMMs have no shapes reads low, as it should.
    Copies are priced from their byte counts, collectives from their message sizes: each has its own
    figure (``None`` when the trace has none of that kind).
    """

    linked_pct: float  # share of compute-kernel time linked to a launching op
    estimated_pct: float  # share of compute-kernel time with a FLOP or byte estimate
    compute_us: float = 0.0  # compute-kernel time the two shares are of (summed over ranks)
    copy_us: float = 0.0  # memcpy + memset time
    copy_estimated_pct: float | None = None  # share of copy time with a byte count
    collective_us: float = 0.0
    collective_estimated_pct: float | None = None  # share of collective time with a message size
    uncovered: tuple[UncoveredShare, ...] = ()  # why the rest of the compute-kernel time is not priced


@dataclass(frozen=True)
class RankSummary(Record):
    rank: int
    total_us: float
    busy_us: float
    compute_us: float
    communication_us: float
    exposed_communication_us: float
    idle_us: float
    kernels: int
    #: this rank's complete ProfilerStep spans (ids and durations, µs): the report's rank × step heat strip
    step_ids: tuple[int, ...] = ()
    step_durations_us: tuple[float, ...] = ()




# ------------------------------------------------------------------------------ timeline sections


@dataclass(frozen=True)
class SyncSite(Record):
    """A host call the GPU waited on (``cudaStreamSynchronize``, ``.item()``'s ``cudaMemcpy`` …)."""

    name: str
    count: int
    total_us: float


@dataclass(frozen=True)
class IdleCauses(Record):
    """What on the host the GPU's host-wait idle is spent in (µs; see ``diagnose.idle``)."""

    sync_us: float = 0.0  # host-wait gaps in which a synchronising call returned
    data_loader_us: float = 0.0  # host-wait time overlapped by DataLoader spans
    pageable_memcpy_us: float = 0.0  # device time of copies from pageable host memory
    sync_in_data_loader_us: float = 0.0  # the part of sync_us inside DataLoader __next__ (one cause)


@dataclass(frozen=True)
class IdleBreakdown(Record):
    """GPU idle time of one rank split HTA's way (µs): host wait, kernel wait and other.

    The one record of idle causes: the diagnosis keeps one per GPU rank (``idle_by_rank``);
    ``Diagnosis.idle`` is their mean. ``idle_us`` is the parts' sum; the timeline's own idle
    (``time.by_bound["idle"]``, ``RankSummary.idle_us``) is the same gaps measured as the window
    minus busy time, equal to it up to float rounding.
    """

    host_wait_us: float  # the work ending the gap was launched only after the device went idle
    kernel_wait_us: float  # gaps under 3 µs between back-to-back kernels
    other_us: float
    gaps: float  # a count; a mean over ranks may be fractional
    causes: IdleCauses = field(default_factory=IdleCauses)
    pageable_memcpy_count: float = 0
    top_syncs: tuple[SyncSite, ...] = ()
    rank: int | None = None  # None: a mean over ranks

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    @property
    def sync_us(self) -> float:
        return self.causes.sync_us

    @property
    def data_loader_us(self) -> float:
        return self.causes.data_loader_us

    @property
    def sync_in_data_loader_us(self) -> float:
        return self.causes.sync_in_data_loader_us

    def to_dict(self) -> dict[str, Any]:
        out = {"idle_us": self.idle_us, **super().to_dict()}
        if self.rank is None:
            del out["rank"]
        return out


@dataclass(frozen=True)
class LaunchStats(Record):
    """Kernel launches of one GPU rank (see ``diagnose.launch``); ``Diagnosis.launch`` is the mean.

    The host-wait idle the launch-bound test uses is the rank's ``IdleBreakdown.host_wait_us``
    (written beside these facts as ``launch_gap_us`` in diagnosis.json)."""

    kernels: float
    short_kernels: float  # kernels under 10 µs
    short_kernel_us: float
    cpu_launch_us: float  # launch API calls on the host
    gpu_busy_us: float
    mean_queue_length: float | None  # kernels queued ahead on the stream at each launch
    launch_bound: bool
    rank: int | None = None  # None: a mean over ranks

    def with_gap(self, host_wait_us: float | None) -> dict[str, Any]:
        """The diagnosis.json form: the facts with ``launch_gap_us`` (host-wait idle) in place."""
        out = {}
        for key, value in super().to_dict().items():
            out[key] = value
            if key == "gpu_busy_us":
                out["launch_gap_us"] = host_wait_us
        return out


@dataclass(frozen=True)
class CommFit(Record):
    """Per-call time = α + bytes/β of one collective kind, fitted over the trace's own calls."""

    collective: str
    alpha_us: float
    beta_bytes_per_s: float
    n: int  # calls fitted
    sizes: int  # distinct message sizes among them


@dataclass(frozen=True)
class RankWait(Record):
    rank: int
    wait_us: float


@dataclass(frozen=True)
class Straggler(Record):
    """The rank the others wait for in collectives (see ``diagnose.ranks``)."""

    rank: int
    made_others_wait_us: float
    arrived_last_calls: int
    matched_calls: int
    wait_us_by_rank: tuple[RankWait, ...] = ()  # each rank's own waiting in matched calls


@dataclass(frozen=True)
class CompiledFacts(Record):
    """torch.compile regions of a CPU trace (µs, mean over the ranks that have them; see
    ``diagnose.compiled``)."""

    regions: float
    residual_us: float  # region time no recorded op covers (booked as ``compiled`` activities)
    residual_estimated_us: float  # the part of it with a byte estimate
    compile_spans: float
    compile_us: float  # compilation inside the window: not work
    #: CompiledFunction / CompiledFunctionBackward calls that recorded their graph inputs' shapes (a
    #: compiled training step records them; an inference one, without autograd, has no such op)
    graph_inputs: float = 0.0


@dataclass(frozen=True)
class UnaddressedTime(Record):
    """A large class of the window's time that the findings leave mostly unclaimed, and why
    (:mod:`bwdiag.diagnose.unaddressed`)."""

    bound: str  # a TIME_KEYS class
    us: float  # what the findings leave of it, over the window (mean per rank)
    pct: float  # of the window
    why: str


@dataclass(frozen=True)
class AppliedFinding(Record):
    """One finding as the what-if applied it."""

    kind: FindingKind
    title: str
    est_saving_us: float
    applied_us: float  # what survives overlaps with earlier findings and the bound classes' caps
    capped: bool
    #: what the dependency graph's window loses when this finding is applied after the ones above
    #: it (the graph projections of the top findings, one after another; None without a graph)
    graph_applied_us: float | None = None


@dataclass(frozen=True)
class WhatIf(Record):
    """The window projected if the top findings were fixed (``diagnose.findings.whatif``):
    ``projected_us`` by subtracting their savings (capped per bound class), ``graph_projected_us``
    by re-timing the trace's dependency graph with them applied (``diagnose.depgraph``)."""

    findings: tuple[AppliedFinding, ...]
    total_us: float
    saved_us: float
    projected_us: float
    speedup: float | None
    #: the window re-timed on the dependency graph with the top findings applied together
    #: (``diagnose.depgraph``; each activity changed once); None without a graph
    graph_projected_us: float | None = None
    graph_saved_us: float | None = None
    graph_speedup: float | None = None
    #: the window the graph projection starts from: ``total_us``, or less where the capture timed the
    #: steps unprofiled and the profiler's cost was taken out of the host side first (the graph's
    #: ``profiler_baseline``); savings and the projection are measured against it
    graph_base_us: float | None = None
    #: per time class, what the top findings leave unclaimed (the subtraction's per-class caps)
    unclaimed_us: dict[str, float] = field(default_factory=dict)

    # -- the projection every view shows (:func:`shown`: the graph's where it has one) --

    @property
    def model(self) -> str:
        """``"graph"`` when the shown projection is the dependency graph's, else ``"rule"``."""
        return "graph" if SHOW_GRAPH_MODEL and self.graph_projected_us is not None else "rule"

    @property
    def shown_projected_us(self) -> float:
        """The projected window shown."""
        return float(shown(self.projected_us, self.graph_projected_us))

    @property
    def shown_base_us(self) -> float:
        """The window the shown projection starts from: the graph's baseline (the profiler's cost
        taken out of the host side, :attr:`graph_base_us`) where it has one, else the analysed window."""
        if self.model == "graph" and self.graph_base_us:
            return float(self.graph_base_us)
        return float(self.total_us)

    @property
    def shown_saved_us(self) -> float:
        """The saving shown: the starting window (:attr:`shown_base_us`) less the projected window.
        The profiler's own cost, which no fix removes, is never part of it."""
        return float(self.shown_base_us - self.shown_projected_us if self.model == "graph" else self.saved_us)

    @property
    def shown_speedup(self) -> float | None:
        """Window ÷ projected window, as shown."""
        return self.graph_speedup if self.model == "graph" else self.speedup


# ---------------------------------------------------------------------------------- the diagnosis


@dataclass(frozen=True)
class Diagnosis(Record):
    """What bwdiag found in one job's traces: everything the report and diagnosis.json show.

    Each fact is stored once: per-rank records for idle and launches (their means, the single
    ``comm_fit`` and ``projected_us`` are properties), step durations beside the step ids in
    ``time``. The report works from this object alone, so ``bwdiag report diagnosis.json``
    re-renders a page without the trace.
    """

    source: Source
    device: DeviceInfo
    time: TimeBreakdown
    kernels: tuple[KernelRow, ...]
    collectives: tuple[CollectiveRow, ...]
    findings: tuple[Finding, ...]
    coverage: Coverage
    warnings: tuple[str, ...]
    ranks: tuple[RankSummary, ...] = ()
    idle_by_rank: tuple[IdleBreakdown, ...] = ()  # one per GPU rank
    launch_by_rank: tuple[LaunchStats, ...] = ()  # one per GPU rank
    comm_fits: tuple[CommFit, ...] = ()  # one per collective kind with enough message sizes
    straggler: Straggler | None = None
    compiled: CompiledFacts | None = None
    whatif: WhatIf | None = None  # None without findings
    #: large classes of time no finding addresses, each with why (``diagnose.unaddressed``)
    unaddressed: tuple[UnaddressedTime, ...] = ()
    schema: str = SCHEMA

    # -- derived views: each fact is stored once ----------------------------------------------

    @property
    def idle(self) -> IdleBreakdown | None:
        """GPU idle by cause, mean over GPU ranks; None on CPU traces."""
        return mean_record(self.idle_by_rank) if self.idle_by_rank else None

    @property
    def launch(self) -> LaunchStats | None:
        """Kernel-launch facts, mean over GPU ranks; None on CPU traces."""
        return mean_record(self.launch_by_rank) if self.launch_by_rank else None

    @property
    def comm_fit(self) -> CommFit | None:
        """The collective fit over the most calls (the first such), None without one."""
        return max(self.comm_fits, key=lambda f: f.n) if self.comm_fits else None

    @property
    def projected_us(self) -> float | None:
        """The window once the top findings are fixed (the what-if's), None without findings."""
        return self.whatif.projected_us if self.whatif is not None else None

    @property
    def shown_projected_us(self) -> float | None:
        """The projected window the views show (:attr:`WhatIf.shown_projected_us`: the dependency
        graph's where the what-if has one); ``projected_us`` stays the subtraction, as written."""
        return self.whatif.shown_projected_us if self.whatif is not None else None

    # -- diagnosis.json -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The ``diagnosis.json`` object: enums as their values, tuples as lists, and the derived
        views (``idle``, ``launch``, ``comm_fit``, ``projected_us``) written beside what they come from."""
        return {
            "source": self.source.to_dict(),
            "device": self.device.to_dict(),
            "time": self.time.to_dict(),
            "kernels": plain(self.kernels),
            "collectives": plain(self.collectives),
            "findings": plain(self.findings),
            "coverage": self.coverage.to_dict(),
            "warnings": list(self.warnings),
            "ranks": plain(self.ranks),
            **self.sections_dict(),
            "schema": self.schema,
        }

    def sections_dict(self) -> dict[str, Any]:
        """The timeline and what-if sections as diagnosis.json writes them (``None`` / ``[]`` when
        absent), in the page's order: ``idle``, ``launch``, ``idle_by_rank``, ``launch_by_rank``,
        ``comm_fits``, ``comm_fit``, ``straggler``, ``compiled``, ``projected_us``, ``whatif``, ``unaddressed``."""
        idle, launch, fit = self.idle, self.launch, self.comm_fit
        gaps = {i.rank: i.host_wait_us for i in self.idle_by_rank}
        return {
            "idle": _without_rank(idle.to_dict()) if idle is not None else None,
            "launch": _without_rank(launch.with_gap(idle.host_wait_us if idle is not None else None))
            if launch is not None else None,
            "idle_by_rank": plain(self.idle_by_rank),
            "launch_by_rank": [s.with_gap(gaps.get(s.rank)) for s in self.launch_by_rank],
            "comm_fits": plain(self.comm_fits),
            "comm_fit": fit.to_dict() if fit is not None else None,
            "straggler": self.straggler.to_dict() if self.straggler is not None else None,
            "compiled": self.compiled.to_dict() if self.compiled is not None else None,
            "projected_us": self.projected_us,
            "whatif": self.whatif.to_dict() if self.whatif is not None else None,
            "unaddressed": plain(self.unaddressed),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "diagnosis") -> Diagnosis:
        """The diagnosis a ``diagnosis.json`` object describes (``@2``, or ``@1`` with ``extras``).

        Keys this version does not know are ignored; the derived views are recomputed, not read.
        Raises :class:`RecordError` (where and why) for another schema or a damaged document."""
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected an object, got a {type(data).__name__}")
        schema = data.get("schema")
        if schema not in READABLE_SCHEMAS:
            raise RecordError(f"{where}: schema {schema!r} is not a bwdiag diagnosis "
                              f"(expected one of {', '.join(READABLE_SCHEMAS)})")
        if schema != SCHEMA:
            data = _upgrade_v1(data)
        return super().from_dict({**data, "schema": SCHEMA}, where)


def _without_rank(d: dict) -> dict:
    d.pop("rank", None)
    return d


def _upgrade_v1(data: dict) -> dict:
    """A ``bwdiag/diagnosis@1`` object in the ``@2`` layout: ``extras`` keys become sections."""
    out = {k: v for k, v in data.items() if k != "extras"}
    extras = data.get("extras")
    if not isinstance(extras, dict):
        return out
    ranks = [r.get("rank") for r in data.get("ranks") or () if isinstance(r, dict)]
    first_rank = ranks[0] if ranks else 0

    def by_rank(key: str) -> list:
        many = extras.get(f"{key}_by_rank")
        if isinstance(many, dict):
            return [{**v, "rank": int(r)} for r, v in many.items() if isinstance(v, dict)]
        one = extras.get(key)
        return [{**one, "rank": first_rank}] if isinstance(one, dict) else []

    out["idle_by_rank"] = by_rank("idle")
    out["launch_by_rank"] = by_rank("launch")
    fits = extras.get("comm_fits")
    if isinstance(fits, dict):
        out["comm_fits"] = list(fits.values())
    elif isinstance(extras.get("comm_fit"), dict):
        out["comm_fits"] = [extras["comm_fit"]]
    who = extras.get("straggler")
    if isinstance(who, dict):
        waits = who.get("wait_us_by_rank")
        out["straggler"] = {**who, "wait_us_by_rank": [{"rank": int(r), "wait_us": w} for r, w in waits.items()]
                            if isinstance(waits, dict) else []}
    for key in ("compiled", "whatif"):
        if isinstance(extras.get(key), dict):
            out[key] = extras[key]
    durs = extras.get("step_durations_us")
    time = data.get("time")
    if isinstance(durs, dict) and isinstance(time, dict) and isinstance(time.get("step_ids"), list):
        out["time"] = {**time, "step_durations_us": [durs.get(str(i), durs.get(i)) for i in time["step_ids"]]}
    return out


__all__ = [
    "AppliedFinding", "Bound", "Category", "CollectiveRow", "CommFit", "CompiledFacts", "Coverage",
    "DeviceInfo", "Diagnosis", "Finding", "FindingKind", "IdleBreakdown", "IdleCauses", "KernelRow",
    "LaunchStats", "RankSummary", "RankWait", "RecordError", "Regime", "SCHEMA", "Source", "SpecSource",
    "Straggler", "SyncSite", "TIME_KEYS", "TimeBreakdown", "TraceKind", "UncoveredShare", "WhatIf",
]
