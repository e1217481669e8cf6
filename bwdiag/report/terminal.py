"""The terminal summary: the same verdict and top findings as the page, printed with rich."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from bwdiag.diagnose.model import Diagnosis
from bwdiag.report.context import build_context, top_kernel_rows
from bwdiag.report.verdict import VERDICT_FINDINGS
from bwdiag.units import fmt_pct, fmt_time

#: Colours shared in spirit with the page's CSS (``--c-compute`` …).
BOUND_STYLES = {
    "compute": "blue",
    "memory": "dark_orange",
    "latency": "magenta",
    "communication": "red",
    "idle": "grey62",
    "unknown": "cyan",
}

_BAR_WIDTH = 48
TOP_KERNELS = 5
MAX_WARNINGS = 10  # warnings printed; all of them are in the report and diagnosis.json



#: Percentage points by which the top findings' own savings may exceed the projection's before the
#: summary says they overlap (rounding, and findings below the top ones adding to the projection).
OVERLAP_POINTS = 0.5

def _shorten(name: str, width: int) -> str:
    """A kernel name cut to fit a terminal row (templated C++ names run to hundreds of chars)."""
    name = printable(name)
    return name if len(name) <= width else name[: width - 1] + "…"


_CONTROL_CHARS = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN``: a name from a trace never drives the terminal."""
    return text.translate(_CONTROL_CHARS)


def coverage_line(cov: dict, noun: str = "kernel") -> str:
    """One sentence that names what each coverage figure counts."""
    line = (f"Estimates cover {fmt_pct(cov['estimated_pct'])} of compute-{noun} time "
            f"(copies and collectives apart); {fmt_pct(cov['linked_pct'])} linked to an op.")
    extra = []
    if cov.get("copy_us"):
        extra.append(f"copies {fmt_pct(cov['copy_estimated_pct'])} with byte counts")
    if cov.get("collective_us"):
        extra.append(f"collectives {fmt_pct(cov['collective_estimated_pct'])} with message sizes")
    return line + (f" Also: {'; '.join(extra)}." if extra else "")


