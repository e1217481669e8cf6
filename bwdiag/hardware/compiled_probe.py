"""What a ``torch.compile``'d call still costs on this CPU host, beyond the extern kernels it calls.

A host-overhead finding that advises ``torch.compile`` keeps, of the gaps it removes, what the compiled
code costs itself (:mod:`bwdiag.diagnose.findings.compiled_calls`): Dynamo's guards, the AOTAutograd
wrappers (in training a compiled backward node, and the gradients' accumulation into ``.grad``), and
Inductor's generated Python around every kernel it calls. That cost grows with what the graph holds —
each module's guards, each parameter passed in, each generated loop — not only with its GEMMs.

The probe is therefore a stack of the layers most models are built from: tiny pre-LayerNorm
transformer blocks (``d_model`` 8, 2 heads, one position, batch 4: ``LayerNorm`` → ``qkv`` ``Linear`` →
SDPA → ``proj`` ``Linear`` → residual → ``LayerNorm`` → ``Linear`` → GELU → ``Linear`` → residual),
compiled at ``LAYERS`` depths, per mode (``inference``: under ``no_grad``; ``training``: forward,
``.sum()`` and backward), one thread, the fastest of ``ROUNDS`` rounds per depth. Each call's time
less its extern kernels' own time (the ``addmm``/``mm`` and SDPA kernels, timed as plain calls at the
probe's shapes; in training also the eager ``sum().backward()`` of a leaf, which the eager step pays
too) is what the compiled code keeps. The slope per block ÷ the extern calls a block makes
(``EXTERNS_PER_BLOCK``: what an eager trace of it records, which is how the finding counts them) is
``extern_us``; the rest, at zero blocks, ``call_us``.

Why blocks and not bare ``Linear`` layers: on the 2-core Intel Xeon VM (torch 2.13, 7 Dec 2026) a
``Sequential`` of ``Linear(8, 8)`` gave 19.8 µs a call and 2.72 µs an extern call under ``no_grad``; a
compiled 2-layer KV-cache decoder (examples/decode_kv_cache.py) spent 70–108 µs a call outside its graph
(the call timed whole less its transformed bytecode called directly), its guards alone 7 µs. The blocks
gave 36.0 + 5.78 µs per extern call — 99.6 µs for the decoder's 11 extern calls, against 49.8 before.
"""

from __future__ import annotations

import time
from typing import Any

#: Depths of the probe's stack (the per-block cost is the slope between them).
LAYERS = (1, 4)
#: Calls per timed round, and rounds per depth (the fastest counts: a loaded host only adds time).
CALLS = {False: 200, True: 60}
ROUNDS = {False: 5, True: 3}
#: Extern kernel calls one block makes as an eager trace records them: 4 ``addmm`` and one SDPA kernel
#: forward; in training also each ``Linear``'s two backward ``mm`` and the SDPA backward kernel.
EXTERNS_PER_BLOCK = {"inference": 5, "training": 14}
#: The block's width, heads, and its input's (batch, positions).
D_MODEL, HEADS, BATCH, POSITIONS = 8, 2, 4, 1


def compiled_call(quick: bool) -> dict[str, dict[str, float]] | None:
    """``{mode: {"call_us", "extern_us"}}`` on this host (see the module's docstring); ``None`` where
    torch.compile cannot run here (no C++ compiler for Inductor, an unsupported Python)."""
    import torch
    from torch._dynamo.utils import counters

    threads = torch.get_num_threads()
    saved = {k: v.copy() for k, v in counters.items()}  # the process reads as never having compiled after
    torch.set_num_threads(1)
    try:
        return _probe(torch, quick)
    except Exception:  # noqa: BLE001 — any failure of Dynamo/Inductor here means: not measured
        return None
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()  # the probe's graphs go
        counters.clear()
        counters.update(saved)


def _probe(torch: Any, quick: bool) -> dict[str, dict[str, float]]:
    calls, rounds = CALLS[quick], ROUNDS[quick]
    own = _externs_own_us(torch, 20 * calls, rounds)
    out: dict[str, dict[str, float]] = {}
    for mode in ("inference", "training"):
        kept = {}
        for layers in LAYERS:
            torch.manual_seed(0)
            eager = torch.nn.Sequential(*(_block(torch) for _ in range(layers)))
            model = torch.compile(eager.eval() if mode == "inference" else eager)
            x = torch.rand(BATCH, POSITIONS, D_MODEL)
            if mode == "inference":
                def step(model=model, x=x) -> None:
                    with torch.no_grad():
                        model(x)
            else:
                def step(model=model, x=x) -> None:
                    model(x).sum().backward()
            kept[layers] = per_call(step, calls, rounds) - layers * own[mode] - (own["loss"] if mode == "training" else 0)
        few, many = LAYERS
        per_block = (kept[many] - kept[few]) / (many - few)
        out[mode] = {"call_us": round(max(0.0, kept[few] - few * per_block), 2),
                     "extern_us": round(max(0.0, per_block / EXTERNS_PER_BLOCK[mode]), 2)}
    return out


def _externs_own_us(torch: Any, calls: int, rounds: int) -> dict[str, float]:
    """µs the extern kernels of one block take as plain calls, per mode, and the eager loss's backward."""
    d, h = D_MODEL, HEADS
    shapes = ((3 * d, d), (d, d), (4 * d, d), (d, 4 * d))  # qkv, proj, fc1, fc2: (out, in)
    n = BATCH * POSITIONS
    layers = [(torch.rand(i, o), torch.rand(o), torch.rand(n, i), torch.rand(n, o)) for o, i in shapes]
    addmm = sum(per_call(lambda w=w, b=b, a=a: torch.addmm(b, a, w), calls, rounds) for w, b, a, _ in layers)
    # each Linear's backward: grad input (grad_out @ Wᵀ) and grad weight (inputᵀ @ grad_out)
    mm = sum(per_call(lambda w=w, g=g: torch.mm(g, w.t()), calls, rounds)
             + per_call(lambda a=a, g=g: torch.mm(a.t(), g), calls, rounds) for w, _, a, g in layers)
    q = torch.rand(BATCH, h, POSITIONS, d // h)
    sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    out, lse = sdpa(q, q, q)[:2]
    fwd = per_call(lambda: sdpa(q, q, q), calls, rounds)
    bwd = per_call(lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        out, q, q, q, out, lse, 0.0, False), calls, rounds)
    leaf = torch.rand(BATCH, POSITIONS, d, requires_grad=True)
    return {"inference": addmm + fwd, "training": addmm + mm + fwd + bwd,
            "loss": per_call(lambda: leaf.sum().backward(), calls // 4, rounds)}


def _block(torch: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = D_MODEL
            self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, dim=-1))
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    return Block()


def per_call(fn: Any, calls: int, rounds: int) -> float:
    """µs per call of ``fn``: the fastest of ``rounds`` rounds of ``calls`` calls, after a warm-up."""
    for _ in range(10):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6
