"""Shared test helpers: where the real traces are, and a skip when they are absent."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"

A100_TRAIN = "hta/negative_queue_length_values_check/rank0.json.gz"
A100_NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
H100_QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
H100_BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_OPS = "hta/rank_non_gpu/rank_non_gpu.json.gz"


def shared_trace(rel: str) -> Path:
    """Path of a real trace in ../shared/traces, or skip the test when the folder is absent."""
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"real trace {rel} not available (../shared/traces is absent in this checkout)")
    return path


def raw_events(path: Path) -> dict:
    """The trace as plain json, read independently of bwdiag's loader."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(autouse=True)
def _private_calibration_cache(tmp_path_factory, monkeypatch):
    """Tests never read the user's `bwdiag calibrate` cache: CPU ceilings stay as each test sets them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
