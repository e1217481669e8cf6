"""Do bwdiag's predicted savings come true? Capture CPU workloads before and after the fix their top
finding proposes, ``bwdiag diff`` the two runs, and print predicted vs realised per finding.

    python benchmarks/whatif.py [--workloads adamw,cast,permute,chain] [--active 5] [--out DIR]

Each workload is one script run twice through ``bwdiag run`` (``before`` / ``after`` as its argument);
the table shows BEFORE's top finding, its predicted saving per step, the saving realised where the
finding acts (``bwdiag diff``'s ``realised_us``) and on the step, and realised / predicted.
``chain`` applies ``torch.compile`` (needs a C++ compiler; its compilation falls in the skipped
steps). Not a test: numbers vary with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_HEAD = """
import sys, torch
torch.manual_seed(0)
torch.set_num_threads(1)
AFTER = sys.argv[1] == "after"
"""

WORKLOADS = {
    # foreach=False: one kernel chain per parameter; the finding proposes fused=True.
    "adamw": """
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, **({"fused": True} if AFTER else {"foreach": False}))
x = torch.randn(64, 512)
for i in range(16):
    opt.zero_grad()
    m(x).square().mean().backward()
    opt.step()
""",
    # A bf16 round trip of the same tensor; the fix drops it.
    "cast": """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))  # a model: bwdiag run steps on its forwards
    def forward(self, x):
        return (x if AFTER else x.to(torch.bfloat16).to(torch.float32)) * self.p
m = M()
x = torch.randn(1024, 1024)
with torch.no_grad():
    for i in range(16):
        m(x)
""",
    # A materialised permute before a bmm; the fix hands the permuted view to the bmm.
    "permute": """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 256, 64))
    def forward(self, y):
        p = y.permute(0, 2, 1)
        return torch.bmm(p if AFTER else p.contiguous(), self.w)
m = M()
y = torch.randn(16, 256, 256)
with torch.no_grad():
    for i in range(16):
        m(y)
""",
    # An eager elementwise chain between two GEMMs; the fix is torch.compile.
    "chain": """
class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(64, 1024) / 8)
        self.w2 = torch.nn.Parameter(torch.randn(1024, 64) / 32)
        self.scale = torch.full((1024, 1024), 0.5)
        self.shift = torch.ones(1024, 1024)
    def forward(self, x):
        h = x @ self.w1
        h = torch.sigmoid(torch.tanh(h * self.scale + self.shift) * self.scale)
        return h @ self.w2
m = Chain()
f = torch.compile(m) if AFTER else m
x = torch.randn(1024, 64)
with torch.no_grad():
    for i in range(16):
        f(x)
""",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _bwdiag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bwdiag", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True)


def measure(name: str, root: Path, active: int) -> dict:
    script = root / f"{name}.py"
    script.write_text(textwrap.dedent(_HEAD) + textwrap.dedent(WORKLOADS[name]))
    for side in ("before", "after"):
        run = _bwdiag("run", "--wait", "3", "--warmup", "1", "--active", str(active), "--force",
                      "-o", str(root / f"{name}-{side}"), str(script), side, cwd=root)
        if run.returncode != 0 or not (root / f"{name}-{side}" / "diagnosis.json").is_file():
            raise SystemExit(f"{name} {side}: bwdiag run wrote no diagnosis:\n{run.stderr[-2000:]}")
    out = root / f"{name}-diff"
    diff = _bwdiag("diff", str(root / f"{name}-before"), str(root / f"{name}-after"), "-o", str(out),
                   "--force", cwd=root)
    if diff.returncode != 0:
        raise SystemExit(f"{name}: bwdiag diff failed:\n{diff.stderr[-2000:]}")
    return json.loads((out / "diff.json").read_text())


def _ms(us: float | None) -> str:
    return "—" if us is None else f"{us / 1e3:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--active", type=int, default=8, help="steps recorded per run")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here [default: a temporary folder]")
    args = ap.parse_args()
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {sorted(WORKLOADS)}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print("| workload | top finding of BEFORE | status | predicted ms/step | realised ms/step (where) "
              "| step before → after ms | realised on step | realised / predicted |")
        print("|---|---|---|---:|---|---|---:|---:|")
        for name in names:
            doc = measure(name, root, args.active)
            s = doc["step"]
            step = f"{_ms(s['before']['median_us'])} → {_ms(s['after']['median_us'])} (noise ±{_ms(s['noise_us'])})"
            if not doc["findings"]:
                print(f"| {name} | (none) | | | | {step} | {_ms(-s['delta_us'])} | |")
                continue
            f = doc["findings"][0]
            ratio = f["realised_over_predicted"]
            print(f"| {name} | {f['title'][:60]} | {f['status']} | {_ms(f['predicted_us'])} | "
                  f"{_ms(f['realised_us'])} ({f['measured_on']}) | {step} | {_ms(f['realised_on_step_us'])} | "
                  f"{'—' if ratio is None else f'{ratio:.2f}'} |", flush=True)


if __name__ == "__main__":
    main()
