"""What every findings rule receives, the registry of rules, and the helpers rules share.

A rule builds its findings through :meth:`RuleContext.finding`, which also records *what the
finding acts on* — the activities (per rank) or the idle time it would remove — so that the what-if
(:mod:`bwdiag.diagnose.findings.whatif`) can combine findings without counting the same kernel
twice or saving more time than a bound class holds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from bwdiag.costs.dtypes import dtype_bytes
from bwdiag.diagnose.model import Diagnosis, Finding, FindingKind
from bwdiag.diagnose.names import name_matches

#: A finding whose saving is under this share of the window is noise, not advice ...
MIN_SAVING_PCT = 0.5
#: ... unless it is at least this share of the device's busy time (a trace that is mostly idle
#: must not hide kernel-level fixes).
MIN_SAVING_BUSY_PCT = 2.0

#: Evidence lines listing modules/kernels stop after this many (the rest are counted).
MAX_EVIDENCE_ITEMS = 5


@dataclass(frozen=True)
class Target:
    """What one finding's saving comes out of.

    ``acts``: rank -> row positions in that rank's ``activities`` (the kernels the fix removes or
    speeds up); ``idle_us``: GPU idle time (mean per rank) the fix removes instead.
    """

    acts: dict[int, np.ndarray] = field(default_factory=dict)
    idle_us: float = 0.0


@dataclass(frozen=True)
class RuleContext:
    diagnosis: Diagnosis  # roofline + timeline facts (typed)
    analyses: list  # list[build.RankAnalysis]: per-rank activities and groups (DataFrames)
    targets: dict[int, Target] = field(default_factory=dict)  # id(finding) -> what it acts on

    @property
    def total_us(self) -> float:
        return self.diagnosis.time.total_us

    @property
    def ranks(self) -> int:
        return max(1, len(self.analyses))

    @property
    def is_cpu(self) -> bool:
        return self.diagnosis.source.trace_kind == "cpu"

    # -- timeline facts, typed (diagnose.model sections; None on CPU traces or without them) --

    @property
    def idle(self):
        """GPU idle by cause (``model.IdleBreakdown``, mean per rank), None on CPU traces."""
        return self.diagnosis.idle

    @property
    def launch(self):
        """Kernel-launch facts (``model.LaunchStats``, mean per rank), None on CPU traces."""
        return self.diagnosis.launch

    @property
    def comm_fit(self):
        """The collective α/β fit over the most calls (``model.CommFit``), None without one (or
        with α or β zero)."""
        fit = self.diagnosis.comm_fit
        return fit if fit is not None and fit.alpha_us and fit.beta_bytes_per_s else None

    @property
    def extras(self) -> dict:
        """The timeline facts in diagnosis.json's plain form (``{"idle": {...}, "launch": {...},
        "comm_fit": {...}}``, absent keys left out), for rules that read them as dicts."""
        d = self.diagnosis.sections_dict()
        return {k: d[k] for k in ("idle", "launch", "comm_fit") if d[k] is not None}

    def pct(self, saving_us: float) -> float:
        """``saving_us`` as a share of the analysed window (mean per rank), in percent."""
        return 100.0 * saving_us / self.total_us if self.total_us > 0 else 0.0

    def claimed(self, pos: int) -> set[int]:
        """Activity rows (of rank position ``pos``) that findings built so far act on."""
        return {int(r) for t in self.targets.values() for r in t.acts.get(pos, ())}

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

    def finding(self, kind: FindingKind, title: str, saving_us: float, evidence: Iterable[str], fix: str,
                acts: dict[int, Sequence[int]] | None = None, idle_us: float = 0.0) -> Finding:
        """Build a finding (``saving_us`` is the mean per rank) and record what it acts on."""
        f = Finding(kind.value, title, float(saving_us), float(self.pct(saving_us)), tuple(str(e) for e in evidence), fix)
        self.targets[id(f)] = Target({r: np.asarray(v, dtype=int) for r, v in (acts or {}).items()}, idle_us)
        return f


Rule = Callable[[RuleContext], list[Finding]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    """Register a findings rule."""
    RULES.append(fn)
    return fn


_TRAINING = re.compile(r"[Bb]ackward|Optimizer\.step|autograd::engine")


# -- shared helpers -------------------------------------------------------------------------------


_TABLES: dict[int, tuple[pd.DataFrame, dict[str, np.ndarray], dict[int, tuple]]] = {}


def _table_cache(ops: pd.DataFrame) -> tuple[dict[str, np.ndarray], dict[int, tuple]]:
    """Per ops table: its columns as numpy arrays and tensor sizes per argument signature."""
    entry = _TABLES.get(id(ops))
    if entry is None or entry[0] is not ops:
        entry = _TABLES[id(ops)] = (ops, {}, {})
        if len(_TABLES) > 16:
            _TABLES.pop(next(iter(_TABLES)))
    return entry[1], entry[2]


def op_column(ops: pd.DataFrame, column: str) -> np.ndarray:
    """``ops[column]`` as a numpy array, cached per table (``ops.at`` per row is slow on big traces).
    Ops tables have a RangeIndex, so an op index is a position."""
    cols = _table_cache(ops)[0]
    if column not in cols:
        cols[column] = ops[column].to_numpy()
    return cols[column]


def op_chain(ops: pd.DataFrame, idx: int, depth: int = 8) -> list[str]:
    """Names of an op and its enclosing ops, innermost first (``aten::copy_, aten::clone, ...``)."""
    names_col, parent_col = op_column(ops, "name"), op_column(ops, "parent")
    names = []
    while idx >= 0 and len(names) < depth:
        names.append(names_col[idx])
        idx = int(parent_col[idx])
    return names


def tensor_sizes(ops: pd.DataFrame, idx: int) -> tuple[tuple[int, int], ...]:
    """(numel, bytes per element) of each dimensioned tensor argument of op ``idx``.

    Worked out once per argument signature (the ops table's ``sig``: ops with equal ``Input Dims``,
    ``Input type`` … share one), not once per op: a 1M-event trace has ~100k ops but a few thousand
    signatures."""
    if idx < 0:
        return ()
    cols, by_sig = _table_cache(ops)
    sig = cols.get("sig")
    if sig is None:
        sig = cols["sig"] = ops["sig"].to_numpy() if "sig" in ops else np.arange(len(ops))
    key = int(sig[idx])
    sizes = by_sig.get(key)
    if sizes is None:
        sizes = by_sig[key] = _sizes(op_column(ops, "dims")[idx], op_column(ops, "types")[idx])
    return sizes


def _sizes(dims, types) -> tuple[tuple[int, int], ...]:
    if not isinstance(dims, list):
        return ()
    out = []
    for i, d in enumerate(dims):
        if not (isinstance(d, list) and d and all(isinstance(x, int) for x in d)):
            continue
        size = dtype_bytes(types[i]) if isinstance(types, list) and i < len(types) else None
        if size:
            out.append((math.prod(d), size))
    return tuple(out)


def output_bytes(ops: pd.DataFrame, idx: int, total_bytes: float) -> float | None:
    """Bytes an op writes: its traffic minus its tensor inputs; an in-place / ``out=`` op (whose
    destination is one of its arguments, e.g. ``copy_``) writes its first argument."""
    sizes = tensor_sizes(ops, idx)
    if not sizes or not np.isfinite(total_bytes):
        return None
    written = total_bytes - sum(n * s for n, s in sizes)
    return float(written) if written > 0 else float(sizes[0][0] * sizes[0][1])


@dataclass(frozen=True)
class ArgBytes:
    """Per op (one entry per requested op index): bytes of its tensor arguments, vectorised.

    ``inputs``: their sum (NaN without dimensioned tensors); ``first``: the first one's;
    ``sizes[sig[k]]``: the set of each argument's bytes (for "does it read a tensor this big?")."""

    inputs: np.ndarray
    first: np.ndarray
    sig: np.ndarray
    sizes: list[frozenset]

    def written(self, total_bytes: np.ndarray) -> np.ndarray:
        """:func:`output_bytes` per op for their ``total_bytes`` of traffic (NaN where unknown)."""
        total = np.asarray(total_bytes, dtype=float)
        known = np.isfinite(self.inputs) & np.isfinite(total)
        rest = np.where(known, total - np.nan_to_num(self.inputs), np.nan)
        return np.where(known, np.where(rest > 0, rest, self.first), np.nan)


