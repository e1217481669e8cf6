"""A CPU's ceilings at the thread count a trace ran with.

``bwdiag calibrate`` measures the host at torch's default intra-op thread count (all cores) and,
where that is more than one, at one thread too (``thread_ceilings``). A script that runs
``torch.set_num_threads(1)`` — benchmarks, DataLoader-heavy jobs, one process per core — meets the
one-thread ceilings: on the 2-core dev VM (7 Dec 2026) a 1024² fp32 GEMM reaches 92 GFLOP/s on one
thread and 166 on two, STREAM 27 and 30 GB/s. Held to the two-thread roof, a one-thread trace's
GEMMs read as running at half their ceiling, and the half "beyond the roofline" counted as overhead:
the host-overhead saving spreads the profiler's added time over that overhead
(:class:`~bwdiag.diagnose.findings.recording.Dilation`), so the gaps kept too large a share and the
bundled transformer's compile was predicted at 2.6 ms a step where 1.5 ms came true.

:func:`at_threads` picks the ceilings measured at the trace's thread count (the capture records
``torch_threads``); between measured counts, compute scales with the threads (GEMMs parallelise
well) and bandwidth is the one-thread figure times the threads, both capped by the all-core figure;
without a one-thread measurement (a calibration from before it), compute scales and bandwidth stays.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from bwdiag.hardware.spec import DeviceSpec


def thread_ceilings(measured: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{threads: {"memory_bandwidth", "vector_flops"}}`` of a CPU measurement (its default thread
    count, and one thread where it measured that too)."""
    def ceilings(m: Mapping[str, Any]) -> dict[str, Any]:
        return {"memory_bandwidth": max(m["copy_bytes_per_s"], m["triad_bytes_per_s"]),
                "vector_flops": dict(m["gemm_flops_per_s"])}

    table = {str(measured["threads"]): ceilings(measured)}
    if isinstance(measured.get("one_thread"), Mapping):
        table["1"] = ceilings(measured["one_thread"])
    return table


def at_threads(spec: DeviceSpec, entry: Mapping[str, Any], threads: int | None) -> DeviceSpec:
    """``spec`` (a CPU calibration's ceilings, from ``entry``) at ``threads`` torch threads, with a
    note saying how they were found; unchanged when the threads are unknown or the calibration's."""
    calibrated = entry.get("threads")
    if not _count(threads) or not _count(calibrated) or threads == calibrated:
        return spec
    table = _table(entry.get("thread_ceilings"))
    if threads in table:
        bandwidth, flops = table[threads]
        how = f"measured at {threads} thread{'s' if threads > 1 else ''} by `bwdiag calibrate`"
    elif threads > calibrated:
        return replace(spec, notes=spec.notes + (f"the trace ran {threads} torch threads on a host calibrated at "
                                                 f"{calibrated}: its {calibrated}-thread ceilings are used",))
    else:
        share = threads / calibrated
        one = table.get(1)
        flops = {k: min(v, one[1][k] * threads) if one and k in one[1] else v * share
                 for k, v in spec.vector_flops.items()}
        bandwidth = min(spec.memory_bandwidth, one[0] * threads) if one else spec.memory_bandwidth
        how = (f"scaled from the one-thread measurement × {threads}, capped by the {calibrated}-thread one" if one
               else f"compute scaled by {threads}/{calibrated} from the {calibrated}-thread measurement, bandwidth "
                    f"as measured (run `bwdiag calibrate` again to measure one thread)")
    note = (f"CPU ceilings at the trace's {threads} torch thread{'s' if threads > 1 else ''} (the calibration's "
            f"default is {calibrated}): {how}.")
    return replace(spec, memory_bandwidth=float(bandwidth),
                   vector_flops={**dict(spec.vector_flops), **{k: float(v) for k, v in flops.items()}},
                   notes=spec.notes + (note,))


def trace_threads(metadata) -> int | None:
    """The torch thread count a bwdiag capture recorded in the ranks' metadata (the largest), or None."""
    found = [t for m in metadata or () if isinstance(b := m.get("bwdiag"), Mapping)
             and _count(t := b.get("torch_threads"))]
    return max(found) if found else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _table(raw: Any) -> dict[int, tuple[float, dict[str, float]]]:
    """The usable rows of an entry's ``thread_ceilings`` (malformed ones are skipped)."""
    table: dict[int, tuple[float, dict[str, float]]] = {}
    for key, row in (raw or {}).items() if isinstance(raw, Mapping) else ():
        try:
            n, bandwidth = int(key), float(row["memory_bandwidth"])
            flops = {str(k): float(v) for k, v in dict(row["vector_flops"]).items()}
        except (TypeError, ValueError, KeyError):
            continue
        if n > 0 and bandwidth > 0 and all(v > 0 for v in flops.values()):
            table[n] = (bandwidth, flops)
    return table
