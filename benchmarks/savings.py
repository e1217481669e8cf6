"""Predicted vs realised savings: each issue-13 workload before and after the fix its findings name.

    python benchmarks/savings.py [--rounds 9] [--steps 14] [--only chain,decode] [--out DIR]

For each workload of ``savings_workloads.py``:

1. ``bwdiag run --step-on label:savings_step`` on the unmodified loop; the **predicted** saving of a
   finding is what its fix saves in that run's ``diagnosis.json``: ``fix_saving_per_step_us`` where the
   fix also resolves other findings (``same_fix``: one ``torch.compile`` covers their code too), else
   the saving the views show (the dependency graph's, else the rule's ``est_saving_per_step_us``); a
   capture bwdiag warns about (its window slowed down while the steps after it did not) is recorded
   again, as bwdiag tells a user to (``RECAPTURES``);
2. one process builds the "before" loop and every fixed variant, warms them up, and times them in
   interleaved rounds (``--rounds``, order alternating each round), each step with
   ``time.perf_counter``; a variant's step time is the median over rounds of each round's median;
3. **realised** = median step before − median step after; ratio = realised / predicted.

``--processes K`` times each variant in K processes of its own instead, alternated (ABBA…), each
running ``--rounds`` rounds, the rounds pooled: a user runs the fixed script in place of the old one,
never beside it, and a ``torch.compile``'d variant sharing a process with the eager ones (the
transformer's compile: 0.2–0.7 ms realised in one process, 1.1–1.6 ms in processes of their own on
the 2-core VM, 7 Dec 2026) is not what the user would see. Realised is then the median of the paired
differences (process ``i`` of ``before`` against process ``i`` of the fix, run back to back), the noise
their half interquartile range: the host's speed drifts between processes (:func:`realised`).

The profiler slows the recorded steps (here 2–4× for tiny ops: every op pays its recording), so a
finding's absolute µs are µs of a profiled step. The prediction compared is therefore its share of
the profiled median step (``est_saving_per_step_us / time.step_us``) times the unprofiled median
step before; the raw µs are kept in ``savings.json`` (``predicted_profiled_us``).

The top finding's row is the goal (ratio within 0.5–2); each of the top three findings that a
variant implements is timed too, and any that makes the step slower (beyond the rounds' spread) is
flagged. Torch runs on one thread everywhere. Prints a Markdown table (the one in
benchmarks/README.md) and writes the raw figures to ``DIR/savings.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from savings_workloads import DISTRIBUTED, NEEDS, STEP_LABEL, WORKLOADS  # noqa: E402

from bwdiag.capture.session import AFTER_WINDOW_STEPS  # noqa: E402

#: (workload, finding kind, title pattern) -> the variant that applies that finding's fix.
FIXES = (
    ("tiny_ops", "host_bound", r"tiny ops", "compile"),
    ("tiny_ops", "fusion", r"optimizer|per.parameter|SGD", "foreach"),
    ("chain", "fusion", r"Fuse", "compile"),
    ("decode", "host_bound", r"tiny ops|Python", "compile"),
    ("slow_loader", "data_loader", r"DataLoader", "workers8"),
    ("gloo_allreduce", "host_bound", r"tiny ops|Python", "compile"),
    ("gloo_allreduce", "overlap", r"all_reduce", "async"),
    ("gloo_allreduce", "precision", r"bf16", "bf16"),
    ("transformer", "host_bound", r"tiny ops|Python", "compile"),
    ("transformer", "fusion", r"AdamW", "fused"),
    ("transformer", "fusion", r"zero_ → _log_softmax", "compile_loss"),
    ("gpt2", "host_bound", r"tiny ops|Python", "compile"),
    ("gpt2", "fusion", r"AdamW", "fused"),
    ("gpt2", "fusion", r"zero_ → _log_softmax|mul → pow", "compile"),
)


#: Steps of a ``bwdiag run`` capture: 3 skipped, 1 warm-up, 4 recorded, then the steps its clock times
#: with the profiler stopped (the unprofiled step the host-overhead saving is worked out against) and one
#: to close the last of them.
CAPTURE_STEPS = 3 + 1 + 4 + AFTER_WINDOW_STEPS + 1


#: Where the finding's fix compiles the whole training step (``train_step = torch.compile(train_step)``:
#: forward, loss and backward), the variant that does so rather than the model alone.
STEP_VARIANTS = {"transformer": "compile_step", "gpt2": "compile_step", "gloo_allreduce": "compile_step"}
#: Other forms of a fix, timed beside the findings': GPT-2's step compiled without the
#: ``fallback_random`` line bwdiag's compile fixes get there (Inductor's own dropout draws).
BESIDE = {"gpt2": ("compile_step",)}


def variant_for(workload: str, finding: dict) -> str | None:
    for w, kind, pattern, variant in FIXES:
        if w == workload and finding["kind"] == kind and re.search(pattern, finding["title"]):
            fix = finding.get("fix") or ""
            if variant == "compile" and fix.startswith("train_step = torch.compile"):
                variant = STEP_VARIANTS.get(workload, variant)
            if "fallback_random" in fix and f"{variant}_eager_rng" in WORKLOADS[workload][1]:
                variant += "_eager_rng"  # the fix as written: its second line keeps eager's dropout draws
            return variant
    return None


#: bwdiag's warning for a window that slowed while it recorded (``diagnose.steps.slowed_window``): as
#: bwdiag tells a user, such a capture is recorded again (up to ``RECAPTURES`` times; the last one stands).
#: A savings.py capture of the transformer on 7 Dec 2026 ran its window at 63.5 ms a step against 25.5 ms
#: after it: its ops at a quarter of their speed put a 1 ms "Fuse 2 ops" on top (0.42 ms in a capture
#: without the warning).
SLOWED = "the recorded window slowed down"
RECAPTURES = 2


def diagnose(workload: str, out: Path, steps: int) -> dict:
    """``bwdiag run`` of the unfixed loop; its diagnosis (``recaptured``: how many captures were recorded
    again because bwdiag said their window had slowed)."""
    for attempt in range(RECAPTURES + 1):
        diagnosis = _diagnose_once(workload, out, steps)
        if attempt == RECAPTURES or not any(w.startswith(SLOWED) for w in diagnosis.get("warnings", ())):
            return {**diagnosis, "recaptured": attempt}
        print(f"{workload}: bwdiag says the recorded window slowed down; recording again", file=sys.stderr)
    raise AssertionError("unreachable")


def _diagnose_once(workload: str, out: Path, steps: int) -> dict:
    cmd = [sys.executable, "-m", "bwdiag", "run", "--step-on", f"label:{STEP_LABEL}", "--wait", "3", "--warmup", "1",
           "--active", "4", "--force", "-o", str(out)]
    if workload in DISTRIBUTED:
        cmd[4:4] = ["--nproc-per-node", "2"]
    cmd += [str(HERE / "savings_workloads.py"), workload, "run", "--steps", str(steps)]
    for attempt in (1, 2):  # a 2-rank gloo rendezvous can fail on a busy host: once more, then say why
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        if done.returncode == 0:
            break
        print(f"{workload}: bwdiag run failed (exit {done.returncode}, attempt {attempt}):\n"
              + "\n".join(done.stderr.splitlines()[-8:]), file=sys.stderr)
    else:
        raise SystemExit(f"{workload}: bwdiag run failed twice")
    return json.loads((out / "diagnosis.json").read_text())


class Timed(dict):
    """Per-round median step times (µs) by variant, pooled; ``by_process``: with ``--processes``, each
    variant's median step in each of its processes, in the order they ran (process ``i`` of every
    variant ran back to back, alternating ABBA), else None."""

    by_process: dict[str, list[float]] | None = None


def time_variants(workload: str, variants: list[str], rounds: int, steps: int, processes: int = 1) -> Timed:
    """Per-round median step times (µs) by variant: all variants interleaved in one process, or
    (``processes`` > 1) each variant in its own processes, alternated ABBA…, the rounds pooled —
    what a user who runs the fixed script instead sees: no compiled graph beside the eager one."""
    if processes <= 1:
        return Timed(_time_in_one(workload, variants, rounds, steps))
    pooled = Timed({v: [] for v in variants})
    pooled.by_process = {v: [] for v in variants}
    for i in range(processes):
        for v in (variants if i % 2 == 0 else variants[::-1]):
            got = _time_in_one(workload, [v], rounds, steps)[v]
            pooled[v] += got
            pooled.by_process[v].append(statistics.median(got))
    return pooled


#: A ``before`` process whose median step is more than this factor off the captured run's unprofiled
#: step ran in another regime than the one bwdiag analysed. On the Intel Xeon VM (7 Dec 2026) 4 of 8 of
#: the chain's ``before`` processes ran 18.6–21.7 ms a step for their whole life and the other 4 7.8–8.2,
#: the captures' own unprofiled steps 7.4–7.9 (the compiled ones 6.0–6.5 in every process): the eager
#: chain's fresh 8 MB results faulting their pages in or not. A prediction is made from the regime its
#: capture ran in, so it is checked against the processes that ran in that regime.
REGIME = 1.5


def in_regime(timed: Timed, regime_us: float | None) -> list[int] | None:
    """Indices of the processes whose ``before`` ran within ``REGIME`` of ``regime_us`` (the captured
    run's unprofiled step); None where every process did, where there are no processes of their own, or
    where fewer than two did (then nothing is set apart)."""
    by = timed.by_process
    if not by or not regime_us or len(by.get("before", ())) < 2:
        return None
    kept = [i for i, b in enumerate(by["before"]) if regime_us / REGIME <= b <= regime_us * REGIME]
    return kept if 2 <= len(kept) < len(by["before"]) else None


def step_before(timed: Timed, regime_us: float | None = None) -> float:
    """The plain step before (µs): the median of the rounds, or of the ``before`` processes that ran in
    the captured run's regime where some did not (:func:`in_regime`)."""
    kept = in_regime(timed, regime_us)
    if kept is None:
        return statistics.median(timed["before"])
    return statistics.median(timed.by_process["before"][i] for i in kept)


def realised(timed: Timed, variant: str, regime_us: float | None = None) -> tuple[float, float]:
    """(µs a step ``variant`` saved against ``before``, the noise it must beat). In one process: the
    difference of the pooled medians, noise the sum of both variants' half IQRs. With processes of their
    own: the median of the paired differences, process ``i`` of ``before`` against process ``i`` of the
    variant (run back to back), noise their half IQR — the host's speed drifts by more than a fix saves
    between processes a minute apart (the transformer's ``before`` ran 26.7 ms in one process and 30.0 in
    the next, 7 Dec 2026), and a pair shares its drift. With ``regime_us``, pairs whose ``before`` ran in
    another regime than the capture are left out (:func:`in_regime`)."""
    by = timed.by_process
    if by and len(by.get("before", ())) >= 2 and len(by.get(variant, ())) == len(by["before"]):
        kept = in_regime(timed, regime_us) or range(len(by["before"]))
        diffs = [by["before"][i] - by[variant][i] for i in kept]
        return statistics.median(diffs), spread(diffs)
    return (statistics.median(timed["before"]) - statistics.median(timed[variant]),
            spread(timed["before"]) + spread(timed[variant]))


def _time_in_one(workload: str, variants: list[str], rounds: int, steps: int) -> dict[str, list[float]]:
    cmd = [sys.executable, str(HERE / "savings_workloads.py"), workload, "time", "--rounds", str(rounds),
           "--steps", str(steps), "--variants", ",".join(variants)]
    done = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=900)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["median_step_us"]


