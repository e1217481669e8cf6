"""Price CUDA/HIP graph replays with the ops recorded when the graph was captured.

A replayed graph shows in the execution trace as one ``cudaGraphLaunch`` / ``hipGraphLaunch`` and
the kernels it ran, all carrying the launch's correlation id and no launching op: no shapes, so no
FLOPs or bytes. The *capture-time* trace has what is missing. vLLM profiles each graph capture into
``<torch_profiler_dir>/capture_traces/graph_capture_rank_<r>.<ts>.pt.trace.json.gz`` (profiler config
``capture_torch_profiler``); there every kernel the graph will replay was launched once, between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture``, inside the op (``aten::addmm`` with its
``Input Dims`` …) that launched it, and each launch names its kernel (``args.kernel``).

A graph replays its kernels in the order they were captured (one stream; a multi-stream graph is
ordered by start time, which may interleave branches differently: that part then fails to align and
is reported). So the replay's sequence of (kind, kernel name) is aligned with each captured
sequence: the capture whose sequence matches the most items wins (ties: the capture whose
``capture_<n>_…`` label has the smallest ``n`` at least the replay's ``execute_<n>_…`` token count,
as vLLM pads a batch up to the next captured size; then the most grid sizes alike). Matched
kernels get a copy of their capture-time op (one copy per replay, so each replay carries the op's
full cost) appended to the execution trace's op table, stamped at the graph launch with zero
duration and ``capture`` = the capture file's name; ``link`` becomes ``"capture"``. Where the
sequences differ, what matches is aligned and the rest is counted in a warning.

Nothing here changes a trace that has no graph launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from bwdiag.errors import TraceError
from bwdiag.trace.events import EventTables, Tabulator
from bwdiag.trace.link import GRAPH_LAUNCH_NAMES, _enclosing, link, thread_indexes
from bwdiag.trace.read import read_trace_file
from bwdiag.trace.sources import CAPTURE_DIR, list_sources

#: The folder vLLM writes capture-time traces into, beside the execution trace.

#: How to get a capture trace, for the warning when replays have none.
HOW_TO_CAPTURE = (
    "vLLM (v0.26+) writes one per captured graph size into <torch_profiler_dir>/capture_traces/ when "
    "serving with --profiler-config.capture_torch_profiler True (SGLang: --enable-profile-cuda-graph); "
    "keep that folder beside the trace, or pass --graph-capture FILE"
)

# A replay must match at least this share of its items to be aligned with a capture.
MIN_MATCH_SHARE = 0.5
# After a difference, the sequences are in step again once this many items agree; skips longer than
# MAX_RESYNC_SKIP (in both sequences together) are not looked for.
RESYNC_RUN = 8
MAX_RESYNC_SKIP = 256

_LAUNCH = re.compile(r"LaunchKernel|LaunchCooperativeKernel|ModuleLaunch|Memcpy|Memset")
_EXECUTE_TOKENS = re.compile(r"^execute_(\d+)_")
_CAPTURE_TOKENS = re.compile(r"^capture_(\d+)_")


@dataclass
class CaptureSegment:
    """The launches recorded between one stream-capture begin and end."""

    file: str
    label: str | None  # the enclosing ``capture_<n>_<mode>`` annotation, when recorded
    tokens: int | None  # ``n`` of that label
    items: list[tuple[str, str | None]]  # (kind, kernel name or None) per launch, in launch order
    blocks: list[int | None]  # grid size per launch (None when not recorded)
    ops: np.ndarray  # row label in ``CaptureTrace.ops`` of each launch's op, or -1


@dataclass
class CaptureTrace:
    path: Path
    ops: pd.DataFrame
    segments: list[CaptureSegment]
    sig_offset: int = 0  # added to this file's ``sig`` ids so they never collide with the host trace's


@dataclass
class AlignStats:
    """What the alignment did, for the loader's warning."""

    replay_kernels: int = 0  # kernels launched by a graph launch
    replay_us: float = 0.0
    aligned_kernels: int = 0
    aligned_us: float = 0.0
    graph_launches: int = 0
    captures_used: set[str] = field(default_factory=set)
    unmatched_launches: int = 0  # graph launches no capture matched well enough
    ambiguous: int = 0  # graph launches whose best captures tied with different shapes


def capture_files(paths: Sequence[str | Path]) -> list[Path]:
    """The capture trace files among ``paths`` (files, or folders searched for trace files)."""
    return list_sources(paths, missing="no such graph-capture trace or folder",
                              empty="folder holds no capture traces (*.json or *.json.gz)")


def captures_beside(trace: Path) -> list[Path]:
    """Capture traces vLLM left beside ``trace``: ``capture_traces/`` in the trace's folder."""
    folder = trace.parent / CAPTURE_DIR
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.rglob("*") if f.is_file() and f.name.endswith((".json", ".json.gz")))


