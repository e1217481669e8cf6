"""``bwdiag analyze … --summary-md FILE``: the verdict in a few lines of GitHub-flavoured Markdown,
for a CI job summary (``$GITHUB_STEP_SUMMARY``) or a pull-request comment.

Verdict, step time and its projection once the findings are fixed, time by bound, and the top
findings with their savings per step (the dependency graph's where the diagnosis has them, as
every view: ``Finding.saving_us``). Every name from the trace is escaped: a kernel called
``a|b<script>`` stays one table cell of text.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath

from bwdiag._version import __version__
from bwdiag.diagnose.model import Diagnosis
from bwdiag.errors import OutputError
from bwdiag.units import fmt_pct, fmt_time
from bwdiag.report.verdict import build_verdict, ranked_findings

#: Findings listed in the summary (the report has them all).
TOP_FINDINGS = 5

_SPECIAL = re.compile(r"([\\`*_\[\]|<>~&])")


def md_text(text: object) -> str:
    """``text`` as literal Markdown inline text: punctuation backslash-escaped, one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def render_markdown(d: Diagnosis, outputs: dict[str, Path] | None = None) -> str:
    """The summary as Markdown text (ends with a newline)."""
    v = build_verdict(d)
    lines = [f"### bwdiag: {md_text(_headline(v))}", ""]
    lines += ["| Step time | Projected after the fixes | Bound by |", "|---|---|---|",
              f"| {_step_cell(v)} | {_projected_cell(v)} | {_bound_cell(v)} |", ""]
    shares = [f"{b['label'].lower()} {fmt_pct(b['pct'])}" for b in v["bars"] if b["us"] > 0]
    if shares:
        lines += [f"Time by bound: {md_text(' · '.join(shares))}", ""]
    findings = ranked_findings(d)
    if findings:
        unit = "per step" if all(f.saving_per_step_us is not None for f in findings) else "over the window"
        lines += [f"**Top findings** (saving {unit})", "", "| # | Finding | Saves | Kind |", "|---:|---|---:|---|"]
        for i, f in enumerate(findings[:TOP_FINDINGS], 1):
            saving = f.saving_per_step_us if unit == "per step" else f.saving_us
            lines.append(f"| {i} | {md_text(f.title)} | {fmt_time(saving)} ({fmt_pct(f.saving_pct)}) "
                         f"| {md_text(f.kind)} |")
        if len(findings) > TOP_FINDINGS:
            lines.append(f"\n… and {len(findings) - TOP_FINDINGS} more in the report.")
        lines.append("")
    else:
        lines += ["No findings: nothing bwdiag knows how to shorten.", ""]
    lines.append(_footer(d, outputs))
    return "\n".join(lines) + "\n"


def write_summary_md(d: Diagnosis, path: Path, outputs: dict[str, Path] | None = None) -> None:
    """Append the summary to ``path`` (created if absent): a job summary file collects every step's
    Markdown, and an existing file is never overwritten."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            if fh.tell():
                fh.write("\n")
            fh.write(render_markdown(d, outputs))
    except OSError as err:
        raise OutputError(f"cannot write the Markdown summary {path}: {err.strerror or err}") from None


def _headline(v: dict) -> str:
    head = v["headline"]
    return f"{head} ({fmt_pct(v['dominant_pct'])} of the window)" if v["dominant_pct"] is not None else head


def _step_cell(v: dict) -> str:
    if v["step_us"] is None:
        return f"**{fmt_time(v['total_us'])}** window (no complete ProfilerStep)"
    about = [f"median of {v['steps']}" if v["steps"] else "median"]
    if v["step_ids"]:
        about[0] += f": {md_text(v['step_ids'])}"
    if v["steps"] and v["steps"] > 1 and v["step_min_us"] is not None and v["step_max_us"] is not None:
        about.append(f"{fmt_time(v['step_min_us'])}–{fmt_time(v['step_max_us'])}")
    return f"**{fmt_time(v['step_us'])}** ({', '.join(about)})"


def _projected_cell(v: dict) -> str:
    if v["projected_us"] is None:
        return "—"
    projected = v["projected_step_us"] if v["projected_step_us"] is not None else v["projected_us"]
    speedup = f", {v['speedup']:.2f}× faster" if v["speedup"] else ""
    model = ", dependency graph" if v.get("projected_model") == "graph" else ""
    return f"**{fmt_time(projected)}** (−{fmt_pct(v['saving_pct'])}{speedup}{model})"


def _bound_cell(v: dict) -> str:
    if v["dominant"] is None:
        return "—"
    label = next(b["label"] for b in v["bars"] if b["key"] == v["dominant"])
    return f"{md_text(label.lower())} {fmt_pct(v['dominant_pct'])}"


def _footer(d: Diagnosis, outputs: dict[str, Path] | None) -> str:
    names = [PurePath(p).name for p in d.source.paths]
    source = names[0] + (f" (+{len(names) - 1} more)" if len(names) > 1 else "") if names else "—"
    ranks = len(d.source.ranks)
    parts = [f"{md_text(d.device.name)} ({md_text(d.device.spec_source)} ceilings)",
             f"{md_text(source)}, {ranks} rank{'s' if ranks != 1 else ''}"]
    if outputs and "html" in outputs:
        parts.append(f"report: `{str(outputs['html']).replace('`', '')}`")
    return "<sub>" + " · ".join(parts) + f" · bwdiag {__version__}</sub>"
