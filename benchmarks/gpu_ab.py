"""Interleaved A/B timing of the bundled transformer's fixes on a GPU: what a finding's fix really saves.

    python benchmarks/gpu_ab.py --rounds 7 --steps 20 [model flags of examples/train_transformer.py]

Every variant (``base``: AdamW with torch's default for the device; ``fused``: ``AdamW(fused=True)``;
``compile``: ``torch.compile(model)``; ``graphs``: ``torch.compile(model, mode="reduce-overhead")``,
CUDA graphs; ``graphs+fused``) is built in this one process from the same seed and warmed up
(compilation and CUDA-graph capture happen there, outside the rounds). Then ``--rounds`` rounds, each
running every variant's ``--steps`` steps in turn (the order rotates each round), timed as one block
between two ``torch.cuda.synchronize()`` calls — no per-step synchronisation, which would change the
timeline the fixes act on. A variant's step time is the median over rounds of block time ÷ steps.
Prints one JSON object: the model flags, per-variant round times, medians and half interquartile ranges.

With bwdiag's capture of the same flags (``bwdiag run examples/train_transformer.py …``) this gives
predicted (the finding's saving) against realised (``base`` − the fix's variant) on real hardware.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_transformer import TinyGPT  # noqa: E402

VARIANTS = {  # name -> (fused AdamW, torch.compile mode or None)
    "base": (False, None),
    "fused": (True, None),
    "compile": (False, "default"),
    "graphs": (False, "reduce-overhead"),
    "graphs+fused": (True, "reduce-overhead"),
}


def build(args, fused: bool, mode: str | None):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True if fused else None)
    fwd = model if mode is None else torch.compile(model, mode=mode)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)
    x, y = data[:, :-1], data[:, 1:]

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(x)
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--variants", default=",".join(VARIANTS))
    for flag, default in (("batch", 8), ("seq", 64), ("d-model", 128), ("heads", 4), ("layers", 2),
                          ("vocab", 512)):
        p.add_argument(f"--{flag}", type=int, default=default)
    args = p.parse_args()
    names = args.variants.split(",")
    steps = {}
    for name in names:
        t0 = time.perf_counter()
        steps[name] = build(args, *VARIANTS[name])
        for _ in range(args.warmup):
            steps[name]()
        torch.cuda.synchronize()
        print(f"{name}: built and warmed up in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                steps[name]()
            torch.cuda.synchronize()
            rounds[name].append((time.perf_counter() - t0) / args.steps * 1e3)
    out = {"model": {k: v for k, v in vars(args).items() if k not in ("rounds", "steps", "warmup", "variants")},
           "rounds": args.rounds, "steps": args.steps, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "ms_per_step": rounds,
           "median_ms": {n: statistics.median(v) for n, v in rounds.items()},
           "half_iqr_ms": {n: (statistics.quantiles(v, n=4)[2] - statistics.quantiles(v, n=4)[0]) / 2
                           for n, v in rounds.items()}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
