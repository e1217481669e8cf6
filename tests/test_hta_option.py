"""``bwdiag analyze --hta``: HTA's own figures beside bwdiag's, checked against HTA called directly
and against the raw events; HTA missing or failing never costs the user bwdiag's report."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bwdiag.units import fmt_count, fmt_pct, fmt_time
from tests.conftest import H100_BERT, REPO, raw_events, shared_trace

CONTROL = "hta/trace_diff/control/control.json.gz"  # integer µs, 6 ProfilerSteps, NCCL
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """``bwdiag ARGS`` in a fresh interpreter (``prelude`` runs first, e.g. to hide HTA)."""
    code = f"{prelude}\nimport sys\nfrom bwdiag.cli import console_main\nsys.argv = ['bwdiag', *{list(args)!r}]\nconsole_main()"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)


def _hta_directly(path: Path):
    """HTA's own TraceAnalysis on ``path``, as its README shows it (a folder holding the trace)."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / path.name).symlink_to(path.resolve())
        ta = TraceAnalysis(trace_dir=folder)
    temporal = ta.get_temporal_breakdown(visualize=False)
    overlap = ta.get_comm_comp_overlap(visualize=False)
    by_type, by_kernel = ta.get_gpu_kernel_breakdown(visualize=False)
    return temporal, overlap, by_type, by_kernel


def _none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _analyze_with_hta(rel: str, tmp_path_factory):
    path = shared_trace(rel)
    out = tmp_path_factory.mktemp("hta") / "out"
    done = _cli("analyze", "--hta", str(path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "diagnosis.json").read_text())
    html = (out / "report.html").read_text()
    return path, doc, done.stdout, html


@pytest.fixture(scope="module")
def control_run(tmp_path_factory):
    return _analyze_with_hta(CONTROL, tmp_path_factory)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    return _analyze_with_hta(H100_BERT, tmp_path_factory)


@pytest.mark.parametrize("run", ["control_run", "bert_run"])
def test_hta_figures_are_htas_own(request, run):
    path, doc, terminal, html = request.getfixturevalue(run)
    temporal, overlap, by_type, by_kernel = _hta_directly(path)
    section = doc["hta"]
    (rank,) = section["ranks"]
    row = temporal.iloc[0]
    assert rank["rank"] == int(row["rank"])
    h = rank["hta"]
    assert h["window_us"] == row["kernel_time(us)"]
    assert h["idle_us"] == row["idle_time(us)"]
    assert h["busy_us"] == row["kernel_time(us)"] - row["idle_time(us)"]
    assert h["compute_us"] == row["compute_time(us)"]
    assert h["non_compute_us"] == row["non_compute_time(us)"]
    assert h["overlap_pct"] == _none_if_nan(overlap["comp_comm_overlap_pctg"].iloc[0])
    assert section["kernel_types"] == [
        {"type": t, "us": float(s), "pct": float(p)}
        for t, s, p in zip(by_type["kernel_type"], by_type["sum"], by_type["percentage"])]
    # per type: every kernel of that type (the "others" row holds those past HTA's top list)
    for kind, key in (("COMPUTATION", "computation_us"), ("COMMUNICATION", "communication_us"), ("MEMORY", "memory_us")):
        assert h[key] == float(by_kernel.loc[by_kernel["kernel_type"] == kind, "sum (us)"].sum())
    top = by_kernel[by_kernel["name"] != "others"].sort_values("sum (us)", ascending=False).head(5)
    assert [(k["name"], k["us"], k["mean_us"]) for k in section["top_kernels"]] == list(
        zip(top["name"], top["sum (us)"].astype(float), top["mean (us)"].astype(float)))

    # bwdiag's side is bwdiag's own per-rank figures
    (bw_rank,) = doc["ranks"]
    b = rank["bwdiag"]
    assert (b["window_us"], b["busy_us"], b["idle_us"]) == (bw_rank["total_us"], bw_rank["busy_us"], bw_rank["idle_us"])

    # shown as such in the terminal and on the page
    window_line = next(line for line in terminal.splitlines() if line.startswith("Window "))
    assert fmt_time(h["window_us"]) in window_line and fmt_time(b["window_us"]) in window_line
    idle_line = next(line for line in terminal.splitlines() if line.startswith("Idle "))
    assert fmt_time(h["idle_us"]) in idle_line
    assert '<section id="hta">' in html and '<a href="#hta">' in html
    assert f'<tr data-key="idle_us"><td>Idle</td><td class="num">{fmt_time(h["idle_us"])}</td>' in html
    if h["overlap_pct"] is not None:
        assert fmt_pct(h["overlap_pct"]) in terminal
        assert f'<td class="num">{fmt_pct(h["overlap_pct"])}</td>' in html


