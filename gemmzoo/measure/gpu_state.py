"""Which GPU measured a result, and its clocks and power state at that moment (NVML).

NVML comes from ``pynvml`` (the ``nvidia-ml-py`` distribution) when it is installed, else straight
from the driver's ``libnvidia-ml.so.1`` through ctypes; without either, a record still names the
GPU (index, and UUID from torch when it can tell) with the state fields ``None``. Nothing here
starts CUDA: the GPU is found by its UUID (asked of torch only where torch already uses CUDA) or
by its position in ``CUDA_VISIBLE_DEVICES``.

Reading the state takes microseconds; it is read right after each measurement, while the GPU is
still at the clock and power it ran the GEMMs at.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import Any

from gemmzoo.config import environment_value

#: NVML's clock-event (throttle) reason bits, by name.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMPERATURE_GPU = 0


class _Nvml:
    """The few NVML calls gemmzoo needs, through pynvml or ctypes."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            pynvml = None
        self._py = pynvml
        if pynvml is not None:
            pynvml.nvmlInit()
            return
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self._lib.nvmlInit_v2())

    @staticmethod
    def _check(code: int) -> None:
        if code != 0:
            raise OSError(f"NVML error {code}")

    def handle(self, index: int | None, uuid: str | None) -> Any:
        if self._py is not None:
            if uuid:
                return self._py.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)
            return self._py.nvmlDeviceGetHandleByIndex(index)
        found = ctypes.c_void_p()
        if uuid:
            self._check(self._lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(found)))
        else:
            position = ctypes.c_uint(index or 0)
            self._check(self._lib.nvmlDeviceGetHandleByIndex_v2(position, ctypes.byref(found)))
        return found

    def _uint(self, name: str, handle: Any, *args: Any) -> int | None:
        if self._py is not None:
            try:
                return int(getattr(self._py, name)(handle, *args))
            except Exception:  # not supported on this GPU or driver
                return None
        value = ctypes.c_uint()
        if getattr(self._lib, name)(handle, *[ctypes.c_uint(a) for a in args], ctypes.byref(value)) != 0:
            return None
        return value.value

    def _text(self, name: str, handle: Any) -> str | None:
        if self._py is not None:
            try:
                value = getattr(self._py, name)(handle)
            except Exception:
                return None
            return value.decode() if isinstance(value, bytes) else str(value)
        buffer = ctypes.create_string_buffer(96)
        if getattr(self._lib, name)(handle, buffer, ctypes.c_uint(96)) != 0:
            return None
        return buffer.value.decode()

    def _reasons(self, handle: Any) -> int | None:
        if self._py is not None:
            try:
                return int(self._py.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
            except Exception:
                return None
        value = ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetCurrentClocksThrottleReasons(handle, ctypes.byref(value)) != 0:
            return None
        return value.value

    def default_sm_clock(self, handle: Any) -> int | None:
        """The SM clock the GPU runs at by default (its default applications clock), else its
        highest SM clock."""
        if self._py is not None:
            try:
                return int(self._py.nvmlDeviceGetDefaultApplicationsClock(handle, _CLOCK_SM))
            except Exception:
                return self._uint("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM)
        value = self._uint("nvmlDeviceGetDefaultApplicationsClock", handle, _CLOCK_SM)
        return value if value is not None else self._uint("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM)

    def sm_clock(self, handle: Any) -> int | None:
        """The SM clock now, in MHz."""
        return self._uint("nvmlDeviceGetClockInfo", handle, _CLOCK_SM)

    def count(self) -> int | None:
        if self._py is not None:
            return int(self._py.nvmlDeviceGetCount())
        value = ctypes.c_uint()
        return value.value if self._lib.nvmlDeviceGetCount_v2(ctypes.byref(value)) == 0 else None

    def state(self, handle: Any) -> dict[str, Any]:
        power = self._uint("nvmlDeviceGetPowerUsage", handle)
        limit = self._uint("nvmlDeviceGetEnforcedPowerLimit", handle)
        pstate = self._uint("nvmlDeviceGetPerformanceState", handle)
        reasons = self._reasons(handle)
        return {
            "index": self._uint("nvmlDeviceGetIndex", handle),
            "uuid": self._text("nvmlDeviceGetUUID", handle),
            "name": self._text("nvmlDeviceGetName", handle),
            "sm_clock_mhz": self._uint("nvmlDeviceGetClockInfo", handle, _CLOCK_SM),
            "mem_clock_mhz": self._uint("nvmlDeviceGetClockInfo", handle, _CLOCK_MEM),
            "max_sm_clock_mhz": self._uint("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM),
            "power_w": power / 1000 if power is not None else None,
            "power_limit_w": limit / 1000 if limit is not None else None,
            "temperature_c": self._uint("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
            "pstate": f"P{pstate}" if pstate is not None else None,
            "throttle_reasons": None if reasons is None else
            [name for bit, name in THROTTLE_REASONS.items() if reasons & bit],
            "source": "pynvml" if self._py is not None else "nvml",
        }


@functools.lru_cache(maxsize=1)
def _nvml() -> _Nvml | None:
    try:
        return _Nvml()
    except Exception:  # no NVML: not an NVIDIA machine, or no driver
        return None


def gpu_count() -> int | None:
    """How many GPUs the driver has (all of them, whatever ``CUDA_VISIBLE_DEVICES`` says), or
    ``None`` without NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return nvml.count()
    except Exception:
        return None


def _torch_uuid() -> str | None:
    """The current CUDA device's UUID from torch, only if this process already uses CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def _visible_index() -> tuple[int | None, str | None]:
    """The first visible GPU as (driver index, UUID) from ``CUDA_VISIBLE_DEVICES`` (either form)."""
    first = (environment_value("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    if first.isdigit():
        return int(first), None
    return None, first if first.startswith(("GPU-", "MIG-")) else None


def _current_handle() -> tuple[_Nvml, Any] | None:
    """NVML and the handle of the GPU this process measures on, or ``None``."""
    nvml = _nvml()
    if nvml is None:
        return None
    index, visible_uuid = _visible_index()
    uuid = _torch_uuid() or visible_uuid
    for by_index, by_uuid in ((None, uuid), (index, None)):
        if by_index is None and by_uuid is None:
            continue
        try:
            return nvml, nvml.handle(by_index, by_uuid)
        except Exception:  # a MIG instance, or a UUID or index NVML does not know
            continue
    return None


def sm_clock_reader() -> tuple[Callable[[], int | None], int | None] | None:
    """``(read, default_mhz)`` for the GPU this process measures on: ``read()`` gives its SM
    clock now in MHz (microseconds per call), ``default_mhz`` its default SM clock; ``None``
    without NVML."""
    found = _current_handle()
    if found is None:
        return None
    nvml, handle = found
    return functools.partial(nvml.sm_clock, handle), nvml.default_sm_clock(handle)


def gpu_state() -> dict[str, Any]:
    """The GPU this process measures on (the current CUDA device) and its state now:
    ``index`` (the driver's numbering, as ``nvidia-smi`` shows it), ``uuid``, ``name``,
    ``sm_clock_mhz``, ``mem_clock_mhz``, ``max_sm_clock_mhz``, ``power_w``, ``power_limit_w``,
    ``temperature_c``, ``pstate``, ``throttle_reasons``, and ``source`` (``pynvml``, ``nvml``,
    or ``none`` when NVML is missing and only the identity is known)."""
    uuid = _torch_uuid()
    index, visible_uuid = _visible_index()
    uuid = uuid or visible_uuid
    nvml = _nvml()
    if nvml is not None:
        for by_index, by_uuid in ((None, uuid), (index, None)):
            if by_index is None and by_uuid is None:
                continue
            try:
                return nvml.state(nvml.handle(by_index, by_uuid))
            except Exception:  # a MIG instance, or a UUID or index NVML does not know
                continue
    empty = dict.fromkeys(("name", "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "power_w",
                           "power_limit_w", "temperature_c", "pstate", "throttle_reasons"))
    return {"index": index, "uuid": uuid, **empty, "source": "none"}
