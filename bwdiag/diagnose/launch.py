"""Launch overhead: many short kernels, CPU launch time against GPU time, and the launch queue.

The queue length at a launch is the number of that stream's kernels launched but not yet finished
(as HTA's queue-length analysis counts it). A step is launch-bound when the device spends a
noticeable share of the window idle waiting for the host to launch work and the queue is nearly
empty: the CPU, not the GPU, sets the pace.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bwdiag.diagnose.model import LaunchStats

#: Kernels shorter than this are "tiny": at this size launch cost (~3–6 µs CPU) rivals the work.
SHORT_KERNEL_US = 10.0
#: Launch-bound: host-wait idle ≥ this share of the window …
LAUNCH_BOUND_IDLE_SHARE = 0.10
#: … while kernels find on average fewer than this many kernels queued ahead of them.
LAUNCH_BOUND_QUEUE = 2.0


def launch_stats(acts: pd.DataFrame, window_us: float, host_wait_us: float, rank: int | None = None) -> LaunchStats:
    """The launch facts of one GPU rank (µs); ``host_wait_us`` is its host-wait idle."""
    kern = acts[acts["kind"] == "kernel"]
    dur = kern["dur"].to_numpy(float)
    short = dur < SHORT_KERNEL_US
    q = mean_queue_length(kern)
    bound = bool(window_us > 0 and host_wait_us >= LAUNCH_BOUND_IDLE_SHARE * window_us
                 and q is not None and q < LAUNCH_BOUND_QUEUE)
    return LaunchStats(kernels=int(len(kern)), short_kernels=int(short.sum()), short_kernel_us=float(dur[short].sum()),
                       cpu_launch_us=float(np.nansum(kern["launch_dur"].to_numpy(float))),
                       gpu_busy_us=float(dur.sum()), mean_queue_length=q, launch_bound=bound, rank=rank)


def mean_queue_length(kern: pd.DataFrame) -> float | None:
    """Mean number of kernels already queued (launched, unfinished) on the stream at each launch."""
    launched = kern.dropna(subset=["launch_ts"])
    if launched.empty:
        return None
    lengths = []
    for _, s in launched.groupby("stream", sort=False, dropna=False):
        lt = np.sort(s["launch_ts"].to_numpy(float))
        ends = np.sort(s["end"].to_numpy(float))
        before = np.arange(len(lt))  # launches strictly earlier on this stream (sorted order)
        finished = np.searchsorted(ends, lt, side="right")
        lengths.append(np.clip(before - finished, 0, None))
    return float(np.concatenate(lengths).mean())
