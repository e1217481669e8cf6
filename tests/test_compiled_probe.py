"""The calibration's compiled-call probe divides its per-block cost by the extern calls a block makes:
that divisor must be what the host-overhead finding counts in an eager trace of the same block.

Counted by hand from the block (``LayerNorm → qkv Linear → SDPA → proj Linear → LayerNorm → Linear →
GELU → Linear``, two residual adds): under ``no_grad`` 4 ``addmm`` + 1 SDPA kernel = 5; a training step
adds each ``Linear``'s two backward ``mm`` (grad input, grad weight) and the SDPA backward kernel:
5 + 8 + 1 = 14. The counting here is the finding's own (:func:`recording._extern` over the loaded trace).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bwdiag.diagnose.findings import recording  # noqa: E402
from bwdiag.diagnose.findings.helpers import op_column  # noqa: E402
from bwdiag.hardware import compiled_probe  # noqa: E402
from bwdiag.trace import load_traces  # noqa: E402

BY_HAND = {"inference": 5, "training": 14}


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_a_probe_block_makes_the_extern_calls_its_divisor_assumes(tmp_path, mode):
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    block = compiled_probe._block(torch)
    x = torch.rand(compiled_probe.BATCH, compiled_probe.POSITIONS, compiled_probe.D_MODEL)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        if mode == "inference":
            with torch.no_grad():
                block.eval()(x)
        else:
            block(x).sum().backward()
    path = tmp_path / "block.pt.trace.json"
    prof.export_chrome_trace(str(path))
    traces, _ = load_traces([path])
    ops = traces[0].ops
    names = op_column(ops, "name").astype(str)
    parent = op_column(ops, "parent").astype(int)
    cpu = op_column(ops, "cat") == "cpu_op"
    calls = recording._extern(names, parent, cpu)[2]
    assert int(calls.sum()) == BY_HAND[mode] == compiled_probe.EXTERNS_PER_BLOCK[mode]
