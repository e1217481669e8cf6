"""Start a 2-rank gloo run for a test, once more if torch's gloo teardown aborted a rank at exit.

With torch 2.13 (CPU build), a gloo rank sometimes dies at interpreter exit with ``terminate called
without an active exception`` (SIGABRT, no Python frame on the stack: C++ teardown after the script
is over), even after ``dist.barrier()`` and ``dist.destroy_process_group()``. It is torch's, not
bwdiag's: the tests' own DDP script under plain ``python -m torch.distributed.run`` (no bwdiag) aborted
in 1 of 7 and 2 of 34 runs on the 2-core dev VM, and in both CI runs of 4 Dec 2026 it took one of the
runs of the suite. torchrun then reports the rank failed and ends the other rank, so the run's exit
status says nothing about bwdiag; such a run is repeated once, and a second abort fails the test.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

#: What libstdc++ prints when torch's gloo teardown ends the process (see the module docstring).
GLOO_EXIT_ABORT = "terminate called without an active exception"
#: How torchrun reports a rank ended by SIGABRT: a CI dry run (4 Dec 2026, 22:33) saw rank 0 abort with
#: no message at all while rank 1 waited in its barrier ("Connection reset by peer"); retried the same way.
RANK_SIGABRT = "(SIGABRT)"


def run_ranks(cmd: Sequence[str], *, before_retry: Callable[[], None] = lambda: None,
              **kwargs) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)``, repeated once (after
    ``before_retry``, which clears the first run's output) when it failed with the teardown abort or a
    rank ended by SIGABRT."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
    if done.returncode != 0 and (GLOO_EXIT_ABORT in done.stderr or RANK_SIGABRT in done.stderr):
        before_retry()
        done = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
    return done