def test_control_differences_worked_out_from_the_raw_events(control_run):
    """HTA's last-step cut on control: the kernels it keeps are those launched before the last
    ProfilerStep began; the sentences give those counts and bwdiag's full window."""
    path, doc, terminal, _ = control_run
    ev = raw_events(path)["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    last = max(steps, key=lambda e: e["ts"])
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"}
    kept = [e for e in gpu if launch.get(e["args"]["correlation"], math.inf) < last["ts"]]
    assert (len(gpu), len(kept)) == (9450, 7875)
    kept_window = max(e["ts"] + e["dur"] for e in kept) - min(e["ts"] for e in kept)
    all_window = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)

    (rank,) = doc["hta"]["ranks"]
    assert rank["hta"]["gpu_events"] == len(kept)
    assert rank["hta"]["gpu_us"] == sum(e["dur"] for e in kept)
    assert rank["hta"]["window_us"] == kept_window
    assert rank["bwdiag"]["gpu_events"] == len(gpu)
    assert rank["bwdiag"]["gpu_us"] == pytest.approx(sum(e["dur"] for e in gpu))
    dropped_us = sum(e["dur"] for e in gpu) - sum(e["dur"] for e in kept)
    assert (f"HTA's last-step filter dropped {fmt_count(len(gpu) - len(kept))} of its {fmt_count(len(gpu))} GPU "
            f"events ({fmt_time(dropped_us)} of GPU time") in " ".join(rank["notes"])
    assert f"last ProfilerStep (#{last['name'].split('#')[1]})" in " ".join(doc["hta"]["notes"])
    assert f"{fmt_time(kept_window)}, against bwdiag's {fmt_time(all_window)}" in " ".join(rank["notes"])
    # the idle sentence is the identity idle = window − busy on both sides
    dw = rank["hta"]["window_us"] - rank["bwdiag"]["window_us"]
    db = rank["hta"]["busy_us"] - rank["bwdiag"]["busy_us"]
    assert rank["hta"]["idle_us"] - rank["bwdiag"]["idle_us"] == pytest.approx(dw - db)
    assert "HTA leaves out the last ProfilerStep" in terminal


def test_bert_rounding_explained(bert_run):
    """bert is a ns-resolution trace with one step: no cut, and HTA's inward rounding to whole µs is
    the whole difference in summed GPU time."""
    path, doc, _, _ = bert_run
    ev = raw_events(path)["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    rounded = sum(math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"]) for e in gpu)
    (rank,) = doc["hta"]["ranks"]
    assert rank["hta"]["gpu_events"] == rank["bwdiag"]["gpu_events"] == len(gpu)
    assert rank["hta"]["gpu_us"] == rounded
    assert rank["bwdiag"]["gpu_us"] == pytest.approx(sum(e["dur"] for e in gpu))
    notes = " ".join(rank["notes"] + doc["hta"]["notes"])
    assert "HTA's rounding to whole µs" in notes and "one ProfilerStep (#6)" in notes


def test_without_hta_one_line_naming_the_extra(tmp_path):
    out = tmp_path / "out"
    done = _cli("analyze", "--hta", str(shared_trace(H100_BERT)), "-o", str(out),
                prelude="import sys; sys.modules['hta'] = None")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        'bwdiag: error: --hta needs HTA (holistictraceanalysis), which is not installed: pip install "bwdiag[hta]"']
    assert not out.exists()  # refused before any work


def test_without_the_flag_hta_is_never_imported():
    code = ("import sys; from bwdiag import pipeline; import bwdiag.trace.hta_bridge, bwdiag.report.hta_view; "
            f"print('hta' in sys.modules, 'pandas' in sys.modules); pipeline.analyze([{str(shared_trace(H100_BERT))!r}]); "
            "print('hta' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", "False"]


_BOOM = """
import hta.common.trace, hta.trace_analysis
def boom(*a, **k):
    raise RuntimeError("boom in HTA")
{target} = boom
"""


