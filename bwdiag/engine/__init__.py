"""Where the map runs: this machine's process pool (``local``, the default) or a Ray cluster (``ray``).

Both engines run the same map (:func:`bwdiag.engine.local.map_rank`: load one rank file, diagnose
it alone, keep its :class:`~bwdiag.diagnose.digest.RankDigest`) and hand the results to the same
reduce (:func:`bwdiag.diagnose.reduce.reduce`), so the diagnosis does not depend on the engine.
A rank whose file cannot be read, or whose worker dies, comes back as a failure message naming the
file and the reason; the reduce reports it and diagnoses the rest.
"""

from __future__ import annotations

ENGINES = ("local", "ray")

__all__ = ["ENGINES"]
