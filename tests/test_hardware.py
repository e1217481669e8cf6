"""Device ceilings: datasheet numbers, name matching on real and synthetic names, overrides,
the CPU path, calibration and the `devices` / `calibrate` commands.

Expected peaks are the vendors' published figures, halved by hand where the datasheet quotes
2:4 sparsity (A100 BF16 624 -> 312 TFLOP/s; H100 SXM BF16 1,979 -> 989.4; B200 BF16 4.5 P -> 2.25 P).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from bwdiag.cli import main
from bwdiag.diagnose.device import device_info
from bwdiag.diagnose.model import SpecSource
from bwdiag.hardware.spec import DeviceSpec
from bwdiag.errors import BwdiagError, DeviceSpecError
from bwdiag.hardware import Dtype, find_device, list_devices, resolve_device
from bwdiag.hardware.spec import GIB, fallback_spec
from tests.conftest import shared_trace



def device_properties(relative: str) -> list[dict]:
    """The deviceProperties array of a real trace (found by text search: it is plain JSON)."""
    path = shared_trace(relative)
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    start = text.find('"deviceProperties"')
    assert start >= 0, f"{relative} has no deviceProperties"
    begin = text.index("[", start)
    end = text.index("]", begin)
    return json.loads(text[begin : end + 1])


def spec_named(name: str):
    spec = find_device(name)
    assert spec is not None, name
    return spec


# -- real traces -----------------------------------------------------------------------------

REAL = [
    ("hta/negative_queue_length_values_check/rank0.json.gz", "NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("hta/trace_diff/control/control.json.gz", "NVIDIA A100-PG509-200", "A100 SXM4 40GB"),
    ("hta/nccl_parser_config/nccl_data.json.gz", "NVIDIA A100-PG509-200", "A100 SXM4 40GB"),
    ("hta/triton_example/triton_example.json.gz", "NVIDIA A100-PG509-200", "A100 SXM4 40GB"),
    ("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "Tesla V100-SXM2-32GB",
     "V100 SXM2 32GB"),
    ("tracelens/b200/eager_trace.json.gz", "NVIDIA B200", "B200 (HGX, 1000 W)"),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "NVIDIA H100 80GB HBM3",
     "H100 SXM5 80GB"),
    ("tracelens/mi300/resnet_act_checkpoint.json.gz", "AMD Instinct MI300X", "MI300X"),
    ("tracelens/torch_compile_triton/trace.json.gz", "AMD Instinct MI300X", "MI300X"),
]


@pytest.mark.parametrize(("relative", "trace_name", "expected"), REAL)
def test_real_trace_devices_match_the_table(relative, trace_name, expected):
    props = device_properties(relative)
    assert props[0]["name"] == trace_name
    spec, warnings = resolve_device(props[0])
    assert spec.name == expected
    assert spec.spec_source is SpecSource.TABLE
    assert spec.matched_from == trace_name
    assert spec.sm_count == props[0]["numSms"]  # the table agrees with the hardware
    assert warnings == []


def test_real_trace_with_blank_name_is_identified_from_arch_cus_and_memory():
    # vLLM decode replay: name '', gfx 9.4, 304 CUs, 192 GiB -> only MI300X fits (MI325X has 256 GiB).
    props = device_properties("tracelens/inference/vllm_decode_full/graph_execution.json.gz")[0]
    assert props["name"] == ""
    assert (props["computeMajor"], props["computeMinor"], props["numSms"]) == (9, 4, 304)
    spec, warnings = resolve_device(props)
    assert spec.name == "MI300X"
    assert spec.spec_source is SpecSource.TABLE
    assert len(warnings) == 1 and "no usable name" in warnings[0] and "9.4" in warnings[0]


def test_cpu_only_trace_has_no_gpu_properties():
    assert device_properties("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") == []


# -- datasheet numbers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype", "tensor", "expected"),
    [
        ("A100 SXM4 80GB", "bf16", True, 312e12),  # datasheet 624 with sparsity
        ("A100 SXM4 40GB", "tf32", True, 156e12),  # datasheet 312 with sparsity
        ("A100 SXM4 80GB", "fp64", True, 19.5e12),
        ("A100 SXM4 80GB", "int8", True, 624e12),  # 1,248 TOPS with sparsity
        ("A100 SXM4 80GB", "fp16", False, 78e12),  # Ampere whitepaper, non-tensor FP16
        ("H100 SXM5 80GB", "bf16", True, 989.4e12),  # datasheet 1,979 with sparsity
        ("H100 SXM5 80GB", "fp8", True, 1978.9e12),  # datasheet 3,958 with sparsity
        ("H100 SXM5 80GB", "fp32", False, 66.9e12),
        ("H100 PCIe 80GB", "bf16", True, 756e12),  # datasheet 1,513 with sparsity
        ("H200 SXM 141GB", "bf16", True, 989.4e12),
        ("B200 (HGX, 1000 W)", "bf16", True, 2.25e15),  # HGX B200: 4.5 PFLOP/s with sparsity
        ("B200 (HGX, 1000 W)", "fp8", True, 4.5e15),  # 9 PFLOP/s with sparsity
        ("V100 SXM2 32GB", "fp16", True, 125e12),  # Volta: no sparsity
        ("V100 PCIe", "fp16", True, 112e12),
        ("T4", "fp16", True, 65e12),
        ("L4", "bf16", True, 121e12),  # 242 with sparsity
        ("L40S", "fp8", True, 733e12),  # 1,466 with sparsity
        ("MI300X", "bf16", True, 1307.4e12),  # ROCm MI300 table, dense
        ("MI300X", "fp64", False, 81.7e12),
        ("MI325X", "fp8", True, 2614.9e12),
        ("MI210", "fp16", True, 181e12),
        ("MI250X (per GCD)", "bf16", True, 383e12 / 2),  # package 383, one GCD per device
        ("MI250X (per GCD)", "fp64", False, 47.9e12 / 2),
    ],
)
def test_dense_peaks_match_the_datasheets(name, dtype, tensor, expected):
    assert spec_named(name).peak_flops(dtype, tensor=tensor) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "bandwidth", "link", "memory_gib"),
    [
        ("V100 SXM2 32GB", 900e9, 150e9, 32),  # NVLink2 300 GB/s both directions
        ("A100 SXM4 40GB", 1555e9, 300e9, 40),  # NVLink3 600 GB/s both directions
        ("A100 SXM4 80GB", 2039e9, 300e9, 80),
        ("A100 PCIe 80GB", 1935e9, 32e9, 80),  # PCIe Gen4 x16 64 GB/s both directions
        ("H100 SXM5 80GB", 3.35e12, 450e9, 80),  # NVLink4 900 GB/s both directions
        ("H100 PCIe 80GB", 2.0e12, 64e9, 80),  # PCIe Gen5 x16
        ("H200 SXM 141GB", 4.8e12, 450e9, 141),
        ("B200 (HGX, 1000 W)", 7.7e12, 900e9, 180),  # NVLink5 1.8 TB/s both directions
        ("T4", 320e9, 16e9, 16),  # PCIe Gen3 x16
        ("MI300X", 5.3e12, 448e9, 192),  # 7 x 128 GB/s Infinity Fabric, both directions
        ("MI325X", 6.0e12, 448e9, 256),
        ("MI250X (per GCD)", 3.2768e12 / 2, 200e9, 64),
    ],
)
def test_memory_and_interconnect_match_the_datasheets(name, bandwidth, link, memory_gib):
    spec = spec_named(name)
    assert spec.memory_bandwidth == pytest.approx(bandwidth)
    assert spec.interconnect_bandwidth == pytest.approx(link)
    assert spec.memory_bytes == memory_gib * GIB


def test_every_table_entry_is_sourced_and_sane():
    specs = list_devices()
    assert len(specs) >= 20
    assert len({s.name for s in specs}) == len(specs)
    for spec in specs:
        assert spec.sources, spec.name
        assert all(isinstance(s, str) and len(s) > 10 for s in spec.sources)
        assert spec.kind == "gpu" and spec.vendor in {"nvidia", "amd"}
        assert set(spec.tensor_flops) <= {d.value for d in Dtype}
        assert set(spec.vector_flops) <= {d.value for d in Dtype}
        numbers = [*spec.tensor_flops.values(), *spec.vector_flops.values(), spec.memory_bandwidth]
        assert all(math.isfinite(x) and x > 0 for x in numbers)
        assert spec.sm_count and spec.memory_bytes and spec.interconnect_bandwidth
        # a tensor rate never falls below the vector rate of the same dtype
        for dtype, value in spec.tensor_flops.items():
            assert value >= spec.vector_flops.get(dtype, 0.0), (spec.name, dtype)


def test_mi250x_entry_says_each_die_gets_half():
    spec = spec_named("MI250X (per GCD)")
    assert spec.sm_count == 110  # 220 CUs per package
    assert any("HALF" in note for note in spec.notes)


def test_fallbacks_are_documented():
    gpu = fallback_spec("gpu")
    assert gpu.spec_source is SpecSource.ASSUMED
    assert gpu.peak_flops("bf16", tensor=True) == 312e12  # A100 SXM4 80GB ceilings
    assert any("ASSUMED" in n and "--device-spec" in n for n in gpu.notes)
    cpu = fallback_spec("cpu")
    assert cpu.kind == "cpu" and cpu.spec_source is SpecSource.ASSUMED
    assert cpu.peak_flops("fp32", tensor=False) == 768e9  # 8 x 2 x 8 x 2 x 3 GHz
    assert cpu.memory_bandwidth == 51.2e9  # 2 x DDR4-3200


# -- DeviceSpec rules ------------------------------------------------------------------------


def test_ceiling_fallbacks():
    a100 = spec_named("A100 SXM4 80GB")
    assert a100.ceiling("fp32", tensor=True) == ("fp32 vector", 19.5e12)  # not tf32 unless asked
    assert a100.ceiling("tf32", tensor=True) == ("tf32 tensor", 156e12)
    assert a100.ceiling("tf32", tensor=False) == ("fp32 vector", 19.5e12)
    assert a100.ceiling("fp8", tensor=True) == ("fp32 vector", 19.5e12)  # no fp8 on Ampere
    v100 = spec_named("V100 SXM2 32GB")
    assert v100.ceiling("bf16", tensor=True) == ("fp32 vector", 15.7e12)  # no bf16 on Volta
    mi300 = spec_named("MI300X")
    assert mi300.ceiling("fp32", tensor=True) == ("fp32 tensor", 163.4e12)  # native fp32 MFMA
    assert mi300.ceiling(None, tensor=False) == ("fp32 vector", 163.4e12)
    assert a100.ridge_point("bf16", tensor=True) == pytest.approx(312e12 / 2039e9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("c10::BFloat16", Dtype.BF16), ("float", Dtype.FP32), ("Half", Dtype.FP16),
     ("torch.float8_e4m3fn", Dtype.FP8), ("double", Dtype.FP64), ("tf32", Dtype.TF32),
     ("int8", Dtype.INT8), ("long int", None), ("bool", None), (None, None)],
)
def test_dtype_parse(text, expected):
    assert Dtype.parse(text) is expected


def test_specs_are_hashable_by_content():
    a, b = find_device("A100 SXM4 80GB"), find_device("NVIDIA A100-SXM4-80GB")
    assert a == b and len({a, b}) == 1
    with pytest.raises(TypeError):
        a.tensor_flops["bf16"] = 1.0  # read-only


def test_device_info_takes_the_best_unit_per_dtype():
    info = device_info(spec_named("A100 SXM4 80GB"))
    assert info.spec_source == "table"
    assert info.peak_flops["bf16"] == 312e12
    assert info.peak_flops["fp64"] == 19.5e12  # FP64 tensor beats 9.7 vector
    assert info.peak_flops["fp32"] == 19.5e12
    assert info.vector_flops["fp64"] == 9.7e12
    assert info.memory_bandwidth == 2039e9 and info.interconnect_bandwidth == 300e9
    assert list(info.peak_flops) == ["fp64", "fp32", "tf32", "bf16", "fp16", "int8"]


# -- synthetic names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("A100-SXM4-80GB", "A100 SXM4 80GB"),  # old drivers drop 'NVIDIA '
        ("NVIDIA A100-PG509-210", "A100 SXM4 80GB"),  # board code of the 80 GB module
        ("NVIDIA A100-SXM-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
        ("NVIDIA H100 NVL", "H100 NVL 94GB"),
        ("H100 80GB HBM3", "H100 SXM5 80GB"),
        ("NVIDIA H200", "H200 SXM 141GB"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("AMD Instinct MI210", "MI210"),
        ("AMD Instinct MI325X", "MI325X"),
    ],
)
def test_synthetic_names(name, expected):
    spec, warnings = resolve_device({"name": name})
    assert spec.name == expected
    assert warnings == []


def test_h100_without_form_uses_sm_count():
    spec, warnings = resolve_device({"name": "NVIDIA H100", "numSms": 114})
    assert spec.name == "H100 PCIe 80GB" and warnings == []


def test_a100_without_form_or_memory_in_name_uses_trace_memory():
    spec, _ = resolve_device({"name": "NVIDIA A100", "totalGlobalMem": 42297524224})
    assert spec.name == "A100 SXM4 40GB"


def test_mig_slice_scales_ceilings():
    spec, warnings = resolve_device(
        {"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "numSms": 14, "totalGlobalMem": 4_972_019_712}
    )
    assert spec.name == "A100 SXM4 40GB"
    assert spec.peak_flops("bf16", tensor=True) == pytest.approx(312e12 / 7)
    assert spec.memory_bandwidth == pytest.approx(1555e9 * 5 / 40)
    assert spec.sm_count == 14
    assert spec.interconnect_bandwidth is None
    assert len(warnings) == 1 and "MIG" in warnings[0] and "fraction" in warnings[0]


def test_mig_slice_on_the_80gb_part():
    spec, _ = resolve_device({"name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb"})
    assert spec.peak_flops("tf32", tensor=True) == pytest.approx(156e12 * 3 / 7)
    assert spec.memory_bandwidth == pytest.approx(2039e9 / 2)
    assert spec.sm_count == round(108 * 3 / 7)


def test_sriov_virtual_function_is_the_full_mi300x():
    spec, warnings = resolve_device({"name": "AMD Instinct MI300X VF", "numSms": 304})
    assert spec.name == "MI300X"
    assert spec.peak_flops("bf16", tensor=True) == 1307.4e12
    assert any("SR-IOV" in n for n in spec.notes)
    assert warnings == []


def test_mi250x_device_is_one_die():
    spec, warnings = resolve_device({"name": "AMD Instinct MI250X", "numSms": 110})
    assert spec.name == "MI250X (per GCD)"
    assert spec.memory_bandwidth == pytest.approx(1.6384e12)
    assert spec.memory_bytes == 64 * GIB
    assert warnings == []


@pytest.mark.parametrize(("sms", "expected"), [(110, "MI250X (per GCD)"), (104, "MI250 (per GCD)")])
def test_combined_mi250_marketing_name_is_split_by_cu_count(sms, expected):
    spec, _ = resolve_device({"name": "AMD Instinct MI250X / MI250", "numSms": sms})
    assert spec.name == expected


def test_radeon_graphics_name_falls_back_on_arch():
    props = {"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "numSms": 110,
             "totalGlobalMem": 68_702_699_520}
    spec, warnings = resolve_device(props)
    assert spec.name == "MI250X (per GCD)"
    assert len(warnings) == 1 and "identified as MI250X" in warnings[0]


def test_arch_match_between_parts_with_equal_ceilings_says_so():
    # An MI210 and one GCD of an MI250 are both gfx90a, 104 CUs, 64 GiB, ~181 TFLOP/s fp16.
    props = {"name": "", "computeMajor": 9, "computeMinor": 0, "numSms": 104,
             "totalGlobalMem": 68_702_699_520}
    spec, warnings = resolve_device(props)
    assert spec.peak_flops("fp16", tensor=True) == pytest.approx(181e12, rel=0.01)
    assert "same ceilings" in warnings[0]


@pytest.mark.parametrize(
    "props",
    [None, {}, {"name": ""}, {"name": "AMD Radeon Graphics", "computeMajor": 11, "computeMinor": 0,
                               "numSms": 48, "totalGlobalMem": 25_753_026_560}],
)
def test_unidentifiable_device_gets_the_assumed_fallback(props):
    spec, warnings = resolve_device(props)
    assert spec.spec_source is SpecSource.ASSUMED
    assert spec.peak_flops("bf16", tensor=True) == 312e12
    assert len(warnings) == 1 and "--device-spec" in warnings[0] and "assumed" in warnings[0]


def test_unknown_named_gpu_is_named_in_the_warning():
    spec, warnings = resolve_device({"name": "NVIDIA GeForce RTX 4090", "numSms": 128})
    assert spec.spec_source is SpecSource.ASSUMED
    assert spec.sm_count == 128
    assert "'NVIDIA GeForce RTX 4090'" in warnings[0]


def test_variant_missing_from_table_warns():
    spec, warnings = resolve_device({"name": "NVIDIA H200 NVL"})
    assert spec.name == "H200 SXM 141GB"
    assert "NVL" in warnings[0]


def test_sm_count_disagreement_warns():
    _, warnings = resolve_device({"name": "NVIDIA A100-SXM4-80GB", "numSms": 98})
    assert "98 SMs" in warnings[0]


# -- overrides -------------------------------------------------------------------------------


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(content, "utf-8")
    return path


def test_partial_override_on_the_matched_device(tmp_path):
    path = write(tmp_path, json.dumps({"memory_bandwidth": 1.0e12, "tensor_flops": {"bf16": 200e12}}))
    spec, _ = resolve_device({"name": "NVIDIA A100-SXM4-80GB"}, override=path)
    assert spec.spec_source is SpecSource.USER
    assert spec.peak_flops("bf16", tensor=True) == 200e12
    assert spec.peak_flops("tf32", tensor=True) == 156e12  # untouched
    assert spec.memory_bandwidth == 1.0e12
    assert spec.name == "A100 SXM4 80GB"
    assert any(str(path) in s for s in spec.sources)


def test_override_with_base_for_an_unknown_device(tmp_path):
    path = write(tmp_path, json.dumps({"base": "H100 SXM5 80GB", "name": "my H100"}))
    spec, warnings = resolve_device({"name": ""}, override=path)
    assert spec.name == "my H100"
    assert spec.spec_source is SpecSource.USER
    assert spec.peak_flops("bf16", tensor=True) == 989.4e12
    assert warnings  # the trace's device was still unknown


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "a device spec is one JSON object, got a list of 2 items"),
        ('"H100"', "must be a JSON object, got str"),
        ('{"memory_bandwith": 1e12}', "unknown field(s) memory_bandwith"),
        ('{"memory_bandwidth": -5}', "'memory_bandwidth' must be a positive number"),
        ('{"tensor_flops": {"bf17": 1e12}}', "unknown dtype 'bf17'"),
        ('{"tensor_flops": {"bf16": "fast"}}', "'tensor_flops.bf16' must be a positive number"),
        ('{"sm_count": 1.5}', "'sm_count' must be a positive integer"),
        ('{"base": "Z100"}', "'base' 'Z100' is not a device"),
    ],
)
def test_bad_override_files_raise_device_spec_error(tmp_path, content, problem):
    path = write(tmp_path, content)
    with pytest.raises(DeviceSpecError) as info:
        resolve_device({"name": "NVIDIA H100 80GB HBM3"}, override=path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)
    assert isinstance(info.value, BwdiagError)


def test_missing_override_file(tmp_path):
    with pytest.raises(DeviceSpecError, match="cannot read"):
        resolve_device(None, override=tmp_path / "nope.json")


# -- CPU and calibration ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One quick CPU calibration into a private cache (the only ~2 s step of this file)."""
    from bwdiag.hardware.calibrate import calibrate

    cache = tmp_path_factory.mktemp("xdg")
    patcher = pytest.MonkeyPatch()
    patcher.setenv("XDG_CACHE_HOME", str(cache))
    try:
        yield calibrate("cpu", quick=True), cache
    finally:
        patcher.undo()


