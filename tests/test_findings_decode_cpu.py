"""Issue 13's "Done means" on two more CPU workloads captured here with ``bwdiag run``: the bundled
KV-cache decode loop (examples/decode_kv_cache.py) and a model trained with ``AdamW(fused=True)``.
The top finding's kind and rank, and no advice the code already follows or the CPU cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FUSED_ADAMW = textwrap.dedent(
    """
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(32, 64)
    for _ in range(10):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    """
)


def _run(cwd: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "bwdiag", "run", "--wait", "2", "--warmup", "1", "--active", "4",
                           "-o", "out", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads((cwd / "out" / "diagnosis.json").read_text())


@pytest.fixture(scope="module")
def decode(tmp_path_factory) -> dict:
    # The host-overhead saving rests on the unprofiled steps after the window, which a noisy 2-core host
    # can slow for a whole capture (610 against 447 µs in one of four, 6 Dec). The saving no longer
    # subtracts all of the profiler's added time from the gaps (recording.Dilation), which once left it
    # under the reporting threshold, but one slow capture is still possible on a loaded host. Up to three
    # captures: the assertions below hold on the first that reports a finding.
    for attempt in range(3):
        tmp = tmp_path_factory.mktemp(f"decode{attempt}")
        d = _run(tmp, str(REPO / "examples" / "decode_kv_cache.py"), "--tokens", "12")
        if d["findings"]:
            break
    return d


def test_decode_loop_top_finding_is_host_overhead_and_no_kv_cache_or_attention_advice(decode):
    assert decode["source"]["trace_kind"] == "cpu"
    top = decode["findings"][0]
    # One token per forward through 2 small layers: the step is dispatch between tiny ops.
    assert top["kind"] == "host_bound" and "tiny ops" in top["title"]
    # Every gap sits inside the Decoder (each recorded step holds the model's whole module span, so
    # the paths are Decoder.tok, Decoder.layers.*.attn, ...): compile the model, named as the model.
    assert top["fix"].startswith("model = torch.compile(model)  # the gaps are inside Decoder: ")
    text = " ".join(f["title"] + " " + f["fix"] for f in decode["findings"])
    assert "KV cache" not in text and "int8" not in text  # no 8-bit cache on CPU eager (1.6× slower)
    assert "Use fused attention" not in text  # it already calls F.scaled_dot_product_attention
    assert "hand-written mean/var" not in text  # nn.LayerNorm


def test_fused_adamw_gets_no_optimizer_advice(tmp_path):
    (tmp_path / "fused.py").write_text(FUSED_ADAMW)
    d = _run(tmp_path, "fused.py")
    text = " ".join(f["title"] + " " + f["fix"] for f in d["findings"])
    assert "fused AdamW step" not in text and "per-parameter" not in text and "foreach=True" not in text
    assert "hand-written mean/var" not in text
    # the fused step itself is a row of the kernel table (it calls aten::item inside, whose µs alone
    # stood for it before), with its bytes: fp32 assumed, the trace records no TensorList types
    (row,) = [k for k in d["kernels"] if k["name"] == "aten::_fused_adamw_"]
    assert row["bytes"] and row["count"] >= 1 and row["category"] == "optimizer"