def has_graph_replays(tables: EventTables) -> bool:
    gpu = tables.gpu
    return bool(len(gpu)) and "launch_name" in gpu and bool(gpu["launch_name"].isin(GRAPH_LAUNCH_NAMES).any())


def load_capture(path: Path) -> CaptureTrace:
    """Read one capture-time trace into its ops and its stream-capture segments."""
    raw = read_trace_file(path)
    kernel_of: dict[int, tuple[str | None, int | None]] = {}  # launch correlation → (kernel, grid size)
    for ev in raw.events:
        if not isinstance(ev, dict) or ev.get("cat") not in ("cuda_runtime", "Runtime", "cuda_driver", "Driver"):
            continue
        args = ev.get("args")
        if not isinstance(args, dict) or not isinstance(args.get("correlation"), int):
            continue
        name = args.get("kernel")
        grid = args.get("grid")
        blocks = int(np.prod(grid)) if isinstance(grid, list) and grid and all(
            isinstance(g, int) for g in grid) else None
        kernel_of[args["correlation"]] = (name if isinstance(name, str) else None, blocks)
    tab = Tabulator()
    tab.add(raw.events)
    del raw
    tables = tab.finish()
    link(tables)  # parents, modules
    return CaptureTrace(path, tables.ops, _segments(path, tables, kernel_of))


def _segments(path: Path, tables: EventTables, kernel_of: dict) -> list[CaptureSegment]:
    rt = tables.runtime.sort_values("ts", kind="stable")
    names = rt["name"].astype(str)
    begins = rt[names.str.contains("StreamBeginCapture")]
    ends = rt[names.str.contains("StreamEndCapture")]
    cpu_ops = tables.ops[tables.ops["cat"] == "cpu_op"]
    threads = thread_indexes(cpu_ops)
    ann = tables.annotations
    labels = ann[ann["name"].astype(str).str.match(_CAPTURE_TOKENS)] if len(ann) else ann
    out = []
    for _, b in begins.iterrows():
        after = ends[(ends["ts"] >= b["end"]) & (ends["pid"] == b["pid"]) & (ends["tid"] == b["tid"])]
        if after.empty:
            continue
        stop = float(after["ts"].iloc[0])
        inside = rt[(rt["ts"] >= b["end"]) & (rt["ts"] < stop) & (rt["pid"] == b["pid"]) & (rt["tid"] == b["tid"])]
        inside = inside[inside["name"].astype(str).str.contains(_LAUNCH)]
        items, blocks = [], []
        for name, corr in zip(inside["name"].astype(str), inside["correlation"]):
            kernel, grid = kernel_of.get(int(corr), (None, None)) if pd.notna(corr) else (None, None)
            kind = "memcpy" if "Memcpy" in name else "memset" if "Memset" in name else "kernel"
            items.append((kind, kernel if kind == "kernel" else None))
            blocks.append(grid)
        ops = _enclosing(threads, inside["pid"].to_numpy(dtype=object), inside["tid"].to_numpy(dtype=object),
                         inside["ts"].to_numpy(dtype=float))
        label = None
        if len(labels):
            around = labels[(labels["ts"] <= b["ts"]) & (labels["end"] >= stop)]
            if len(around):
                label = str(around.sort_values("dur")["name"].iloc[0])
        m = _CAPTURE_TOKENS.match(label) if label else None
        out.append(CaptureSegment(path.name, label, int(m.group(1)) if m else None, items, blocks, ops))
    return out


