"""One cause, one finding (issue 13, Build 4): host syncs made inside DataLoader __next__ are the
data loader's wait, not a second finding; their savings never add beyond the host wait."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from bwdiag.diagnose.findings import host
from bwdiag.diagnose.findings.helpers import unexplained_host_wait
from bwdiag.diagnose.findings.registry import run_rules
from bwdiag.diagnose.idle import idle_breakdown
from tests.rule_context import context, rank


def _trace():
    """Kernels 0–10, 100–110, 200–210, the last two launched at 90 and 150 (after the GPU went idle:
    two host-wait gaps, 10–100 and 110–200, 90 µs each). cudaStreamSynchronize returns at 50 and at
    180 (one in each gap); DataLoader __next__ spans 5–120: all of the first gap, 10 µs of the second."""
    acts = pd.DataFrame({"name": ["k1", "k2", "k3"], "kind": ["kernel"] * 3, "ts": [0.0, 100.0, 200.0],
                         "end": [10.0, 110.0, 210.0], "dur": [10.0] * 3, "launch_ts": [-5.0, 90.0, 150.0]})
    runtime = pd.DataFrame({"name": ["cudaStreamSynchronize", "cudaStreamSynchronize"], "ts": [20.0, 160.0],
                            "end": [50.0, 180.0], "dur": [30.0, 20.0]})
    ops = pd.DataFrame({"name": ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"],
                        "ts": [5.0], "end": [120.0]})
    return SimpleNamespace(tables=SimpleNamespace(runtime=runtime), ops=ops, rank=0), acts


def test_idle_counts_the_syncs_inside_the_loader():
    idle = idle_breakdown(*_trace())
    assert idle.host_wait_us == pytest.approx(180.0)
    # Both gaps hold a sync that returned in them: 90 + 90. The loader covers 90 + 10 of the gaps,
    # and the syncs' gaps are exactly those: 100 µs seen by both causes.
    assert idle.sync_us == pytest.approx(180.0)
    assert idle.data_loader_us == pytest.approx(100.0)
    assert idle.sync_in_data_loader_us == pytest.approx(100.0)


def test_sync_and_loader_findings_split_the_wait_once():
    idle = idle_breakdown(*_trace()).to_dict()
    launch = {"kernels": 3, "short_kernels": 0, "short_kernel_us": 0.0, "cpu_launch_us": 10.0,
              "gpu_busy_us": 30.0, "launch_bound": False, "mean_queue_length": 1.0}
    ctx = context([rank([], [])], total_us=210, extras={"idle": idle, "launch": launch})
    (sync,) = host.sync_points(ctx)
    (loader,) = host.data_loader(ctx)
    # syncs outside the loader: 180 − 100 = 80 µs; the loader: 100 µs, the syncs inside named in it.
    assert sync.est_saving_us == pytest.approx(80.0) and sync.idle_us == pytest.approx(80.0)
    assert loader.est_saving_us == pytest.approx(100.0)
    assert "100 µs of it the host spends in synchronising calls" in " ".join(loader.finding.evidence)
    assert "inside DataLoader __next__" in " ".join(sync.finding.evidence)
    # nothing left unexplained: 180 − (80 + 100) = 0, and the findings add up to the host wait
    assert unexplained_host_wait(ctx) == pytest.approx(0.0)
    total = sum(r.est_saving_us for r in run_rules(ctx))
    assert total == pytest.approx(idle["host_wait_us"])
