"""What does `bwdiag run` cost a training step? A benchmark (not a test), reported in one run.

    python benchmarks/capture_overhead.py [--steps 40] [--repeats 3] [--device cpu|cuda]

It trains the small GPT of examples/train_transformer.py and times every step in four setups:

  plain          python script.py, no profiler at all
  bwdiag run     bwdiag run script.py (default options: auto step marker, module annotations);
                 steps before the window (hooks waiting) and after it (profiler stopped) are
                 "outside"; the recorded steps are "inside"
  bwdiag run --no-modules   the same without bwdiag's module annotations
  torch.profiler a hand-written torch.profiler.profile(record_shapes=True, same schedule) with
                 prof.step() after each step: what bwdiag's window is compared with

Each setup runs --repeats times, interleaved; a setup's figure is the median over runs of each run's median step
time. The last recorded step is left out of "inside" in both profiled setups: it includes writing
the trace, a one-off cost the same in both. Targets: outside <= 1.02x plain, inside <= 1.05x
torch.profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WAIT, WARMUP, ACTIVE = 10, 2, 10


def workload(steps: int, device_name: str, torch_profiler: bool, out: str | None) -> None:
    """Train for `steps` steps, print one JSON line with every step's wall time (seconds)."""
    sys.path.insert(0, str(REPO / "examples"))
    import torch
    import torch.nn.functional as F
    from train_transformer import TinyGPT

    torch.manual_seed(0)
    device = torch.device(device_name)
    vocab, seq = 512, 64
    model = TinyGPT(vocab, 128, 4, 2, seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (8, seq + 1), device=device)
    amp = torch.bfloat16 if device.type == "cuda" else None
    prof = None
    if torch_profiler:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(Path(out) / "plain.pt.trace.json.gz")),
            record_shapes=True,
        )
        prof.start()
    # On the CPU, torch runs on one thread and each step is timed in CPU time of that thread: the
    # profiler's cost is work on this thread, and other processes on a shared machine do not
    # inflate it. On a GPU, wall time after a synchronize.
    clock = time.perf_counter if device.type == "cuda" else time.thread_time
    if device.type == "cpu":
        torch.set_num_threads(1)
    times = []
    for _ in range(steps):
        t0 = clock()
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(model(data[:, :-1]).reshape(-1, vocab), data[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if prof is not None:
            prof.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - t0)
    if prof is not None:
        prof.stop()
    print(json.dumps(times))


def _run(cmd: list[str]) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch-profiler", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.workload:
        workload(args.steps, args.device, args.torch_profiler, args.trace_dir)
        return

    me = str(Path(__file__).resolve())
    wl = ["--workload", "--steps", str(args.steps), "--device", args.device]
    sched = [f"--wait={WAIT}", f"--warmup={WARMUP}", f"--active={ACTIVE}", "--no-analyze", "--force"]
    first, last = WAIT + WARMUP, WAIT + WARMUP + ACTIVE  # recorded steps: [first, last)
    results: dict[str, list[list[float]]] = {k: [] for k in ("plain", "bwdiag", "bwdiag-nomod", "torch")}
    with tempfile.TemporaryDirectory(prefix="bwdiag-bench-") as tmp:
        for _ in range(args.repeats):
            results["plain"].append(_run([sys.executable, me, *wl]))
            results["bwdiag"].append(_run([sys.executable, "-m", "bwdiag", "run", *sched, "-o", tmp, me, *wl]))
            results["bwdiag-nomod"].append(
                _run([sys.executable, "-m", "bwdiag", "run", *sched, "--no-modules", "-o", tmp, me, *wl])
            )
            results["torch"].append(_run([sys.executable, me, *wl, "--torch-profiler", "--trace-dir", tmp]))

    def figure(key: str, pick) -> float:
        # median step of each run (robust to a step hit by another process), median over runs
        return statistics.median(statistics.median(pick(run)) for run in results[key])

    settled = lambda run: run[3:]  # noqa: E731 - the first steps warm up allocator and caches
    before = lambda run: run[3:WAIT]  # noqa: E731
    after = lambda run: run[last + 1 :]  # noqa: E731 - the step after the window pays for its close
    outside = lambda run: run[3:WAIT] + run[last + 1 :]  # noqa: E731
    inside = lambda run: run[first : last - 1]  # noqa: E731 - the last one also writes the trace

    plain = figure("plain", lambda r: before(r) + after(r))
    torch_in = figure("torch", inside)
    rows = [
        ("no profiler (steps 3.. outside the window)", plain, plain, "1.00x plain"),
        ("bwdiag run, before the window", figure("bwdiag", before), plain, "plain"),
        ("bwdiag run, after the window", figure("bwdiag", after), plain, "plain"),
        ("bwdiag run, outside the window", figure("bwdiag", outside), plain, "plain"),
        ("torch.profiler, inside the window", torch_in, plain, "plain"),
        ("bwdiag run, inside the window", figure("bwdiag", inside), torch_in, "torch.profiler"),
        ("bwdiag run --no-modules, inside", figure("bwdiag-nomod", inside), torch_in, "torch.profiler"),
    ]
    clock = "wall time" if args.device.startswith("cuda") else "CPU time of the step's thread (1 torch thread)"
    print(f"device {args.device} ({clock}), {os.cpu_count()} CPU cores, {args.steps} steps x {args.repeats} runs; "
          f"schedule wait={WAIT} warmup={WARMUP} active={ACTIVE}; plain median step "
          f"{figure('plain', settled) * 1e3:.2f} ms")
    print(f"{'setup':46s} {'ms/step':>9s} {'ratio':>7s}  vs")
    for name, value, base, versus in rows:
        print(f"{name:46s} {value * 1e3:9.2f} {value / base:7.3f}  {versus}")


if __name__ == "__main__":
    main()