def test_cpu_trace_without_calibration_is_assumed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec, warnings = resolve_device(None, trace_kind="cpu")
    assert spec.kind == "cpu" and spec.spec_source is SpecSource.ASSUMED
    assert "bwdiag calibrate" in warnings[0]


def test_quick_calibration_is_positive_and_round_trips(calibrated, monkeypatch):
    from bwdiag.hardware.calibrate import cache_path, device_identity, load_calibration

    spec, cache = calibrated
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert spec.kind == "cpu" and spec.spec_source is SpecSource.CALIBRATED
    numbers = [spec.memory_bandwidth, *spec.vector_flops.values()]
    assert {"fp32", "fp64"} <= set(spec.vector_flops)
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    # sanity, not speed: any machine moves > 100 MB/s and computes > 100 MFLOP/s
    assert spec.memory_bandwidth > 1e8 and spec.vector_flops["fp32"] > 1e8
    path = cache_path(device_identity("cpu"))
    assert path.parent == cache / "bwdiag" and path.exists()
    loaded = load_calibration("cpu")
    assert loaded is not None
    assert loaded.memory_bandwidth == spec.memory_bandwidth
    assert dict(loaded.vector_flops) == dict(spec.vector_flops)
    assert loaded.spec_source is SpecSource.CALIBRATED
    record = json.loads(path.read_text())
    assert record["schema"] == "bwdiag/calibration@1" and record["quick"] is True
    measured = record["measurements"]
    assert spec.memory_bandwidth == max(measured["copy_bytes_per_s"], measured["triad_bytes_per_s"])
    # The profiler's cost per recorded op: measured (a tanh call costs ~1 µs; recording it, under 50 µs
    # on any host), stored in the entry, and reported in diagnosis.json's device.calibration values.
    from bwdiag.hardware.calibrate import read_calibration

    op_us = measured["profiler_op_us"]
    assert isinstance(op_us, float) and 0 <= op_us < 50 and record["entry"]["profiler_op_us"] == op_us
    assert read_calibration("cpu").to_record()["values"]["profiler_op_us"] == op_us
    # What a compiled call keeps, per mode: a call's fixed cost and one per extern GEMM call it makes —
    # positive, under 5 ms on any host, and a training call (forward, compiled backward node) dearer
    # than an inference one (36 vs 144 µs on the Intel Xeon VM, probed on tiny transformer blocks).
    compiled = measured["compiled_call"]
    assert set(compiled) == {"inference", "training"} and record["entry"]["compiled_call"] == compiled
    assert all(0 <= c[k] < 5000 for c in compiled.values() for k in ("call_us", "extern_us"))
    assert compiled["training"]["call_us"] > compiled["inference"]["call_us"] > 0
    assert read_calibration("cpu").to_record()["values"]["compiled_call"] == compiled
    # What each transcendental op adds per element to an Inductor loop: every probed op measured, each
    # positive and under 100 ns (0.16–0.76 ns on the 2-core VM), stored and reported like the rest.
    from bwdiag.hardware.pointwise_probe import PROBE_OPS

    import torch

    pointwise = measured["compiled_pointwise"]
    by_threads = pointwise["ns_per_element"]
    assert set(by_threads) == {"1", str(torch.get_num_threads())} and record["entry"]["compiled_pointwise"] == pointwise
    assert all(set(per_op) == set(PROBE_OPS) and all(0 <= ns < 100 for ns in per_op.values())
               for per_op in by_threads.values())
    assert by_threads["1"]["tanh"] > 0 and torch.get_num_threads() == int(max(by_threads, key=int))
    # ... and chained (each application feeding the next), every op but dropout's draw: a dependent tanh
    # is no cheaper than independent ones (2.02 against 1.57 ns on the Intel Xeon VM; 0.9×: noise of a
    # quick calibration's 256 k elements)
    from bwdiag.hardware.pointwise_probe import CHAINED_OPS
    chained = pointwise["chained_ns_per_element"]
    assert set(chained) == set(by_threads) and "dropout" not in CHAINED_OPS
    assert all(set(per_op) == set(CHAINED_OPS) and all(0 <= ns < 100 for ns in per_op.values())
               for per_op in chained.values())
    assert chained["1"]["tanh"] >= 0.9 * by_threads["1"]["tanh"] > 0
    assert read_calibration("cpu").to_record()["values"]["compiled_pointwise"] == pointwise
    # and the process reads as never having compiled (bwdiag's capture skips its module annotations
    # once torch.compile has graphs)
    from bwdiag.capture.annotate import compiled_graphs_present
    assert not compiled_graphs_present()
    # and a CPU trace now uses it
    resolved, warnings = resolve_device(None, trace_kind="cpu")
    assert resolved.spec_source is SpecSource.CALIBRATED and warnings == []


