"""The GPU idles on the host: syncs, the data loader, Python between kernels (``ctx.idle``), and
``Memcpy … (Pageable …)`` transfers seen in the activities themselves."""

from __future__ import annotations

import numpy as np

from bwdiag.diagnose.findings.base import RuleContext, RuleResult
from bwdiag.diagnose.findings.helpers import (
    fmt_bytes,
    fmt_time,
    host_gap_lines,
    host_gaps,
    looks_launch_bound,
    short_list,
    unexplained_host_wait,
    host_wait_cap_line,
)
from bwdiag.diagnose.model import FindingKind


def sync_points(ctx: RuleContext) -> list[RuleResult]:
    """GPU idle caused by host synchronisation (``.item()``, ``.cpu()``, ``cudaDeviceSynchronize``)."""
    idle = ctx.idle
    if ctx.is_cpu or idle is None:
        return []
    # Syncs inside DataLoader __next__ are the data loader's (one cause, one finding): the
    # data-loader finding reports that wait and says which syncs it holds.
    inside = min(idle.sync_in_data_loader_us, idle.sync_us)
    saving = idle.sync_us - inside
    if not ctx.worth_reporting(saving):
        return []
    evidence = [f"the GPU idles {fmt_time(saving)} while the host waits on synchronisation → {ctx.per_step(saving)}"]
    if inside > 0:
        evidence.append(f"another {fmt_time(inside)} of sync wait lies inside DataLoader __next__: counted once, "
                        f"in the data-loader finding")
    evidence += [f"{s.name}: {s.count}× {fmt_time(s.total_us)}" for s in idle.top_syncs[:4]]
    fix = ("# keep values on the GPU: log every N steps, not every step\n"
           "if step % 100 == 0:\n    print(loss.item())\n"
           "# avoid implicit syncs: torch.nonzero / boolean-mask indexing / .cpu() inside the step;\n"
           "# find them with torch.cuda.set_sync_debug_mode(\"warn\")")
    return [ctx.finding(FindingKind.SYNC, "Remove host sync points from the step", saving, evidence, fix,
                        idle_us=saving)]


def data_loader(ctx: RuleContext) -> list[RuleResult]:
    """GPU idle while the host fetches the next batch (CPU traces: the main thread waiting for it)."""
    if ctx.is_cpu:
        return _cpu_data_loader(ctx)
    idle = ctx.idle
    if idle is None:
        return []
    saving = idle.data_loader_us
    if not ctx.worth_reporting(saving):
        return []
    evidence = [f"the device idles {fmt_time(saving)} inside DataLoader __next__ → {ctx.per_step(saving)}"]
    if idle.sync_in_data_loader_us > 0:
        evidence.append(f"{fmt_time(idle.sync_in_data_loader_us)} of it the host spends in synchronising calls inside "
                        f"__next__ (pageable host-to-device copies, .item() in a collate): pin_memory=True and "
                        f".to(device, non_blocking=True) make them asynchronous (not counted again as sync points)")
    fix = ("loader = torch.utils.data.DataLoader(dataset, batch_size=bs, num_workers=8, pin_memory=True,\n"
           "                                     persistent_workers=True, prefetch_factor=4)")
    return [ctx.finding(FindingKind.DATA_LOADER, "Feed the GPU faster: DataLoader workers and pinned memory",
                        saving, evidence, fix, idle_us=saving)]


def _cpu_data_loader(ctx: RuleContext) -> list[RuleResult]:
    """The main thread inside DataLoader ``__next__`` spans: it does nothing else until the batch comes.
    Saving: that time (the ops inside the spans — collate, unpickling — and the wait between them);
    a loader that keeps up hides it behind the step, one that cannot still removes the ops' share."""
    found = [(pos, g) for pos, a in enumerate(ctx.analyses) if (g := host_gaps(a)) is not None and g.loader_us > 0]
    if not found:
        return []
    saving = sum(g.loader_us for _, g in found) / ctx.ranks
    if not ctx.worth_reporting(saving):
        return []
    acts = {pos: g.loader_rows for pos, g in found}
    work = sum(float(ctx.analyses[pos].activities["dur"].to_numpy(float)[g.loader_rows].sum())
               for pos, g in found) / ctx.ranks
    spans = sum(g.loader_spans for _, g in found) / ctx.ranks
    kind = next((g.loader_kind for _, g in found if g.loader_kind), None)
    single = kind is not None and "SingleProcess" in kind
    evidence = [
        f"the main thread spends {fmt_time(saving)} ({ctx.pct(saving):.0f}% of the window) inside {spans:,.0f} "
        f"DataLoader __next__ calls{f' ({kind})' if kind else ''}, {fmt_time(work)} of it in ops "
        f"(collate, copies) and the rest waiting for the batch → {ctx.per_step(saving)}",
        "num_workers=0: the main thread loads every batch itself" if single else
        "the workers do not keep up: the step waits for every batch they have not prepared yet",
    ]
    cores = _cores_per_rank(ctx)
    if cores is not None:
        evidence.append(_cores_line(cores, ctx.ranks_in_job))
    fix = _loader_fix(single, cores)
    # The ops inside the spans are activities (what-if: their time), the rest of the spans idle.
    return [ctx.finding(FindingKind.DATA_LOADER, "Load batches off the main thread: DataLoader workers",
                        saving, evidence, fix, acts=acts, idle_us=max(0.0, saving - work))]