def align_replays(tables: EventTables, captures: list[CaptureTrace]) -> AlignStats:
    """Give each graph-replayed kernel of ``tables`` the op that launched it at capture time."""
    gpu, ops = tables.gpu, tables.ops
    stats = AlignStats()
    if not has_graph_replays(tables):
        return stats
    replay = gpu["launch_name"].isin(GRAPH_LAUNCH_NAMES).to_numpy()
    stats.replay_kernels = int(replay.sum())
    stats.replay_us = float(gpu.loc[replay, "dur"].sum())
    stats.graph_launches = int(gpu.loc[replay, "correlation"].nunique())
    segments = [s for c in captures for s in c.segments]
    if not segments:
        return stats
    _offset_sigs(ops, captures)
    by_file = {c.path.name: c for c in captures}
    tokens = _execute_tokens(tables)
    new_rows: list[pd.DataFrame] = []
    next_label = int(ops.index.max()) + 1 if len(ops) else 0
    op_col = gpu["op"].to_numpy().copy()
    link_col = gpu["link"].to_numpy(dtype=object).copy()
    graph_col = gpu["graph"].to_numpy().copy()
    choice_cache: dict[tuple, tuple] = {}
    rows_by_launch = pd.Series(np.flatnonzero(replay)).groupby(gpu["correlation"].to_numpy()[replay]).indices
    replay_pos = np.flatnonzero(replay)
    for corr, where in rows_by_launch.items():
        rows = replay_pos[where]
        rows = rows[np.argsort(gpu["ts"].to_numpy()[rows], kind="stable")]
        items = [(k, n if k == "kernel" else None) for k, n in
                 zip(gpu["kind"].to_numpy(dtype=object)[rows], gpu["name"].to_numpy(dtype=object)[rows])]
        launch_ts = float(gpu["launch_ts"].to_numpy()[rows[0]])
        want = _tokens_at(tokens, launch_ts)
        blocks = [None if pd.isna(b) else int(b) for b in gpu["blocks"].to_numpy(dtype=object)[rows]]
        key = (tuple(items), want, tuple(blocks))
        if key not in choice_cache:
            choice_cache[key] = _best_segment(items, blocks, want, segments)
        seg, pairs, ambiguous = choice_cache[key]
        stats.ambiguous += ambiguous
        if seg is None:
            stats.unmatched_launches += 1
            continue
        cap = by_file[seg.file]
        cap_ops = seg.ops[[j for _, j in pairs]]
        have = cap_ops >= 0
        if not have.any():
            continue
        stats.captures_used.add(seg.file if seg.label is None else f"{seg.file} ({seg.label})")
        uniq = np.unique(cap_ops[have])
        labels = np.arange(next_label, next_label + len(uniq))
        next_label += len(uniq)
        launch = _launch_of(tables, corr)
        new_rows.append(_op_copies(cap, uniq, labels, launch, ops.columns))
        relabel = dict(zip(uniq.tolist(), labels.tolist()))
        for (i, _), c in zip(pairs, cap_ops):
            if c < 0:
                continue
            r = rows[i]
            op_col[r] = relabel[int(c)]
            link_col[r] = "capture"
            graph_col[r] = False
            stats.aligned_kernels += 1
            stats.aligned_us += float(gpu["dur"].iat[r])
    if new_rows:
        if "capture" not in ops:
            ops["capture"] = None
        tables.ops = pd.concat([ops, *new_rows])
        gpu["op"] = op_col
        gpu["link"] = link_col
        gpu["graph"] = graph_col
    return stats


def _best_segment(items, blocks, want, segments):
    """(segment, [(replay index, capture index)], ambiguous) of the best-matching capture."""
    scored = []
    for s in segments:
        pairs = _match(items, s.items)
        if not pairs:
            continue
        size_rank = 0 if want is None or s.tokens is None else (
            s.tokens - want if s.tokens >= want else 10**9)  # padded up to the next captured size
        grids = sum(1 for i, j in pairs if blocks[i] is not None and blocks[i] == s.blocks[j])
        scored.append((len(pairs), -size_rank, grids, -len(s.items), s, pairs))
    if not scored:
        return None, [], 0
    scored.sort(key=lambda t: t[:4], reverse=True)
    best = scored[0]
    if best[0] < MIN_MATCH_SHARE * len(items):
        return None, [], 0
    ambiguous = int(len(scored) > 1 and scored[1][:4] == best[:4] and scored[1][4].label != best[4].label)
    return best[4], best[5], ambiguous


def _match(replay, captured) -> list[tuple[int, int]]:
    """Pairs (replay index, capture index) of items that align, in order.

    The two sequences are walked in step; at a difference, the smallest skip (in either or both
    sequences) after which the next :data:`RESYNC_RUN` items agree again is taken. A decoder's
    kernels repeat layer after layer, so a longest-common-block diff would happily pair layer 3 of
    one with layer 7 of the other; the smallest skip keeps each kernel with its own layer. A launch
    with no recorded kernel name (CUDA runtime events may lack ``kernel``) matches any kernel.
    """
    n, m = len(replay), len(captured)

    def same(i: int, j: int) -> bool:
        r, c = replay[i], captured[j]
        return r[0] == c[0] and (c[1] is None or r[1] == c[1])

    def run_agrees(i: int, j: int) -> bool:
        w = min(RESYNC_RUN, n - i, m - j)
        return w > 0 and all(same(i + k, j + k) for k in range(w))

    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if same(i, j):
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        skip = None
        for d in range(1, min(MAX_RESYNC_SKIP, (n - i) + (m - j)) + 1):
            # skips of total d, the most even first (a substituted run before a one-sided gap)
            for di in sorted(range(d + 1), key=lambda x: abs(2 * x - d)):
                if run_agrees(i + di, j + d - di):
                    skip = (di, d - di)
                    break
            if skip:
                break
        if skip is None:
            break
        i, j = i + skip[0], j + skip[1]
    return pairs


