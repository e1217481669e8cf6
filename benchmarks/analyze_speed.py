"""bwdiag against HTA and against the floor, on the same traces, one measurement after another.

Every measurement runs in a fresh Python subprocess, so its wall time includes interpreter start
and imports (what a user waits for) and its peak RSS is its own. Bytecode caching is on for them
(as for an installed package) and warmed once before anything is measured:

  floor    gzip-decompress + JSON-parse the file(s) alone (orjson), nothing else
  hta      HTA ``TraceAnalysis`` load + temporal breakdown + kernel breakdown + comm/comp overlap
           (HTA wants a folder holding only the traces: they are symlinked into a temporary one)
  bwdiag   ``python -m bwdiag analyze PATH -o TMP --force`` end to end (diagnosis.json + report.html)
  serial   (folders only) bwdiag on the same folder with ``BWDIAG_JOBS=1``: the ranks one after another

Peak RSS is the larger of the kernel's ru_maxrss of the measured process tree (``os.wait4``: the
largest single process) and the sampled sum of PSS over the whole tree (psutil, every 50 ms), so a
process pool is charged for all its workers (shared pages once). CPU seconds (user + system, the
tree) are printed beside wall time: on a shared machine wall time also measures the neighbours.

    python benchmarks/analyze_speed.py ../shared/traces/hta/negative_queue_length_values_check/rank0.json.gz
    python benchmarks/analyze_speed.py /tmp/big1m.json.gz /tmp/ranks8 --skip hta --json /tmp/speed.json

Prints one table per trace and the ratios bwdiag/hta (c/b), bwdiag/floor (c/a) and peak RSS over
the uncompressed JSON size. See benchmarks/README.md for recorded results and the machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
MEASURES = ("floor", "hta", "bwdiag", "serial")

FLOOR = r"""
import gzip, sys, orjson
for p in sys.argv[1:]:
    raw = open(p, 'rb').read()
    if raw[:2] == b'\x1f\x8b':
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    n = len(doc['traceEvents'])
    del raw, doc
