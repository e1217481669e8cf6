"""The worker processes that parse trace chunks and whole rank files for ``bwdiag analyze``.

Workers are forked (they inherit the parsing code and pandas instead of importing them) and end with
the parent however it ends: they ignore Ctrl-C (the parent handles it and stops them), and on Linux
the kernel kills them when the parent dies, so a ``kill -TERM`` or ``kill -9`` of ``bwdiag analyze``
leaves no worker blocked in a pipe write, holding the trace open.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import weakref
from concurrent.futures import ProcessPoolExecutor

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_pools: weakref.WeakSet = weakref.WeakSet()


def _child_ignores_ctrl_c() -> None:
    # Right after fork, before the child runs any Python: a Ctrl-C that lands while a worker is
    # being forked (pools fork lazily, on submit) must not print a KeyboardInterrupt traceback there.
    if _pools:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


os.register_at_fork(after_in_child=_child_ignores_ctrl_c)


def forkable() -> bool:
    """Whether worker processes may be forked from this process.

    Not once torch is loaded here: ``bwdiag run`` and ``bwdiag.profile`` analyse in the process that
    ran the user's script, where torch's OpenMP pool and CUDA's threads may hold locks that a forked
    child would inherit locked (fork copies only the calling thread), and CUDA is not fork-safe.
    Those captures load in this process, one file after another. (numpy's OpenBLAS threads, present
    in ``bwdiag analyze`` once the analysis is imported, are fork-safe: OpenBLAS registers fork
    handlers.) Spawned workers are no alternative: they would re-import the user's script as
    ``__main__``.
    """
    return "fork" in multiprocessing.get_all_start_methods() and "torch" not in sys.modules


def _worker_init(parent: int) -> None:
    # gc.freeze: the collector then never walks the objects inherited from the parent, which would
    # copy their pages into the worker (and cost time on every collection).
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the parent's stop_workers() still ends them on SIGTERM and Ctrl-C
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def start_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` forked workers, registered so that :func:`stop_workers` can end them."""
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init, initargs=(os.getpid(),),
                               mp_context=multiprocessing.get_context("fork"))
    # When a worker dies (killed for memory) while a 1 MB chunk is being written to it, the queue's
    # feeder thread can stay blocked on that pipe for good (any process forked later holds its read
    # end), and Python would wait for that thread at exit: the process would never end. Results all
    # come back through their futures, so nothing needs that join (CPython's ProcessPoolExecutor
    # has no public switch for it; _call_queue is its queue of work for the workers).
    call_queue = getattr(pool, "_call_queue", None)
    if call_queue is not None:
        call_queue.cancel_join_thread()
    _pools.add(pool)
    return pool


def stop_workers() -> None:
    """Kill every worker of every pool still open (the parent is being interrupted or terminated)."""
    for pool in list(_pools):
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                proc.kill()
            except (OSError, ValueError, AttributeError):
                pass  # already gone
