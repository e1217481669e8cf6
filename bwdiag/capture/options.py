"""What to capture and when: the step schedule and the step marker, validated up front.

Both ``bwdiag run`` and ``bwdiag.profile(...)`` build a :class:`CaptureOptions`; every bad value is
rejected here, before the user's script or loop starts, with a message that names the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from bwdiag.errors import BwdiagError

#: Default schedule: skip 5 steps (compilation, autotuning, CUDA-graph recording, allocator growth),
#: warm the profiler up for 2, record 3. Steps after that run with no profiler at all.
DEFAULT_WAIT = 5
DEFAULT_WARMUP = 2
DEFAULT_ACTIVE = 3
#: How long rank 0 waits for the other ranks' traces under a plain torchrun (seconds).
DEFAULT_RANK_TIMEOUT_S = 300.0


class StepOn(str, Enum):
    """What marks the boundary between two steps."""

    AUTO = "auto"  # optimizer steps when the script trains, else top-level forwards
    OPTIMIZER = "optimizer"  # every optimizer.step() of any optimizer ends a step
    FORWARD = "forward"  # every call of the top-level nn.Module starts a step
    MODULE = "module"  # every call of the first module of class NAME starts a step
    LABEL = "label"  # every `record_function(NAME)` block starts a step
    TIME = "time"  # every SECONDS of wall time is a step
    MANUAL = "manual"  # only `prof.step()` (the context manager's default)


#: Accepted spellings, for help texts and error messages.
STEP_ON_HELP = (
    "auto | optimizer | forward | module:ClassName | label:NAME | time:SECONDS | manual"
)


@dataclass(frozen=True)
class StepMarker:
    """A parsed ``--step-on`` value: the kind and its argument (class name, label or seconds)."""

    kind: StepOn
    arg: str | None = None

    @property
    def seconds(self) -> float:
        """The step length of a ``time:SECONDS`` marker."""
        if self.kind is not StepOn.TIME or self.arg is None:
            raise ValueError("only a time marker has seconds")
        return float(self.arg)

    def __str__(self) -> str:
        return self.kind.value if self.arg is None else f"{self.kind.value}:{self.arg}"

    @classmethod
    def parse(cls, text: str) -> StepMarker:
        """Parse ``auto``, ``optimizer``, ``forward``, ``module:Name``, ``label:NAME``, ``time:S``."""
        if not isinstance(text, str):
            raise TypeError(f"step_on must be a str such as 'optimizer', got {type(text).__name__}")
        head, sep, arg = text.strip().partition(":")
        try:
            kind = StepOn(head.strip().lower())
        except ValueError:
            raise BwdiagError(
                f"unknown step marker {text!r}: use one of {STEP_ON_HELP}"
            ) from None
        needs_arg = kind in (StepOn.MODULE, StepOn.LABEL, StepOn.TIME)
        arg = arg.strip()
        if needs_arg and not arg:
            raise BwdiagError(
                f"step marker {kind.value!r} needs a value, e.g. "
                + {"module": "module:GPT", "label": "label:decode_step", "time": "time:0.5"}[kind.value]
            )
        if not needs_arg and sep:
            raise BwdiagError(f"step marker {kind.value!r} takes no value (got {text!r})")
        if kind is StepOn.TIME:
            try:
                seconds = float(arg)
            except ValueError:
                raise BwdiagError(f"time:SECONDS needs a number of seconds, got {arg!r}") from None
            if not seconds > 0 or seconds == float("inf"):
                raise BwdiagError(f"time:SECONDS needs a positive number of seconds, got {arg!r}")
        return cls(kind, arg if needs_arg else None)


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise BwdiagError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class CaptureOptions:
    """The capture schedule and what the profiler records.

    Steps ``0 .. wait-1`` run with no profiler; steps ``wait .. wait+warmup-1`` warm it up (not
    recorded); the next ``active`` steps are recorded; then the profiler is stopped and every later
    step pays nothing.
    """

    wait: int = DEFAULT_WAIT
    warmup: int = DEFAULT_WARMUP
    active: int = DEFAULT_ACTIVE
    step_on: StepMarker = StepMarker(StepOn.AUTO)
    with_stack: bool = False  # Python stacks: costly (about +70% step time on CPU); off by default
    with_modules: bool = True  # module annotations from bwdiag's own forward hooks, window only

    def __post_init__(self) -> None:
        _count("wait", self.wait, 0)
        _count("warmup", self.warmup, 0)
        _count("active", self.active, 1)
        if not isinstance(self.step_on, StepMarker):
            raise TypeError("step_on must be a StepMarker; build it with StepMarker.parse(text)")
        for name in ("with_stack", "with_modules"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def last_step(self) -> int:
        """Index of the last recorded step (0-based, counting from the first step of the run)."""
        return self.wait + self.warmup + self.active - 1

    def schedule_dict(self) -> dict[str, object]:
        """The schedule as written into each trace's ``bwdiag`` metadata."""
        return {
            "step_on": str(self.step_on),
            "wait": self.wait,
            "warmup": self.warmup,
            "active": self.active,
            "first_recorded_step": self.wait + self.warmup,
        }
