"""How an offline command (``bwdiag analyze``) ends when the user interrupts it.

Ctrl-C and ``kill -TERM`` both end it at once with one line on stderr and the shell's conventional
status (130 for SIGINT, 143 for SIGTERM): its worker processes are killed first, and outputs, which
are written atomically as a pair, are either all there from a run that finished or not there at all.
The process ends with ``os._exit`` (from the signal handler, or from ``cli.console_main`` when the
signal came during the write): the executor's threads would otherwise print tracebacks about the
futures the interruption cancelled, and Python's exit would wait for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

#: Exit statuses of an interrupted command, which the program ends at once (see module docstring).
INTERRUPTED_STATUSES = (130, 143)


class Terminated(BaseException):
    """SIGTERM during the output write, raised so that the write's clean-up runs."""


_SIGNALS = {signal.SIGINT: (130, "interrupted (Ctrl-C)"), signal.SIGTERM: (143, "terminated (SIGTERM)")}


class Interruptible:
    """The signal policy of one command (see :func:`ends_cleanly_when_interrupted`).

    Outside :meth:`writing` a signal ends the process from the handler itself: an exception raised
    there could land in a finalizer (a pandas object freed mid-analysis), where Python prints
    "Exception ignored" and carries on, and the analysis would finish as if never interrupted.
    Inside it the signal raises, so that the pair of outputs is removed as the write unwinds.
    """

    def __init__(self) -> None:
        self.at_once = True

    def handler(self, signum: int, frame) -> None:
        if self.at_once:
            _end_process(*_SIGNALS[signum])
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        self.at_once = False
        try:
            yield
        finally:
            self.at_once = True


@contextlib.contextmanager
def ends_cleanly_when_interrupted() -> Iterator[Interruptible]:
    """Run the body; on Ctrl-C or SIGTERM stop the workers, say so in one line, and exit."""
    policy = Interruptible()
    try:
        previous = {sig: signal.signal(sig, policy.handler) for sig in _SIGNALS}
    except ValueError:  # not the main thread (a library caller): leave signals alone
        yield policy
        return
    try:
        yield policy
    except KeyboardInterrupt:  # raised by the body itself, or by a signal during the write
        _end(*_SIGNALS[signal.SIGINT])
    except Terminated:
        _end(*_SIGNALS[signal.SIGTERM])
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _say_stopped(what: str) -> None:
    for sig in _SIGNALS:  # a second Ctrl-C must not interrupt the clean-up
        signal.signal(sig, signal.SIG_IGN)
    from bwdiag.trace.workers import stop_workers

    stop_workers()
    try:
        sys.stderr.write(f"bwdiag: {what}: stopped, no output written\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _end(status: int, what: str) -> None:  # noqa: RET503 - always raises
    _say_stopped(what)
    raise SystemExit(status)


def _end_process(status: int, what: str) -> None:
    _say_stopped(what)
    os._exit(status)
