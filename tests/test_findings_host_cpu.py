"""Host overhead and the input pipeline on CPU workloads captured here with ``bwdiag run``
(issue 13): 300 tiny parameters updated by ``SGD(foreach=False)``, and a slow ``Dataset`` behind
``DataLoader(num_workers=2)``. The numbers are checked against the raw trace events."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.findings_helpers import analysed

REPO = Path(__file__).resolve().parents[1]

TINY = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    params = [torch.randn(8, requires_grad=True) for _ in range(300)]
    opt = torch.optim.SGD(params, lr=0.01, foreach=False)
    target = torch.randint(0, 8, (1,))
    for _ in range(6):
        opt.zero_grad()
        x = torch.zeros(8)
        for p in params:
            x = x + p * 0.5
        F.cross_entropy(x.unsqueeze(0), target).backward()
        opt.step()
    """
)

SLOW_LOADER = textwrap.dedent(
    """
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 96
        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.randn(32), torch.tensor(i % 4)

    if __name__ == "__main__":
        model = torch.nn.Linear(32, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(Slow(), batch_size=8, num_workers=2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
)


ALREADY_FUSED = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d=64, h=4):
            super().__init__()
            self.ln, self.qkv, self.o, self.h = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d), h
        def forward(self, x):
            b, l, d = x.shape
            q, k, v = self.qkv(self.ln(x)).view(b, l, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.o(y.transpose(1, 2).reshape(b, l, d))

    model = nn.Sequential(Block(), Block())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(8, 128, 64)
    for _ in range(6):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    """
)


def _capture(tmp_path: Path, name: str, source: str, wait: int = 1) -> Path:
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    # one intra-op thread: on a small shared machine a tiny Linear otherwise spins for milliseconds
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    out = tmp_path / f"out-{name}"
    proc = subprocess.run([sys.executable, "-m", "bwdiag", "run", "-o", str(out), "--wait", str(wait), "--warmup", "1",
                           "--active", "3", "--no-analyze", str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (trace,) = out.glob("*.pt.trace.json.gz")
    return trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("host_cpu")
    return {"tiny": _capture(tmp, "tiny", TINY), "loader": _capture(tmp, "loader", SLOW_LOADER, wait=4),
            "fused": _capture(tmp, "fused", ALREADY_FUSED)}


def _cpu_ops(path: Path) -> list[dict]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]


def _top_level(ops: list[dict]) -> list[dict]:
    """The top-level cpu_ops (not inside another cpu_op) of the thread holding ProfilerStep spans,
    inside those spans."""
    steps = [e for e in ops if e["name"].startswith("ProfilerStep#")]
    tid = steps[0]["tid"]
    start, stop = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    cpu = sorted((e for e in ops if e["cat"] == "cpu_op" and e["tid"] == tid and start <= e["ts"] <= stop),
                 key=lambda e: e["ts"])
    top, reach = [], None
    for e in cpu:
        if reach is not None and e["ts"] < reach:  # inside (or overlapping) the previous top-level op
            reach = max(reach, e["ts"] + e["dur"])
            continue
        top.append(e)
        reach = e["ts"] + e["dur"]
    return top


def test_tiny_ops_get_a_host_overhead_finding(traces):
    d, _ = analysed(traces["tiny"])
    (f,) = [f for f in d.findings if f.kind == "host_bound"]
    assert d.findings[0] is f and "tiny ops" in f.title
    # ``bwdiag run`` timed steps after the profiler stopped, so the saving is the plain script's: the
    # gaps plus the tiny ops a compiled step fuses away, less the recording of the ops it removes,
    # given as a share of the profiled step (× profiled ÷ unprofiled). In the plain script's time it
    # cannot exceed the window's idle plus every tiny top-level op's own time (raw events), nor the
    # plain window.
    t = d.time
    plain = f.est_saving_us * t.unprofiled_step_us / t.step_us
    tiny_work = sum(e["dur"] for e in _top_level(_cpu_ops(traces["tiny"])) if e["dur"] < 50)
    assert 0 < plain <= t.by_bound["idle"] + tiny_work
    assert plain <= t.total_us * t.unprofiled_step_us / t.step_us
    assert any("after it stopped" in e and "µs per recorded op" in e for e in f.evidence)
    assert f.est_saving_pct >= 10.0
    assert "gaps" in f.evidence[0]
    assert "optimizer step" in next(e for e in f.evidence if e.startswith("gaps by where"))
    # What the compiled step would still pay stays out of the saving: a training step's calls.
    assert any(e.startswith("a compiled step still pays") and "(training, " in e for e in f.evidence)
    # The gaps lie in backward, the optimizer loop and outside any module: compile the step (not
    # "the model": there is none) and batch the 300 per-parameter updates.
    assert "train_step = torch.compile(train_step)" in f.fix and "model = torch.compile" not in f.fix
    assert "foreach=True" in f.fix and "900 per-parameter ops" in f.fix  # 300 add_ × 3 recorded steps
    assert not [g for g in d.findings if g.kind == "fusion" and "302" in g.title]


def test_slow_dataset_gets_a_data_loader_finding(traces):
    d, _ = analysed(traces["loader"])
    f = d.findings[0]
    assert f.kind == "data_loader"
    ops = _cpu_ops(traces["loader"])
    spans = [e for e in ops if e["name"].startswith("enumerate(DataLoader)#_MultiProcessingDataLoaderIter")]
    raw = sum(e["dur"] for e in spans)  # spans are sequential calls on the main thread: no overlap
    # The window starts at the first work op, inside the first __next__ call: the saving is the
    # spans' time minus at most that first call's part before it.
    assert raw - spans[0]["dur"] <= f.est_saving_us <= raw + 1e-3
    # 8 items × 20 ms per batch on 2 workers: ≥ 80 ms per batch against a step of a few ms once the
    # prefetched batches are used up (steps 6–8 of 12)
    assert f.est_saving_pct >= 20.0  # a loaded 2-core machine: measured 50–90 %
    assert "_MultiProcessingDataLoaderIter" in f.evidence[0]
    assert "num_workers" in f.fix and "persistent_workers=True" in f.fix
    assert "pin_memory" not in f.fix  # a CPU step has no host-to-device copy to pin for


def test_no_advice_the_model_already_follows(traces):
    """nn.LayerNorm, F.scaled_dot_product_attention and AdamW(foreach=True): none of "use fused
    attention", "a fused norm instead of a hand-written mean/var chain", "runs per parameter"."""
    d, analyses = analysed(traces["fused"])
    names = set(analyses[0].trace.ops["name"])
    assert {"aten::layer_norm", "aten::scaled_dot_product_attention"} <= names  # what the model runs
    assert any(n.startswith("aten::_foreach_") for n in names)
    text = " ".join(f.title + " " + f.fix for f in d.findings)
    assert "Use fused attention" not in text and "attn_implementation" not in text
    assert "hand-written mean/var" not in text
    assert "per-parameter" not in text and "fused AdamW step" not in text
