"""Name tests over whole columns, evaluated once per distinct name.

Traces repeat a few thousand op and kernel names over hundreds of thousands of rows, and kernel
names can be kilobytes of C++ template text: a regex per row is the slow way to ask.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd


def name_matches(names: pd.Series, pattern: re.Pattern, *, anchored: bool = False) -> np.ndarray:
    """Per row: whether ``pattern`` is found in the name (``match`` at its start when ``anchored``).
    Missing names do not match."""
    if names.empty:
        return np.zeros(0, dtype=bool)
    test = pattern.match if anchored else pattern.search
    codes, uniques = pd.factorize(names, use_na_sentinel=True)
    hits = np.fromiter((bool(test(n)) if isinstance(n, str) else False for n in uniques), dtype=bool,
                       count=len(uniques))
    return np.where(codes >= 0, hits[np.maximum(codes, 0)], False)