def spread(values: list[float]) -> float:
    """Half the interquartile range of the per-round medians (µs): the noise a difference must beat."""
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return (q[2] - q[0]) / 2


def measure(workload: str, out: Path, rounds: int, steps: int, processes: int = 1) -> dict:
    diagnosis = diagnose(workload, out / workload, steps=CAPTURE_STEPS)
    top3 = diagnosis["findings"][:3]
    wanted = [v for f in top3 if (v := variant_for(workload, f))]
    variants = ["before", *dict.fromkeys([*wanted, *BESIDE.get(workload, ())])]
    timed = time_variants(workload, variants, rounds, steps, processes)
    regime = diagnosis["time"].get("unprofiled_step_us")
    before = step_before(timed, regime)
    rows = []
    for rank, f in enumerate(top3, 1):
        v = variant_for(workload, f)
        # the fix as applied: with the findings it also resolves (one torch.compile) where it resolves
        # others, else the saving the views show (the dependency graph's where there is one, else the rule's)
        raw = f.get("fix_saving_per_step_us")  # set where the fix's saving is not the finding's own
        raw = f.get("graph_saving_per_step_us") if raw is None else raw
        raw = f.get("est_saving_per_step_us") if raw is None else raw
        share = raw / diagnosis["time"]["step_us"] if raw is not None and diagnosis["time"].get("step_us") else None
        row = {"rank": rank, "kind": f["kind"], "title": f["title"], "predicted_profiled_us": raw,
               "predicted_share": share, "predicted_us": None if share is None else share * before, "variant": v}
        if v:
            saved, noise = realised(timed, v, regime)
            row.update(after_us=statistics.median(timed[v]), realised_us=saved, noise_us=noise)
            row["ratio"] = row["realised_us"] / row["predicted_us"] if row["predicted_us"] else None
            row["realised_share"] = row["realised_us"] / before
            row["slower"] = row["realised_us"] < -row["noise_us"]
        rows.append(row)
    for v in BESIDE.get(workload, ()):  # another form of a fix, timed beside the finding's
        saved, noise = realised(timed, v, regime)
        rows.append({"rank": None, "kind": "", "title": f"(beside: {v})", "variant": v, "predicted_us": None,
                     "after_us": statistics.median(timed[v]), "realised_us": saved, "noise_us": noise,
                     "realised_share": saved / before, "slower": saved < -noise})
    return {"workload": workload, "step_us_bwdiag": diagnosis["time"]["step_us"],
            "recaptured": diagnosis["recaptured"], "before_us": before,
            "before_rounds_us": timed["before"], "rounds_us": timed,
            "by_process_us": timed.by_process, "in_regime": in_regime(timed, regime), "findings": rows}


