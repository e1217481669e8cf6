"""What a CPU fusion's compiled loop still computes: ns per element of each transcendental op in it.

A fused loop on a CPU thread reads its inputs, evaluates every op per element and writes its output,
one element after another: its time is the bytes it moves *plus* the arithmetic of its transcendental
ops (on a GPU the two overlap, and the larger bounds the loop). That arithmetic is Inductor's own
vectorised code, not ATen's kernel the eager trace timed, and the two differ by host: ``tanh`` cost
0.8 ns per element compiled against 1.3–1.7 eager on the AMD EPYC dev VM of 7 Dec 2026, and 5.5×
*more* than eager on an earlier one. ``bwdiag calibrate`` measures it on the host
(``device.calibration.values.compiled_pointwise``, :mod:`bwdiag.hardware.pointwise_probe`); without it
the eager ops' time beyond their bytes stands in (:func:`.chains.arithmetic_floor`).

Checked on ``benchmarks/savings.py``'s elementwise chain (9 ops over 2 M floats, ``sigmoid`` and
``tanh`` among them, one thread): 11.39 ms a step eager, 6.70 ms compiled. The trace's bandwidth gave
the fused loop 14.8 ms of bytes over its 4 runs, Inductor's ``sigmoid`` and ``tanh`` another 15.9 ms
(2 M × (0.40 + 1.50) ns each): 5.56 ms predicted against 4.69 realised (0.84). Before, the arithmetic
came from the eager ``tanh`` and only the larger of the two counted: 8.10 ms predicted, 5.26 realised
(0.65).

Ops that feed one another cost more than the probe's independent copies (:func:`chained_costs`): on the
Intel Xeon VM of 8 Dec 2026 the chain's ``sigmoid`` and ``tanh`` added 2.61 ns per element to its
compiled loop, against 1.91 for the two side by side and 2.46 chained. Priced side by side, and with its
bytes at the eager ops' average bandwidth (page faults and ``tanh``'s own time in it), the chain's
``whatif.py`` ratio was 0.61–0.82 over four runs on that VM; chained, at the best op's line
(:attr:`.chains.Run.memory_floor_us`), 1.07.

The figures are the plain script's speed, while the eager ops and the bytes' time are the recording's:
the fusion rule counts the arithmetic × :attr:`~.base.RuleContext.recorded_stretch` (the mean recorded
step ÷ the step timed without the profiler), the ratio by which the views turn the window back into the
plain step. On a 2-core Intel Xeon VM (7 Dec 2026) the chain's recorded steps ran 10.7–12.8 ms against
7.3–7.5 ms after the window (a first step of 15–20 ms each time): without the stretch the finding
predicted 3.2–3.5 ms a plain step, compiling saved 1.6 (``whatif.py`` ratio 0.44); with it 2.0–2.2 ms,
and the next run's ratio was 0.74.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: ``aten::tanh``, ``aten::tanh_``, ``aten::sigmoid.out`` … → the probe's op name.
_OP = re.compile(r"^aten::([a-z0-9]+?)_?(?:\.\w+)?$")


def loop_costs(ctx) -> tuple[Mapping[str, float], str]:
    """(ns per element per op, where the figures come from) at the thread count the trace ran with
    (:attr:`~.base.RuleContext.torch_threads`; unknown: the most the calibration measured, what a
    script gets by default), from the calibration's ``compiled_pointwise`` when the diagnosis used a
    calibration of the trace's host that measured it. A thread count not measured gets the one-thread
    figures ÷ its threads (a loop over a large tensor splits evenly). Without such a calibration: no
    figures (``{}``) — another host's Inductor can be 2× faster or 5× slower than this one's, and the
    trace's own eager ops are the better guess (:func:`.chains.loop_arithmetic` falls back on them)."""
    return _at_threads(ctx, "ns_per_element")


def chained_costs(ctx) -> Mapping[str, float]:
    """:func:`loop_costs`' figures for ops that feed one another in the loop (each op's output the
    next one's input: ``sigmoid → mul → tanh``), which cost more per element than the same ops side by
    side (:mod:`bwdiag.hardware.pointwise_probe`); ``{}`` for a calibration made before they were
    measured."""
    return _at_threads(ctx, "chained_ns_per_element")[0]


def _at_threads(ctx, key: str) -> tuple[Mapping[str, float], str]:
    values = (ctx.diagnosis.device.calibration or {}).get("values") or {}
    measured = values.get("compiled_pointwise")
    table = measured.get(key) if isinstance(measured, Mapping) else None
    if not _valid(table):
        return {}, UNCALIBRATED
    source = "Inductor's ns per element, measured on this host by bwdiag calibrate"
    threads = ctx.torch_threads or max(int(k) for k in table)
    if str(threads) in table:
        return {str(k): float(v) for k, v in table[str(threads)].items()}, f"{source}, {threads} thread{'s' * (threads > 1)}"
    one = table.get("1") or table[max(table, key=int)]
    return ({str(k): float(v) / threads for k, v in one.items()},
            f"{source}: its one-thread figures ÷ the trace's {threads} threads")


#: Where the arithmetic comes from without a calibration of the trace's host.
UNCALIBRATED = ("from the eager ops' time beyond their bytes; `bwdiag calibrate` on the trace's host measures "
                "Inductor's own loop")


def _valid(table) -> bool:
    """Whether ``table`` is ``{threads: {op: ns}}`` with thread counts as digit strings and ns ≥ 0."""
    return (isinstance(table, Mapping) and bool(table)
            and all(str(k).isdigit() and int(k) > 0 and isinstance(v, Mapping) and v
                    and all(_number(ns) for ns in v.values()) for k, v in table.items()))


#: Recorded ops the probe times under another name: every way a trace records dropout's random draw.
ALIASES = {"native_dropout": "dropout", "bernoulli": "dropout", "feature_dropout": "dropout",
           "alpha_dropout": "dropout", "feature_alpha_dropout": "dropout"}


def op_key(name: str) -> str:
    """The probe's name for a recorded op: ``aten::tanh_`` → ``tanh``, ``aten::bernoulli_`` →
    ``dropout`` (other names unchanged)."""
    m = _OP.match(str(name))
    if m:
        return ALIASES.get(m.group(1), m.group(1))
    return ALIASES.get(str(name).removeprefix("aten::").rstrip("_"), str(name))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
