"""Launch overhead: many tiny kernels and GPU gaps waiting on the host to launch the next one.

Uses the timeline facts ``ctx.launch`` (kernel count, short kernels) and ``ctx.idle``.
The saving is the host-wait idle that syncs and the data loader do not explain:
the GPU waiting for the next launch. A CUDA graph replays the whole sequence with one launch. GPU
traces only.
"""

from __future__ import annotations

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import (
    fmt_time,
    host_gap_lines,
    host_wait_cap_line,
    looks_launch_bound,
    unexplained_host_wait,
)
from bwdiag.diagnose.model import FindingKind


def launch_overhead(ctx: RuleContext) -> list[RuleResult]:
    """GPU idle between launches when the host cannot keep the queue fed."""
    launch = ctx.launch
    if ctx.is_cpu or launch is None:
        return []
    gap = unexplained_host_wait(ctx)
    kernels = int(launch.kernels)
    short = int(launch.short_kernels)
    if not looks_launch_bound(ctx) or not ctx.worth_reporting(gap):
        return []
    evidence = [
        f"{short:,} of {kernels:,} kernels run under 10 µs ({fmt_time(launch.short_kernel_us)} "
        f"in all); the GPU waits {fmt_time(gap)} between them for the next launch (host wait not "
        f"explained by syncs or the data loader)",
        f"launch API calls take {fmt_time(launch.cpu_launch_us)} on the host vs "
        f"{fmt_time(launch.gpu_busy_us)} of GPU work"
        + (f"; mean queue length {launch.mean_queue_length:.1f}" if launch.mean_queue_length is not None else ""),
        f"one graph replay instead of {kernels:,} launches removes the gaps → {ctx.per_step(gap)}",
        *host_wait_cap_line(ctx, unexplained_host_wait(ctx, capped=False), gap),
    ]
    lines, optimizer = host_gap_lines(ctx)
    evidence += lines
    fix = ("model = torch.compile(model, mode=\"reduce-overhead\")  # CUDA graphs + fusion\n"
           + (optimizer + "\n" if optimizer else "")
           + "# or larger batches: the same launches, more work in each\n"
           "# or capture by hand (static shapes, static input buffers):\n"
           "g = torch.cuda.CUDAGraph()\n"
           "with torch.cuda.graph(g):\n    static_out = model(static_in)\n"
           "static_in.copy_(batch); g.replay()")
    return [ctx.finding(FindingKind.LAUNCH_OVERHEAD, f"Capture the {kernels:,} small launches in a CUDA graph",
                        gap, evidence, fix, idle_us=gap)]
