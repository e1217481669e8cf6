"""Inputs a user really types (issue 16, items 5, 7 and 8), through the command line.

* ``--device-spec`` takes what ``bwdiag devices --json`` prints.
* ``bwdiag roofline`` refuses impossible input in one line (exit 2) and says which device variant
  and which compute roof it chose; ``--device cpu`` uses this machine's calibration.
* ``--open`` never turns a written report into a failure, honours ``$BROWSER`` and reports a
  display nobody serves.

Expected numbers are worked out here from the datasheet figures of the table entries (H100 SXM5:
989.4 TFLOP/s dense bf16, 3.35 TB/s; A100 SXM4 80GB: 19.5 TFLOP/s fp32 vector) and from the
hand-written calibration below, not from what bwdiag printed.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from bwdiag.cli import main

REPO = Path(__file__).resolve().parents[1]
GPU_TRACE = REPO / "tests" / "data" / "bad" / "reference_good.json.gz"  # an H100 (BERT) trace
CPU_TRACE = REPO / "tests" / "data" / "cpu_elementwise_chain.json.gz"  # the smallest trace here

H100_BF16 = 989.4e12
H100_BW = 3.35e12


def invoke(args: list[str], env: dict[str, str | None] | None = None):
    return CliRunner().invoke(main, args, env=env)


def error_line(result) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bwdiag: error: ")
    return lines[0]


# -- item 5: --device-spec takes a `devices --json` entry -------------------------------------


def devices_json() -> dict[str, dict]:
    result = invoke(["devices", "--json"])
    assert result.exit_code == 0
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_an_edited_devices_json_entry_is_a_device_spec(tmp_path):
    entry = devices_json()["H100 SXM5 80GB"]
    assert {"spec_source", "matched_from", "memory_bytes"} <= set(entry)  # what used to be refused
    entry["memory_bandwidth"] = 1.0e12
    entry["tensor_flops"]["bf16"] = 500e12
    spec = tmp_path / "h100.json"
    spec.write_text(json.dumps(entry, indent=2))
    out = tmp_path / "out"
    result = invoke(["analyze", str(GPU_TRACE), "-o", str(out), "--device-spec", str(spec)])
    assert result.exit_code == 0, (result.stderr, result.exception)
    doc = json.loads((out / "diagnosis.json").read_text())
    device = doc["device"]
    assert device["spec_source"] == "user"  # the copied "table" is informational
    assert device["memory_bandwidth"] == 1.0e12
    assert device["peak_flops"]["bf16"] == 500e12
    assert device["peak_flops"]["fp8"] == 1978.9e12  # untouched figures of the entry
    assert device["matched_from"] == "NVIDIA H100 80GB HBM3"  # the trace's name, not the copy's null
    memory_bound = [k for k in doc["kernels"] if k["bound"] == "memory"]
    assert memory_bound
    for k in memory_bound:  # % of the memory roof = achieved B/s over the user's bandwidth
        assert k["pct_of_ceiling"] == pytest.approx(100 * k["achieved_bytes_per_s"] / 1.0e12, rel=1e-9)
    assert device["sources"] == [*entry["sources"], f"user file: {spec}"]  # the copy's are not repeated


def test_every_devices_json_entry_loads_as_it_is(tmp_path):
    from bwdiag.hardware import list_devices, resolve_device

    rows = devices_json()
    for table in list_devices():
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(rows[table.name]))
        spec, _ = resolve_device({"name": ""}, override=path)  # an unknown GPU, ceilings from the file
        assert spec.name == table.name
        assert spec.memory_bandwidth == table.memory_bandwidth
        assert spec.memory_bytes == table.memory_bytes and spec.sm_count == table.sm_count
        assert spec.compute_capability == table.compute_capability
        assert spec.interconnect_bandwidth == table.interconnect_bandwidth
        for dtype, value in table.tensor_flops.items():
            assert spec.tensor_flops[dtype] == value
    unknowns = {"sm_count": None, "memory_bytes": None, "compute_capability": None, "interconnect": None,
                "interconnect_bandwidth": None}  # null: "not known" (as a calibrated CPU entry has them)
    path.write_text(json.dumps([{**rows["MI300X"], **unknowns}]))  # copied with the list's brackets
    spec, _ = resolve_device({"name": "NVIDIA H100 80GB HBM3"}, override=path)
    assert spec.name == "MI300X" and spec.memory_bandwidth == 5.3e12
    assert (spec.sm_count, spec.memory_bytes, spec.compute_capability, spec.interconnect,
            spec.interconnect_bandwidth) == (None, None, None, None, None)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"memory_bandwith": 3e12}, "unknown field(s) memory_bandwith; allowed: "),
        ({"spec_source": "tabel"}, "field 'spec_source' must be one of assumed, calibrated, table, user"),
        ({"memory_gb": 40}, "'memory_gb' (40 GiB) and 'memory_bytes' (85899345920) disagree"),
    ],
)
def test_a_device_spec_with_a_bad_key_is_refused_in_one_line(tmp_path, change, problem):
    entry = {**devices_json()["H100 SXM5 80GB"], **change}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(entry))
    line = error_line(invoke(["analyze", str(GPU_TRACE), "-o", str(tmp_path / "out"),
                              "--device-spec", str(spec)]))
    assert str(spec) in line and problem in line


def test_the_whole_devices_json_list_is_refused_with_the_fix(tmp_path):
    spec = tmp_path / "all.json"
    spec.write_text(invoke(["devices", "--json"]).stdout)
    line = error_line(invoke(["analyze", str(GPU_TRACE), "-o", str(tmp_path / "out"),
                              "--device-spec", str(spec)]))
    assert f"{spec}: a device spec is one JSON object, got a list of {len(devices_json())} items" in line
    assert "copy one device's object out of `bwdiag devices --json`" in line


@pytest.mark.parametrize("command", ["analyze", "run"])
def test_help_documents_the_device_spec_format(command):
    text = " ".join(invoke([command, "--help"]).stdout.split())
    assert "bwdiag devices --json" in text
    assert '"base": "<name from bwdiag devices>" starts from that device' in text
    for key in ("tensor_flops", "vector_flops", "memory_bandwidth", "interconnect_bandwidth",
                "memory_bytes", "devices_per_package", "spec_source and matched_from are ignored"):
        assert key in text


# -- item 7: bwdiag roofline -------------------------------------------------------------------


def roofline(*args: str, env=None):
    return invoke(["roofline", *args], env=env)


def test_a_time_far_under_the_roof_is_refused_naming_the_roof():
    line = error_line(roofline("--flops", "2.2e12", "--bytes", "1e8", "--device", "H100 SXM5 80GB",
                               "--dtype", "bf16", "--time", "3.1ns"))
    best = 2.2e12 / H100_BF16  # compute bound: intensity 22,000 FLOP/B is past the ridge (295)
    assert f"at least {best * 1e3:.4g} ms under its bf16 tensor roof (989 TFLOP/s)" in line
    assert f"so 3.1 ns would be {100 * best / 3.1e-9:,.0f}% of it (over 105% is refused)" in line
    assert "--time 3.1ns is impossible on H100 SXM5 80GB" in line


def test_the_impossible_rule_is_five_percent_over_the_memory_roof():
    # 3.35 GB on a 3.35 TB/s memory: 1 ms at best.
    ok = roofline("--flops", "1M", "--bytes", "3.35G", "--device", "H100 SXM5 80GB", "--time", "0.97ms")
    assert ok.exit_code == 0, ok.output
    assert f"of ceiling    {100 * 1e-3 / 0.97e-3:.1f}%" in ok.stdout  # 103.1%: allowed
    line = error_line(roofline("--flops", "1M", "--bytes", "3.35G", "--device", "H100 SXM5 80GB",
                               "--time", "0.94ms"))
    assert "under its memory roof (3.35 TB/s)" in line
    assert f"{100 * 1e-3 / 0.94e-3:,.0f}% of it" in line  # 106%


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flops", "2.2e12", "--bytes", "1e8", "--time", "0"], "--time 0: the measured time must be more than 0"),
        (["--flops", "2.2TB", "--bytes", "1e8"], "--flops: '2.2TB' is a number of bytes, not of FLOPs"),
        (["--flops", "2.2T", "--bytes", "3GFLOP"], "--bytes: '3GFLOP' is a number of FLOPs, not of bytes"),
        (["--flops", "0", "--bytes", "0"], "--flops and --bytes are both 0"),
    ],
)
def test_impossible_roofline_input_is_refused_in_one_line(args, message):
    line = error_line(roofline(*args, "--device", "H100 SXM5 80GB"))
    assert message in line


def test_fp8_on_a_device_without_fp8_units_says_which_roof_it_uses():
    result = roofline("--flops", "2.2T", "--bytes", "3G", "--device", "A100 SXM4 80GB", "--dtype", "fp8")
    assert result.exit_code == 0, result.output
    assert "ceiling       fp32 vector" in result.stdout
    assert f"best time     {2.2e12 / 19.5e12 * 1e3:.4g} ms" in result.stdout
    assert ("note          A100 SXM4 80GB has no fp8 tensor-core rate; using its fp32 vector roof "
            "(19.5 TFLOP/s)") in result.stdout
    assert "Its tensor-core rates: fp64, tf32, bf16, fp16, int8 (--dtype)" in result.stdout
    exact = roofline("--flops", "2.2T", "--bytes", "3G", "--device", "H100 SXM5 80GB", "--dtype", "fp8")
    assert "note" not in exact.stdout  # H100 has fp8 tensor cores: nothing to say


def test_an_ambiguous_device_name_says_which_variant_it_picked():
    result = roofline("--flops", "2.2T", "--bytes", "1e8", "--device", "H100")
    assert result.exit_code == 0, result.output
    assert ("note          --device 'H100' fits 3 devices of the table (H100 SXM5 80GB, H100 PCIe 80GB, "
            "H100 NVL 94GB); using H100 SXM5 80GB. For another, name it: --device 'H100 PCIe 80GB'"
            ) in result.stdout
    assert "device        H100 SXM5 80GB (table)" in result.stdout
    pcie = roofline("--flops", "2.2T", "--bytes", "1e8", "--device", "H100 PCIe 80GB")
    assert "device        H100 PCIe 80GB (table)" in pcie.stdout and "fits" not in pcie.stdout


def test_device_cpu_without_a_calibration_says_how_to_make_one():
    line = error_line(roofline("--flops", "1G", "--bytes", "1G", "--device", "cpu"))
    assert "--device cpu: this machine's CPU is not calibrated" in line
    assert "run `bwdiag calibrate --device cpu` (add --quick" in line


def test_device_cpu_uses_the_cached_calibration():
    from bwdiag.hardware.calibrate import CACHE_SCHEMA, cache_path, device_identity
    from bwdiag.hardware.host import host_record

    identity = device_identity("cpu")
    path = cache_path(identity)  # in the test's private cache (conftest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "schema": CACHE_SCHEMA, "device_key": identity.key, "kind": "cpu",
        "created": "2026-01-02T03:04:05+00:00", "quick": True, "host": host_record(),
        "entry": {"name": f"{identity.name}, calibrated", "kind": "cpu", "vendor": identity.vendor,
                  "tensor_flops": {}, "vector_flops": {"fp32": 100e9, "fp64": 50e9},
                  "memory_bandwidth": 10e9, "notes": [], "sources": ["by hand"]},
    }))
    result = roofline("--flops", "1G", "--bytes", "1G", "--device", "cpu", "--dtype", "fp32",
                      "--vector", "--time", "0.2s")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"device        {identity.name}, calibrated\n" in out  # not "calibrated (calibrated)"
    assert "roofs         fp32 vector: 100 GFLOP/s; memory: 10 GB/s; ridge point 10 FLOP/B" in out
    assert "bound         memory" in out
    assert "best time     100 ms" in out  # 1 GB / 10 GB/s (the 1 GFLOP take 10 ms)
    assert "of ceiling    50.0%" in out  # 100 ms of 200 ms
    assert f"measured by `bwdiag calibrate` on 2026-01-02T03:04:05+00:00 ({path})" in out
    bf16 = roofline("--flops", "1G", "--bytes", "1G", "--device", "cpu")  # default: bf16 tensor
    assert "has no bf16 matrix-unit rate; using its fp32 vector roof (100 GFLOP/s)" in bf16.stdout
    # Measured ceilings may be low: above them is a note up to 10x, refused beyond (a unit slip).
    above = roofline("--flops", "1G", "--bytes", "1G", "--device", "cpu", "--time", "50ms")
    assert above.exit_code == 0 and "of ceiling    200.0%" in above.stdout
    assert "above the measured memory roof: the calibration may be low" in above.stdout
    line = error_line(roofline("--flops", "1G", "--bytes", "1G", "--device", "cpu", "--time", "9ms"))
    assert "so 9 ms would be 1,111% of it (over 1000% is refused)" in line


# -- item 8: --open ----------------------------------------------------------------------------


def analyze_open(tmp_path: Path, env: dict[str, str | None]):
    out = tmp_path / "out"
    result = invoke(["analyze", str(CPU_TRACE), "-o", str(out), "--open"], env=env)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert (out / "diagnosis.json").is_file() and (out / "report.html").is_file()
    return result, (out / "report.html").resolve()


def no_browser(monkeypatch):
    monkeypatch.setattr("webbrowser.open", lambda *a, **k: pytest.fail("must not start a browser"))


def test_open_without_a_display_still_succeeds_and_says_where_the_report_is(tmp_path, monkeypatch):
    no_browser(monkeypatch)
    result, html = analyze_open(tmp_path, {"DISPLAY": None, "WAYLAND_DISPLAY": None, "BROWSER": None})
    last = result.stderr.strip().splitlines()[-1]
    assert last == (f"bwdiag: no display to open a browser on (set $BROWSER to choose a command); "
                    f"the report is at {html}; copy it to your machine and open it there")


@pytest.mark.parametrize("template", ["{script}", "{script} --new-tab %s"])
def test_open_runs_the_browser_command_in_BROWSER(tmp_path, monkeypatch, template):
    no_browser(monkeypatch)
    record = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\n')
    script.chmod(0o755)
    browser = template.format(script=script)
    result, html = analyze_open(tmp_path, {"DISPLAY": None, "WAYLAND_DISPLAY": None, "BROWSER": browser})
    expected = ([html.as_uri()] if "%s" not in template else ["--new-tab", html.as_uri()])
    assert record.read_text().splitlines() == expected
    assert "could not open" not in result.stderr and "no display" not in result.stderr


def test_open_reports_a_failing_BROWSER_command(tmp_path, monkeypatch):
    no_browser(monkeypatch)
    result, html = analyze_open(tmp_path, {"DISPLAY": None, "BROWSER": f"false{os.pathsep}"})
    assert result.stderr.strip().splitlines()[-1] == (
        f"bwdiag: could not open the report with $BROWSER (false exited with status 1); the report is at {html}")


def test_open_on_a_display_nobody_serves_is_reported(tmp_path, monkeypatch):
    if Path("/tmp/.X11-unix/X99").exists():
        pytest.skip("an X server listens on :99 here")
    no_browser(monkeypatch)
    result, html = analyze_open(tmp_path, {"DISPLAY": ":99", "WAYLAND_DISPLAY": None, "BROWSER": None})
    assert result.stderr.strip().splitlines()[-1] == (
        f"bwdiag: could not open the report: no display server answers on DISPLAY=:99; the report is at {html}")


def test_open_on_a_display_that_answers_starts_the_browser(tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url, *a, **k: opened.append(url) or True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:  # a stand-in X server (TCP)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port > 6000
        result, html = analyze_open(tmp_path, {"DISPLAY": f"127.0.0.1:{port - 6000}.0",
                                               "WAYLAND_DISPLAY": None, "BROWSER": None})
    assert opened == [html.as_uri()]
    assert "could not open" not in result.stderr
