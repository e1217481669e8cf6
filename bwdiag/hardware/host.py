"""Which machine a trace was recorded on, and whether a calibration belongs to that machine.

A CPU-only trace is placed against measured ceilings only when they were measured on the host that
recorded it. What a trace says about its host:

* ``host_name`` — written by Kineto itself (torch >= 2.4 or so; older traces have none);
* ``bwdiag.host`` — ``{hostname, cpu, cores}``, written by ``bwdiag run`` / ``bwdiag.profile``;
* ``bwdiag.device`` — ``{kind: "cpu", name: <CPU model>, cores}``, written by older bwdiag captures.

A calibration file stores the same facts of the host it was measured on (``host``; files written
before that field existed are taken as this machine's, named by their CPU key). The rule
(:func:`host_mismatch`): every fact both sides record must agree (host name, CPU model, core count),
and the trace must record at least one; a trace that records none is never taken as local.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class HostFacts:
    """What is known of one machine; ``None`` where unknown."""

    hostname: str | None = None
    cpu: str | None = None  # CPU model name as /proc/cpuinfo spells it
    cores: int | None = None  # logical cores
    source: str = ""  # where the facts were read ("trace host_name", "bwdiag capture" ...)

    @property
    def known(self) -> bool:
        return bool(self.hostname or self.cpu)

    def to_dict(self) -> dict[str, Any]:
        return {"hostname": self.hostname, "cpu": self.cpu, "cores": self.cores}

    def describe(self) -> str:
        parts = []
        if self.hostname:
            parts.append(f"host {self.hostname!r}")
        if self.cpu:
            parts.append(f"CPU {self.cpu!r}" + (f" ({self.cores} cores)" if self.cores else ""))
        return ", ".join(parts) or "no host facts"


#: A recording host whose 1-minute load average exceeds its cores by this much was oversubscribed.
BUSY_HOST_EXCESS = 1.0


def oversubscribed(load: Mapping[str, Any] | None) -> bool:
    """``load`` (``{load1, cores}``, as a capture records it) says more runnable work than cores: the
    recorded times include waiting for a CPU."""
    return load is not None and load["load1"] > load["cores"] + BUSY_HOST_EXCESS


def this_host() -> HostFacts:
    """The machine running bwdiag now."""
    record = host_record()
    return HostFacts(record["hostname"], record["cpu"], record["cores"], "this machine")


def _hostname() -> str | None:
    try:
        return socket.gethostname() or None
    except OSError:
        return None


def cpu_name() -> str:
    """This machine's CPU model, as ``/proc/cpuinfo`` names it (elsewhere what ``platform`` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: platform.processor() below
    return platform.processor() or platform.machine() or "unknown CPU"


def host_record() -> dict[str, Any]:
    """``{hostname, cpu, cores}`` of this machine, as capture and calibration files store it."""
    return {"hostname": _hostname(), "cpu": cpu_name(), "cores": os.cpu_count()}


def trace_host(metadata: Mapping[str, Any]) -> HostFacts:
    """The host facts a trace's top-level metadata records (``known`` is False when none)."""
    hostname = _text(metadata.get("host_name"))
    cpu = None
    cores = None
    sources = ["trace host_name"] if hostname else []
    meta = metadata.get("bwdiag")
    if isinstance(meta, dict):
        host = meta.get("host")
        if isinstance(host, dict):
            hostname = hostname or _text(host.get("hostname"))
            cpu = _text(host.get("cpu"))
            cores = _count(host.get("cores"))
            sources.append("bwdiag capture")
        device = meta.get("device")
        if cpu is None and isinstance(device, dict) and device.get("kind") == "cpu":
            cpu = _text(device.get("name"))
            cores = _count(device.get("cores"))
            sources.append("bwdiag capture (device)")
    return HostFacts(hostname, cpu, cores, " + ".join(sources))


def calibration_host(record: Mapping[str, Any], cpu_name: str, cores: int | None) -> HostFacts:
    """The host a calibration file was measured on: its ``host`` field, or (older files) the CPU
    its cache key names, on this machine."""
    host = record.get("host")
    if isinstance(host, dict):
        return HostFacts(_text(host.get("hostname")), _text(host.get("cpu")) or cpu_name,
                         _count(host.get("cores")) or cores, "calibration file")
    return HostFacts(None, cpu_name, cores, "calibration cache key")


def host_mismatch(trace: HostFacts, calibration: HostFacts) -> str | None:
    """Why a calibration of ``calibration`` does not describe the host that recorded ``trace``;
    ``None`` when every fact both record agrees (and the trace records at least one)."""
    if not trace.known:
        return "the trace records no host name or CPU, so it may come from another machine"
    if trace.hostname and calibration.hostname and not _same_host(trace.hostname, calibration.hostname):
        return (f"the trace was recorded on host {trace.hostname!r}, the calibration measured on "
                f"{calibration.hostname!r}")
    if trace.cpu and calibration.cpu and _norm(trace.cpu) != _norm(calibration.cpu):
        return f"the trace's CPU is {trace.cpu!r}, the calibration's {calibration.cpu!r}"
    if trace.cores and calibration.cores and trace.cores != calibration.cores:
        return f"the trace's host has {trace.cores} cores, the calibration's {calibration.cores}"
    if trace.hostname and not calibration.hostname and not trace.cpu:
        # An older calibration file names its CPU only: then it is this machine's, whose name we know.
        here = _hostname()
        if here and not _same_host(trace.hostname, here):
            return f"the trace was recorded on host {trace.hostname!r}, this machine is {here!r}"
    return None


def _same_host(a: str, b: str) -> bool:
    """Host names equal, ignoring case and the domain (``node1`` is ``node1.cluster.local``)."""
    return a.strip().lower().split(".")[0] == b.strip().lower().split(".")[0]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
