"""PyTorch Lightning: ``Trainer(callbacks=[BwdiagCallback(out="runs/diag")])``.

::

    from bwdiag.integrations.lightning import BwdiagCallback

    callback = BwdiagCallback(out="runs/diag", wait=5, warmup=2, active=3)
    trainer = lightning.Trainer(max_steps=1000, callbacks=[callback])
    trainer.fit(model, loader)
    callback.diagnosis.findings      # on global rank 0; also runs/diag/{diagnosis.json, report.html}

Every batch of the chosen loops (``loops="train"`` by default) ends a step at its
``on_*_batch_end`` hook, so ``ProfilerStep#N`` in the trace is the loop's batch N (counted from 0,
across epochs). Under a DDP/FSDP strategy every rank writes its own trace into the same folder and
global rank 0 writes the one report for all ranks. The verdict and the top findings go to the
Trainer's loggers (``log_metrics``: ``bwdiag/step_time_ms`` …; ``log_hyperparams``: the verdict and
findings as text) and to Lightning's console log. The profiler only observes: losses and weights are
the same with and without the callback.

Works with the ``lightning`` package, or ``pytorch_lightning`` when only that one is installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bwdiag.capture.folder import default_out_dir, launch_time, say_line, unique_default
from bwdiag.capture.options import DEFAULT_ACTIVE, DEFAULT_RANK_TIMEOUT_S, DEFAULT_WAIT, DEFAULT_WARMUP
from bwdiag.errors import BwdiagError
from bwdiag.integrations._common import (
    CapturingCallback,
    import_framework,
    verdict_lines,
    verdict_metrics,
    verdict_texts,
)

pl = import_framework(("lightning.pytorch", "pytorch_lightning"), extra="lightning",
                      framework="Lightning", integration="bwdiag.integrations.lightning")

#: The loops a callback can take its steps from.
LOOPS = ("train", "validation", "test", "predict")


class BwdiagCallback(CapturingCallback, pl.Callback):
    """Capture ``wait`` skipped + ``warmup`` + ``active`` recorded batches of a Lightning loop and
    diagnose them (see the module docstring).

    out
        Output folder, the same on every rank. Default: ``bwdiag-<LightningModule>-<time>/`` in the
        Trainer's ``default_root_dir`` (chosen on rank 0, broadcast to the others).
    wait, warmup, active, with_stack, with_modules, force, analyze, device_spec, rank_timeout_s
        As for :func:`bwdiag.profile`.
    loops
        Which loops' batches are the steps: ``"train"`` (default), ``"validation"``, ``"test"``,
        ``"predict"``, or several of them. The sanity-check batches are never counted.
    log
        Send the verdict to the Trainer's loggers and console (default on).
    """

    def __init__(
        self,
        *,
        out: str | os.PathLike[str] | None = None,
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        loops: str | tuple[str, ...] | list[str] = "train",
        with_stack: bool = False,
        with_modules: bool = True,
        force: bool = False,
        analyze: bool = True,
        device_spec: str | os.PathLike[str] | None = None,
        rank_timeout_s: float = DEFAULT_RANK_TIMEOUT_S,
        log: bool = True,
    ) -> None:
        super().__init__()
        names = (loops,) if isinstance(loops, str) else tuple(loops)
        unknown = [n for n in names if n not in LOOPS]
        if unknown or not names:
            raise BwdiagError(f"loops must be among {', '.join(LOOPS)}; got {loops!r}")
        self.loops = frozenset(names)
        self._init_capture(out, log, wait=wait, warmup=warmup, active=active, with_stack=with_stack,
                           with_modules=with_modules, force=force, analyze=analyze, device_spec=device_spec,
                           rank_timeout_s=rank_timeout_s)

    # ------------------------------------------------------------------ results
    # ------------------------------------------------------------------ the steps
    def _begin(self, trainer: Any, pl_module: Any, loop: str) -> None:
        if loop not in self.loops or self._capture.started or trainer.sanity_checking:
            return
        out = self.out
        if out is None:  # chosen once, on rank 0: the ranks' clocks and folders must agree
            base = Path(trainer.default_root_dir)
            out = unique_default(default_out_dir(type(pl_module).__name__, launch_time(), base=base))
            out = Path(trainer.strategy.broadcast(str(out), src=0))
        self._capture.start(out)

    def _end(self, trainer: Any, loop: str) -> None:
        if loop in self.loops and not trainer.sanity_checking and self._capture.step():
            self._report(trainer)

    def _finish(self, trainer: Any, exc: BaseException | None = None) -> None:
        if self._capture.finish(exc):
            self._report(trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._begin(trainer, pl_module, "train")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._end(trainer, "train")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._begin(trainer, pl_module, "validation")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._end(trainer, "validation")

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._begin(trainer, pl_module, "test")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._end(trainer, "test")

    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._begin(trainer, pl_module, "predict")

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._end(trainer, "predict")

    # A run shorter than the window: finish with what was captured when the stage's loop ends
    # (before the Trainer's teardown, while the process group still exists).
    def on_train_end(self, trainer, pl_module):
        self._finish(trainer)

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and trainer.state.fn == "validate":
            self._finish(trainer)

    def on_test_end(self, trainer, pl_module):
        self._finish(trainer)

    def on_predict_end(self, trainer, pl_module):
        self._finish(trainer)

    def teardown(self, trainer, pl_module, stage):
        self._finish(trainer)

    def on_exception(self, trainer, pl_module, exception):
        self._finish(trainer, exception)

    # ------------------------------------------------------------------ the verdict, logged
    def _report(self, trainer: Any) -> None:
        view = self._capture.view_or_none()
        if view is None or not self.log:
            return
        for line in verdict_lines(view):
            pl.utilities.rank_zero.rank_zero_info(f"bwdiag: {line}")
        metrics, texts = verdict_metrics(view), verdict_texts(view)
        for logger in trainer.loggers:
            try:
                logger.log_metrics(metrics, step=trainer.global_step)
                logger.log_hyperparams(texts)
            except Exception as err:  # noqa: BLE001 - a logger's failure must not stop training
                say_line(f"could not log the verdict to {type(logger).__name__}: {type(err).__name__}: {err}")
