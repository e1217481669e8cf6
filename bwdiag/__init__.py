"""bwdiag: why is my PyTorch step slow, and what should I change?

Capture or read a torch.profiler trace, pin every kernel to the roofline ceiling that limits it,
and rank fixes by the time they would save.
"""

from bwdiag._version import __version__
from bwdiag.errors import BwdiagError

__all__ = ["BwdiagError", "Profile", "__version__", "profile"]


def __getattr__(name: str):
    # Lazy: `import bwdiag` stays cheap and never imports torch; `bwdiag.profile` loads capture.
    if name in ("profile", "Profile"):
        from bwdiag.capture import context as _context

        return getattr(_context, name)
    raise AttributeError(f"module 'bwdiag' has no attribute {name!r}")
