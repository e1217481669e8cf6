"""How far two runs' median steps may differ by chance: the diff's noise rule.

The rule reads each run's ordinary steps (those not over ``ABNORMAL_RATIO`` × the run's step time: a
checkpoint or a recompilation is an event, not noise), in the order they ran.

- **Few steps** (under ``MIN_STEPS_FOR_STATS`` on either side): half the larger range,
  ``max(max − min) / 2``. Nothing finer can be told from three or six steps.
- **Enough steps**: the larger of
  - the *scatter* bound, ``Z × √(se_b² + se_a²)``, ``se`` being the standard error of a median
    (``1.2533 × σ / √n``, σ estimated robustly as ``1.4826 × MAD``), and
  - the *drift* bound: on each side, how far the median of the second half of its steps sits from
    the median of the first half — a run that drifts by that much within itself may sit that far
    from another run for the same reason (a busy host, a clock that changed).

Half the range grows with the number of steps (thirty steps reach further into the tails than
three) while the uncertainty of a median shrinks with it: on thirty CPU steps varying ±8 %, half the
range called a steady 7.8 % speed-up "no change". One capture cannot show the drift *between* runs
beyond what it shows within itself; interleaved runs (``benchmarks/whatif.py``) measure that.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from bwdiag.diagnose.steps import ABNORMAL_RATIO

#: Ordinary steps each side needs before the statistical rule replaces half the range.
MIN_STEPS_FOR_STATS = 8
#: Standard errors of the difference of medians a change must exceed (≈ 0.3 % two-sided if normal).
Z = 3.0
#: Standard deviation of a normal distribution per median absolute deviation.
SIGMA_PER_MAD = 1.4826
#: Standard error of a median per σ/√n (√(π/2), normal data).
SE_MEDIAN_PER_SIGMA = math.sqrt(math.pi / 2)

RULE = (f"with at least {MIN_STEPS_FOR_STATS} ordinary steps on each side, beyond the noise when |after median - "
        f"before median| exceeds both {Z:g} standard errors of the difference of the medians (from each side's "
        "median absolute deviation) and the drift either run shows within itself (the median of its second half "
        "of steps against its first half); with fewer steps, when it exceeds half the larger range (max - min) "
        f"of the two runs' steps; steps over {ABNORMAL_RATIO:g}x their run's median (events, not noise) are left out")


def ordinary(durations: Sequence[float], step_us: float | None = None) -> list[float]:
    """The steps that are not events (over ``ABNORMAL_RATIO`` × ``step_us``, the run's median by
    default), in their order; all of them when every one would be left out."""
    durations = [float(x) for x in durations]
    if not durations:
        return []
    ref = step_us if step_us else statistics.median(durations)
    return [x for x in durations if x <= ABNORMAL_RATIO * ref] or durations


def half_range(steps: Sequence[float]) -> float:
    return (max(steps) - min(steps)) / 2.0 if steps else 0.0


def median_se(steps: Sequence[float]) -> float:
    """Standard error of the median of ``steps`` (robust σ from the median absolute deviation)."""
    med = statistics.median(steps)
    mad = statistics.median(abs(x - med) for x in steps)
    return SE_MEDIAN_PER_SIGMA * SIGMA_PER_MAD * mad / math.sqrt(len(steps))


def drift(steps: Sequence[float]) -> float:
    """|median of the second half − median of the first half| of the steps in their order (the
    middle step of an odd count left out)."""
    half = len(steps) // 2
    return abs(statistics.median(steps[len(steps) - half:]) - statistics.median(steps[:half]))


def noise(before: Sequence[float], after: Sequence[float]) -> dict[str, float | str]:
    """The noise of a change between two runs' ordinary steps (see the module docstring):
    ``noise_us``, the ``method`` that gave it (``"half range"`` or ``"median error"`` or ``"drift"``)
    and the bounds it was taken from."""
    if min(len(before), len(after)) < MIN_STEPS_FOR_STATS:
        return {"noise_us": max(half_range(before), half_range(after)), "method": "half range"}
    scatter = Z * math.hypot(median_se(before), median_se(after))
    run_drift = max(drift(before), drift(after))
    return {"noise_us": max(scatter, run_drift), "method": "median error" if scatter >= run_drift else "drift",
            "scatter_us": scatter, "drift_us": run_drift}
