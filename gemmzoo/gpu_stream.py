"""The CUDA pieces of the timing engine: events, an L2 flush, and a hold on the stream.

A *hold* is a one-thread kernel that spins until a flag in pinned host memory turns non-zero.
While it spins, everything queued after it on the stream waits, so the host can queue timed
calls (flush, start event, GEMM, end event) at its own pace; once it releases the flag, the GPU
runs them back to back and no host-side launch time can fall between a call's events. This is
how NVIDIA's nvbench (``block_stream``) separates launch time from device time.

The kernel comes from CuPy (CUDA C through NVRTC) or from Triton (torch tensors), whichever is
installed, in that order. A watchdog thread releases a hold that is still closed after
:data:`HOLD_TIMEOUT_S`: a call that synchronises, or that fills the launch queue, would otherwise
wait forever for a kernel that waits for the host. The engine then sees ``expired`` and times
that call without a hold.

Events come from torch when it sees a GPU, else from CuPy; both record on the current stream,
where the bundled backends launch their work.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2, like triton.testing.do_bench
HOLD_TIMEOUT_S = 2.0
_FLAG_SLOTS = 64  # a fresh flag per hold, so a new hold never re-arms one an old kernel still reads

_CUDA_HOLD = r"""
extern "C" __global__ void gemmzoo_hold(unsigned long long address) {
    const volatile int* flag = (const volatile int*)address;
    while (*flag == 0) {
    }
}
"""


def torch_cuda() -> bool:
    """Whether torch is installed with CUDA usable (a CPU build on a CuPy machine is not)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class StreamHold:
    """One hold on the current stream; :meth:`release` lets the queued work run."""

    def __init__(self, flag: np.ndarray, launch: Callable[[], None],
                 timeout_s: float = HOLD_TIMEOUT_S) -> None:
        self._flag = flag
        self.expired = False
        flag[0] = 0
        launch()
        self._watchdog = threading.Timer(timeout_s, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _expire(self) -> None:
        self.expired = True
        self._flag[0] = 1

    def release(self) -> None:
        """Open the flag (idempotent)."""
        self._watchdog.cancel()
        self._flag[0] = 1


class _CupyHolder:
    def __init__(self) -> None:
        import cupy

        self._kernel = cupy.RawKernel(_CUDA_HOLD, "gemmzoo_hold")
        self._memory = cupy.cuda.alloc_pinned_memory(4 * _FLAG_SLOTS)
        self._flags = np.frombuffer(self._memory, np.int32, _FLAG_SLOTS)
        self._flags[:] = 1
        try:
            base = cupy.cuda.runtime.hostGetDevicePointer(self._memory.ptr, 0)
        except Exception:  # with unified addressing the host address is the device address
            base = self._memory.ptr
        self._base = int(base)
        self._slot = 0

    def __call__(self) -> StreamHold:
        self._slot = (self._slot + 1) % _FLAG_SLOTS
        slot = self._slot
        address = np.uint64(self._base + 4 * slot)
        return StreamHold(self._flags[slot:slot + 1], lambda: self._kernel((1,), (1,), (address,)))


class _TritonHolder:
    def __init__(self) -> None:
        import torch

        from gemmzoo.measure._hold_kernel import hold_kernel

        self._kernel = hold_kernel
        self._pinned = torch.ones(_FLAG_SLOTS, dtype=torch.int32).pin_memory()
        self._flags = self._pinned.numpy()
        self._slot = 0

    def __call__(self) -> StreamHold:
        self._slot = (self._slot + 1) % _FLAG_SLOTS
        slot = self._slot
        view = self._pinned[slot:slot + 1]
        return StreamHold(self._flags[slot:slot + 1], lambda: self._kernel[(1,)](view))


_HOLDERS: dict[str, Callable[[], Any]] = {"cupy": _CupyHolder, "triton": _TritonHolder}


class CudaGpu:
    """Events, flush, synchronisation and stream holds for the current CUDA device.

    ``holder`` names the hold kernel's source (``"cupy"`` or ``"triton"``); by default the first
    that works here. ``hold()`` returns ``None`` when neither does, and the engine then times
    without a hold (and says so).
    """

    def __init__(self, holder: str | None = None) -> None:
        if torch_cuda():
            import torch

            self._new_event = lambda: torch.cuda.Event(enable_timing=True)
            flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            self.flush = flush_buffer.zero_
            self.synchronize = torch.cuda.synchronize
            self._elapsed_ms = lambda start, end: start.elapsed_time(end)
        else:
            import cupy

            self._new_event = cupy.cuda.Event
            cupy_buffer = cupy.empty(L2_FLUSH_BYTES // 4, dtype=cupy.int32)
            self.flush = lambda: cupy_buffer.fill(0)
            self.synchronize = cupy.cuda.Device().synchronize
            self._elapsed_ms = lambda start, end: cupy.cuda.get_elapsed_time(start, end)
        self.holder_name, self._holder = _first_holder(holder)

    def pair(self) -> tuple[Any, Any]:
        """A fresh (start, end) pair of timing events; each has ``record()``."""
        return self._new_event(), self._new_event()

    @staticmethod
    def wait(event: Any) -> None:
        """Return when the device has reached ``event`` (a recorded event)."""
        event.synchronize()

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds of device time between two recorded events (both completed)."""
        return self._elapsed_ms(start, end) / 1e3

    def hold(self) -> StreamHold | None:
        """Hold the current stream until the returned object's ``release()``; ``None`` when no
        hold kernel can be built here."""
        return self._holder() if self._holder is not None else None


def _first_holder(wanted: str | None) -> tuple[str | None, Any]:
    names = [wanted] if wanted else list(_HOLDERS)
    for name in names:
        try:
            holder = _HOLDERS[name]()
            holder().release()  # build (and compile) it once, outside any timing
        except Exception:
            if wanted:
                raise
            continue
        return name, holder
    return None, None


@functools.lru_cache(maxsize=1)
def default_gpu() -> CudaGpu:
    """The process's :class:`CudaGpu` (one flush buffer and one hold kernel per process)."""
    return CudaGpu()
