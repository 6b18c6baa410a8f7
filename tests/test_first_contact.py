"""A fresh process pays only for what it uses, and the shipped prior routes a problem with nothing
measured (subprocesses, so that ``sys.modules`` starts empty)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmzoo.tuning import prior

FRAMEWORKS = ("torch", "jax", "jaxlib", "cupy", "triton")

ROUTES = {
    "numpy": ({"device": "cpu", "library": "numpy"},),
    "torch-cpu": ({"device": "cpu", "library": "torch"},),
    "torch": ({"device": "cuda", "library": "torch"},),
    "torch-padded": ({"device": "cuda", "library": "torch", "dtypes": ("float16", "bfloat16"),
                      "misaligned_bytes": 16},),
}


def _run(code: str, cache: str) -> dict:
    env = {**os.environ, "GEMMZOO_CACHE_DIR": cache}
    env.pop("GEMMZOO_BACKENDS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


IMPORTED = ("import json, sys; print(json.dumps({'imported': sorted({m.split('.')[0] for m in sys.modules} "
            f"& set({FRAMEWORKS!r})), **extra}}))")


def test_matmul_on_numpy_arrays_imports_no_framework(tmp_path):
    code = ("import numpy as np, gemmzoo\n"
            "rng = np.random.default_rng(5)\n"
            "a = rng.standard_normal((37, 23)).astype(np.float32)\n"
            "b = rng.standard_normal((23, 41)).astype(np.float32)\n"
            "c = gemmzoo.matmul(a, b)\n"
            "err = float(np.abs(c.astype(np.float64) - a.astype(np.float64) @ b.astype(np.float64)).max())\n"
            "from gemmzoo.dispatch.matmul import backend_for\n"
            "extra = {'err': err, 'shape': list(c.shape), 'backend': backend_for(a, b).name}\n" + IMPORTED)
    found = _run(code, str(tmp_path))
    assert found["imported"] == []
    assert found["shape"] == [37, 41] and found["err"] < 1e-4
    assert found["backend"] == "numpy"


def test_matmul_on_cpu_tensors_imports_torch_only(tmp_path):
    pytest.importorskip("torch")
    code = ("import torch, gemmzoo\n"
            "torch.manual_seed(3)\n"
            "a, b = torch.randn(29, 17), torch.randn(17, 31)\n"
            "c = gemmzoo.matmul(a, b)\n"
            "err = float((c.double() - a.double() @ b.double()).abs().max())\n"
            "from gemmzoo.dispatch.matmul import backend_for\n"
            "extra = {'err': err, 'backend': backend_for(a, b).name}\n" + IMPORTED)
    found = _run(code, str(tmp_path))
    assert found["imported"] == ["torch"]
    assert found["err"] < 1e-4 and found["backend"] == "torch-cpu"


def test_a_stored_problem_imports_only_what_can_answer_it(tmp_path):
    """With measurements stored (a first answer ran the suite of its winner only), a torch caller's
    first product in a new process asks the availability of backends with a verdict here, not of
    those without one: JAX is not imported for a torch CPU tensor."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    measured = ("import gemmzoo\n"
                "backend = gemmzoo.best_backend((48, 40, 32), 'float32', 'cpu')\n"
                "extra = {'backend': backend.name}\n" + IMPORTED)
    first = _run(measured, str(tmp_path))
    assert "jax" in first["imported"]  # measuring times every candidate, JAX's included
    code = ("import torch, gemmzoo\n"
            "from gemmzoo.tuning.tune import conformance_verdict\n"
            "from gemmzoo.tuning import state\n"
            "torch.manual_seed(3)\n"
            "a, b = torch.randn(48, 32), torch.randn(32, 40)\n"
            "c = gemmzoo.matmul(a, b)\n"
            "err = float((c.double() - a.double() @ b.double()).abs().max())\n"
            "from gemmzoo.dispatch.matmul import backend_for\n"
            "jax = gemmzoo.get_backend('jax')\n"
            "verdict = conformance_verdict(state.store(), jax, 'float32', run=False)\n"
            "extra = {'err': err, 'backend': backend_for(a, b).name, 'jax_verdict': verdict}\n" + IMPORTED)
    found = _run(code, str(tmp_path))
    assert found["err"] < 1e-4 and found["backend"] in ("torch-cpu", "numpy"), found
    if found["jax_verdict"] is None:  # JAX's suite did not run (it would not have been the answer)
        assert "jax" not in found["imported"] and "jaxlib" not in found["imported"]


def test_list_imports_no_framework(tmp_path):
    code = ("import contextlib, io, gemmzoo.cli\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
            "    gemmzoo.cli.main(['list', '--plain'])\n"
            "lines = out.getvalue().splitlines()[1:]\n"
            "rows = {line.split('\\t')[0]: line.split('\\t')[3] for line in lines}\n"
            "extra = {'rows': rows}\n" + IMPORTED)
    found = _run(code, str(tmp_path))
    assert found["imported"] == []
    assert found["rows"]["numpy"] == "yes"
    for name in ("torch-cpu", "jax"):
        module = "torch" if name.startswith("torch") else "jax"
        import importlib.util

        if importlib.util.find_spec(module) is None:
            assert found["rows"][name].startswith(f"no: {module} is not installed")
        else:
            assert found["rows"][name].startswith("installed")


