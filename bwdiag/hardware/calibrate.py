"""``bwdiag calibrate``: measure this machine's ceilings and cache them.

Memory bandwidth: STREAM-style copy (``a = b``) and triad (``a = b + s*c``) on arrays far larger
than the last-level cache, best of several repetitions, bytes counted the STREAM way (copy moves
2 arrays, triad 3; no write-allocate traffic). Compute: square GEMMs (2·n³ FLOP) per dtype, best of
several repetitions after a warm-up. On CUDA the timing uses CUDA events around the work, with the
device synchronised before and after. CPU also: what ``torch.profiler`` adds per recorded op
(``profiler_op_us``: tiny ops timed with and without it, interleaved; the host-overhead finding names
that share of the gaps with it), and what a ``torch.compile``'d call still costs (``compiled_call``:
stacks of tiny transformer blocks compiled, inference and training, timed per call
(:mod:`bwdiag.hardware.compiled_probe`); what the host-overhead finding's saving keeps of a compiled step), and what each transcendental op costs per
element inside an Inductor loop (``compiled_pointwise``, :mod:`bwdiag.hardware.pointwise_probe`; the
arithmetic a CPU fusion finding's fused loop still pays).

Results are cached as JSON under ``$XDG_CACHE_HOME/bwdiag/`` (default ``~/.cache/bwdiag``), keyed by
the device's identity (CPU model and logical core count; GPU name and memory size), and read back
by :func:`read_calibration` (spec_source "calibrated"). Each file also records the host it was
measured on (``host``: host name, CPU model, cores), so an analysis can tell whether a trace was
recorded on that host (:mod:`bwdiag.hardware.host`).

An analysis reads the file once, into a :class:`CalibrationSnapshot` (values, path, modification
time, measurement time, host), and uses that snapshot for the whole run: a ``bwdiag calibrate``
rewriting the file meanwhile cannot change the result, and ``diagnosis.json`` says which
calibration was used (``device.calibration``).
"""

from __future__ import annotations

import contextlib

import json
import os
import platform
import re
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from bwdiag.cache import cache_dir
from bwdiag.errors import BwdiagError
from bwdiag.hardware.host import HostFacts, calibration_host, host_record
from bwdiag.hardware.lookup import gpu_spec
from bwdiag.hardware.compiled_probe import compiled_call
from bwdiag.hardware.pointwise_probe import compiled_pointwise
from bwdiag.hardware.spec import GIB, DeviceSpec, SpecSource, spec_from_entry
from bwdiag.hardware.threads import thread_ceilings

CACHE_SCHEMA = "bwdiag/calibration@1"

#: STREAM arrays (float32 elements). The STREAM rule is >= 4x the last-level cache; 64 MiB per
#: array clears the LLC of most desktop/server parts (quick mode: 16 MiB, still 2x this host's 8 MiB
#: L3 and ~3x once both arrays of a copy count).
CPU_STREAM_ELEMENTS = {False: 16 * 2**20, True: 4 * 2**20}
CPU_GEMM_N = {False: 1024, True: 512}
REPS = {False: 6, True: 3}

#: CPU bf16 counts as its own ceiling only if its GEMM runs at least at this fraction of fp32;
#: slower means no native bf16 path (bf16 is emulated), and bf16 ops are held to the fp32 ceiling.
CPU_BF16_MIN_FRACTION = 0.5
CPU_BF16_PROBE_N = 256

