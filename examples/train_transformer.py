"""A small GPT-style language model training loop: the `bwdiag run` example for training.

    bwdiag run examples/train_transformer.py
    python examples/train_transformer.py                     # the same script, unprofiled
    bwdiag run -o after examples/train_transformer.py --fused-adamw   # a fix bwdiag may name
    bwdiag diff BEFORE_FOLDER after                          # did it work, and as predicted?

The default 40 steps leave the 30 after bwdiag's recorded window (steps 7-9) that it times without
the profiler; with fewer, it times fewer (``bwdiag diff`` compares unprofiled steps from 3 a side).

bf16 autocast on a GPU, fp32 on the CPU. No bwdiag code in here: `bwdiag run` finds the steps from
the optimizer's step() calls. The last line printed is the loop's own clock: all steps, and the steady
steps after the first 10 (what bwdiag's step time is to be compared with).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


#: Steps from which the loop's own steady-state time is measured: after compilation and warm-up, and
#: after the steps `bwdiag run` records by default (7-9), so the figure is the unprofiled step.
STEADY_FROM = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True): one kernel per step")
    parser.add_argument("--compile", default="none", choices=("none", "default", "reduce-overhead"),
                        help="torch.compile the model in this mode (reduce-overhead: CUDA graphs)")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True if args.fused_adamw else None)
    step_model = model if args.compile == "none" else torch.compile(model, mode=args.compile)
    amp_dtype = torch.bfloat16 if device.type == "cuda" else None
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=device)

    steady_from = min(STEADY_FROM, args.steps - 1)
    start = steady = time.perf_counter()
    for step in range(args.steps):
        if step == steady_from:  # past compilation, warm-up and bwdiag's default recorded steps (7-9)
            if device.type == "cuda":
                torch.cuda.synchronize()
            steady = time.perf_counter()
        x, y = data[:, :-1], data[:, 1:]
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = step_model(x)
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady_ms = (end - steady) / (args.steps - steady_from) * 1e3
    print(f"{args.steps} steps, loss {loss.item():.3f} (ln vocab {math.log(args.vocab):.3f}), "
          f"{(end - start) / args.steps * 1e3:.1f} ms/step on {device.type}; "
          f"steps {steady_from}-{args.steps - 1}: {steady_ms:.2f} ms/step")


if __name__ == "__main__":
    main()
