"""Print the coverage of compute-kernel time for every shared trace, as a Markdown table.

    python benchmarks/coverage_table.py            # over ../shared/traces

For each trace: compute-kernel time, the share linked to a launching op, the share with a FLOP or byte
estimate, whether its ops carry shapes, and the reasons for the unpriced rest (``coverage.uncovered``,
largest first). The table in ``benchmarks/README.md`` ("Coverage on the shared traces") is this output.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_outputs import SHARED, shared_traces  # noqa: E402

from bwdiag.diagnose.build import diagnose  # noqa: E402
from bwdiag.trace import find_trace_files, load_traces  # noqa: E402


def row(path: Path) -> str:
    traces, load_warnings = load_traces(find_trace_files([path]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        diagnosis, _ = diagnose(traces, load_warnings=load_warnings)
    c = diagnosis.coverage
    reasons = "; ".join(f"{u.pct:.1f} % {u.reason}" for u in c.uncovered[:3]) or "—"
    if len(c.uncovered) > 3:
        rest = sum(u.pct for u in c.uncovered[3:])
        reasons += f"; {rest:.1f} % other"
    name = str(path.relative_to(SHARED))
    return (f"| {name} | {c.compute_us / 1e3:,.1f} | {c.linked_pct:.1f} | {c.estimated_pct:.1f} | {reasons} |")


def main() -> int:
    print("| trace | compute-kernel ms | linked % | estimated % | unpriced, by reason |")
    print("|---|---:|---:|---:|---|")
    for path in shared_traces():
        print(row(path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