def print_summary(
    diagnosis: Diagnosis, *, outputs: dict[str, Path] | None = None, file: IO[str] | None = None,
    width: int | None = None, brand: bool = True,
) -> None:
    """Print the verdict, the time-by-bound bar, the top findings and the written files.

    Goes to ``file`` (stderr by default, so stdout stays the user's); ``outputs`` maps a label
    (``"report"``, ``"json"``) to the path written. ``width`` is the line width to draw at (default:
    the terminal's, 80 when not a terminal); ``brand=False`` leaves the leading ``bwdiag`` off the
    first line, for callers that prefix every line with ``bwdiag: `` themselves.
    """
    ctx = build_context(diagnosis)
    console = Console(file=file if file is not None else sys.stderr, highlight=False, width=width)
    v = ctx["verdict"]
    dev = ctx["device"]

    head = Text()
    if brand:
        head.append("bwdiag ", style="bold")
    head.append(ctx["title"].removeprefix("bwdiag report: "))
    source = "" if dev["spec_source"] in dev["name"].lower() else f" ({dev['spec_source']})"
    head.append(f"  ·  {dev['name']}{source}", style="dim")
    console.print(head)
    sel = ctx["source"]["selection"]
    if sel:
        console.print(Text(f"{len(sel['ranks'])} of {sel['files']:,} rank files analysed ({sel['how']}): "
                           f"ranks {', '.join(str(r['rank']) for r in sel['ranks'][:16])}"
                           f"{' …' if len(sel['ranks']) > 16 else ''}; why in the report", style="dim"))

    when = Text()
    if v["step_us"]:
        when.append(f"Step {fmt_time(v['step_us'])}", style="bold")
        if v["steps"] and v["steps"] > 1:
            spread = ""
            if v.get("step_min_us") is not None and v.get("step_max_us") is not None:
                spread = f", {fmt_time(v['step_min_us'])}–{fmt_time(v['step_max_us'])}"
            per_rank = f" per rank, the median over {v['step_ranks']} ranks" if (v.get("step_ranks") or 1) > 1 else ""
            if v.get("step_statistic") == "mean":
                when.append(f" (mean of {v['steps']} complete steps{per_rank}{spread}: the steps over 1.5× the "
                            "median are a pattern rather than outliers)", style="dim")
            else:
                when.append(f" (median of {v['steps']} complete steps{per_rank}{spread})", style="dim")
        elif v["steps"]:
            when.append(" (one complete step)", style="dim")
        if v.get("step_ids"):
            when.append(f"  ·  steps {v['step_ids']}", style="dim")
            if v.get("steps_excluded"):
                when.append(f" ({v['steps_excluded']} left out: cut or without duration)", style="dim")
        when.append(f"  ·  window {fmt_time(v['total_us'])}", style="dim")
    else:
        when.append(f"Analysed window {fmt_time(v['total_us'])}", style="bold")
    console.print(when)
    if v.get("unprofiled_step_us"):
        slower = v.get("profiler_slowdown")
        mean = "the mean of " if v.get("unprofiled_statistic") == "mean" else ""
        line = (f"Unprofiled {fmt_time(v['unprofiled_step_us'])} per step ({mean}steps {v['unprofiled_step_ids']} "
                f"without the profiler, {v['unprofiled_clock']} clock{': slow steps are a pattern' if mean else ''})")
        if slower and slower >= 1.1:
            line += f": the recorded steps ran {slower:.2f}× slower under the profiler"
        console.print(Text(line, style="yellow" if slower and slower >= 1.25 else "dim"))
    for ab in v.get("abnormal_steps") or ():
        ratio = f"{ab['ratio']:.1f}× the median" if ab.get("ratio") else "over 1.5× the median"
        console.print(Text(f"step {ab['step']} took {ratio}: counted in the median and "
                           "the window totals", style="yellow"))
    if v["dominant"]:
        console.print(
            Text(f"{v['headline_base']} ({fmt_pct(v['dominant_pct'])} of the time)",
                 style=f"bold {BOUND_STYLES[v['dominant']]}")
        )
        for note in v["headline_notes"]:  # what the one-class verdict leaves out (verdict._headline)
            console.print(Text(f"… {note}", style=BOUND_STYLES[v["dominant"]]))
    console.print(_bar(v["bars"]))
    console.print(_legend(v["bars"]))

    if ctx["findings"]:
        table = Table(title="Top findings", title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("#", justify="right", style="dim")
        table.add_column("finding")
        table.add_column("saves", justify="right", style="green")
        for i, f in enumerate(ctx["findings"][:VERDICT_FINDINGS], 1):
            fix = (f["fix"] or "").strip().splitlines()
            cell = Text(f["title"], style="bold")
            if fix:
                cell.append(f"\nfix: {fix[0]}" + (" …" if len(fix) > 1 else ""), style="dim")
            saves = Text(f"{fmt_time(f['saving_shown_us'])} {f['saving_unit']}\n({fmt_pct(f['saving_pct'])})")
            if f.get("models_note"):  # the rule's own estimate differs from the graph's: say it, short
                saves.append(f"\nrule's estimate {fmt_time(f['rule_saving_shown_us'])}", style="dim")
            if f.get("same_fix_note"):  # the fix also resolves other findings: what it saves with them
                saves.append(f"\nthe fix: {fmt_time(f['fix_saving_shown_us'])}", style="green")
                cell.append(f"\nthe same fix resolves {f['same_fix_refs']} too", style="dim")
            table.add_row(str(i), cell, saves)
        console.print(table)
        if len(ctx["findings"]) > VERDICT_FINDINGS:
            console.print(Text(f"… and {len(ctx['findings']) - VERDICT_FINDINGS} more in the report",
                               style="dim"))
        if v["projected_us"] is not None:
            proj = Text("Projected after fixes: ", style="bold")
            base = v["projected_step_us"] if v["projected_step_us"] else v["projected_us"]
            proj.append(f"{fmt_time(base)}" + (" per step" if v["projected_step_us"] else " per window"),
                        style="bold green")
            proj.append(f"  (−{fmt_pct(v['saving_pct'])}", style="green")
            if v["speedup"]:
                proj.append(f", {v['speedup']:.2f}× faster", style="green")
            proj.append(")", style="green")
            if v.get("projected_from") == "shares":
                proj.append(f"  from the unprofiled {fmt_time(v['projected_base_step_us'])}: the recorded step's "
                            "shares applied to it", style="dim")
            elif v.get("projected_base_step_us"):
                proj.append(f"  from the unprofiled {fmt_time(v['projected_base_step_us'])}, re-timed on the "
                            "dependency graph", style="dim")
            elif v.get("projected_model") == "graph":
                proj.append("  re-timed on the dependency graph", style="dim")
            console.print(proj)
            shown = ctx["findings"][:VERDICT_FINDINGS]
            alone = sum(f["saving_pct"] or 0.0 for f in shown)
            if v["saving_pct"] is not None and alone > v["saving_pct"] + OVERLAP_POINTS:
                # savings that do not add up: the reader must not sum the table
                console.print(Text(f"The findings overlap: alone the {len(shown)} above claim {fmt_pct(alone)} of the "
                                   f"step, together the projection counts {fmt_pct(v['saving_pct'])} (each kernel and "
                                   "each wait changed once; the report's what-if table shows each one's part)",
                                   style="dim"))
    else:
        console.print(Text("No findings: nothing bwdiag knows how to fix stands out.", style="dim"))
    for u in ctx.get("unaddressed") or ():
        console.print(Text(f"Not addressed: {u['label']} {fmt_pct(u['pct'])} of the time — {u['why']}", style="yellow"))

    records = top_kernel_rows(diagnosis, TOP_KERNELS)
    if records:
        noun = ctx["item_label"].lower()
        table = Table(title=f"Top {noun}s by time", title_justify="left", show_edge=False,
                      pad_edge=False)
        # The other columns take 8+6+13+9 cells and 4×3 of separators: names get the rest.
        width = max(20, console.width - 49)
        table.add_column(noun, no_wrap=True, overflow="ellipsis", max_width=width)
        table.add_column("time", justify="right", no_wrap=True, min_width=8)
        table.add_column("share", justify="right", no_wrap=True, min_width=6)
        table.add_column("bound", no_wrap=True, min_width=13)
        table.add_column("% ceiling", justify="right", no_wrap=True, min_width=9)
        repeated = Counter(r["name"] for r in records)
        for r in records[:TOP_KERNELS]:
            # The same op (aten::mm) in several rows: its shapes tell the rows apart.
            label = f"{r['name']} {r['shapes']}" if repeated[r["name"]] > 1 and r.get("shapes") else r["name"]
            table.add_row(Text(_shorten(label, width)), fmt_time(r["total_us"]), fmt_pct(r["share_pct"]),
                          Text(r["bound"], style=BOUND_STYLES.get(r["bound"], "")),
                          fmt_pct(r["pct_of_ceiling"]))
        console.print(table)

    if dev["assumed"]:
        console.print(Text(f"Device ceilings {dev['spec_source_note']}", style="yellow"))
    cov = ctx["coverage"]
    console.print(Text(coverage_line(cov, "op" if ctx["item_label"] == "CPU op" else "kernel"), style="dim"))
    for w in ctx["warnings"][:MAX_WARNINGS]:
        console.print(Text(f"warning: {printable(w)}", style="yellow"), soft_wrap=True)
    if len(ctx["warnings"]) > MAX_WARNINGS:
        console.print(Text(f"… and {len(ctx['warnings']) - MAX_WARNINGS} more warning(s) in the report.",
                           style="yellow"))
    for label, path in (outputs or {}).items():
        line = Text(f"{label}: ", style="bold")
        line.append(str(path))
        console.print(line, soft_wrap=True)  # a path cut over two lines cannot be copied


def _bar(bars: list[dict]) -> Text:
    """A one-line stacked bar; every non-empty slice gets at least one cell."""
    total = sum(b["us"] for b in bars)
    text = Text()
    if total <= 0:
        return text
    cells = [(b["key"], b["us"] / total * _BAR_WIDTH) for b in bars if b["us"] > 0]
    widths = [max(1, round(w)) for _, w in cells]
    while sum(widths) > _BAR_WIDTH and max(widths) > 1:
        widths[widths.index(max(widths))] -= 1
    for (key, _), width in zip(cells, widths):
        text.append("█" * width, style=BOUND_STYLES[key])
    return text


def _legend(bars: list[dict]) -> Text:
    text = Text()
    for b in bars:
        if b["us"] <= 0:
            continue
        text.append("■ ", style=BOUND_STYLES[b["key"]])
        text.append(f"{b['label'].lower()} {fmt_time(b['us'])} ({fmt_pct(b['pct'])})  ")
    return text
