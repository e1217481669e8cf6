"""bwdiag's version, in a leaf module any layer may import (``bwdiag/__init__`` sits at the top)."""

__version__ = "0.1.0"
