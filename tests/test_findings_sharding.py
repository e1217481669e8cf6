"""FSDP sharding advice (issue 13, communication-bound steps): SHARD_GRAD_OP where FULL_SHARD re-gathers
in the backward what the forward gathered, saving from bytes ÷ the measured algbw capped by the exposed
time — on a hand-built FSDP rank, and none on the shared traces whose all-gathers are not FSDP's."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bwdiag.diagnose.findings.sharding import fsdp_sharding
from tests.conftest import shared_trace
from tests.findings_helpers import analysed
from tests.gloo_ranks import run_ranks
from tests.rule_context import context, kernel, op, rank

MiB = 1 << 20
AG = "ncclKernel_AllGather_RING_LL_Sum_int8_t"


def _fsdp_rank(*, bwd_durs: list[float], bwd_hidden: float, fsdp: bool = True, backward: bool = True):
    """One rank of an 8-way FSDP job: 4 forward all-gathers of 64 MiB (gathered) at 1000 µs each, all
    behind a GEMM; then, in the backward, one all-gather of 64 MiB per entry of ``bwd_durs`` (µs),
    the first ``bwd_hidden`` µs of each behind a GEMM. Calls are 5000 µs apart."""
    ops, acts = [], []
    if fsdp:
        ops.append(op("FullyShardedDataParallel.forward", cat="user_annotation", ts=0, end=20000, tid=1))
    for i in range(4):
        t = 5000.0 * i
        ops.append(op("c10d::_allgather_base_", dims=[[8 * MiB], [MiB]], types=["float", "float"], ts=t, end=t + 5,
                      tid=1))
        acts.append(kernel(AG, op=len(ops) - 1, ts=t, dur=1000.0, category="communication",
                           bound="communication", stream=20))
        acts.append(kernel("sm80_gemm", ts=t, dur=1000.0, category="gemm", bound="compute"))
    t0 = 20000.0
    if fsdp and backward:
        ops.append(op("FullyShardedDataParallel._pre_backward_hook", cat="user_annotation", ts=t0,
                      end=t0 + 5000.0 * len(bwd_durs), tid=2))
    for i, dur in enumerate(bwd_durs):
        t = t0 + 5000.0 * i
        parent = -1
        if backward:
            ops.append(op("autograd::engine::evaluate_function: MmBackward0", ts=t, end=t + 10, tid=2))
            parent = len(ops) - 1
        ops.append(op("c10d::_allgather_base_", dims=[[8 * MiB], [MiB]], types=["float", "float"], parent=parent,
                      ts=t, end=t + 5, tid=2))
        acts.append(kernel(AG, op=len(ops) - 1, ts=t, dur=dur, category="communication",
                           bound="communication", stream=20))
        acts.append(kernel("sm80_gemm", ts=t, dur=bwd_hidden, category="gemm", bound="compute"))
    a = rank(ops, acts)
    is_comm = (a.activities["category"] == "communication").to_numpy()
    a.activities["msg_bytes"] = np.where(is_comm, 64.0 * MiB, np.nan)
    a.activities["msg_dtype"] = [("fp32" if c else None) for c in is_comm]
    a.activities["msg_group"] = np.where(is_comm, 8.0, np.nan)
    a.activities["collective"] = [("all_gather" if c else None) for c in is_comm]
    return a


def test_backward_regather_gets_shard_grad_op_with_saving_from_bytes_and_algbw():
    # Backward: three 1000 µs all-gathers (400 µs behind a GEMM: 600 µs exposed) and one of 3000 µs
    # (a rank waiting: 2600 µs exposed). Measured algbw over the rank's 8 all-gathers:
    # 8 × 64 MiB / (7 × 1000 + 3000) µs → one 64 MiB message's transfer = 10000 / 8 = 1250 µs.
    # Saving = 3 × min(600, 1250) + min(2600, 1250) = 1800 + 1250 = 3050 µs.
    a = _fsdp_rank(bwd_durs=[1000.0, 1000.0, 1000.0, 3000.0], bwd_hidden=400.0)
    (r,) = fsdp_sharding(context([a], total_us=40000, step_us=40000))
    assert r.est_saving_us == pytest.approx(3050.0)
    assert r.kind == "overlap" and "SHARD_GRAD_OP" in r.title
    assert "ShardingStrategy.SHARD_GRAD_OP" in r.finding.fix and "reshard_after_forward=False" in r.finding.fix
    # Memory: the forward gathered 4 × 64 MiB per step; the rank keeps 7/8 of it unsharded = 224 MiB.
    memory = r.finding.evidence[2]
    assert "235 MB more per rank" in memory and "(8 − 1)/8" in memory, memory
    # It acts on the backward all-gathers only (the forward's are needed either way).
    acts = a.activities
    bwd_rows = [i for i in np.flatnonzero((acts["category"] == "communication").to_numpy()) if acts["ts"].iat[i] >= 20000]
    assert sorted(r.acts[0].tolist()) == bwd_rows


def test_no_sharding_advice_where_the_trace_does_not_support_it():
    # Backward all-gathers wholly behind compute: nothing exposed to save.
    a = _fsdp_rank(bwd_durs=[1000.0] * 4, bwd_hidden=1000.0)
    assert fsdp_sharding(context([a], total_us=40000)) == []
    # The same collectives with no FSDP range around them (a sequence-parallel gather, an optimizer's).
    a = _fsdp_rank(bwd_durs=[1000.0] * 4, bwd_hidden=0.0, fsdp=False)
    assert fsdp_sharding(context([a], total_us=40000)) == []
    # FSDP gathers in the forward only (SHARD_GRAD_OP / reshard_after_forward=False already): no re-gather.
    a = _fsdp_rank(bwd_durs=[], bwd_hidden=0.0)
    assert fsdp_sharding(context([a], total_us=40000)) == []
    # A CPU trace is comm_volume's (gloo).
    a = _fsdp_rank(bwd_durs=[1000.0] * 4, bwd_hidden=0.0)
    assert fsdp_sharding(context([a], total_us=40000, trace_kind="cpu")) == []


@pytest.mark.parametrize("path", [
    "hta/negative_queue_length_values_check/rank0.json.gz",  # sequence-parallel reduce-scatter / all-gather
    "hta/timeline_analysis/sampled_rank-0.json.gz",  # distributed Shampoo's all-gather in Optimizer.step
])
def test_shared_traces_with_all_gathers_that_are_not_fsdp_get_no_sharding_advice(path):
    d, analyses = analysed(shared_trace(path))
    # The trace does hold all-gathers (c10d::_allgather_base_ launching NCCL kernels)...
    assert any((a.trace.ops["name"] == "c10d::_allgather_base_").any() for a in analyses)
    # ... but no FSDP range issues them: no SHARD_GRAD_OP finding.
    assert not any("SHARD_GRAD_OP" in f.title for f in d.findings)


def _exposed_all_gather_fix(a) -> str:
    from bwdiag.diagnose.findings.overlap import exposed_collectives
    from tests.rule_context import collective

    rows = (collective(AG, "all_gather", count=8, total_us=8000, exposed_us=4000, bytes=64.0 * MiB),)
    (r,) = exposed_collectives(context([a], total_us=40000, collectives=rows))
    assert r.est_saving_us == pytest.approx(4000.0)
    return r.finding.fix


def test_overlap_gives_fsdp_prefetch_only_for_fsdp_all_gathers():
    fsdp = _exposed_all_gather_fix(_fsdp_rank(bwd_durs=[1000.0] * 4, bwd_hidden=0.0))
    assert "forward_prefetch=True" in fsdp and "BackwardPrefetch.BACKWARD_PRE" in fsdp
    other = _exposed_all_gather_fix(_fsdp_rank(bwd_durs=[1000.0] * 4, bwd_hidden=0.0, fsdp=False))
    assert "FSDP" not in other and "async_op=True" in other


# -- the FSDP ranges of a real FSDP run (2 ranks, gloo) ------------------------------------------------

FSDP_SCRIPT = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist, torch.nn as nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    strategy = ShardingStrategy[sys.argv[1]]
    model = FSDP(nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)]), device_id=torch.device("cpu"),
                 auto_wrap_policy=lambda module, recurse, nonwrapped_numel: recurse or isinstance(module, nn.Linear),
                 sharding_strategy=strategy)
    x = torch.randn(8, 64)
    model(x).sum().backward()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as p:
        model(x).sum().backward()
    p.export_chrome_trace(f"{sys.argv[1]}_rank{dist.get_rank()}.json")
    dist.barrier()  # no rank tears gloo down while the other still exports its trace
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def fsdp_traces(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fsdp")
    (tmp / "fsdp.py").write_text(FSDP_SCRIPT)
    for strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        done = run_ranks([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", "fsdp.py", strategy], cwd=tmp, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    return tmp


@pytest.mark.parametrize("strategy, backward", [("FULL_SHARD", 4), ("SHARD_GRAD_OP", 0)])
def test_real_fsdp_all_gathers_are_found_with_their_phase(fsdp_traces, strategy, backward):
    # 4 wrapped Linear units (the root holds no parameters of its own): each forward all-gathers the
    # 4 units once; FULL_SHARD gathers them again in the backward, SHARD_GRAD_OP keeps them.
    from bwdiag.diagnose.findings.sharding import fsdp_all_gather_phases
    from bwdiag.trace import find_trace_files, load_traces

    traces, _ = load_traces(find_trace_files([fsdp_traces / f"{strategy}_rank0.json"]))
    from bwdiag.diagnose.build import diagnose

    _, (a,) = diagnose(traces)
    phases = list(fsdp_all_gather_phases(a.trace.ops).values())
    assert phases.count("forward") == 4 and phases.count("backward") == backward
