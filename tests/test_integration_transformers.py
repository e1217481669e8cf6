"""``bwdiag.integrations.transformers.BwdiagCallback`` on a tiny BERT built from a config (2 layers,
hidden 32, no download) trained by ``transformers.Trainer`` on the CPU: the steps covered, step time
against the loop's own clock, what the kernel table holds, unchanged training, the log history."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import torch

from conftest import UNDER_CI

try:
    import transformers
    import accelerate  # noqa: F401  (transformers.Trainer needs it)
except ImportError:
    if UNDER_CI:
        raise
    pytest.skip('transformers/accelerate are not installed (pip install -e ".[test]")', allow_module_level=True)

from bwdiag.integrations.transformers import BwdiagCallback

SEQ, BATCH = 16, 4


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (n, SEQ), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.labels[i]}


class Clock(transformers.TrainerCallback):
    """The loop's own measurement: the time of every on_step_end (placed before bwdiag's)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def _train(tmp: Path, callbacks: list) -> transformers.Trainer:
    transformers.set_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp), max_steps=12, per_device_train_batch_size=BATCH, report_to="none",
        use_cpu=True, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0,
        dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=callbacks)
    trainer.train()
    return trainer


def _losses(trainer: transformers.Trainer) -> list[float]:
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


def test_bert_trainer_steps_step_time_and_unchanged_training(tmp_path: Path) -> None:
    clock = Clock()
    callback = BwdiagCallback(out=tmp_path / "diag", wait=3, warmup=2, active=4)
    with_cb = _train(tmp_path / "a", [clock, callback])
    plain = _train(tmp_path / "b", [])

    assert len(_losses(with_cb)) == 12 and _losses(with_cb) == _losses(plain)
    for (name, a), (_, b) in zip(with_cb.model.state_dict().items(), plain.model.state_dict().items()):
        assert torch.equal(a, b), name

    d = callback.diagnosis
    # Optimizer steps 0-2 skipped, 3-4 warm up, 5-8 recorded: ProfilerStep#N is optimizer step N.
    assert d.raw.time.step_ids == (5, 6, 7, 8) and d.raw.source.ranks == (0,)
    # Step N runs from on_step_end of step N-1 to its own.
    loop = {n: clock.ends[n] - clock.ends[n - 1] for n in range(1, len(clock.ends))}
    loop_median_us = statistics.median(loop[n] for n in d.raw.time.step_ids) * 1e6
    assert d.raw.time.step_us == pytest.approx(loop_median_us, rel=0.10)
    # One forward per step: per layer Q, K, V, attention output, intermediate and output (6 Linear),
    # times 2 layers, plus the pooler and the classifier: 14 Linear per step, 56 in 4 steps.
    kernels = d.kernels
    linear = kernels[kernels["name"] == "aten::linear"]
    assert linear["count"].sum() == 56
    assert linear.loc[linear["module"] == "BertForSequenceClassification.classifier", "count"].sum() == 4
    assert (tmp_path / "diag" / "report.html").exists()
    # The verdict is in the log history, at the step the window closed (after optimizer step 8).
    logged = [e for e in with_cb.state.log_history if "bwdiag/step_time_ms" in e]
    assert len(logged) == 1 and logged[0]["step"] == 9
    assert logged[0]["bwdiag/step_time_ms"] == pytest.approx(d.raw.time.step_us / 1e3)
