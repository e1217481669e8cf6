"""Roofline placement worked by hand, the latency rules, invariants, and `bwdiag roofline`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from bwdiag.cli import main
from bwdiag.diagnose.model import Bound
from bwdiag.diagnose.roofline import (
    CPU_DISPATCH_MAX_MEAN_S,
    GPU_LATENCY_MAX_MEAN_S,
    GPU_SMALL_GRID_MAX_MEAN_S,
    place,
)
from bwdiag.hardware import find_device
from bwdiag.hardware.spec import fallback_spec

A100 = find_device("A100 SXM4 80GB")  # bf16 tensor 312e12, fp32 19.5e12, 2.039e12 B/s, 108 SMs
H100 = find_device("H100 SXM5 80GB")  # bf16 tensor 989.4e12, 3.35e12 B/s

# bf16 GEMM 4096 x 4096 x 4096: 2*M*N*K FLOPs; reads A and B, writes C, 2 bytes each.
GEMM_FLOPS = 2 * 4096**3  # 137,438,953,472
GEMM_BYTES = 3 * 4096**2 * 2  # 100,663,296


def test_a100_bf16_gemm_is_compute_bound():
    p = place(GEMM_FLOPS, GEMM_BYTES, 500e-6, A100, "bf16", tensor=True)
    assert p.intensity == pytest.approx(4096 / 3)  # 1365.3 FLOP/B
    assert p.ridge_point == pytest.approx(312e12 / 2.039e12)  # 153.0 FLOP/B
    assert p.bound is Bound.COMPUTE
    assert p.ceiling == "bf16 tensor"
    assert p.attainable_flops_per_s == 312e12
    assert p.best_time_s == pytest.approx(GEMM_FLOPS / 312e12)  # 440.5 µs
    assert p.best_time_s == pytest.approx(440.5e-6, rel=1e-4)
    assert p.achieved_flops_per_s == pytest.approx(GEMM_FLOPS / 500e-6)  # 274.9 TFLOP/s
    assert p.pct_of_ceiling == pytest.approx(100 * GEMM_FLOPS / 500e-6 / 312e12)  # 88.1 %
    assert p.pct_of_ceiling == pytest.approx(88.10, abs=0.01)


def test_same_gemm_on_vector_units_has_a_lower_roof():
    p = place(GEMM_FLOPS, GEMM_BYTES, None, A100, "fp32", tensor=False)
    assert p.ceiling == "fp32 vector"
    assert p.ridge_point == pytest.approx(19.5e12 / 2.039e12)  # 9.56 FLOP/B
    assert p.best_time_s == pytest.approx(GEMM_FLOPS / 19.5e12)  # 7.05 ms
    assert p.pct_of_ceiling is None and p.achieved_flops_per_s is None


def test_h100_bf16_add_is_memory_bound():
    # c = a + b over 2^24 bf16 elements: 1 FLOP and 3 x 2 bytes per element.
    n = 2**24
    p = place(n, 6 * n, 40e-6, H100, "bf16", tensor=False)
    assert p.intensity == pytest.approx(1 / 6)
    assert p.bound is Bound.MEMORY
    assert p.ceiling == "memory"
    assert p.compute_ceiling == "bf16 vector"
    assert p.attainable_flops_per_s == pytest.approx(3.35e12 / 6)
    assert p.best_time_s == pytest.approx(6 * n / 3.35e12)  # 30.05 µs
    assert p.achieved_bytes_per_s == pytest.approx(6 * n / 40e-6)  # 2.517 TB/s
    assert p.pct_of_ceiling == pytest.approx(100 * (6 * n / 40e-6) / 3.35e12)  # 75.1 %
    assert p.pct_of_ceiling == pytest.approx(75.12, abs=0.01)


def test_byte_only_kernel_is_held_to_bandwidth():
    p = place(None, 1e9, 1e-3, A100, None, tensor=False)
    assert p.bound is Bound.MEMORY and p.ceiling == "memory"
    assert p.intensity is None and p.attainable_flops_per_s is None
    assert p.best_time_s == pytest.approx(1e9 / 2.039e12)
    assert p.pct_of_ceiling == pytest.approx(100 * 1e12 / 2.039e12)  # 49.04 %


def test_flop_only_kernel_is_held_to_compute():
    p = place(1e12, None, 5e-3, A100, "bf16", tensor=True)
    assert p.bound is Bound.COMPUTE and p.ceiling == "bf16 tensor"
    assert p.best_time_s == pytest.approx(1e12 / 312e12)
    assert p.pct_of_ceiling == pytest.approx(100 * 2e14 / 312e12)  # 64.1 %


def test_nothing_known_is_unknown():
    p = place(None, None, 1e-3, A100, "bf16", tensor=True)
    assert p.bound is Bound.UNKNOWN and p.ceiling == "unknown"
    assert p.best_time_s is None and p.pct_of_ceiling is None and p.intensity is None


def test_dtype_without_a_compute_roof_is_placed_on_memory_alone():
    from dataclasses import replace

    no_fp64 = replace(A100, vector_flops={"fp32": 19.5e12}, tensor_flops={})
    p = place(1e9, 1e9, 1e-3, no_fp64, "fp64", tensor=True)
    assert p.bound is Bound.MEMORY and p.compute_ceiling is None
    assert p.best_time_s == pytest.approx(1e9 / 2.039e12)
    assert place(1e9, None, 1e-3, no_fp64, "fp64", tensor=True).bound is Bound.UNKNOWN


def test_exactly_at_the_ridge_is_compute_bound():
    ridge = 312e12 / 2.039e12
    p = place(ridge * 1e6, 1e6, None, A100, "bf16", tensor=True)
    assert p.bound is Bound.COMPUTE


def test_tiny_short_kernel_is_latency_bound():
    # 1 KFLOP, 4 KiB in 3 µs: 0.007 % of the memory roof.
    p = place(1024, 4096, 3e-6, A100, "fp32", tensor=False, mean_duration_s=3e-6)
    assert 3e-6 < GPU_LATENCY_MAX_MEAN_S
    assert p.bound is Bound.LATENCY and p.ceiling == "launch latency"
    assert p.pct_of_ceiling == pytest.approx(100 * 4096 / 3e-6 / 2.039e12)


def test_short_kernel_near_its_roof_is_not_latency_bound():
    moved = 0.8 * 2.039e12 * 4e-6  # 80 % of bandwidth over 4 µs
    p = place(None, moved, 4e-6, A100, None, tensor=False, mean_duration_s=4e-6)
    assert p.bound is Bound.MEMORY
    assert p.pct_of_ceiling == pytest.approx(80.0)


def test_small_grid_short_kernel_is_latency_bound():
    moved = 0.10 * 2.039e12 * 15e-6  # 10 % of bandwidth, 15 µs, 8 blocks on 108 SMs
    p = place(None, moved, 15e-6, A100, None, tensor=False, mean_duration_s=15e-6, grid_blocks=8)
    assert 15e-6 < GPU_SMALL_GRID_MAX_MEAN_S
    assert p.bound is Bound.LATENCY
    long = place(None, moved * 2, 30e-6, A100, None, tensor=False, mean_duration_s=30e-6,
                 grid_blocks=8)
    assert long.bound is Bound.MEMORY
    full_grid = place(None, moved, 15e-6, A100, None, tensor=False, mean_duration_s=15e-6,
                      grid_blocks=216)
    assert full_grid.bound is Bound.MEMORY


def test_cpu_dispatch_overhead():
    cpu = fallback_spec("cpu")  # 768 GFLOP/s fp32, 51.2 GB/s
    p = place(1000, 8000, 10e-6, cpu, "fp32", tensor=False, mean_duration_s=10e-6)
    assert 10e-6 < CPU_DISPATCH_MAX_MEAN_S
    assert p.bound is Bound.LATENCY and p.ceiling == "dispatch overhead"
    slow = place(1000, 8000, 100e-6, cpu, "fp32", tensor=False, mean_duration_s=100e-6)
    assert slow.bound is Bound.MEMORY  # long enough that dispatch is not the story


@settings(max_examples=300, deadline=None)
@given(
    flops=st.floats(1.0, 1e16),
    bytes_=st.floats(1.0, 1e13),
    time_s=st.floats(1e-7, 10.0),
    tensor=st.booleans(),
)
def test_placement_invariants(flops, bytes_, time_s, tensor):
    p = place(flops, bytes_, time_s, H100, "bf16", tensor=tensor)
    peak = H100.peak_flops("bf16", tensor=tensor)
    assert p.best_time_s == pytest.approx(max(flops / peak, bytes_ / 3.35e12))
    assert p.pct_of_ceiling == pytest.approx(100 * p.best_time_s / time_s)
    assert (p.bound is Bound.COMPUTE) == (flops / bytes_ >= peak / 3.35e12)
    assert p.attainable_flops_per_s <= peak * (1 + 1e-12)
    # achieved FLOP/s never beat the attainable roof unless the kernel beats its best time
    if time_s >= p.best_time_s:
        assert p.achieved_flops_per_s <= p.attainable_flops_per_s * (1 + 1e-9)


# -- CLI -------------------------------------------------------------------------------------


def test_roofline_command():
    args = ["roofline", "--flops", str(GEMM_FLOPS), "--bytes", str(GEMM_BYTES), "--time", "500us",
            "--device", "A100 SXM4 80GB", "--dtype", "bf16"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "1365 FLOP/B" in out
    assert "ceiling       bf16 tensor" in out
    assert "bound         compute" in out
    assert "best time     440.5 µs" in out
    assert "of ceiling    88.1%" in out


def test_roofline_command_accepts_suffixes_and_driver_names():
    result = CliRunner().invoke(main, ["roofline", "--flops", "1G", "--bytes", "6G", "--device",
                                       "NVIDIA H100 80GB HBM3", "--vector"])
    assert result.exit_code == 0, result.output
    assert "H100 SXM5 80GB" in result.output
    assert "bound         memory" in result.output
    assert "best time     1.791 ms" in result.output  # 6e9 B / 3.35e12 B/s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "Z100"], "unknown device 'Z100'; choose one of: V100 SXM2 32GB"),
        (["--device", "H100", "--dtype", "fp4"], "unknown dtype 'fp4'"),
        (["--device", "H100", "--time", "soon"], "--time: not a duration: 'soon'"),
    ],
)
def test_roofline_command_errors(args, message):
    result = CliRunner().invoke(main, ["roofline", "--flops", "1T", "--bytes", "1G", *args])
    assert result.exit_code == 2
    assert f"bwdiag: error: {message}" in result.output


def test_roofline_command_bad_quantity():
    result = CliRunner().invoke(main, ["roofline", "--flops", "lots", "--bytes", "1G",
                                       "--device", "H100"])
    assert result.exit_code == 2
    assert "not a quantity: 'lots'" in result.output