def test_a_one_thread_trace_meets_the_one_thread_ceilings(calibrated, monkeypatch):
    """``bwdiag calibrate`` measures one thread as well as the default count; a CPU trace whose capture
    ran one torch thread is held to those (a 2-thread GEMM roof made a 1-thread trace's GEMMs read as
    half overhead, and the host-overhead saving over-promised)."""
    import torch

    from bwdiag.hardware.calibrate import cache_path, device_identity

    spec, cache = calibrated
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    measured = json.loads(cache_path(device_identity("cpu")).read_text())["measurements"]
    threads = torch.get_num_threads()
    if threads == 1:
        assert "one_thread" not in measured
        pytest.skip("this host runs torch on one thread: the default is the one-thread measurement")
    one = measured["one_thread"]
    one_bw = max(one["copy_bytes_per_s"], one["triad_bytes_per_s"])
    meta = [{"bwdiag": {"torch_threads": 1}}]
    resolved, _ = resolve_device(None, trace_kind="cpu", trace_metadata=None)
    assert resolved.memory_bandwidth == spec.memory_bandwidth  # no trace: this process's threads, the default
    # a trace recorded on this host at one thread (trace_host reads the host facts; none here: this host)
    from bwdiag.hardware import match

    monkeypatch.setattr(match, "trace_host", lambda m: match.this_host())
    resolved, _ = resolve_device(None, trace_kind="cpu", trace_metadata=meta)
    assert resolved.memory_bandwidth == one_bw
    assert dict(resolved.vector_flops) == {k: v for k, v in one["gemm_flops_per_s"].items()}
    assert any("1 torch thread" in n for n in resolved.notes)
    default, _ = resolve_device(None, trace_kind="cpu", trace_metadata=[{"bwdiag": {"torch_threads": threads}}])
    assert default.memory_bandwidth == spec.memory_bandwidth and dict(default.vector_flops) == dict(spec.vector_flops)