@pytest.mark.parametrize("target, warning", [
    ("hta.common.trace.Trace.parse_traces", "HTA could not analyse these traces (RuntimeError: boom in HTA)"),
    ("hta.trace_analysis.TraceAnalysis.get_gpu_kernel_breakdown",
     "HTA's kernel breakdown failed on these traces (RuntimeError: boom in HTA)"),
], ids=["load", "one-analysis"])
def test_hta_raising_is_a_warning_and_the_report_goes_on(tmp_path, target, warning):
    path = str(shared_trace(H100_BERT))
    plain = _cli("analyze", path, "-o", str(tmp_path / "plain"))
    done = _cli("analyze", "--hta", path, "-o", str(tmp_path / "hta"), prelude=_BOOM.format(target=target))
    assert plain.returncode == 0 and done.returncode == 0, done.stderr
    assert f"warning: {warning}" in done.stdout
    assert "report.html" in done.stdout and "Top kernels by time" in done.stdout
    base = json.loads((tmp_path / "plain" / "diagnosis.json").read_text())
    doc = json.loads((tmp_path / "hta" / "diagnosis.json").read_text())
    assert doc.pop("hta")["errors"] == [warning]
    assert doc["warnings"] == [*base["warnings"], warning]
    doc["warnings"] = base["warnings"]
    assert doc == base  # bwdiag's own diagnosis is untouched
    html = (tmp_path / "hta" / "report.html").read_text()
    assert warning.replace("'", "&#39;") in html


def test_hta_failing_on_a_real_trace_is_a_warning(tmp_path):
    """HTA's own load fails on the MI300 ResNet trace (a dtype overflow in its parser): bwdiag says
    so in one warning and writes its whole report."""
    path = shared_trace("tracelens/mi300/resnet_act_checkpoint.json.gz")
    with pytest.raises(TypeError):
        _hta_directly(path)
    done = _cli("analyze", "--hta", str(path), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert doc["hta"]["error"].startswith("HTA could not analyse these traces (TypeError: ")
    assert doc["hta"]["error"] in doc["warnings"] and f"warning: {doc['hta']['error']}" in done.stdout
    assert doc["hta"]["ranks"] == [] and doc["kernels"] and doc["findings"]
    assert ": no figures (see the warning above)." in done.stdout


def _dist(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_default_install_declares_every_import_and_keeps_hta_an_extra():
    """Every third-party package bwdiag/ imports is a declared dependency, except HTA: an extra,
    imported only by bwdiag/trace/hta_bridge.py, and part of the test extra (the suite's oracle)."""
    import ast
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_dist(r) for r in project["dependencies"]}
    imports: dict[str, set[str]] = {}
    for path in (REPO / "bwdiag").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                imports.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    third_party = set(imports) - set(sys.stdlib_module_names) - {"bwdiag", "__future__"}
    dists = packages_distributions()
    # Extras, each imported by its one module only: HTA (hta_bridge.py) and fsspec (trace/sources.py,
    # the bwdiag[cloud] extra: fsspec opens s3fs / gcsfs itself).
    undeclared = {m for m in third_party - {"hta", "fsspec", "ray"} if not {_dist(d) for d in dists.get(m, [m])} & declared}
    assert not undeclared, f"imported but not in [project] dependencies: {sorted(undeclared)}"
    assert {"numpy", "markupsafe", "orjson", "psutil"} <= declared
    assert imports["hta"] == {"bwdiag/trace/hta_bridge.py"}
    assert imports["fsspec"] == {"bwdiag/trace/sources.py"} and "fsspec" not in declared
    assert {_dist(r) for r in project["optional-dependencies"]["cloud"]} == {"fsspec", "s3fs", "gcsfs"}
    # Ray (bwdiag[ray]) is imported by the Ray engine alone.
    assert imports["ray"] == {"bwdiag/engine/ray_engine.py"} and "ray" not in declared
    assert {_dist(r) for r in project["optional-dependencies"]["ray"]} == {"ray"}
    assert "holistictraceanalysis" not in declared
    assert [_dist(r) for r in project["optional-dependencies"]["hta"]] == ["holistictraceanalysis"]
    assert "bwdiag[hta]" in project["optional-dependencies"]["test"]