def _offset_sigs(ops: pd.DataFrame, captures: list[CaptureTrace]) -> None:
    nxt = int(ops["sig"].max()) + 1 if len(ops) and "sig" in ops else 0
    for c in captures:
        c.sig_offset = nxt
        if len(c.ops) and "sig" in c.ops:
            nxt += int(c.ops["sig"].max()) + 1


def _op_copies(cap: CaptureTrace, uniq: np.ndarray, labels: np.ndarray, launch: tuple, columns) -> pd.DataFrame:
    src = cap.ops.loc[uniq]
    pid, tid, ts = launch
    out = pd.DataFrame(index=pd.Index(labels))
    for c in columns:
        out[c] = src[c].to_numpy() if c in src else None
    out["ts"] = ts
    out["dur"] = 0.0
    out["end"] = ts
    out["pid"] = pid
    out["tid"] = tid
    out["ext_id"] = pd.array([pd.NA] * len(out), dtype="Int64")
    if "sig" in out:
        out["sig"] = src["sig"].to_numpy(dtype=np.int64) + cap.sig_offset
    if "parent" in out:
        out["parent"] = -1  # the capture-time parents stay in the capture trace
    if "children" in out:
        out["children"] = 0
    out["capture"] = cap.path.name
    return out


def _launch_of(tables: EventTables, corr) -> tuple:
    rt = tables.runtime
    hit = rt[rt["correlation"] == corr]
    if hit.empty:
        return (None, None, float("nan"))
    r = hit.iloc[-1]
    return (r["pid"], r["tid"], float(r["ts"]))


def _execute_tokens(tables: EventTables) -> pd.DataFrame:
    """vLLM's ``execute_<n>_context_…`` step annotations: (ts, end, n)."""
    ann = tables.annotations
    if ann.empty:
        return ann
    m = ann["name"].astype(str).str.extract(_EXECUTE_TOKENS, expand=False)
    hit = ann[m.notna()].assign(tokens=m[m.notna()].astype(int))
    return hit[["ts", "end", "tokens"]]


def _tokens_at(tokens: pd.DataFrame, t: float) -> int | None:
    if tokens is None or tokens.empty or t != t:
        return None
    around = tokens[(tokens["ts"] <= t) & (tokens["end"] >= t)]
    return int(around["tokens"].iloc[0]) if len(around) else None


def replay_warnings(path: Path, tables: EventTables, stats: AlignStats, looked: list[Path]) -> list[str]:
    """One warning about graph replays that no capture-time op prices (none when all aligned)."""
    if not stats.replay_kernels:
        return []
    kernels = tables.gpu[tables.gpu["kind"] == "kernel"]
    total = float(kernels["dur"].sum())
    replay = kernels["launch_name"].isin(GRAPH_LAUNCH_NAMES) & (kernels["link"] != "capture")
    n, us = int(replay.sum()), float(kernels.loc[replay, "dur"].sum())
    if n == 0:
        return []
    pct = 100.0 * us / total if total else 0.0
    amount = f"{us / 1e3:,.2f} ms" if us >= 1e3 else f"{us:,.1f} µs"
    head = (f"{path.name}: {n:,} kernels ({amount}, {pct:.1f}% of kernel time) were replayed from a CUDA/HIP "
            f"graph ({stats.graph_launches:,} graph launch{'es' if stats.graph_launches != 1 else ''}) and have "
            "no op of their own, so no shapes: their FLOPs and bytes are estimated from the kernel name alone, "
            "or unknown")
    if not looked:
        return [f"{head}. No capture-time trace was found (none in {path.parent / CAPTURE_DIR}/): {HOW_TO_CAPTURE}"]
    names = ", ".join(p.name for p in looked[:3]) + (f" and {len(looked) - 3} more" if len(looked) > 3 else "")
    detail = []
    if stats.aligned_kernels:
        detail.append(f"{stats.aligned_kernels:,} others were aligned with their capture-time ops")
    if stats.unmatched_launches:
        detail.append(f"{stats.unmatched_launches:,} graph launch(es) matched no captured kernel sequence "
                      f"(under {MIN_MATCH_SHARE:.0%} of their kernels)")
    return [f"{head}. The capture trace ({names}) does not record them in the replayed order"
            + (f" ({'; '.join(detail)})" if detail else "")
            + "; a capture trace from the same run and graph sizes aligns them all"]


def ambiguity_warning(path: Path, stats: AlignStats) -> list[str]:
    if not stats.ambiguous:
        return []
    return [f"{path.name}: {stats.ambiguous:,} graph launch(es) match several captured graphs equally well "
            "(same kernels, different capture sizes) and no execute_<n>_… annotation tells them apart; "
            "the first was used, so their shapes may be those of another batch size"]
