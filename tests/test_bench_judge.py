"""gemmzoo bench judges a result by the conformance suite's checks: anything wrong is WRONG."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from fake_distributions import run_gemmzoo, write_distribution
from strassen_plugin import StrassenBackend

from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.report import results_table
from gemmzoo.scale.bench import OK, WRONG, bench_one
from gemmzoo_numpy import NumpyBackend


class Float64Result(NumpyBackend):
    name = "float64-result"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(a.astype(np.float64), b.astype(np.float64))


class TorchResult(NumpyBackend):
    name = "torch-result"

    def matmul(self, a, b):
        import torch  # imported here so that collecting this file needs no torch

        self.check_operands(a, b)
        return torch.from_numpy(np.matmul(a, b))


class TransposedResult(NumpyBackend):
    name = "transposed-result"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.ascontiguousarray(np.matmul(a, b).T)


class InfInsteadOfLarge(NumpyBackend):
    name = "inf-result"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        c[0, 0] = np.inf
        return c


class ToNumpyKeepsFloat16(NumpyBackend):
    name = "to-numpy-float16"

    def to_numpy(self, y):
        return np.array(y, dtype=np.float16)


@pytest.mark.parametrize(("backend", "message"), [
    (Float64Result(), "C has dtype float64, expected float32 (float32 operands)"),
    pytest.param(TorchResult(), "C is a Tensor, the operands are ndarray",
                 marks=pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")),
    (TransposedResult(), "C has shape (24, 40), expected (40, 24)"),
    (InfInsteadOfLarge(), "Inf pattern differs; first at (0, 0)"),
    (ToNumpyKeepsFloat16(), "to_numpy(C) gave float16 (40, 24), expected float32 (40, 24)"),
], ids=lambda x: getattr(x, "name", None))
def test_each_wrong_result_is_wrong_not_a_speed(backend, message):
    point = GridPoint(40, 24, 56, "float32")

    result = bench_one(backend, point, budget_s=0.005)

    assert result.status == WRONG and result.tflops is None and result.measurement is None
    assert result.detail.startswith(f"{backend.name}: {point.id}: {message}"), result.detail


def test_bench_uses_the_declared_accuracy_class_and_shows_it():
    class HonestStrassen(StrassenBackend):
        name = "strassen-normwise"
        accuracy = "normwise"

    point = GridPoint(64, 48, 80, "float32")
    results = [bench_one(NumpyBackend(), point, 0.005), bench_one(HonestStrassen(), point, 0.005)]

    assert [r.status for r in results] == [OK, OK]
    assert [r.as_dict()["accuracy"] for r in results] == ["componentwise", "normwise"]
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(results_table(results))
    text = " ".join(console.export_text().split())
    assert "strassen-normwise (normwise)" in text and "numpy (" not in text
    assert "accuracy class componentwise unless the column says (normwise)" in text


def test_gemmzoo_bench_shows_an_installed_plugins_float64_result_as_wrong(tmp_path):
    write_distribution(tmp_path, "gemmzoo-widening", "1.0", {"widening": "gemmzoo_widening"},
                       {"gemmzoo_widening": """
        import numpy as np
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class Widening(NumpyBackend):
            name = "widening"

            def matmul(self, a, b):
                self.check_operands(a, b)
                return np.matmul(a.astype(np.float64), b.astype(np.float64))

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(Widening())
    """})
    out = tmp_path / "bench.json"

    result = run_gemmzoo(tmp_path, "bench", "--backend", "widening", "--backend", "numpy", "--shape",
                         "64x48x32", "--dtype", "float32", "--budget", "0.005", "--json", str(out))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "WRONG" in result.stdout
    assert "C has dtype float64, expected float32 (float32 operands)" in result.stdout
    records = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert records["widening"]["status"] == "wrong" and records["widening"]["tflops"] is None
    assert records["numpy"]["status"] == "ok" and records["numpy"]["accuracy"] == "componentwise"