def arg_bytes(ops: pd.DataFrame, idx: np.ndarray) -> ArgBytes:
    """:class:`ArgBytes` of the ops at ``idx`` (-1: no op), worked out once per argument signature."""
    idx = np.asarray(idx, dtype=np.int64)
    cols, _ = _table_cache(ops)
    if "sig" not in cols:
        cols["sig"] = ops["sig"].to_numpy() if "sig" in ops else np.arange(len(ops))
    keys = np.where(idx >= 0, cols["sig"][np.maximum(idx, 0)] if len(ops) else -1, -1)
    uniq, where, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inputs, first, sizes = np.full(len(uniq), np.nan), np.full(len(uniq), np.nan), []
    for j, (key, at) in enumerate(zip(uniq, where)):
        args = tensor_sizes(ops, int(idx[at])) if key >= 0 else ()
        if args:
            inputs[j] = float(sum(n * e for n, e in args))
            first[j] = float(args[0][0] * args[0][1])
        sizes.append(frozenset(n * e for n, e in args))
    return ArgBytes(inputs[inverse], first[inverse], inverse, sizes)


def iteration_size(ops: pd.DataFrame, idx: int) -> int | None:
    """The largest tensor argument's element count: the loop a fused kernel would run over."""
    sizes = tensor_sizes(ops, idx)
    return max(n for n, _ in sizes) if sizes else None


