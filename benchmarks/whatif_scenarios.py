"""Two what-ifs on the shared traces, by simple subtraction and by the dependency graph.

    python benchmarks/whatif_scenarios.py [TRACE ...]   # default: the traces of benchmarks/README.md

* **remove all idle**: subtraction = the window's idle time (``time.by_bound.idle``); graph = every
  host gap cut where the device idled (DataLoader spans included; on a CPU trace, where the host is
  the device, every gap between ops) and every sync wait dropped, then re-timed;
* **halve all memory-bound kernels**: subtraction = half the memory-bound kernels' time, capped by
  the window's memory-bound time (what ``findings.whatif.project`` does); graph = those kernels at
  half their duration, re-timed.

Prints a Markdown table: window, each saving by both models, graph rounds and time per re-timing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bwdiag.diagnose import depgraph  # noqa: E402
from bwdiag.diagnose.build import diagnose  # noqa: E402
from bwdiag.diagnose.depgraph import Change  # noqa: E402
from bwdiag.diagnose.findings.whatif import idle_cut  # noqa: E402
from bwdiag.trace import load_traces  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
TRACES = [
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/critical_path/alexnet",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "hta/rank_non_gpu/rank_non_gpu.json.gz",
    "hta/cpu_only",
]


def scenarios(path: str) -> dict:
    traces, _warnings = load_traces([path])[:2]
    d, analyses = diagnose(traces)
    t = time.perf_counter()
    g = depgraph.build_graph(analyses)
    build_s = time.perf_counter() - t
    base = depgraph.retime(g)
    drop = np.zeros(g.size, dtype=bool)
    drop[g.dst[g.kind == depgraph.WAIT]] = True
    t = time.perf_counter()
    idle = depgraph.retime(g, Change(cut=idle_cut(g, None), drop_waits=drop))
    retime_s = time.perf_counter() - t
    scale = np.ones(g.size)
    mem_us = 0.0
    for pos, a in enumerate(analyses):
        rows = np.flatnonzero(a.activities["bound"].to_numpy(dtype=object) == "memory")
        ids = g.node_of_act[pos][rows]
        scale[ids[ids >= 0]] = 0.5
        mem_us += float(a.activities["dur"].to_numpy(float)[rows].sum())
    half = depgraph.retime(g, Change(scale=scale))
    by = d.time.by_bound
    return {"trace": path, "kind": d.source.trace_kind, "ranks": len(analyses), "window": d.time.total_us,
            "nodes": g.size, "edges": len(g.src), "rounds": base.rounds, "build_ms": build_s * 1e3,
            "retime_ms": retime_s * 1e3, "idle_sub": by["idle"], "idle_graph": base.window_us - idle.window_us,
            "half_sub": min(mem_us / 2 / len(analyses), by["memory"]), "half_raw": mem_us / 2 / len(analyses),
            "half_graph": base.window_us - half.window_us, "base_err": base.window_us - d.time.total_us}


def main() -> None:
    paths = sys.argv[1:] or [str(SHARED / p) for p in TRACES]
    print("| trace | kind, ranks | window | remove all idle: subtraction → graph | halve memory-bound: "
          "subtraction (uncapped) → graph | nodes / edges / rounds | build, one re-timing |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ms = lambda us: f"{us / 1e3:,.2f} ms"  # noqa: E731
    for p in paths:
        if not Path(p).exists():
            print(f"| {p} | missing | | | | | |")
            continue
        r = scenarios(p)
        name = Path(p).name if Path(p).is_file() else Path(p).name + "/"
        print(f"| {name} | {r['kind']}, {r['ranks']} | {ms(r['window'])} | {ms(r['idle_sub'])} → {ms(r['idle_graph'])} | "
              f"{ms(r['half_sub'])} ({ms(r['half_raw'])}) → {ms(r['half_graph'])} | "
              f"{r['nodes']:,} / {r['edges']:,} / {r['rounds']} | {r['build_ms']:.0f} ms, {r['retime_ms']:.0f} ms |",
              flush=True)


if __name__ == "__main__":
    main()
