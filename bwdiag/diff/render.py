"""The diff in its three forms: ``diff.json``, one self-contained ``diff.html``, the terminal."""

from __future__ import annotations

import sys
from typing import IO, Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bwdiag._version import __version__
from bwdiag.diagnose.model import TIME_KEYS
from bwdiag.report.html import _asset, environment
from bwdiag.report.terminal import BOUND_STYLES, printable
from bwdiag.units import fmt_pct, fmt_time

_PAGE = "diff.html.j2"
TERMINAL_GROUPS = 8
TERMINAL_FINDINGS = 8
PAGE_GROUPS = 100


def render_json(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"


def _signed(us: float | None) -> str:
    if us is None:
        return "—"
    if us == 0:
        return "±0"
    return ("+" if us > 0 else "−") + fmt_time(abs(us))


def _change(before_us: float, after_us: float, delta_us: float, delta_pct: float | None) -> str:
    head = f"{fmt_time(before_us)} → {fmt_time(after_us)} ({_signed(delta_us)}"
    if delta_pct is not None:
        head += f", {'+' if delta_pct > 0 else '−' if delta_pct < 0 else ''}{abs(delta_pct):.1f}%"
    return head + ")"


#: How the noise was told (``bwdiag.diff.noise``), in the verdict's words.
NOISE_METHODS = {"half range": "half the larger range of the steps",
                 "median error": "3 standard errors of the medians' difference",
                 "drift": "the drift a run shows within itself"}


def verdict_line(doc: dict[str, Any]) -> str:
    """The verdict on the steps the diff compares (``doc["headline"]``: unprofiled or recorded)."""
    h = doc["headline"]
    unprofiled = h["source"] == "unprofiled"
    what = "unprofiled step" if unprofiled else ("step" if doc["unit"] == "step" else "window")
    head = f"{what} {_change(h['before_us'], h['after_us'], h['delta_us'], h['delta_pct'])}"
    how = NOISE_METHODS.get(h.get("noise_method"))
    how = f"{how}, " if how else ""
    if unprofiled:
        noise = (f"noise ±{fmt_time(h['noise_us'])} ({how}{h['steps'][0]} and {h['steps'][1]} steps run without the "
                 f"profiler, the captures' own {h['clock']} clock)")
    elif h["noise_known"]:
        noise = f"noise ±{fmt_time(h['noise_us'])}" + (f" ({how[:-2]})" if how else "")
    else:
        noise = "noise unknown (one step each)"
    if h["verdict"] == "no change":
        return f"No change beyond the noise: {head}; {noise}"
    word = "Faster" if h["verdict"] == "faster" else "Slower"
    speed = f", {h['before_us'] / h['after_us']:.2f}× the speed" if h["after_us"] else ""
    return f"{word}, beyond the noise: {head}{speed}; {noise}"


def unprofiled_line(doc: dict[str, Any]) -> str | None:
    """The other comparison: the recorded steps when the verdict is on the unprofiled ones, else the
    unprofiled steps when both captures timed them (too few to judge the noise by)."""
    s = doc["step"]
    if doc["headline"]["source"] == "unprofiled":
        return (f"recorded steps (under the profiler): "
                f"{_change(s['before']['median_us'], s['after']['median_us'], s['delta_us'], s['delta_pct'])}")
    u = s.get("unprofiled")
    if not u:
        return None
    return (f"unprofiled step (the captures' own {u['clock']} clock, steps run without the profiler): "
            f"{_change(u['before_us'], u['after_us'], u['delta_us'], u['delta_pct'])}")


def gate_line(doc: dict[str, Any]) -> str | None:
    g = doc.get("gate")
    if not g:
        return None
    if g["failed"]:
        return (f"--fail-if-slower {g['fail_if_slower_pct']:g}: FAILED, AFTER is slower by "
                f"{fmt_time(doc['headline']['delta_us'])}, over the {fmt_time(g['limit_us'])} allowed "
                f"(noise + {g['fail_if_slower_pct']:g}%)")
    return f"--fail-if-slower {g['fail_if_slower_pct']:g}: passed (allowed up to {fmt_time(g['limit_us'])} slower)"


def group_label(row: dict[str, Any]) -> str:
    k = row["key"]
    if "op" in k:
        label = k["op"] + (f" {k['shapes']}" if k.get("shapes") else "")
        if k.get("module"):
            label += f" in {k['module'].rsplit('.', 1)[-1]}"
        return label
    return k["name"]


def _step_rows(doc: dict) -> list[list[str]]:
    s = doc["step"]
    rows = []
    stats = {s["before"].get("statistic", "median"), s["after"].get("statistic", "median")}
    step = stats.pop() if len(stats) == 1 else "median / mean"  # what each side's step time is
    for label, key in ((step, "median_us"), ("fastest", "min_us"), ("slowest", "max_us"), ("range", "spread_us")):
        rows.append([label, fmt_time(s["before"][key]), fmt_time(s["after"][key])])
    rows.append(["complete steps", str(s["before"]["steps"]), str(s["after"]["steps"])])
    return rows


def _run_rows(doc: dict) -> list[list[str]]:
    b, a = doc["runs"]["before"], doc["runs"]["after"]
    rows = []
    for label, key in (("device", "device"), ("ceilings", "spec_source"), ("trace", "trace_kind"),
                       ("torch", "torch_version"), ("world size", "world_size"), ("ranks", "ranks")):
        fmt = (lambda v: ", ".join(map(str, v)) if len(v) <= 8 else f"{len(v)} ranks") if key == "ranks" else str
        rows.append([label, fmt(b[key]) if b[key] is not None else "—", fmt(a[key]) if a[key] is not None else "—"])
    rows.append(["read from", doc["before"].get("read_from", "—"), doc["after"].get("read_from", "—")])
    return rows


def _time_rows(doc: dict) -> list[list[str]]:
    t = doc["time"]
    rows = [["total", fmt_time(t["total"]["before_us"]), fmt_time(t["total"]["after_us"]), _signed(t["total"]["delta_us"])]]
    for k in TIME_KEYS:
        p = t["by_bound"][k]
        if p["before_us"] or p["after_us"]:
            rows.append([k, fmt_time(p["before_us"]), fmt_time(p["after_us"]), _signed(p["delta_us"])])
    p = t["exposed_communication"]
    rows.append(["exposed communication", fmt_time(p["before_us"]), fmt_time(p["after_us"]), _signed(p["delta_us"])])
    return rows


def _finding_rows(doc: dict) -> list[list[str]]:
    return [[f["title"], f["status"], fmt_time(f["predicted_us"]), _graph_time(f),
             _signed(f["realised_us"]).replace("+", ""), f["measured_on"], fmt_time(f["realised_on_step_us"])]
            for f in doc["findings"]]


def fix_lines(doc: dict) -> list[str]:
    """One line per finding whose fix also resolved others in AFTER: what BEFORE predicted for the fix
    as applied, against what the step gained."""
    out = []
    for f in doc["findings"]:
        if f.get("fix_predicted_us") is None:
            continue
        others = ", ".join(f"\"{printable(t)}\"" for t in f["fix_applied_with"])
        ratio, gained = f["realised_on_step_over_fix"], f["realised_on_step_us"]
        step = f"the step gained {fmt_time(gained)}" if gained >= 0 else f"the step lost {fmt_time(-gained)}"
        out.append(f"\"{printable(f['title'])}\": its fix also changed {others}; predicted together "
                   f"{fmt_time(f['fix_predicted_us'])}, {step}"
                   + (f" ({ratio:.2f}× the prediction)" if ratio is not None else ""))
    return out


def _graph_time(f: dict) -> str:
    """The graph model's predicted step saving — the one ``bwdiag analyze`` shows and ranks by where
    the diagnosis has it (``Finding.saving_us``) — and — in diffs of diagnoses written without it."""
    g = f.get("graph_predicted_us")
    return "—" if g is None else fmt_time(g)


def _kernel_rows(doc: dict, limit: int) -> list[list[str]]:
    return [[group_label(r), r["status"], fmt_time(r["before_us"]), fmt_time(r["after_us"]), _signed(r["delta_us"])]
            for r in doc["kernels"]["groups"][:limit]]


def _kernel_summary(doc: dict) -> str:
    k = doc["kernels"]
    c = k["counts"]
    share = f"; {fmt_pct(k['matched_share_of_before_pct'])} of BEFORE's kernel time matched" \
        if k["matched_share_of_before_pct"] is not None else ""
    return (f"{c['matched']} matched, {c['new']} new, {c['vanished']} vanished (matched by op, shapes, dtype "
            f"and module, else kernel name){share}; kernel time {fmt_time(k['before_us'])} → {fmt_time(k['after_us'])}")


def page_context(doc: dict[str, Any]) -> dict[str, Any]:
    before, after = doc["before"].get("name", "before"), doc["after"].get("name", "after")
    verdict = doc["headline"]["verdict"]
    return {
        "title": f"bwdiag diff: {before} → {after}",
        "before_name": before,
        "after_name": after,
        "unit_text": "per median complete step" if doc["unit"] == "step" else "per analysed window",
        "verdict": verdict_line(doc),
        "unprofiled": unprofiled_line(doc),
        "verdict_class": {"faster": "faster", "slower": "slower"}.get(verdict, ""),
        "gate": gate_line(doc),
        "gate_failed": bool(doc.get("gate", {}).get("failed")),
        "noise_rule": "Noise: " + doc["step"]["noise_rule"] + ".",
        "step_rows": _step_rows(doc),
        "run_rows": _run_rows(doc),
        "warnings": doc["warnings"],
        "notes": doc["notes"],
        "time_rows": _time_rows(doc),
        "finding_rows": _finding_rows(doc),
        "fix_lines": fix_lines(doc),
        "kernel_summary": _kernel_summary(doc),
        "kernel_rows": _kernel_rows(doc, PAGE_GROUPS),
        "kernels_more": max(0, len(doc["kernels"]["groups"]) - PAGE_GROUPS) + doc["kernels"]["groups_left_out"],
    }


def render_html(doc: dict[str, Any]) -> str:
    """The whole diff page: one file, nothing fetched when viewed, the diff embedded via |tojson."""
    return environment().get_template(_PAGE).render(
        page=page_context(doc), doc=doc, version=__version__, css=_asset("report.css"))


def print_diff(doc: dict[str, Any], *, outputs: dict[str, Any] | None = None, file: IO[str] | None = None,
               width: int | None = None) -> None:
    """The terminal form: the verdict, the gate, the warnings, time by bound, findings, top groups."""
    console = Console(file=file if file is not None else sys.stdout, highlight=False, width=width)
    page = page_context(doc)
    head = Text("bwdiag diff ", style="bold")
    head.append(printable(f"{page['before_name']} → {page['after_name']}"))
    head.append(f"  ·  times {page['unit_text']}", style="dim")
    console.print(head)
    style = {"faster": "bold green", "slower": "bold red"}.get(doc["headline"]["verdict"], "bold")
    console.print(Text(page["verdict"], style=style))
    if page["unprofiled"]:
        console.print(Text(page["unprofiled"], style="dim"))
    if page["gate"]:
        console.print(Text(page["gate"], style="bold red" if page["gate_failed"] else "green"))
    for w in doc["warnings"]:
        console.print(Text(f"warning: {printable(w)}", style="yellow"), soft_wrap=True)
    for n in doc["notes"]:
        console.print(Text(printable(n), style="dim"))

    table = Table(title="Time by bound", title_justify="left", show_edge=False, pad_edge=False)
    for c in ("", "before", "after", "change"):
        table.add_column(c, justify="left" if not c else "right")
    for r in page["time_rows"]:
        table.add_row(Text(r[0], style=BOUND_STYLES.get(r[0], "")), *r[1:])
    console.print(table)

    if doc["findings"]:
        table = Table(title="Findings of BEFORE", title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("finding", overflow="fold")
        table.add_column("status")
        table.add_column("rule's est.", justify="right")
        table.add_column("graph", justify="right")
        table.add_column("realised", justify="right")
        for f in doc["findings"][:TERMINAL_FINDINGS]:
            st = {"resolved": "green", "partly": "yellow", "still there": "red"}[f["status"]]
            table.add_row(printable(f["title"]), Text(f["status"], style=st), fmt_time(f["predicted_us"]), _graph_time(f),
                          Text(_signed(f["realised_us"]).replace("+", "") + f"\non {f['measured_on']}"))
        console.print(table)
        for line in fix_lines(doc):
            console.print(Text(line, style="dim"))
        if len(doc["findings"]) > TERMINAL_FINDINGS:
            console.print(Text(f"… and {len(doc['findings']) - TERMINAL_FINDINGS} more in diff.html", style="dim"))

    groups = doc["kernels"]["groups"]
    if groups:
        table = Table(title="Kernel groups, by time gained or lost", title_justify="left", show_edge=False,
                      pad_edge=False)
        name_width = max(20, console.width - 50)
        table.add_column("group", no_wrap=True, overflow="ellipsis", max_width=name_width)
        table.add_column("", no_wrap=True)
        table.add_column("before", justify="right", no_wrap=True)
        table.add_column("after", justify="right", no_wrap=True)
        table.add_column("change", justify="right", no_wrap=True)
        for r in _kernel_rows(doc, TERMINAL_GROUPS):
            table.add_row(Text(printable(r[0])), r[1], *r[2:])
        console.print(table)
    console.print(Text(_kernel_summary(doc), style="dim"))
    for label, path in (outputs or {}).items():
        line = Text(f"{label}: ", style="bold")
        line.append(str(path))
        console.print(line, soft_wrap=True)
