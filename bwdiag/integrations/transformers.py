"""Hugging Face: ``transformers.Trainer(..., callbacks=[BwdiagCallback(out="runs/diag")])``.

::

    from bwdiag.integrations.transformers import BwdiagCallback

    callback = BwdiagCallback(out="runs/diag", wait=5, warmup=2, active=3)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    callback.diagnosis.findings      # on the world's process zero; also runs/diag/report.html

The Profile starts at the first ``on_step_begin`` and every ``on_step_end`` (one optimizer step,
after gradient accumulation) ends a step, so ``ProfilerStep#N`` in the trace is the optimizer step
after which ``state.global_step == N + 1``. Under ``torchrun`` / ``accelerate launch`` every process
writes its trace into the same folder and process zero of the world writes the one report, puts the
verdict into ``state.log_history`` (``bwdiag/step_time_ms`` …, saved with ``trainer_state.json``)
and prints it. The profiler only observes: losses and weights are those of a run without it.

In a plain ``accelerate`` loop, use ``bwdiag.profile`` directly (it is rank-aware the same way) and
read ``prof.diagnosis`` where ``accelerator.is_main_process``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bwdiag.capture.folder import default_out_dir, launch_time, say_line, unique_default
from bwdiag.capture.options import DEFAULT_ACTIVE, DEFAULT_RANK_TIMEOUT_S, DEFAULT_WAIT, DEFAULT_WARMUP
from bwdiag.integrations._common import CapturingCallback, import_framework, verdict_lines, verdict_metrics

transformers = import_framework(("transformers",), extra="transformers", framework="transformers",
                                integration="bwdiag.integrations.transformers")


class BwdiagCallback(CapturingCallback, transformers.TrainerCallback):
    """Capture ``wait`` skipped + ``warmup`` + ``active`` recorded optimizer steps of a
    ``transformers.Trainer`` and diagnose them (see the module docstring).

    out
        Output folder, the same on every process. Default: ``bwdiag-<model class>-<time>/`` inside
        ``TrainingArguments.output_dir`` (chosen on rank 0 and broadcast under torch.distributed).
    wait, warmup, active, with_stack, with_modules, force, analyze, device_spec, rank_timeout_s
        As for :func:`bwdiag.profile`.
    log
        Print the verdict and add it to ``state.log_history`` (default on).
    """

    def __init__(
        self,
        *,
        out: str | os.PathLike[str] | None = None,
        wait: int = DEFAULT_WAIT,
        warmup: int = DEFAULT_WARMUP,
        active: int = DEFAULT_ACTIVE,
        with_stack: bool = False,
        with_modules: bool = True,
        force: bool = False,
        analyze: bool = True,
        device_spec: str | os.PathLike[str] | None = None,
        rank_timeout_s: float = DEFAULT_RANK_TIMEOUT_S,
        log: bool = True,
    ) -> None:
        self._init_capture(out, log, wait=wait, warmup=warmup, active=active, with_stack=with_stack,
                           with_modules=with_modules, force=force, analyze=analyze, device_spec=device_spec,
                           rank_timeout_s=rank_timeout_s)

    def on_step_begin(self, args, state, control, **kwargs):
        if self._capture.started:
            return
        out = self.out
        if out is None:
            model = kwargs.get("model")
            name = type(model).__name__ if model is not None else "transformers"
            out = unique_default(default_out_dir(name, launch_time(), base=Path(args.output_dir or ".")))
            out = Path(_from_rank_zero(str(out)))
        self._capture.start(out)

    def on_step_end(self, args, state, control, **kwargs):
        if self._capture.step():
            self._report(state)

    def on_train_end(self, args, state, control, **kwargs):
        if self._capture.finish():  # training ended inside the window: what was captured
            self._report(state)

    def _report(self, state: Any) -> None:
        view = self._capture.view_or_none()
        if view is None or not self.log or not state.is_world_process_zero:
            return
        for line in verdict_lines(view):
            say_line(line)
        state.log_history.append({**verdict_metrics(view), "step": state.global_step})


def _from_rank_zero(value: str) -> str:
    """``value`` as rank 0 has it, when torch.distributed runs (every rank calls this)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
