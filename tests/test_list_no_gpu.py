"""``gemmzoo list`` says that a machine has no GPU, for CUDA backends it does not ask, without
importing any framework."""

from __future__ import annotations

import sys

from gemmzoo import Backend
from gemmzoo.cli import cmd_list
from gemmzoo.measure import device


class _Declared(Backend):
    """A backend whose framework (the standard library's ``this``: installed, never imported
    here) would have to be imported to ask it."""

    requires = ("this",)
    name = "declared"
    dtypes = frozenset({"float32"})

    def __init__(self, on: str) -> None:
        self.device = on
        self.asked = 0

    def unavailable_reason(self):
        self.asked += 1
        return None


def test_no_gpu_is_told_from_the_device_nodes(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    nodes = (str(tmp_path / "nvidiactl"), str(tmp_path / "kfd"))
    assert "no GPU" in device.no_gpu_reason(nodes)
    (tmp_path / "kfd").touch()
    assert device.no_gpu_reason(nodes) is None
    monkeypatch.setattr(sys, "platform", "darwin")  # elsewhere the nodes say nothing: not told
    (tmp_path / "kfd").unlink()
    assert device.no_gpu_reason(nodes) is None


def test_list_says_no_gpu_for_cuda_backends_it_does_not_ask(monkeypatch, tmp_path):
    assert "this" not in sys.modules
    monkeypatch.setattr(sys, "platform", "linux")
    nodes = (str(tmp_path / "nvidiactl"),)
    cuda, cpu = _Declared("cuda"), _Declared("cpu")
    assert cmd_list._availability(cuda, probe=False, gpu_nodes=nodes) == (None, cmd_list.NO_GPU)
    assert cmd_list._availability(cpu, probe=False, gpu_nodes=nodes) == (None, cmd_list.NOT_PROBED)
    (tmp_path / "nvidiactl").touch()
    assert cmd_list._availability(cuda, probe=False, gpu_nodes=nodes) == (None, cmd_list.NOT_PROBED)
    assert cuda.asked == cpu.asked == 0 and "this" not in sys.modules
    assert cmd_list._availability(cuda, probe=True, gpu_nodes=nodes) == (True, None)  # -v asks
    assert cuda.asked == 1
