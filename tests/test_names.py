"""Name tests over columns, evaluated once per distinct name, agree with a per-row regex."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwdiag.diagnose.names import name_matches


def test_name_matches_agrees_with_a_row_by_row_search():
    names = pd.Series(["cudaDeviceSynchronize", None, "aten::mm", "cudaStreamSynchronize", float("nan"),
                       "aten::mm", "x cudaDeviceSynchronize"], dtype=object)
    pattern = re.compile(r"(?:Device|Stream)Synchronize")
    expect = [isinstance(n, str) and bool(pattern.search(n)) for n in names]
    assert name_matches(names, pattern).tolist() == expect == [True, False, False, True, False, False, True]
    anchored = [isinstance(n, str) and bool(pattern.match(n)) for n in names]
    assert name_matches(names, re.compile(r"cuda"), anchored=True).tolist() == \
        [isinstance(n, str) and n.startswith("cuda") for n in names]
    assert anchored == [False] * 7
    assert name_matches(pd.Series([], dtype=object), pattern).dtype == np.bool_
    assert name_matches(pd.Series(["ab", "c"], dtype="str"), re.compile("c")).tolist() == [False, True]