def regime_notes(results: list[dict]) -> list[str]:
    """One line per workload some of whose ``before`` processes ran outside the captured run's regime."""
    notes = []
    for r in results:
        kept, by = r.get("in_regime"), r.get("by_process_us") or {}
        if kept is None or not by.get("before"):
            continue
        out = [f"{b / 1e3:.1f}" for i, b in enumerate(by["before"]) if i not in kept]
        notes.append(f"{r['workload']}: {len(out)} of {len(by['before'])} `before` processes ran outside the captured "
                     f"run's regime ({', '.join(out)} ms a step; more than {REGIME:g}× off its unprofiled step) and "
                     "are not paired")
    return notes


def table(results: list[dict]) -> str:
    lines = ["| workload | # | finding (kind) | fix timed | step before | predicted (share) | realised ± noise | ratio | |",
             "|---|---:|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        for f in r["findings"]:
            mark = ""
            if f.get("ratio") is not None and f["rank"] == 1 and f["predicted_us"] > 0:
                mark = "✔" if 0.5 <= f["ratio"] <= 2 else "✘ miss"
            if f.get("slower"):
                mark += " slower"
            pred = (f"{f['predicted_us'] / 1e3:.2f} ms ({100 * f['predicted_share']:.0f}%)"
                    if f["predicted_us"] is not None else "—")
            real = f"{f['realised_us'] / 1e3:.2f} ms ±{f['noise_us'] / 1e3:.2f}" if f.get("variant") else "not timed"
            ratio = f"{f['ratio']:.2f}" if f.get("ratio") is not None else "—"
            lines.append(f"| {r['workload'] if f['rank'] == 1 else ''} | {f['rank'] or ''} | {f['title'][:60]} ({f['kind']}) | "
                         f"{f.get('variant') or '—'} | {r['before_us'] / 1e3:.2f} ms | {pred} | {real} | {ratio} | {mark} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=14, help="timed steps per variant per round")
    parser.add_argument("--only", default=None, help="comma-separated workloads (default: all)")
    parser.add_argument("--processes", type=int, default=1,
                        help="time each variant in this many processes of its own, alternated, --rounds in each "
                             "(default 1: all variants interleaved in one process)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs and savings.json")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bwdiag-savings-"))
    out.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(WORKLOADS)
    results = []
    for name in names:
        if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
            print(f"{name}: skipped ({NEEDS[name]} is not installed: pip install -e '.[test]')", file=sys.stderr)
            continue
        print(f"{name}: bwdiag run, then {args.rounds} interleaved rounds", file=sys.stderr, flush=True)
        results.append(measure(name, out, args.rounds, args.steps, args.processes))
        (out / "savings.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    for note in regime_notes(results):
        print(f"\n{note}")
    print(f"raw figures: {out / 'savings.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