def _cores_per_rank(ctx: RuleContext) -> int | None:
    """The recording host's cores each rank's loader can use (its cores ÷ the job's ranks), None unknown."""
    cores = ctx.host_cores
    return max(1, cores // ctx.ranks_in_job) if cores is not None else None


def _cores_line(cores: int, ranks: int) -> str:
    share = f" ({ranks} ranks share the host)" if ranks > 1 else ""
    return (f"the script has {cores} core{'s' * (cores > 1)} of the recording host{share}: workers beyond "
            f"{max(1, cores - 1)} load in parallel only while __getitem__ waits (disk, network, a sleep); a CPU-bound "
            f"one then competes with the main thread for the cores, and a cheaper __getitem__ is the fix")


def _loader_fix(single: bool, cores: int | None) -> str:
    """The DataLoader arguments to paste: as many workers as the host's cores allow beside the main
    thread (``cores`` per rank, None unknown), more only for a loader that waits."""
    free = max(1, cores - 1) if cores is not None else None
    if single:
        n = min(4, free) if free is not None else 4
        why = (f"  # {cores} core{'s' * (cores > 1)} here: {free} beside the main thread (more for a loader waiting on I/O)"
               if cores is not None else "")
        return ("loader = torch.utils.data.DataLoader(dataset, batch_size=bs,\n"
                f"    num_workers={n},{why}\n"
                "    persistent_workers=True, prefetch_factor=2)")
    cores_note = (f"more than now; past {free} (this host's {cores} cores less the main thread) only an I/O-bound "
                  f"__getitem__ gains" if cores is not None else "more than now, up to the free cores")
    return ("loader = torch.utils.data.DataLoader(dataset, batch_size=bs,\n"
            f"    num_workers=8,             # {cores_note}: each worker loads batches in parallel\n"
            "    persistent_workers=True,   # no worker start-up at every epoch\n"
            "    prefetch_factor=4)         # batches each worker prepares ahead\n"
            "# and make __getitem__ cheaper: decode/augment once offline, or cache")


def host_bound(ctx: RuleContext) -> list[RuleResult]:
    """GPU idle waiting on the host that no specific cause explains, when kernels are not tiny
    (tiny kernels: the launch-overhead rule reports the same wait instead)."""
    idle = ctx.idle
    if ctx.is_cpu or idle is None or looks_launch_bound(ctx):
        return []
    host = idle.host_wait_us
    saving = unexplained_host_wait(ctx)
    if not ctx.worth_reporting(saving):
        return []
    evidence = [
        f"the GPU waits on the host for {fmt_time(host)} in {int(idle.gaps):,} gaps; "
        f"syncs and the data loader explain {fmt_time(host - saving)}",
        f"the rest, {ctx.per_step(saving)}, is Python / framework time between kernels",
        *host_wait_cap_line(ctx, unexplained_host_wait(ctx, capped=False), saving),
    ]
    lines, optimizer = host_gap_lines(ctx)
    evidence += lines
    fix = ("model = torch.compile(model)  # removes Python overhead between kernels\n"
           + (optimizer + "\n" if optimizer else "")
           + "# and profile the host side: python -m cProfile -o step.prof train.py / py-spy record -- python train.py")
    return [ctx.finding(FindingKind.HOST_BOUND, "The GPU waits on Python between kernels", saving, evidence, fix,
                        idle_us=saving)]


def pageable_memcpy(ctx: RuleContext) -> list[RuleResult]:
    """Host↔device copies from pageable memory: staged through a bounce buffer and synchronous."""
    if ctx.is_cpu:
        return []
    acts_of, time, nbytes, count = {}, 0.0, 0.0, 0
    for pos, a in enumerate(ctx.analyses):
        acts = a.activities
        mask = (acts["kind"] == "memcpy").to_numpy() & acts["name"].str.contains("Pageable", na=False).to_numpy()
        if mask.any():
            acts_of[pos] = np.flatnonzero(mask)
            time += float(acts.loc[mask, "dur"].sum())
            nbytes += float(acts.loc[mask, "bytes"].fillna(0).sum())
            count += int(mask.sum())
    # A pinned copy runs at full link speed and asynchronously (it can overlap compute): at best
    # the pageable copy's time leaves the critical path.
    saving = time / ctx.ranks
    if not count or not ctx.worth_reporting(saving):
        return []
    names = short_list(a.activities["name"].iloc[r].iloc[0] for a, r in
                       ((ctx.analyses[p], rows) for p, rows in acts_of.items()))
    evidence = [
        f"{count} pageable copies move {fmt_bytes(nbytes / ctx.ranks)} in {fmt_time(time / ctx.ranks)} "
        f"({fmt_bytes(nbytes / (time / 1e6))}/s): staged through a bounce buffer, synchronous with the host "
        f"→ up to {ctx.per_step(saving)}",
        names,
    ]
    fix = ("x = x.pin_memory()                     # once, or DataLoader(pin_memory=True)\n"
           "x_gpu = x.to(\"cuda\", non_blocking=True)  # asynchronous, overlaps compute")
    return [ctx.finding(FindingKind.MEMCPY, "Copy from pinned memory, asynchronously", saving, evidence, fix,
                        acts=acts_of)]
