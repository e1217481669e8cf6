"""What every framework callback shares: importing the framework or naming the extra to install,
one :class:`~bwdiag.capture.context.Profile` driven by the framework's step hooks, and the verdict
as metrics and lines for the framework's logger."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from bwdiag.capture.context import Profile
from bwdiag.capture.folder import say_line
from bwdiag.capture.runner import ending_of
from bwdiag.capture.view import DiagnosisView
from bwdiag.errors import MissingExtra, NoDiagnosis

#: Findings named in the logger's lines and metrics.
TOP_FINDINGS = 3


def import_framework(candidates: tuple[str, ...], *, extra: str, framework: str, integration: str) -> ModuleType:
    """The first of ``candidates`` that imports; :class:`MissingExtra` naming the extra if none does."""
    failure: ImportError | None = None
    for name in candidates:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or name.split(".")[0] != err.name.split(".")[0]:
                failure = failure or err  # the package is there but one of its imports is not
        except ImportError as err:
            failure = failure or err
    fix = f'pip install "bwdiag[{extra}]"'
    if failure is not None:
        raise MissingExtra(f"{integration} could not import {framework} ({failure}); reinstall it: {fix}")
    raise MissingExtra(f"{integration} needs {framework}, which is not installed: {fix}")


class CaptureDriver:
    """One ``bwdiag.profile`` run by a framework's hooks: started before the first step, stepped at
    every step's end, and stopped as soon as the recorded window closes (so the report is written
    while training carries on), or when the loop ends or fails.

    Capture problems never stop training: the profiler disables itself with one line, and a report
    that cannot be written is one line too.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        if "step_on" in options:
            raise TypeError("the callback marks the steps itself; step_on is not an option here")
        self.options = dict(options)
        Profile(**self.options)  # check every option now, when the callback is created
        self.profile: Profile | None = None
        self.done = False

    @property
    def started(self) -> bool:
        return self.profile is not None

    def start(self, out: Path) -> None:
        self.profile = Profile(out=out, **self.options)
        self.profile.start()

    def step(self) -> bool:
        """One step ended; True when this step closed the window and the capture was finished."""
        if self.profile is None or self.done:
            return False
        self.profile.step()
        if self.profile.window_closed:
            return self.finish()
        return False

    def finish(self, exc: BaseException | None = None) -> bool:
        """Finish the capture once (rank 0: analyse and write the report); True if this call did."""
        if self.profile is None or self.done:
            return False
        self.done = True
        try:
            self.profile.stop(ending_of(exc) if exc is not None else "ended")
        except Exception as err:  # noqa: BLE001 - training goes on; the failure is said, not hidden
            say_line(f"could not finish the report: {type(err).__name__}: {err}")
        return True

    @property
    def diagnosis(self) -> DiagnosisView:
        if self.profile is None:
            raise NoDiagnosis("no diagnosis: the callback has not started (no step of its loop has run yet)")
        return self.profile.diagnosis

    def view_or_none(self) -> DiagnosisView | None:
        try:
            return self.diagnosis
        except NoDiagnosis:
            return None


class CapturingCallback:
    """What every framework callback holds: its output folder, whether it logs the verdict, the
    :class:`CaptureDriver`, and the ``diagnosis`` / ``profile`` it exposes."""

    def _init_capture(self, out: Any, log: bool, **options: Any) -> None:
        if out is not None and not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be a path (str or os.PathLike), got {type(out).__name__}")
        self.out = Path(out) if out is not None else None
        self.log = log
        self._capture = CaptureDriver(options)

    @property
    def diagnosis(self) -> DiagnosisView:
        """The diagnosis (on the process that writes the report, once the window closed or training
        ended); raises :class:`~bwdiag.errors.NoDiagnosis` saying why there is none."""
        return self._capture.diagnosis

    @property
    def profile(self):
        """The :class:`bwdiag.Profile` behind the callback (None before the first step)."""
        return self._capture.profile


def verdict_metrics(view: DiagnosisView) -> dict[str, float]:
    """Numbers for a metrics logger (``bwdiag/…``): step time, projected step, saving, top findings."""
    from bwdiag.report.verdict import build_verdict

    v = build_verdict(view.raw)
    metrics = {
        "bwdiag/step_time_ms": _ms(v["step_us"]),
        "bwdiag/projected_step_ms": _ms(v["projected_step_us"]),
        "bwdiag/saving_pct": v["saving_pct"],
        "bwdiag/findings": float(len(view.raw.findings)),
    }
    for i, f in enumerate(v["top_findings"], 1):
        metrics[f"bwdiag/finding_{i}_saving_ms"] = _ms(f["saving_shown_us"])
    return {k: float(x) for k, x in metrics.items() if isinstance(x, (int, float))}


def verdict_texts(view: DiagnosisView) -> dict[str, str]:
    """Text for a logger's hyperparameters / config: the verdict, the top findings, the report."""
    lines = verdict_lines(view)
    texts = {"bwdiag/verdict": lines[0]}
    for i, line in enumerate(lines[1:1 + TOP_FINDINGS], 1):
        texts[f"bwdiag/finding_{i}"] = line.strip().split(". ", 1)[-1]
    if "html" in view.paths:
        texts["bwdiag/report"] = str(view.paths["html"])
    return texts


def verdict_lines(view: DiagnosisView) -> list[str]:
    """The verdict in a few lines: headline with step time, then one line per top finding."""
    from bwdiag.units import fmt_pct, fmt_time
    from bwdiag.report.verdict import build_verdict

    v = build_verdict(view.raw)
    head = v["headline"]
    if v["dominant_pct"] is not None:
        head += f" ({fmt_pct(v['dominant_pct'])} of the window)"
    if v["step_us"] is not None:
        head += f"; step {fmt_time(v['step_us'])} (median of {v['steps']}, {v['step_ids']})"
    lines = [head]
    for i, f in enumerate(v["top_findings"], 1):
        lines.append(f"  {i}. {f['title']}: saves {fmt_time(f['saving_shown_us'])} {f['saving_unit']} "
                     f"({fmt_pct(f['saving_pct'])})")
    if v["more_findings"]:
        lines.append(f"  … and {v['more_findings']} more in the report")
    return lines


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3