def _cpu_spec(bandwidth: float, fp32: float) -> DeviceSpec:
    return DeviceSpec(name="host", kind="cpu", vendor="x", tensor_flops={}, vector_flops={"fp32": fp32},
                      memory_bandwidth=bandwidth, interconnect_bandwidth=None, sm_count=8, memory_bytes=None,
                      spec_source=SpecSource.CALIBRATED)


def test_ceilings_between_the_measured_thread_counts():
    from bwdiag.hardware.threads import at_threads, trace_threads

    spec = _cpu_spec(100e9, 800e9)  # 8 threads
    entry = {"threads": 8, "thread_ceilings": {"8": {"memory_bandwidth": 100e9, "vector_flops": {"fp32": 800e9}},
                                               "1": {"memory_bandwidth": 20e9, "vector_flops": {"fp32": 110e9}}}}
    assert at_threads(spec, entry, 8) is spec and at_threads(spec, entry, None) is spec
    one = at_threads(spec, entry, 1)
    assert (one.memory_bandwidth, one.vector_flops["fp32"]) == (20e9, 110e9)  # measured
    # 3 threads: the one-thread figures × 3, each capped by the 8-thread one
    three = at_threads(spec, entry, 3)
    assert (three.memory_bandwidth, three.vector_flops["fp32"]) == (60e9, 330e9) and "one-thread" in three.notes[-1]
    six = at_threads(spec, entry, 6)
    assert (six.memory_bandwidth, six.vector_flops["fp32"]) == (100e9, 660e9)
    # more threads than the calibration ran: its ceilings, said
    more = at_threads(spec, entry, 16)
    assert (more.memory_bandwidth, dict(more.vector_flops)) == (spec.memory_bandwidth, dict(spec.vector_flops))
    assert "16 torch threads" in more.notes[-1]
    # a calibration from before the one-thread measurement: compute scales with the threads, bandwidth stays
    old = at_threads(spec, {"threads": 8}, 2)
    assert (old.memory_bandwidth, old.vector_flops["fp32"]) == (100e9, 200e9) and "calibrate` again" in old.notes[-1]
    # malformed rows are skipped, not trusted
    bad = at_threads(spec, {"threads": 8, "thread_ceilings": {"1": {"memory_bandwidth": -1, "vector_flops": {}}}}, 2)
    assert (bad.memory_bandwidth, bad.vector_flops["fp32"]) == (100e9, 200e9)
    assert trace_threads([{"bwdiag": {"torch_threads": 1}}, {"bwdiag": {"torch_threads": 2}}, {}]) == 2
    assert trace_threads([{"bwdiag": {"torch_threads": True}}]) is None and trace_threads(None) is None