def short_list(items: Iterable[str], limit: int = MAX_EVIDENCE_ITEMS) -> str:
    """``a, b, c`` (+ ``… and N more``), keeping first-seen order and dropping repeats."""
    seen = list(dict.fromkeys(i for i in items if i))
    text = ", ".join(seen[:limit])
    return text + (f", … and {len(seen) - limit} more" if len(seen) > limit else "")


def common_prefix(paths: Iterable[str]) -> str | None:
    """The deepest module path shared by ``paths`` (``model.layers.3.mlp``), or None."""
    split = [p.split(".") for p in paths if isinstance(p, str) and p]
    if not split:
        return None
    first = split[0]
    n = 0
    while n < len(first) and all(len(s) > n and s[n] == first[n] for s in split):
        n += 1
    return ".".join(first[:n]) or None


def _sig(value: float) -> str:
    text = f"{value:.3g}"
    return text if "e" not in text else f"{value:.0f}"


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{_sig(value / scale)} {prefix}{unit}"
    return f"{_sig(value)} {unit}"


def fmt_time(us: float) -> str:
    """Microseconds as ``850 µs`` / ``12.3 ms`` / ``4.56 s`` (the report's convention)."""
    if abs(us) >= 1e6:
        return f"{_sig(us / 1e6)} s"
    if abs(us) >= 1e3:
        return f"{_sig(us / 1e3)} ms"
    return f"{_sig(us)} µs"


def fmt_bytes(n: float) -> str:
    """``64 MB`` (decimal prefixes)."""
    return _si(n, "B")


def fmt_bandwidth(bps: float) -> str:
    """``2.04 TB/s``."""
    return _si(bps, "B/s")


def fmt_flops(fps: float) -> str:
    """``312 TFLOP/s``."""
    return _si(fps, "FLOP/s")


def kernel_label(name: str, width: int = 60) -> str:
    """A kernel name cut to ``width`` characters for evidence text."""
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


__all__ = [
    "MAX_EVIDENCE_ITEMS", "MIN_SAVING_PCT", "RULES", "Rule", "RuleContext", "Target", "common_prefix",
    "ArgBytes", "arg_bytes", "fmt_bandwidth", "fmt_bytes", "fmt_flops", "fmt_time", "iteration_size", "kernel_label", "op_chain", "output_bytes",
    "rule", "short_list", "tensor_sizes",
]