@pytest.mark.parametrize(("shape", "dtype", "layout", "want"), [
    ((4097, 4097, 4097), "float16", "NN", "torch-padded"),
    ((4096, 4096, 4096), "float16", "NN", "torch"),
    ((4096, 4096, 4095), "bfloat16", "NN", "torch-padded"),  # A's rows: 4095·2 bytes
    ((4096, 4095, 4096), "float16", "NN", "torch-padded"),   # B's and C's rows
    ((4095, 4096, 4096), "float16", "TN", "torch-padded"),   # A stored K×M: rows of M
    ((4095, 4096, 4096), "float16", "NN", "torch"),          # M is no row length in NN
    ((4095, 4095, 4095), "float32", "NN", "torch"),          # not a 16-bit route
    ((0, 5, 5), "float16", "NN", "torch"),                   # an empty product has no alignment
])
def test_prior_routes_misaligned_16_bit_cuda_problems_to_the_padded_path(shape, dtype, layout, want):
    assert prior.route(shape, dtype, layout, "cuda", "sm_90", "torch", ROUTES) == want


def test_prior_routes_by_library_and_device():
    assert prior.route((100, 200, 300), "float32", "NN", "cpu", "x86_64", "numpy", ROUTES) == "numpy"
    assert prior.route((101, 201, 301), "float16", "NN", "cpu", "x86_64", "torch", ROUTES) == "torch-cpu"
    assert prior.route((8, 8, 8), "float32", "NN", "cuda", "sm_90", "cupy", ROUTES) is None
    keyed = {"a": ({"device": "cuda", "arch": ("sm_8",)},), "b": ({"device": "cuda"},)}
    assert prior.route((8, 8, 8), "float32", "NN", "cuda", "sm_80", None, keyed) == "a"
    assert prior.route((8, 8, 8), "float32", "NN", "cuda", "sm_90", None, keyed) == "b"


def test_a_route_with_a_work_floor_takes_only_products_at_or_above_it():
    floored = {**ROUTES, "torch-padded": ({**ROUTES["torch-padded"][0], "min_flops": 1e10},)}
    small, large = (1023, 1023, 1023), (1111, 2222, 3333)  # 2.1 and 16.5 GFLOP, both misaligned
    assert prior.route(small, "float16", "NN", "cuda", "sm_90", "torch", floored) == "torch"
    assert prior.route(large, "float16", "NN", "cuda", "sm_90", "torch", floored) == "torch-padded"
    exact = {"p": ({"device": "cuda", "min_flops": 2 * 10 * 10 * 10},)}
    assert prior.route((10, 10, 10), "float16", "NN", "cuda", "sm_90", None, exact) == "p"
    assert prior.route((10, 10, 9), "float16", "NN", "cuda", "sm_90", None, exact) is None


def test_prior_ignores_malformed_routes():
    bad = {"x": ({"device": "cpu", "colour": "red"}, "not a mapping", {"misaligned_bytes": "16"},
                 {"min_flops": "many"}, {"min_flops": float("nan")}, {"min_flops": True})}
    assert prior.route((3, 3, 3), "float32", "NN", "cpu", "x86_64", "numpy", bad) is None


def test_a_measured_answer_replaces_the_prior(tmp_path):
    """With a measured row at the shape, the answer comes from the database, not the prior."""
    code = ("import numpy as np, gemmzoo\n"
            "from gemmzoo.tuning.select import explain\n"
            "gemmzoo.best_backend((64, 48, 32), 'float32', 'cpu', measure=True)\n"
            "c = explain((64, 48, 32), 'float32', 'cpu', measure=False, library='numpy')\n"
            "p = explain((640, 480, 320), 'float32', 'cpu', measure=False, library='numpy')\n"
            "extra = {'measured': c.source, 'far': p.source}\n" + IMPORTED)
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path), "GEMMZOO_BACKENDS": "numpy"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["measured"] == "database"
    assert found["far"] == "nearest shape"


def test_the_cpu_backends_hint_points_at_the_cpu_index(monkeypatch):
    import importlib.util

    from gemmzoo_torch import backend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    cpu = backend.torch_missing_reason()
    assert "download.pytorch.org/whl/cpu" in cpu and "gemmzoo[torch]" not in cpu
    assert "gemmzoo[torch]" in backend.cuda_missing_reason()


def test_list_at_80_columns_shows_availability(tmp_path):
    """A long dtypes list (torch declares fp8 until it is loaded) gives way to the available column."""
    from fake_distributions import run_gemmzoo

    result = run_gemmzoo(tmp_path, "list", COLUMNS="80", TTY_COMPATIBLE="1", NO_COLOR="1",
                         GEMMZOO_CACHE_DIR=str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    import re

    lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stdout).splitlines()]
    header = next(line for line in lines if line.split()[:2] == ["backend", "device"])
    assert "available" in header.split()
    numpy_row = next(line for line in lines if line.startswith("numpy "))
    assert numpy_row.split()[-1] == "yes"
    assert all(len(line) <= 80 for line in lines)


def test_the_first_call_benchmarks_child_reports_what_served_a_numpy_call_and_imports_no_framework():
    # benchmarks/first_call.py's timed process, as it runs it: a fresh process and an empty cache
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "first_call.py"
    spec = importlib.util.spec_from_file_location("first_call_benchmark", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    ours = tool.child(tool.TIMED.format(setup=tool.SETUP["numpy"], product=tool.GEMMZOO))
    assert ours["served"] == "numpy" and ours["source"] == "library"
    assert ours["frameworks"] == []
    assert ours["wall_s"] > 0 and ours["cpu_s"] >= 0
