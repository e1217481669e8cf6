"""Trace sources: local folders, glob patterns and fsspec URLs (file://, memory:// standing in for
object storage: no network here), all through trace/sources.py; URLs without fsspec, or a cloud
protocol without its package, fail in one line naming ``bwdiag[cloud]``."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bwdiag.errors import TraceError
from bwdiag.trace import find_trace_files, load_rank, load_traces
from bwdiag.trace.sources import UrlPath
from tests.many_rank_traces import write_job

fsspec = pytest.importorskip("fsspec", reason="the URL tests need fsspec (the test extra installs it)")

ROOT = Path(__file__).resolve().parents[1]


def _step(r: int, s: int) -> float:
    return 1000.0 + 100.0 * r + s


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    return write_job(tmp_path_factory.mktemp("job") / "ranks", 4, step_us=_step)[0].parent


@pytest.fixture()
def memory_job(job):
    """The same four rank files in fsspec's in-memory filesystem, under a fresh folder."""
    fs = fsspec.filesystem("memory")
    root = f"/bwdiag-{uuid.uuid4().hex[:8]}"
    for p in sorted(job.iterdir()):
        fs.pipe(f"{root}/run42/{p.name}", p.read_bytes())
    yield f"memory://{root}/run42"
    fs.rm(root, recursive=True)


def _bwdiag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bwdiag", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_memory_url_lists_url_paths_and_loads_as_the_local_files(job, memory_job):
    files = find_trace_files([memory_job + "/"])
    assert [type(f) for f in files] == [UrlPath] * 4
    assert [str(f) for f in files] == [f"{memory_job}/{p.name}" for p in sorted(job.iterdir())]
    local = load_rank(sorted(job.iterdir())[2])
    remote = load_rank(files[2])
    assert remote.rank == local.rank == 2 and str(remote.path) == str(files[2])
    assert remote.tables.gpu["dur"].tolist() == local.tables.gpu["dur"].tolist()


@pytest.mark.parametrize("jobs", [1, 2])
def test_memory_url_analysis_equals_the_local_one(job, memory_job, jobs):
    """Serial and in forked workers (a UrlPath pickles as its URL and is opened again there)."""
    from bwdiag.diagnose.build import diagnose

    remote, rw = load_traces([memory_job], jobs=jobs)
    local, lw = load_traces([job], jobs=1)
    assert [t.rank for t in remote] == [0, 1, 2, 3] and rw == lw
    dr, _ = diagnose(remote)
    dl, _ = diagnose(local)
    assert dataclasses.replace(dr, source=dl.source) == dl
    assert dr.source.paths == tuple(f"{memory_job}/{p.name}" for p in sorted(job.iterdir()))
    assert [r.step_durations_us for r in dr.ranks] == [tuple(_step(r, s) for s in (1, 2, 3)) for r in range(4)]


def test_url_path_pickles_as_its_url(memory_job):
    (f, *_) = find_trace_files([memory_job])
    back = pickle.loads(pickle.dumps(f))
    assert back == f and back.name == f.name and back.stat().st_size == f.stat().st_size
    assert back.parent == UrlPath(memory_job)


def test_missing_url_and_empty_pattern_are_one_line_errors(memory_job, tmp_path):
    with pytest.raises(TraceError, match=r"^memory://nowhere/at/all: no such file or folder$"):
        find_trace_files(["memory://nowhere/at/all"])
    with pytest.raises(TraceError, match=r"matches this pattern"):
        find_trace_files([str(tmp_path / "rank*.json.gz")])
    with pytest.raises(TraceError, match=r"matches this pattern"):
        find_trace_files([memory_job + "/*.csv"])
    assert [f.name for f in find_trace_files([memory_job + "/node0_rank[13]*"])] == [
        "node0_rank1.pt.trace.json.gz", "node0_rank3.pt.trace.json.gz"]


def test_without_fsspec_a_url_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    with pytest.raises(TraceError) as err:
        find_trace_files(["s3://bucket/run42/"])
    assert str(err.value) == ('s3://bucket/run42: reading a URL needs fsspec, which is not installed; '
                              'pip install "bwdiag[cloud]"')


def test_cli_glob_and_file_url(job, tmp_path):
    out = _bwdiag("analyze", str(job / "node0_rank[02]*.json.gz"), "-o", str(tmp_path / "g"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    d = json.loads((tmp_path / "g" / "diagnosis.json").read_text())
    assert d["source"]["ranks"] == [0, 2]
    out = _bwdiag("analyze", (job / "node0_rank3.pt.trace.json.gz").as_uri(), "-o", str(tmp_path / "u"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads((tmp_path / "u" / "diagnosis.json").read_text())
    assert d["source"]["paths"] == [str(job / "node0_rank3.pt.trace.json.gz")]
    assert d["source"]["ranks"] == [3]


def test_cli_cloud_url_without_its_package_exits_2_in_one_line(tmp_path):
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("s3fs is installed: the URL would be fetched (no network here)")
    out = _bwdiag("analyze", "s3://bucket/run42/", "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("bwdiag: error: s3://bucket/run42: ")
    assert 'pip install "bwdiag[cloud]"' in out.stderr
    assert not (tmp_path / "o").exists()