def test_corrupt_calibration_cache_names_the_file(calibrated, tmp_path, monkeypatch):
    from bwdiag.hardware.calibrate import CalibrationError, cache_path, device_identity, load_calibration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cache_path(device_identity("cpu"))
    path.parent.mkdir(parents=True)
    path.write_text("{oops")
    with pytest.raises(CalibrationError, match="calibration-cpu-"):
        load_calibration("cpu")


def test_calibrate_rejects_unknown_device():
    from bwdiag.hardware.calibrate import CalibrationError, calibrate

    with pytest.raises(CalibrationError, match="unknown device 'tpu'"):
        calibrate("tpu")


# -- CLI -------------------------------------------------------------------------------------


def test_devices_command_table():
    result = CliRunner().invoke(main, ["devices"])
    assert result.exit_code == 0, result.output
    line = next(l for l in result.output.splitlines() if l.startswith("H100 SXM5 80GB"))
    assert "3.35 TB/s" in line and "989 TFLOP/s" in line and "1.98 PFLOP/s" in line and "450 GB/s" in line


def test_devices_command_json():
    result = CliRunner().invoke(main, ["devices", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["A100 SXM4 40GB"]["tensor_flops"]["bf16"] == 312e12
    assert rows["MI300X"]["memory_bandwidth"] == 5.3e12
    assert all(row["sources"] for row in rows.values())


def test_calibrate_command(tmp_path):
    result = CliRunner().invoke(main, ["calibrate", "--device", "cpu", "--quick"],
                                env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "memory BW" in result.output and "fp32 vector" in result.output
    assert "µs per recorded op" in result.output and "compiled call inference" in result.output
    cached = list((tmp_path / "bwdiag").glob("calibration-cpu-*.json"))
    assert len(cached) == 1 and str(cached[0]) in result.output


def test_calibrate_command_error_path(tmp_path):
    result = CliRunner().invoke(main, ["calibrate", "--device", "tpu"],
                                env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "bwdiag: error: unknown device 'tpu'" in result.output
