"""Shared test helpers: where the real traces are, and what a test does when an input is absent.

Every test that needs the real traces (``../shared/traces`` beside the checkout) reaches them through
:func:`shared_trace` / :func:`shared_trace_names`, and any other absent input through
:func:`missing_input`: on a developer's machine the test skips with the reason; under CI
(``CI=true``, which ``.ci/run`` sets) it fails, so a CI run without the traces cannot stay green.
``BWDIAG_SHARED_TRACES`` points the tests at another traces folder (e.g. a missing one, to check
exactly that).

Not covered, on purpose: the browser tests (``test_browser_report.py``) skip when Chromium or
websocket-client is absent, in CI too: Chromium is not installed on the CI machines, and a page
check needs a real browser.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("BWDIAG_SHARED_TRACES") or REPO.parent / "shared" / "traces")
SAMPLE_TRACES = REPO / "sample_traces"

#: Under CI a missing input fails the test instead of skipping it.
UNDER_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

A100_TRAIN = "hta/negative_queue_length_values_check/rank0.json.gz"
A100_NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
H100_QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
H100_BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
CPU_OPS = "hta/rank_non_gpu/rank_non_gpu.json.gz"


def missing_input(reason: str) -> NoReturn:
    """Skip the running test because ``reason`` (an input it needs is absent); fail it under CI."""
    if UNDER_CI:
        pytest.fail(f"{reason} (CI=true: a missing input fails the test instead of skipping it)",
                    pytrace=False)
    pytest.skip(reason)


def shared_trace(rel: str) -> Path:
    """Path of a real trace under the shared traces folder; skip (fail under CI) when absent."""
    path = SHARED_TRACES / rel
    if not path.exists():
        missing_input(f"real trace {rel} not found under {SHARED_TRACES} "
                      "(the shared traces folder sits beside the checkout: ../shared/traces)")
    return path


#: The one name :func:`shared_trace_names` gives when there are no traces: the test that gets it
#: asks :func:`shared_trace` for it, which skips or fails, instead of pytest's silent empty set.
NO_SHARED_TRACES = "<no shared traces>"


def shared_trace_names() -> list[str]:
    """Every real trace file (relative names, sorted), to parametrize a test over."""
    if not SHARED_TRACES.is_dir():
        return [NO_SHARED_TRACES]
    return sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.rglob("*.json*"))


def raw_events(path: Path) -> dict:
    """The trace as plain json, read independently of bwdiag's loader."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(autouse=True)
def _private_calibration_cache(tmp_path_factory, monkeypatch):
    """Tests never read the user's `bwdiag calibrate` cache: CPU ceilings stay as each test sets them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
