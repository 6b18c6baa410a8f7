"""The roofline: bytes a GEMM must move, its floor on a known device, and the bandwidth measured
once per device and kept in the tuning database."""

from __future__ import annotations

import pytest
from sessions import reconfigure, restart

from gemmzoo.measure import roofline as roofline_module
from gemmzoo.measure.roofline import bytes_moved, roofline
from gemmzoo.problems.grids import GridPoint

H100 = "NVIDIA H100 80GB HBM3"


def test_bytes_moved_counts_each_operand_once():
    assert bytes_moved(GridPoint(16, 4096, 4096, "float16")) == 2 * (16 * 4096 + 4096 * 4096 + 16 * 4096)
    assert bytes_moved(GridPoint(3, 5, 7, "float32")) == 4 * (21 + 35 + 15)


def test_a_decode_gemm_is_memory_bound_and_a_cube_compute_bound():
    decode = GridPoint(16, 4096, 4096, "float16")
    seconds = 2 * bytes_moved(decode) / 3e12  # half the copy bandwidth
    roof = roofline(decode, seconds, "cuda", H100, bandwidth_bytes_per_s=3e12)
    assert roof.bound == "memory" and roof.percent == pytest.approx(50)
    assert roof.gbps == pytest.approx(1500) and roof.peak_tflops == 989
    cube = GridPoint(4096, 4096, 4096, "float16")
    at_peak = cube.flops / 989e12
    roof = roofline(cube, 2 * at_peak, "cuda", H100, bandwidth_bytes_per_s=3e12)
    assert roof.bound == "compute" and roof.percent == pytest.approx(50)


def test_no_roofline_where_the_device_is_unknown():
    roof = roofline(GridPoint(64, 64, 64), 1e-5, "cpu", "Some CPU")
    assert roof.bound is None and roof.percent is None and roof.gbps > 0


def test_bandwidth_is_measured_once_per_device_and_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path))
    reconfigure()
    monkeypatch.setattr("gemmzoo.tuning.fingerprint.device_fingerprint", lambda device: "fake-gpu")
    measured = []

    def copy_bandwidth(*args, **kwargs):
        measured.append(1)
        return 2.9e12

    monkeypatch.setattr(roofline_module, "measure_copy_bandwidth", copy_bandwidth)
    restart()
    try:
        assert roofline_module.bandwidth("cuda") == 2.9e12
        assert roofline_module.bandwidth("cuda") == 2.9e12 and len(measured) == 1  # kept in the session
        restart()  # as a new process would: a new session, the database the same
        assert roofline_module.bandwidth("cuda") == 2.9e12 and len(measured) == 1  # from the database
        assert roofline_module.bandwidth("cpu") is None
        point = GridPoint(16, 4096, 4096, "float16")
        roof = roofline(point, bytes_moved(point) / 2.9e12, "cuda", H100)
        assert roof.bandwidth_gbps == pytest.approx(2900) and roof.percent == pytest.approx(100)
    finally:
        restart()
