"""Kernels whose DRAM traffic bwdiag estimates from shapes, to compare with Nsight Compute's counters.

    # on a CUDA machine: bwdiag's estimate (one recorded iteration) and ncu's measurement (the same one)
    bwdiag run --no-analyze --step-on label:measure --wait 1 --warmup 1 --active 1 -o /tmp/nb \\
        benchmarks/ncu_bytes.py
    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum --nvtx --nvtx-include "measure/" \\
        --csv --log-file /tmp/nb/ncu.csv python benchmarks/ncu_bytes.py --nvtx
    # anywhere: join the two kernel by kernel
    python benchmarks/ncu_bytes.py --compare /tmp/nb

Each iteration runs the same ops, in the same order, on tensors far larger than the H200's 60 MB L2
(so the counters see DRAM, not cache): elementwise add and GELU, a cast, LayerNorm, softmax, a sum,
an embedding gather, a bf16 GEMM and flash attention. Iteration 3 is the one both tools look at:
bwdiag through its ``measure`` step label, ncu through an NVTX range of the same name. The kernels are
joined in launch order (the same program launches the same kernels), and the comparison prints
bwdiag's bytes, ncu's DRAM read + write, and their ratio.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

ITERATIONS = 3


def run_ops(nvtx: bool) -> None:
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    torch.manual_seed(0)
    n = 1 << 25  # 32 M elements: 128 MiB in fp32, 64 MiB in bf16, both beyond the L2
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    h = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    ln = torch.nn.LayerNorm(4096, device=dev, dtype=torch.bfloat16)
    s = torch.randn(4096, 8192, device=dev)
    table = torch.randn(50_000, 2048, device=dev, dtype=torch.bfloat16)
    idx = torch.randint(0, 50_000, (16_384,), device=dev)
    g1 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    g2 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    q, k, v = (torch.randn(8, 16, 4096, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))

    with torch.no_grad():
        for i in range(ITERATIONS):
            if nvtx and i == ITERATIONS - 1:
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push("measure")
            with torch.profiler.record_function("measure"):
                a + b                                   # noqa: B018  (fp32 add: 2 reads, 1 write)
                F.gelu(h)                               # bf16 elementwise
                a.to(torch.bfloat16)                    # cast: 4 B read, 2 B written per element
                ln(h)                                   # LayerNorm, one pass
                torch.softmax(s, dim=-1)                # fp32 softmax over rows of 8192
                a.sum()                                 # reduction: read once
                F.embedding(idx, table)                 # gather of 16 K rows of 4 KiB
                g1 @ g2                                 # bf16 GEMM 8192^3
                F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention
            if nvtx and i == ITERATIONS - 1:
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()


def _ncu_rows(path: Path) -> list[dict]:
    """Kernels of ncu's CSV in launch order: name and DRAM bytes read + written."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    kernels: dict[int, dict] = {}
    for row in csv.DictReader(lines[start:]):
        k = kernels.setdefault(int(row["ID"]), {"name": row["Kernel Name"], "bytes": 0.0})
        unit = row.get("Metric Unit", "byte").lower()
        scale = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9}.get(unit, 1)
        k["bytes"] += float(row["Metric Value"].replace(",", "")) * scale
    return [kernels[i] for i in sorted(kernels)]


def _bwdiag_rows(folder: Path, category: str = "kernel") -> list[dict]:
    """GPU kernels of the recorded step in launch order, with bwdiag's byte estimate.

    The trace is re-analysed with ``--annotated-trace``: every kernel carries ``args.bwdiag.bytes``.
    """
    trace = next(folder.glob("rank0.pt.trace.json*"))
    out = folder.with_name(folder.name + "-analysed")
    path = out / "annotated.json.gz"
    subprocess.run([sys.executable, "-m", "bwdiag", "analyze", str(trace), "-o", str(out), "--force",
                    "--annotated-trace", str(path)], check=True, stdout=subprocess.DEVNULL)
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == category and e.get("ph") == "X"),
                     key=lambda e: e["ts"])
    return [{"name": e["name"], "bytes": (e.get("args", {}).get("bwdiag") or {}).get("bytes"),
             "group": (e.get("args", {}).get("bwdiag") or {}).get("group")} for e in kernels]


def compare(folder: Path) -> None:
    measured = _ncu_rows(folder / "ncu.csv")
    estimated = _bwdiag_rows(folder)
    if len(measured) != len(estimated):
        print(f"note: ncu saw {len(measured)} kernels, bwdiag {len(estimated)}; joined in order, "
              "by name where they differ", file=sys.stderr)
    print(f"{'bwdiag group':58s} {'kernel':40s} {'bwdiag MB':>10s} {'ncu MB':>10s} {'ratio':>6s}")
    for est, meas in zip(estimated, measured):
        mb_est = est["bytes"] / 1e6 if est["bytes"] else float("nan")
        ratio = est["bytes"] / meas["bytes"] if est["bytes"] and meas["bytes"] else float("nan")
        print(f"{(est['group'] or '?')[:58]:58s} {est['name'][:40]:40s} {mb_est:10.1f} "
              f"{meas['bytes'] / 1e6:10.1f} {ratio:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvtx", action="store_true", help="mark the last iteration for ncu")
    parser.add_argument("--compare", type=Path, metavar="FOLDER",
                        help="join FOLDER's bwdiag trace with FOLDER/ncu.csv")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
    else:
        run_ops(args.nvtx)


if __name__ == "__main__":
    main()
