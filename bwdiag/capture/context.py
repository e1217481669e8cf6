"""``bwdiag.profile``: capture and diagnose a loop of your own with two added lines.

::

    import bwdiag

    with bwdiag.profile(out="runs/diag", active=3) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    prof.diagnosis.findings          # also written: runs/diag/{rank0.pt.trace.json.gz,
                                     #   diagnosis.json, report.html}

``__enter__``/``__exit__`` are thin wrappers over :meth:`Profile.start`/:meth:`Profile.stop`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bwdiag.capture.folder import (
    API_WORDS,
    default_out_dir,
    launch_time,
    prepare_out_dir,
    remove_if_empty,
    say_line,
    unique_default,
    wait_for_ranks,
)
from bwdiag.capture.metadata import rank_and_world
from bwdiag.capture.options import (
    DEFAULT_ACTIVE,
    DEFAULT_RANK_TIMEOUT_S,
    DEFAULT_WAIT,
    DEFAULT_WARMUP,
    CaptureOptions,
    StepMarker,
)
from bwdiag.capture.runner import ending_of
from bwdiag.capture.session import CaptureResult, CaptureSession
from bwdiag.capture.view import DiagnosisView
from bwdiag.errors import BwdiagError, NoDiagnosis


class Profile:
    """Capture ``wait`` skipped + ``warmup`` + ``active`` recorded steps of a loop, then diagnose.

    Keyword-only options (checked here, before anything runs; bad types raise TypeError, bad
    values BwdiagError):

    out
        Output folder (created). Default ``./bwdiag-<script>-<timestamp>/``.
    wait, warmup, active
        The schedule, in steps (defaults 5, 2, 3). After the active steps the profiler stops.
    step_on
        ``"manual"`` (default: call ``prof.step()`` once per iteration) or any ``bwdiag run
        --step-on`` marker: ``"optimizer"``, ``"forward"``, ``"module:Name"``, ``"label:NAME"``,
        ``"time:SECONDS"``, ``"auto"``.
    with_stack, with_modules
        Python stacks (off: costly) and module annotations (on: cheap, window only).
    force
        Overwrite a trace or report already in ``out``.
    analyze
        Write ``diagnosis.json`` and ``report.html`` on exit and fill ``.diagnosis`` (default on).
    device_spec
        Device ceilings override file, as for ``bwdiag analyze --device-spec``.

    A Profile is used once: a second ``with`` (or ``start()``) raises BwdiagError.
    Under torch.distributed every rank writes its own trace; rank 0 waits for the others and
    writes the one report (``.diagnosis`` is None on the other ranks).
    """

    def __init__(
        self,
        *,
        out: str | os.PathLike[str] | None = None,
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        step_on: str = "manual",
        with_stack: bool = False,
        with_modules: bool = True,
        force: bool = False,
        analyze: bool = True,
        device_spec: str | os.PathLike[str] | None = None,
        rank_timeout_s: float = DEFAULT_RANK_TIMEOUT_S,
    ) -> None:
        if out is not None and not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be a path (str or os.PathLike), got {type(out).__name__}")
        if device_spec is not None and not isinstance(device_spec, (str, os.PathLike)):
            raise TypeError(f"device_spec must be a path, got {type(device_spec).__name__}")
        for name, value in (("force", force), ("analyze", analyze)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        if isinstance(rank_timeout_s, bool) or not isinstance(rank_timeout_s, (int, float)):
            raise TypeError(f"rank_timeout_s must be a number, got {rank_timeout_s!r}")
        if not rank_timeout_s >= 0:
            raise BwdiagError(f"rank_timeout_s must be >= 0, got {rank_timeout_s}")
        self.options = CaptureOptions(
            wait=wait,
            warmup=warmup,
            active=active,
            step_on=StepMarker.parse(step_on),
            with_stack=with_stack,
            with_modules=with_modules,
        )
        self._out = Path(out) if out is not None else None
        self._force = force
        self._analyze = analyze
        self._device_spec = Path(device_spec) if device_spec is not None else None
        self._rank_timeout_s = float(rank_timeout_s)
        self._session: CaptureSession | None = None
        self._used = False
        self._started_at = 0.0
        self._created = False
        self.result: CaptureResult | None = None
        self._diagnosis: DiagnosisView | None = None
        self._why_none = "the profile block has not ended yet (read prof.diagnosis after the with block)"

    @property
    def diagnosis(self) -> DiagnosisView:
        """The diagnosis of the captured steps (after the block, on rank 0).

        Raises :class:`~bwdiag.errors.NoDiagnosis` saying why there is none (the loop ended before
        the capture window, ``analyze=False``, another rank…) and what to change.
        """
        if self._diagnosis is None:
            raise NoDiagnosis(f"no diagnosis: {self._why_none}")
        return self._diagnosis

    @property
    def out_dir(self) -> Path | None:
        """The output folder (known once started)."""
        return self._session.out_dir if self._session else self._out

    @property
    def window_closed(self) -> bool:
        """True once the capture is over: the recorded steps are in the trace (or capture gave up).

        A framework callback calls :meth:`stop` then, so the report is written while training
        goes on instead of at its end."""
        from bwdiag.capture.session import Phase

        return self._session is not None and self._session.phase in (Phase.DONE, Phase.DISABLED)

    def start(self) -> Profile:
        """Prepare the output folder and start counting steps (the profiler starts at ``wait``)."""
        if self._used:
            raise BwdiagError("a bwdiag.profile is used once; create a new one for another capture")
        self._used = True
        import torch

        rank, world = rank_and_world()
        self._started_at = launch_time()
        out = self._out
        if out is None:
            script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] not in ("", "-c") else "python"
            out = default_out_dir(script, self._started_at)
            if world == 1:
                out = unique_default(out)
        self._created = not out.exists()
        out = prepare_out_dir(out, rank=rank, analyses=self._analyze and rank == 0, force=self._force,
                              words=API_WORDS)
        self._session = CaptureSession(self.options, out, argv=list(sys.argv), api=True)
        self._session.attach(torch)
        return self

    def step(self) -> None:
        """Mark the end of one iteration (with ``step_on="manual"``)."""
        if self._session is None:
            raise BwdiagError("prof.step() called outside the profile block (call start() first)")
        self._session.step()

    def stop(self, ended: str = "ended") -> DiagnosisView | None:
        """Finish the trace with what was captured; on rank 0 analyse and write the report."""
        if self._session is None or self.result is not None:
            return self._diagnosis
        self.result = result = self._session.finish(ended)
        if result.note:
            say_line(result.note)
        if not self._analyze:
            self._why_none = "analyze=False: the trace is written, not analysed (bwdiag analyze FOLDER does it)"
            return None
        if result.rank != 0:
            self._why_none = f"this is rank {result.rank}; rank 0 analyses every rank's trace and holds the diagnosis"
            return None
        out = self._session.out_dir
        if result.world_size > 1:
            traces, missing = wait_for_ranks(
                out, result.world_size, since=self._started_at,
                timeout_s=self._rank_timeout_s, say=say_line,
            )
            if missing:
                say_line(f"rank(s) {', '.join(map(str, missing))} did not finish; analysing the others")
        else:
            traces = [result.trace] if result.trace else []
        if not traces:
            self._why_none = result.note or f"no trace was written in {out}"
            if result.world_size == 1:
                remove_if_empty(out, self._created, say_line)
            else:
                say_line(f"no trace to analyse in {out}")
            return None
        from bwdiag.capture.report import analyze_traces

        diagnosis, outputs = analyze_traces(
            traces, out, force=self._force, device_spec=self._device_spec
        )
        self._diagnosis = DiagnosisView(diagnosis, outputs)
        say_line(f"report: {outputs.get('html', out / 'report.html')}")
        return self._diagnosis

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            self.stop()
            return False
        try:
            self.stop(ending_of(exc))
        except Exception as err:  # noqa: BLE001 - the block's own exception is the one to see
            say_line(f"could not finish the report: {type(err).__name__}: {err}")
        return False


def profile(**options: Any) -> Profile:
    """``with bwdiag.profile(out=..., active=3) as prof:`` — see :class:`Profile` for options."""
    return Profile(**options)
