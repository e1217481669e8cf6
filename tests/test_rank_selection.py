"""``bwdiag analyze --ranks SPEC`` and ``--sample N``: which rank files are analysed, why, and the
cheap first pass over step markers that finds the slow ones."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bwdiag.trace.select import SelectionError, identify, median_step_us, parse_ranks, select
from tests.many_rank_traces import write_job

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
SLOW = (21, 50)


def _step(r: int, s: int) -> float:
    return 1000.0 + r + (2000.0 if r in SLOW else 0.0)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """64 ranks on 8 nodes (8 per node); ranks 21 and 50 take 2 ms more per step."""
    return write_job(tmp_path_factory.mktemp("sel") / "job", 64, step_us=_step)[0].parent


def _files(job: Path) -> list[Path]:
    return sorted(job.iterdir())


def _bwdiag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bwdiag", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_parse_ranks():
    assert parse_ranks("0-3,128,1023") == [0, 1, 2, 3, 128, 1023]
    assert parse_ranks(" 5 , 2-3, 3") == [5, 2, 3]
    for bad, why in [("0-x", "'0-x' is not a rank"), ("", "'' is not a rank"), ("7-2", "runs backwards"),
                     ("1,,2", "'' is not a rank"), ("-1", "'-1' is not a rank")]:
        with pytest.raises(SelectionError, match=why):
            parse_ranks(bad)


def test_identify_reads_the_header_not_the_events(job):
    f = identify(_files(job)[0])
    assert (f.rank, f.host) == (int(f.path.name.split("rank")[1].split(".")[0]), f.path.name.split("_")[0])


def test_step_pass_matches_the_written_steps(job):
    for p in _files(job)[:5]:
        r = identify(p).rank
        assert median_step_us(p) == _step(r, 2)


def test_step_pass_on_a_real_trace_matches_its_profilerstep_spans():
    """The cheap pass against a full JSON parse of the same file: per step id the longest span."""
    path = SHARED / "hta/trace_diff/control/control.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not beside this checkout")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    steps: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#") and "dur" in e:
            steps[e["name"]] = max(steps.get(e["name"], 0.0), float(e["dur"]))
    assert steps and median_step_us(path) == pytest.approx(statistics.median(steps.values()))
    assert identify(path).rank == doc["distributedInfo"]["rank"]


def test_ranks_picks_exactly_those(job):
    files, sel = select(_files(job), ranks="0-2,63")
    assert [identify(f).rank for f in files] == [0, 1, 2, 63]
    assert sel["how"] == "--ranks 0-2,63" and sel["files"] == 64
    assert [r["rank"] for r in sel["ranks"]] == [0, 1, 2, 63]


def test_sample_takes_the_slow_ranks_and_spreads_the_rest_over_nodes(job):
    files, sel = select(_files(job), sample=8)
    why = {r["rank"]: r["why"] for r in sel["ranks"]}
    assert len(files) == 8 and len(why) == 8
    # 8 // 4 = 2 slowest by median step: 21 (3021 µs) and 50 (3050 µs)
    slow = {r for r, w in why.items() if w.startswith("one of the 2 slowest")}
    assert slow == set(SLOW)
    # the other 6 on 6 different nodes (8 ranks per node), none twice
    spread = [r for r in why if r not in slow]
    assert len({r // 8 for r in spread}) == 6
    assert all(f"host node{r // 8}" in why[r] for r in spread)


def test_sample_of_equal_ranks_calls_none_slow(tmp_path):
    """Every rank's steps equal: nothing is above the median, so all picks are spread (none 'slow')."""
    files = write_job(tmp_path / "eq", 12, step_us=lambda r, s: 1000.0, per_node=4)
    _, sel = select(files, sample=6)
    # nodes 0-3 | 4-7 | 8-11; within a node the spread order is 0, 2, 1, 3 (bit-reversed 00, 10, 01, 11);
    # round-robin over the nodes: 0, 4, 8, then 2, 6, 10
    assert [r["rank"] for r in sel["ranks"]] == [0, 2, 4, 6, 8, 10]
    assert all(r["why"].startswith("spread across the 3 nodes") for r in sel["ranks"])


def test_sample_calls_no_rank_slow_within_the_ranks_jitter(tmp_path):
    """Ranks 0.3 % apart (1000 µs and 1003 µs, as two real ranks were) are jitter: the 1 % floor
    (10 µs) is above the 3 µs difference, so every pick is a spread one; a rank 50 % slower among
    them is still picked (median 1001.5, MAD 1.5 → margin max(10.015, 3 × 1.4826 × 1.5 = 6.67) µs;
    1500 > 1011.5, 1003 is not)."""
    files = write_job(tmp_path / "jit", 8, step_us=lambda r, s: 1000.0 + 3.0 * (r % 2), per_node=4)
    _, sel = select(files, sample=4)
    assert all(r["why"].startswith("spread across") for r in sel["ranks"])
    files = write_job(tmp_path / "one", 8, step_us=lambda r, s: 1500.0 if r == 5 else 1000.0 + 3.0 * (r % 2),
                      per_node=4)
    _, sel = select(files, sample=4)
    assert [r["rank"] for r in sel["ranks"] if r["why"].startswith("one of the 1 slowest")] == [5]


def test_sample_more_than_there_are_takes_all(job):
    files, sel = select(_files(job)[:3], sample=10)
    assert len(files) == 3 and all("all 3 rank files" in r["why"] for r in sel["ranks"])


def test_cli_sample_says_in_the_report_which_ranks_and_why(job, tmp_path):
    out = _bwdiag("analyze", str(job), "--sample", "4", "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "o" / "diagnosis.json").read_text())
    assert len(d["source"]["ranks"]) == 4 and 50 in d["source"]["ranks"]
    assert d["source"]["selection"]["how"] == "--sample 4"
    assert [r["rank"] for r in d["source"]["selection"]["ranks"]] == d["source"]["ranks"]
    picked = ", ".join(str(r) for r in d["source"]["ranks"])
    assert f"4 of 64 rank files analysed (--sample 4): ranks {picked}; why in the report" in out.stdout
    html = (tmp_path / "o" / "report.html").read_text()
    assert 'id="rank-selection"' in html and "4 of 64 rank files analysed" in html


@pytest.mark.parametrize("args, message", [
    (["--ranks", "0-x"], "--ranks '0-x': '0-x' is not a rank or a range of ranks; write e.g. --ranks 0-7,128,1023"),
    (["--ranks", "3,99"], "--ranks 3,99: no rank file for rank 99 among the 64 files (ranks 0–63)"),
    (["--sample", "0"], "--sample 0: sample at least one rank"),
    (["--ranks", "1", "--sample", "2"], "--ranks and --sample pick ranks in two ways"),
])
def test_cli_bad_selection_is_one_line_exit_2(job, tmp_path, args, message):
    out = _bwdiag("analyze", str(job), *args, "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("bwdiag: error: ") and message in out.stderr
    assert not (tmp_path / "o").exists()
