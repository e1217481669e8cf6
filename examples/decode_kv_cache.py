"""Greedy decoding with a KV cache: the `bwdiag run` example for inference.

    bwdiag run examples/decode_kv_cache.py --tokens 16

Each generated token is one forward of the model over a single new position, attending to the
cached keys and values. There is no optimizer, and decoding runs under torch.inference_mode, so
`bwdiag run` marks one step per forward of the top-level model (or pass --step-on forward).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class CachedAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor], pos: int) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        cache["k"][:, :, pos : pos + t] = k
        cache["v"][:, :, pos : pos + t] = v
        keys, values = cache["k"][:, :, : pos + t], cache["v"][:, :, : pos + t]
        att = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
        return self.proj(att.transpose(1, 2).reshape(b, t, d))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CachedAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor], pos: int) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_heads: int, n_layers: int, max_len: int) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.max_len = d_model, n_heads, max_len
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def new_cache(self, batch: int, device: torch.device, dtype: torch.dtype) -> list[dict[str, torch.Tensor]]:
        shape = (batch, self.n_heads, self.max_len, self.d_model // self.n_heads)
        return [{"k": torch.zeros(shape, device=device, dtype=dtype),
                 "v": torch.zeros(shape, device=device, dtype=dtype)} for _ in self.layers]

    def forward(self, idx: torch.Tensor, caches: list[dict[str, torch.Tensor]], pos: int) -> torch.Tensor:
        positions = torch.arange(pos, pos + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache, pos)
        return self.head(self.ln_f(x[:, -1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16, help="tokens to generate")
    parser.add_argument("--prompt", type=int, default=32, help="prompt length")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sdpa-backend", default="default", choices=("default", "flash", "efficient", "math", "cudnn"),
                        help="restrict scaled_dot_product_attention to one backend (torch.nn.attention.sdpa_kernel)")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    max_len = args.prompt + args.tokens
    model = Decoder(args.vocab, args.d_model, args.heads, args.layers, max_len).to(device, dtype).eval()
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt), device=device)

    backends = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH",
                "cudnn": "CUDNN_ATTENTION"}
    attention = (contextlib.nullcontext() if args.sdpa_backend == "default"
                 else sdpa_kernel(getattr(SDPBackend, backends[args.sdpa_backend])))
    with torch.inference_mode(), attention:
        caches = model.new_cache(args.batch, device, dtype)
        logits = model(prompt, caches, 0)  # prefill
        out = [logits.argmax(-1, keepdim=True)]
        start = time.perf_counter()
        for i in range(args.tokens - 1):  # decode: one token per forward
            logits = model(out[-1], caches, args.prompt + i)
            out.append(logits.argmax(-1, keepdim=True))
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    tokens = torch.cat(out, dim=1)
    print(f"generated {tuple(tokens.shape)} tokens, "
          f"{elapsed / max(1, args.tokens - 1) * 1e3:.2f} ms/token on {device.type}")


if __name__ == "__main__":
    main()