"""

HTA = r"""
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
print(f"hta ranks={len(ta.t.traces)} events kept={sum(len(df) for df in ta.t.traces.values()):,}")
"""


@dataclass
class Measurement:
    trace: str
    measure: str
    wall_s: float
    cpu_s: float  # user + system of the process and its children (less than wall x cores when busy)
    peak_rss_mb: float
    returncode: int


def trace_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [path]


def json_bytes(files: list[Path]) -> int:
    """Uncompressed JSON size of the files (streamed, never held in memory)."""
    total = 0
    for f in files:
        opener = gzip.open if f.read_bytes()[:2] == b"\x1f\x8b" else open
        with opener(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                total += len(chunk)
    return total


def _pss(p: psutil.Process) -> int:
    """Proportional set size: pages shared with forked workers are counted once over the tree."""
    try:
        return p.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return p.memory_info().rss


def run_measured(cmd: list[str], env: dict | None = None, cwd: Path = REPO) -> tuple[float, float, float, int]:
    """Run ``cmd``; return (wall seconds, CPU seconds of the tree, peak RSS in MiB, return code)."""
    peak = [0]
    done = threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def sample() -> None:
        try:
            root = psutil.Process(proc.pid)
        except psutil.NoSuchProcess:
            return
        while not done.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    total += _pss(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            peak[0] = max(peak[0], total)
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    stderr = proc.stderr.read()
    reader.join()
    _, status, usage = os.wait4(proc.pid, 0)  # reaped here (not by Popen) to get its rusage
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(stderr.decode("utf-8", "replace")[-2000:])
    rss = max(usage.ru_maxrss * 1024, peak[0]) / 2**20
    note = out[0].decode("utf-8", "replace").strip().splitlines()[-1:] if out and out[0] else []
    if note and note[0].startswith("hta "):
        print(f"    {note[0]}", file=sys.stderr)
    return wall, usage.ru_utime + usage.ru_stime, rss, proc.returncode


def bench_env() -> dict:
    """The environment of every measured process: bytecode caching on, as on a user's machine.

    With ``PYTHONDONTWRITEBYTECODE`` set (some sandboxes set it), a source checkout recompiles its
    modules on every start: ~0.15 s for bwdiag's, which an installed package (pip compiles at
    install) never pays. :func:`warm_up` writes the caches once before anything is measured.
    """
    env = dict(os.environ)
    env.pop("BWDIAG_JOBS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_up() -> None:
    """Import what each measurement imports once, unmeasured, so bytecode caches exist."""
    code = ("import orjson, bwdiag.cli, bwdiag.pipeline; bwdiag.pipeline._import_analysis(); "
            "import bwdiag.report.terminal, rich.progress, hta.trace_analysis")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=bench_env(), check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(path: Path, what: str, files: list[Path]) -> Measurement:
    py = sys.executable
    env = bench_env()
    if what == "floor":
        cmd = [py, "-c", FLOOR, *map(str, files)]
        wall, cpu, rss, rc = run_measured(cmd, env)
    elif what == "hta":
        with tempfile.TemporaryDirectory(prefix="bwdiag-hta-") as tmp:
            for f in files:
                os.symlink(f.resolve(), Path(tmp) / f.name)
            wall, cpu, rss, rc = run_measured([py, "-c", HTA, tmp], env)
    else:
        if what == "serial":
            env["BWDIAG_JOBS"] = "1"
        out = tempfile.mkdtemp(prefix="bwdiag-speed-")
        try:
            cmd = [py, "-m", "bwdiag", "analyze", str(path), "-o", out, "--force"]
            wall, cpu, rss, rc = run_measured(cmd, env)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return Measurement(str(path), what, wall, cpu, rss, rc)


def machine() -> str:
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores, {model}, {mem:.0f} GiB RAM, Python {platform.python_version()}"


def report(path: Path, rows: dict[str, Measurement], json_size: int, events: int | None) -> str:
    lines = [f"\n{path}  ({json_size / 2**20:,.0f} MiB JSON" + (f", {events:,} events" if events else "") + ")"]
    lines.append(f"  {'measure':<8} {'wall s':>9} {'cpu s':>8} {'peak RSS MiB':>13} {'RSS/JSON':>9}")
    for name in MEASURES:
        m = rows.get(name)
        if m is None:
            continue
        flag = "" if m.returncode == 0 else f"  (exit {m.returncode})"
        lines.append(f"  {name:<8} {m.wall_s:>9.2f} {m.cpu_s:>8.2f} {m.peak_rss_mb:>13,.0f} "
                     f"{m.peak_rss_mb * 2**20 / json_size:>9.2f}{flag}")
    c = rows.get("bwdiag")
    if c:
        for label, other in (("c/b (bwdiag/hta)", "hta"), ("c/a (bwdiag/floor)", "floor"),
                             ("bwdiag/serial", "serial")):
            o = rows.get(other)
            if o and o.wall_s > 0:
                lines.append(f"  {label:<19} wall {c.wall_s / o.wall_s:5.2f}   cpu {c.cpu_s / o.cpu_s:5.2f}   "
                             f"RSS {c.peak_rss_mb / o.peak_rss_mb:5.2f}")
    return "\n".join(lines)


def count_events(files: list[Path]) -> int | None:
    """Events in the files, counted with a cheap byte scan (one ``"ph"`` key per event)."""
    total = 0
    for f in files:
        opener = gzip.open if f.read_bytes()[:2] == b"\x1f\x8b" else open
        with opener(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                total += chunk.count(b'"ph":')
    return total or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="bwdiag vs HTA vs the JSON-parse floor")
    ap.add_argument("paths", nargs="+", type=Path, help="trace files or folders of rank files")
    ap.add_argument("--skip", action="append", default=[], choices=MEASURES, help="leave a measurement out")
    ap.add_argument("--only", action="append", default=[], choices=MEASURES, help="run only these")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure each this many times (interleaved); the table shows the median wall time "
                         "(the faster of two); --json keeps every run")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}; load average before: {os.getloadavg()[0]:.2f}")
    warm_up()
    results = []
    for path in args.paths:
        files = trace_files(path)
        size, events = json_bytes(files), count_events(files)
        runs: dict[str, list[Measurement]] = {}
        for _ in range(max(1, args.repeat)):  # interleaved, so a busy spell hits every measure alike
            for what in MEASURES:
                if what in args.skip or (args.only and what not in args.only):
                    continue
                if what == "serial" and not path.is_dir():
                    continue
                m = measure(path, what, files)
                runs.setdefault(what, []).append(m)
                print(f"  {path.name} {what}: {m.wall_s:.2f} s wall, {m.cpu_s:.2f} s cpu, {m.peak_rss_mb:,.0f} MiB",
                      file=sys.stderr, flush=True)
        rows = {what: sorted(ms, key=lambda m: m.wall_s)[(len(ms) - 1) // 2] for what, ms in runs.items()}
        print(report(path, rows, size, events), flush=True)
        results.append({"path": str(path), "json_bytes": size, "events": events,
                        "measurements": [asdict(m) for ms in runs.values() for m in ms]})
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
