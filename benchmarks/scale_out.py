"""Scale-out: wall time and the reducing process's peak RSS for N-rank jobs, on both engines.

Each job is a folder of N rank files made by ``make_big_trace.py --ranks N`` from one real trace (the
H100 BERT inference trace by default, about ``--events`` events per rank). Each (N, engine) is
analysed in a fresh subprocess — ``bwdiag.pipeline.analyze(folder, engine=...)``, the map and the
reduce ``bwdiag analyze`` runs — which reports its wall time and its own peak RSS
(``getrusage(RUSAGE_SELF)``: the process that receives the summaries and reduces them; the local
engine's forked workers and Ray's workers are other processes). The Ray runs start a local Ray
instance of ``--cpus`` CPUs before the clock starts (its workers' start-up is inside the wall time).

    python benchmarks/scale_out.py                          # N = 8 64 256, both engines
    python benchmarks/scale_out.py --ranks 8 64 --engines local

Target (issue 17): the reducing process's peak RSS at 256 ranks ≤ 1.5× its peak at 8 ranks.
Jobs are written under ``--work`` (default /tmp/bwdiag-scale-out), never into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "traces" / "tracelens" / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"


def make_job(source: Path, ranks: int, events: int, work: Path) -> Path:
    """The folder of ``ranks`` rank files (made once, reused while its marker says the same recipe)."""
    folder = work / f"ranks{ranks}_ev{events}"
    marker = folder / ".made"
    recipe = f"{source} {ranks} {events}"
    if marker.exists() and marker.read_text() == recipe:
        return folder
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_big_trace.py"), str(source),
                    "--events", str(events), "--ranks", str(ranks), "-o", str(folder)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker.write_text(recipe)
    return folder


def child(folder: Path, engine: str, cpus: int, before_checkout: Path | None = None) -> None:
    """Analyse ``folder`` here and print one JSON line: wall seconds, peak RSS (MiB) before and after.
    ``engine`` "before": the checkout ``before_checkout`` (bwdiag before the map/reduce split)."""
    sys.path.insert(0, str(before_checkout if engine == "before" else REPO))
    from bwdiag import pipeline

    if engine == "ray":
        import ray

        ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    d = pipeline.analyze([folder]) if engine == "before" else pipeline.analyze([folder], engine=engine)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "rss_before_mib": before, "peak_rss_mib": peak, "ranks": len(d.ranks),
                      "straggler": d.straggler.rank if d.straggler else None}))
    if engine == "ray":
        ray.shutdown()


def measure(folder: Path, engine: str, cpus: int, before_checkout: Path | None = None) -> dict:
    env = dict(os.environ, BWDIAG_JOBS=str(cpus))
    extra = ["--before", str(before_checkout)] if before_checkout else []
    res = subprocess.run([sys.executable, __file__, "--child", str(folder), engine, "--cpus", str(cpus), *extra],
                         capture_output=True, text=True, env=env, cwd=str(Path(__file__).resolve().parent))
    if res.returncode != 0:
        raise SystemExit(f"{engine} on {folder} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--engines", nargs="+", choices=["local", "ray"], default=["local", "ray"])
    ap.add_argument("--events", type=int, default=5000, help="about how many events per rank file")
    ap.add_argument("--cpus", type=int, default=2, help="workers: BWDIAG_JOBS and the local Ray's CPUs")
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bwdiag-scale-out"))
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="also measure this checkout of bwdiag (e.g. `git archive` of the commit before the "
                         "map/reduce split), as engine 'before': every rank's tables in the one process")
    ap.add_argument("--child", nargs=2, metavar=("FOLDER", "ENGINE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(Path(args.child[0]), args.child[1], args.cpus, args.before)
        return 0
    if not args.source.exists():
        print(f"no source trace {args.source}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    engines = [*args.engines, *(["before"] if args.before else [])]
    print(f"{'ranks':>6} {'engine':>6} {'wall s':>8} {'s/(rank/worker)':>16} {'peak RSS MiB':>13} {'after imports':>14}")
    for n in args.ranks:
        folder = make_job(args.source, n, args.events, args.work)
        for engine in engines:
            r = measure(folder, engine, args.cpus, args.before)
            assert r["ranks"] == n, r
            rows.append({"ranks": n, "engine": engine, **r})
            print(f"{n:>6} {engine:>6} {r['wall_s']:>8.1f} {r['wall_s'] / (n / args.cpus):>16.2f} "
                  f"{r['peak_rss_mib']:>13.0f} {r['rss_before_mib']:>14.0f}", flush=True)
    for engine in engines:
        peaks = {r["ranks"]: r["peak_rss_mib"] for r in rows if r["engine"] == engine}
        lo, hi = min(peaks), max(peaks)
        if lo != hi:
            print(f"{engine}: peak RSS at {hi} ranks = {peaks[hi] / peaks[lo]:.2f}× its peak at {lo} "
                  f"(target ≤ 1.5×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