#: CUDA: arrays of up to 1 GiB each (never more than 1/16 of device memory); GEMM sizes big enough
#: to reach the tensor-core roof.
CUDA_STREAM_MAX_BYTES = {False: GIB, True: GIB // 4}

#: The profiler's recording cost per op (CPU): tiny ``tanh`` calls timed plain and under
#: ``torch.profiler`` (``record_shapes=True``), interleaved rounds, median of the differences per op.
PROFILER_PROBE_OPS = {False: 2000, True: 2000}
PROFILER_PROBE_ROUNDS = {False: 9, True: 5}
CUDA_GEMM_N = {False: 8192, True: 4096}



class CalibrationError(BwdiagError):
    """A calibration that cannot run (no such device) or a cache file that cannot be used."""


@dataclass(frozen=True)
class DeviceIdentity:
    """What a calibration belongs to."""

    kind: str  # "cpu" | "cuda"
    key: str  # e.g. "AMD EPYC x2" or "NVIDIA H100 80GB HBM3 79.2GiB"
    name: str
    vendor: str
    cores: int | None = None

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", f"{self.kind}-{self.key}".lower()).strip("-")


@dataclass(frozen=True)
class CalibrationSnapshot:
    """One calibration, read once: what it measured, where it was read, when, and on which host.

    ``origin`` is "local" for this machine's cache file, "trace" for the copy a ``bwdiag`` capture
    embedded in the trace (``bwdiag.calibrated``) on the host that recorded it.
    """

    path: str
    measured_at: str | None  # the file's "created" (UTC, ISO 8601)
    file_mtime: float | None  # the file's modification time when it was read (None: from a trace)
    host: HostFacts
    origin: str  # "local" | "trace"
    quick: bool | None
    torch_version: str | None
    entry: Mapping[str, Any] = field(repr=False)
    spec: DeviceSpec = field(repr=False)  # the ceilings (without a link back to this snapshot)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry", MappingProxyType(dict(self.entry)))

    def to_record(self) -> dict[str, Any]:
        """The ``device.calibration`` object of ``diagnosis.json``."""
        spec = self.spec
        mtime = (datetime.fromtimestamp(self.file_mtime, timezone.utc).isoformat(timespec="seconds")
                 if self.file_mtime is not None else None)
        return {
            "path": self.path,
            "origin": self.origin,
            "measured_at": self.measured_at,
            "file_mtime": mtime,
            "host": self.host.to_dict(),
            "quick": self.quick,
            "torch_version": self.torch_version,
            "values": {
                "memory_bandwidth": float(spec.memory_bandwidth),
                "vector_flops": {k: float(v) for k, v in spec.vector_flops.items()},
                "tensor_flops": {k: float(v) for k, v in spec.tensor_flops.items()},
                **({"profiler_op_us": float(op_us)} if isinstance(op_us := self.entry.get("profiler_op_us"),
                                                                  (int, float)) else {}),
                **({"compiled_call": _plain(compiled)} if isinstance(compiled := self.entry.get("compiled_call"),
                                                                    Mapping) else {}),
                **({"thread_ceilings": _plain(by_threads)}
                   if isinstance(by_threads := self.entry.get("thread_ceilings"), Mapping) else {}),
                **({"compiled_pointwise": _plain(pointwise)}
                   if isinstance(pointwise := self.entry.get("compiled_pointwise"), Mapping) else {}),
            },
        }

    def device_spec(self) -> DeviceSpec:
        """The ceilings, carrying this snapshot (``diagnosis.json`` records it from there)."""
        return replace(self.spec, calibration=self)

    def same_measurement(self, other: CalibrationSnapshot) -> bool:
        """Whether two snapshots hold the same measurement (same time and ceilings)."""
        return self.measured_at == other.measured_at and dict(self.entry) == dict(other.entry)


def cache_path(identity: DeviceIdentity) -> Path:
    """Where the calibration of ``identity`` is cached."""
    return cache_dir() / f"calibration-{identity.slug}.json"


def device_identity(device: str = "auto") -> DeviceIdentity:
    """The identity of ``device`` ("auto", "cpu", "cuda" or "cuda:N") on this machine."""
    kind, index = _pick(device)
    if kind == "cpu":
        model, vendor = _cpu_model()
        cores = os.cpu_count() or 1
        return DeviceIdentity("cpu", f"{model} x{cores}", f"{model} ({cores} cores)", vendor, cores)
    import torch

    props = torch.cuda.get_device_properties(index)
    key = f"{props.name} {props.total_memory / GIB:.1f}GiB"
    return DeviceIdentity("cuda", key, props.name, "nvidia" if torch.version.hip is None else "amd",
                          props.multi_processor_count)


def calibrate(device: str = "auto", *, quick: bool = False, quiet: Any = None) -> DeviceSpec:
    """Measure the ceilings of ``device`` ("auto" = CUDA when available, else CPU), cache them and
    return them as a ``DeviceSpec`` with spec_source "calibrated". ``quick=True`` takes ~3 s on a
    small CPU (smaller arrays and GEMMs, fewer repetitions)."""
    import torch

    kind, index = _pick(device)
    identity = device_identity(device)
    started = time.perf_counter()
    if kind == "cpu":
        measured = _measure_cpu(quick, quiet)
    else:
        measured = _measure_cuda(index, quick)
    measured["seconds"] = round(time.perf_counter() - started, 3)
    entry = _entry(identity, measured, quick, torch.__version__)
    record = {
        "schema": CACHE_SCHEMA,
        "device_key": identity.key,
        "kind": identity.kind,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "quick": quick,
        "host": host_record(),
        "measurements": measured,
        "entry": entry,
    }
    path = cache_path(identity)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", "utf-8")
        tmp.replace(path)
    except OSError as err:
        raise CalibrationError(f"{path}: cannot write the calibration cache: {err.strerror}") from err
    return _spec(entry, identity)


def load_calibration(device: str = "cpu") -> DeviceSpec | None:
    """The cached calibration of ``device`` on this machine, or ``None`` when there is none.

    A cache file that exists but cannot be used raises ``CalibrationError`` naming the file.
    """
    snapshot = read_calibration(device)
    return snapshot.spec if snapshot is not None else None


def read_calibration(device: str = "cpu") -> CalibrationSnapshot | None:
    """Read the cached calibration of ``device`` once: ``None`` when there is none.

    The file is opened once; its contents and modification time come from that one open file, so
    a concurrent ``bwdiag calibrate`` (which replaces the file atomically) yields either the old
    calibration or the new one, never a mix. A file that exists but cannot be used raises
    ``CalibrationError`` naming the file.
    """
    identity = device_identity(device)
    path = cache_path(identity)
    try:
        with open(path, "rb") as fh:
            mtime = os.fstat(fh.fileno()).st_mtime
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CalibrationError(
            f"{path}: unreadable calibration cache ({err.strerror or err}); delete it or run "
            "`bwdiag calibrate` again"
        ) from err
    try:
        record = json.loads(data.decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        if record.get("schema") != CACHE_SCHEMA or record.get("device_key") != identity.key:
            raise ValueError("written for another device or schema")
        spec = _spec(record["entry"], identity)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise CalibrationError(
            f"{path}: unusable calibration cache ({err}); delete it or run `bwdiag calibrate` again"
        ) from err
    snapshot = CalibrationSnapshot(
        path=str(path),
        measured_at=_str_or_none(record.get("created")),
        file_mtime=mtime,
        host=calibration_host(record, _cpu_model()[0] if identity.kind == "cpu" else identity.name,
                              identity.cores if identity.kind == "cpu" else None),
        origin="local",
        quick=record.get("quick") if isinstance(record.get("quick"), bool) else None,
        torch_version=_str_or_none(record.get("torch_version")),
        entry=record["entry"],
        spec=spec,
    )
    return snapshot


def embedded_calibration(meta: Mapping[str, Any]) -> CalibrationSnapshot | None:
    """The CPU calibration a ``bwdiag`` capture embedded in its trace (``bwdiag.calibrated``): the
    recording host's own measurement. ``None`` when the trace holds none or it is unusable."""
    found = meta.get("calibrated") if isinstance(meta, Mapping) else None
    device = meta.get("device") if isinstance(meta, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(found.get("entry"), Mapping):
        return None
    if not isinstance(device, Mapping) or device.get("kind") != "cpu":
        return None  # a GPU calibration: GPU traces use the table (see match.py)
    entry = found["entry"]
    if entry.get("kind", "cpu") != "cpu":
        return None
    try:
        spec = spec_from_entry(entry, SpecSource.CALIBRATED)
    except (ValueError, KeyError, TypeError):
        return None
    host = found.get("host") if isinstance(found.get("host"), Mapping) else meta.get("host")
    cpu = _str_or_none(device.get("name"))
    cores = device.get("cores") if isinstance(device.get("cores"), int) else None
    snapshot = CalibrationSnapshot(
        path=_str_or_none(found.get("file")) or "(embedded in the trace)",
        measured_at=_str_or_none(found.get("created")),
        file_mtime=None,
        host=calibration_host({"host": host} if isinstance(host, Mapping) else {}, cpu or "", cores),
        origin="trace",
        quick=found.get("quick") if isinstance(found.get("quick"), bool) else None,
        torch_version=_str_or_none(found.get("torch_version")),
        entry=entry,
        spec=replace(spec, matched_from=cpu),
    )
    return snapshot


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- measurement -----------------------------------------------------------------------------


def _measure_cpu(quick: bool, quiet: Any = None) -> dict[str, Any]:
    import torch

    threads = torch.get_num_threads()
    result: dict[str, Any] = {"threads": threads, **_cpu_ceilings(quick)}
    if threads > 1:  # a script run with torch.set_num_threads(1) (or OMP_NUM_THREADS=1) meets these
        torch.set_num_threads(1)
        try:
            result["one_thread"] = _cpu_ceilings(quick)
        finally:
            torch.set_num_threads(threads)
    result["profiler_op_us"] = _profiler_op_us(quick, quiet)
    result["compiled_call"] = compiled_call(quick)
    result["compiled_pointwise"] = compiled_pointwise(quick)
    return result


def _cpu_ceilings(quick: bool) -> dict[str, Any]:
    """STREAM copy/triad and GEMM FLOP/s per dtype at the current torch thread count."""
    import torch

    reps = REPS[quick]
    n = CPU_STREAM_ELEMENTS[quick]
    a = torch.empty(n, dtype=torch.float32)
    b = torch.rand(n, dtype=torch.float32)
    c = torch.rand(n, dtype=torch.float32)
    a.copy_(b)  # touch every page before timing
    copy_s = _best_cpu(lambda: a.copy_(b), reps)
    triad_s = _best_cpu(lambda: torch.add(b, c, alpha=3.0, out=a), reps)
    del a, b, c
    item = 4
    result: dict[str, Any] = {
        "stream_elements": n,
        "copy_bytes_per_s": 2 * n * item / copy_s,
        "triad_bytes_per_s": 3 * n * item / triad_s,
    }
    size = CPU_GEMM_N[quick]
    gemm = {}
    for name, dtype in (("fp32", torch.float32), ("fp64", torch.float64)):
        gemm[name] = _cpu_gemm(size, dtype, reps)
    probe = _cpu_gemm(CPU_BF16_PROBE_N, torch.bfloat16, 2)
    fp32_probe = _cpu_gemm(CPU_BF16_PROBE_N, torch.float32, 2)
    result["bf16_probe_flops_per_s"] = probe
    if probe >= CPU_BF16_MIN_FRACTION * fp32_probe:
        gemm["bf16"] = _cpu_gemm(size, torch.bfloat16, reps)
    result["gemm_n"] = size
    result["gemm_flops_per_s"] = gemm
    return result


def _plain(value: Mapping) -> dict:
    """A read-only mapping (nested) as plain dicts, for JSON."""
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in value.items()}


def _profiler_op_us(quick: bool, quiet: Any = None) -> float | None:
    """µs the profiler adds per recorded op on this host: ``PROFILER_PROBE_OPS`` ``tanh`` calls on an
    8-element tensor, plain and under ``torch.profiler`` (CPU, ``record_shapes=True``, as ``bwdiag run``
    records), in interleaved rounds; (the fastest profiled round − the fastest plain one) ÷ ops — the fastest
    of each, as for the ceilings, since a loaded host only ever adds time. Only the loop is timed,
    not the profiler's start and stop. ``None`` when a profiler is already running in this process
    (a second one cannot start). ``quiet``: a context manager around each profiler session (the CLI's
    keeps Kineto's own start/stop lines off stderr)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if torch.autograd._profiler_enabled():
        return None
    n, x = PROFILER_PROBE_OPS[quick], torch.rand(8)

    def loop() -> float:
        start = time.perf_counter()
        for _ in range(n):
            torch.tanh(x)
        return time.perf_counter() - start

    def profiled() -> float:
        with (quiet or contextlib.nullcontext)(), profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            return loop()

    loop(), profiled()  # warm-up: the first profiler session pays its set-up inside the loop
    plain, traced = [], []
    for _ in range(PROFILER_PROBE_ROUNDS[quick]):
        plain.append(loop())
        traced.append(profiled())
    return round(max(0.0, (min(traced) - min(plain)) / n * 1e6), 3)


def _cpu_gemm(n: int, dtype: Any, reps: int) -> float:
    import torch

    x = torch.rand(n, n).to(dtype)
    y = torch.rand(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    torch.mm(x, y, out=out)  # warm-up: thread pool, packing buffers
    return 2.0 * n**3 / _best_cpu(lambda: torch.mm(x, y, out=out), reps)


def _best_cpu(fn: Any, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _measure_cuda(index: int, quick: bool) -> dict[str, Any]:
    import torch

    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    reps = REPS[quick]
    total = torch.cuda.get_device_properties(index).total_memory
    nbytes = min(CUDA_STREAM_MAX_BYTES[quick], total // 16)
    n = nbytes // 4
    a = torch.empty(n, dtype=torch.float32, device=dev)
    b = torch.rand(n, dtype=torch.float32, device=dev)
    c = torch.rand(n, dtype=torch.float32, device=dev)
    a.copy_(b)
    copy_s = _best_cuda(lambda: a.copy_(b), reps)
    triad_s = _best_cuda(lambda: torch.add(b, c, alpha=3.0, out=a), reps)
    del a, b, c
    torch.cuda.empty_cache()
    result: dict[str, Any] = {
        "stream_elements": n,
        "copy_bytes_per_s": 2 * n * 4 / copy_s,
        "triad_bytes_per_s": 3 * n * 4 / triad_s,
    }
    size = CUDA_GEMM_N[quick]
    gemm: dict[str, float] = {}
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in (
            ("fp32", torch.float32, False),
            ("tf32", torch.float32, True),
            ("bf16", torch.bfloat16, False),
            ("fp16", torch.float16, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            x = torch.rand(size, size, device=dev).to(dtype)
            y = torch.rand(size, size, device=dev).to(dtype)
            out = torch.empty(size, size, device=dev, dtype=dtype)
            torch.mm(x, y, out=out)  # warm-up: cuBLAS handle, heuristics, clocks
            gemm[name] = 2.0 * size**3 / _best_cuda(lambda: torch.mm(x, y, out=out), reps)
            del x, y, out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    result["gemm_n"] = size
    result["gemm_flops_per_s"] = gemm
    return result


def _best_cuda(fn: Any, reps: int) -> float:
    import torch

    best = float("inf")
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)  # ms -> s
    return best


# -- results ---------------------------------------------------------------------------------


def _entry(identity: DeviceIdentity, measured: dict[str, Any], quick: bool, torch_version: str
           ) -> dict[str, Any]:
    """A devices.json-style entry of the measured ceilings (what the cache stores)."""
    gemm = measured["gemm_flops_per_s"]
    bandwidth = max(measured["copy_bytes_per_s"], measured["triad_bytes_per_s"])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    how = (
        f"bwdiag calibrate{' --quick' if quick else ''} on {when} with torch {torch_version}: "
        f"STREAM copy {measured['copy_bytes_per_s'] / 1e9:.1f} GB/s, triad "
        f"{measured['triad_bytes_per_s'] / 1e9:.1f} GB/s ({measured['stream_elements']} float32 "
        f"per array); GEMM n={measured['gemm_n']}"
    )
    if identity.kind == "cpu":
        notes = [
            "Measured ceilings: GEMM FLOP/s is what torch reaches on this host "
            f"({measured['threads']} threads), not a datasheet peak.",
        ]
        if "bf16" not in gemm:
            notes.append(
                f"bf16 GEMM ran at {measured['bf16_probe_flops_per_s'] / 1e9:.2f} GFLOP/s (no "
                "native bf16 path); bf16 ops are held to the fp32 ceiling."
            )
        return {
            "name": f"{identity.name}, calibrated",
            "kind": "cpu",
            "threads": measured["threads"],
            "thread_ceilings": thread_ceilings(measured),
            "profiler_op_us": measured.get("profiler_op_us"),
            "compiled_call": measured.get("compiled_call"),
            "compiled_pointwise": measured.get("compiled_pointwise"),
            "vendor": identity.vendor,
            "sm_count": identity.cores,
            "memory_gb": None,
            "tensor_flops": {},
            "vector_flops": dict(gemm),
            "memory_bandwidth": bandwidth,
            "interconnect_bandwidth": None,
            "notes": notes,
            "sources": [how],
        }
    table = gpu_spec({"name": identity.name}, [])
    tensor = dict(table.tensor_flops)
    vector = dict(table.vector_flops)
    vector["fp32"] = gemm["fp32"]
    for dtype in ("tf32", "bf16", "fp16"):
        tensor[dtype] = gemm[dtype]
    return {
        "name": f"{identity.name}, calibrated",
        "kind": "gpu",
        "vendor": identity.vendor,
        "sm_count": identity.cores,
        "memory_gb": table.memory_bytes / GIB if table.memory_bytes else None,
        "compute_capability": list(table.compute_capability) if table.compute_capability else None,
        "tensor_flops": tensor,
        "vector_flops": vector,
        "memory_bandwidth": bandwidth,
        "interconnect_bandwidth": table.interconnect_bandwidth,
        "interconnect": table.interconnect,
        "notes": [
            "Measured: memory bandwidth, fp32 (vector) and tf32/bf16/fp16 (tensor) GEMM FLOP/s; "
            f"the other ceilings come from {table.name} (spec_source "
            f"{table.spec_source.value!r}).",
        ],
        "sources": [how, *table.sources],
    }


def _spec(entry: dict[str, Any], identity: DeviceIdentity) -> DeviceSpec:
    spec = spec_from_entry(entry, SpecSource.CALIBRATED)
    return replace(spec, matched_from=identity.name)


def _pick(device: str) -> tuple[str, int]:
    wanted = (device or "auto").strip().lower()
    if wanted == "cpu":
        return "cpu", 0
    if wanted == "auto" or wanted.startswith("cuda"):
        import torch

        available = torch.cuda.is_available()
        if wanted == "auto":
            return ("cuda", torch.cuda.current_device()) if available else ("cpu", 0)
        if not available:
            raise CalibrationError("--device cuda: no CUDA/ROCm GPU is visible to torch here")
        index = int(wanted.split(":", 1)[1]) if ":" in wanted else torch.cuda.current_device()
        if not 0 <= index < torch.cuda.device_count():
            raise CalibrationError(
                f"--device {device}: no such GPU (torch sees {torch.cuda.device_count()})"
            )
        return "cuda", index
    raise CalibrationError(f"unknown device {device!r}; choose auto, cpu, cuda or cuda:N")


def _cpu_model() -> tuple[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text("utf-8", errors="replace")
    except OSError:
        text = ""  # not Linux: platform.processor() below names the CPU
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name", "")
    vendor = fields.get("vendor_id", "")
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor, vendor.lower() or "unknown")
    return model, vendor


#: The calibration of each device read in the current analysis (:func:`one_reading`), else empty.
_RUN_READINGS: list[dict[str, "CalibrationSnapshot | None"]] = []


@contextlib.contextmanager
def one_reading():
    """Within: :func:`run_calibration` reads each device's calibration once and hands that same
    snapshot to every rank and to the job (the map and the reduce of one analysis), so a
    ``bwdiag calibrate`` finishing mid-run cannot give two ranks two ceilings. Forked workers inherit
    what was read before they forked."""
    _RUN_READINGS.append({})
    try:
        yield
    finally:
        _RUN_READINGS.pop()


def readings_of_this_run(devices: tuple[str, ...] = ("cpu",)) -> dict[str, "CalibrationSnapshot | None"]:
    """The calibration of each of ``devices`` as this analysis reads it (:func:`run_calibration`), to
    hand to workers that do not share this process's memory or files (Ray's: another node, or a
    worker started with another environment, would read another cache)."""
    return {device: run_calibration(device) for device in devices}


@contextlib.contextmanager
def given_readings(readings: dict[str, "CalibrationSnapshot | None"] | None):
    """Within: :func:`run_calibration` returns ``readings`` (the driver's, :func:`readings_of_this_run`)
    for the devices they hold, and reads the others once, as in :func:`one_reading`."""
    _RUN_READINGS.append(dict(readings or {}))
    try:
        yield
    finally:
        _RUN_READINGS.pop()


def run_calibration(device: str = "cpu") -> "CalibrationSnapshot | None":
    """:func:`read_calibration`, read once per :func:`one_reading` (every call outside one reads)."""
    if not _RUN_READINGS:
        return read_calibration(device)
    readings = _RUN_READINGS[-1]
    if device not in readings:
        readings[device] = read_calibration(device)
    return readings[device]
