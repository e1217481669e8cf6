"""bwdiag: why is my PyTorch step slow, and what should I change?

Capture or read a torch.profiler trace, pin every kernel to the roofline ceiling that limits it,
and rank fixes by the time they would save.
"""

__version__ = "0.1.0"

from bwdiag.errors import BwdiagError

__all__ = ["BwdiagError", "__version__"]
