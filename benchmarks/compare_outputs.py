"""Analyse every shared trace and compare the diagnoses with an earlier run of this script.

A refactor must not change what bwdiag says. Run this once on the old code and once on the new one,
then compare::

    python benchmarks/compare_outputs.py --out /tmp/before            # on the old commit
    python benchmarks/compare_outputs.py --out /tmp/after --against /tmp/before

Each trace is analysed with ``bwdiag analyze`` in a subprocess (the CLI a user runs), one output
folder per trace. The comparison walks both ``diagnosis.json`` files and prints every path whose value
differs (numbers compared to a relative 1e-9), then a one-line count per trace. Exit status 1 when
anything differs, so the script can gate a refactor.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
IGNORED_KEYS = {"paths"}  # output folders differ between runs by construction


def shared_traces(root: Path = SHARED) -> list[Path]:
    """Every trace file under ``root``, skipping capture-time traces (they are read beside their replay)."""
    files = [p for p in sorted(root.rglob("*.json*")) if p.suffix in (".json", ".gz")]
    return [p for p in files if "capture_traces" not in p.parts]


def slug(path: Path, root: Path = SHARED) -> str:
    return "__".join(path.relative_to(root).parts).replace(".json.gz", "").replace(".json", "")


def analyse(trace: Path, out: Path) -> int:
    cmd = [sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(out), "--force"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    (out.parent / f"{out.name}.stderr").write_text(res.stderr)
    return res.returncode


def differences(a, b, path: str = "") -> list[str]:
    """Paths at which two decoded JSON documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in IGNORED_KEYS:
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'only after' if k not in a else 'only before'}")
            else:
                out.extend(differences(a[k], b[k], f"{path}.{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
            return []
    elif a == b:
        return []
    return [f"{path}: {a!r} -> {b!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for one output folder per trace")
    ap.add_argument("--against", type=Path, help="an earlier --out folder to compare with")
    ap.add_argument("--traces", type=Path, default=SHARED, help=f"root of the traces [default: {SHARED}]")
    args = ap.parse_args(argv)
    traces = shared_traces(args.traces)
    if not traces:
        print(f"no traces under {args.traces}", file=sys.stderr)
        return 2
    changed = 0
    for trace in traces:
        name = slug(trace, args.traces)
        rc = analyse(trace, args.out / name)
        line = f"{name:70s} rc={rc}"
        if args.against is not None:
            before, after = args.against / name / "diagnosis.json", args.out / name / "diagnosis.json"
            if before.exists() != after.exists():
                diffs = [f"diagnosis.json {'missing after' if before.exists() else 'new'}"]
            elif not before.exists():
                diffs = []
            else:
                diffs = differences(json.loads(before.read_text()), json.loads(after.read_text()))
            changed += bool(diffs)
            line += f"  {len(diffs)} difference(s)"
            for d in diffs[:40]:
                line += f"\n    {d}"
        print(line, flush=True)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
