"""What the three Triton backends share: availability, the run mode, and the wrapper helpers.

Nothing here imports torch or triton at module import; the functions that need them import them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.backend import dtype_name
from gemmzoo.torch_tensors import TorchTensors

#: The oldest Triton with ``tl.dot(..., input_precision=...)`` (it replaced ``allow_tf32``); the
#: keyword has the same name and values ("ieee", "tf32") in Triton 3.6 and 3.9.
MIN_TRITON = (3, 0)

#: The fused epilogues ``triton-grouped`` offers, by the name callers pass as ``activation``.
ACTIVATIONS = ("leaky_relu", "relu")

#: Offsets into each matrix are 32-bit in the kernels.
MAX_OFFSET = 2**31 - 1

def interpreter_mode() -> bool:
    """Whether Triton runs kernels under its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def mode_dtypes() -> frozenset[str]:
    """The dtypes the Triton backends compute correctly in the current mode.

    On a GPU: float16, bfloat16, float32 (IEEE) and tf32. Under the interpreter only float16 and
    float32: its ``tl.dot`` on bfloat16 reads the raw 16-bit patterns (wrong results, an upstream
    bug), and its fp32 dot is IEEE even when TF32 is asked for, so a tf32 pass there would not
    have computed TF32 at all.
    """
    if interpreter_mode():
        return frozenset({"float16", "float32"})
    return frozenset({"float16", "bfloat16", "float32", "tf32"})


def triton_unavailable_reason() -> str | None:
    """Why the Triton backends cannot run here, or ``None``."""
    for package in ("torch", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'gemmzoo[triton]')"
    import triton

    version = tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit())
    if version < MIN_TRITON:
        return f"triton {triton.__version__} is too old; gemmzoo needs triton >= 3.0"
    if interpreter_mode():
        return None
    import torch

    if not torch.cuda.is_available():
        return (
            f"no CUDA GPU visible to torch {torch.__version__}; "
            "set TRITON_INTERPRET=1 to run the Triton kernels on the CPU under Triton's interpreter"
        )
    return None


class TritonBackend(TorchTensors, Backend):
    """Base of the Triton backends: torch tensors in, torch tensors out, one kernel per backend.

    ``device`` is ``"cuda"``, or ``"cpu"`` under Triton's interpreter (``TRITON_INTERPRET=1``),
    which runs the same kernels on CPU tensors. ``dtypes`` follow the mode; see
    :func:`mode_dtypes` for why the interpreter declares fewer.
    """

    @property  # type: ignore[override]
    def device(self) -> str:  # the base class has a plain attribute; here it follows the mode
        return "cpu" if interpreter_mode() else "cuda"

    @property  # type: ignore[override]
    def dtypes(self) -> frozenset[str]:
        return mode_dtypes()

    def unavailable_reason(self) -> str | None:
        return triton_unavailable_reason()

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    # Wrapper helpers ---------------------------------------------------------------------------

    def operands(self, a: Any, b: Any) -> tuple[Any, Any, str]:
        """The torch tensors behind A and B, and the ``tl.dot`` input precision for their mode.

        The precision is "ieee" for float32 and "tf32" otherwise: TF32 tensor-core math for the
        tf32 mode, and Triton's default for 16-bit inputs, where it has no effect.

        Call after :meth:`check_operands`. Raises a clear error for tensors on the wrong device
        or too large for the kernels' 32-bit offsets.
        """
        x, y = (a.data, b.data) if isinstance(a, TF32Array) else (a, b)
        for label, tensor in (("A", x), ("B", y)):
            if tensor.device.type != self.device:
                raise self.input_error(
                    "matmul", f"{label} is on {tensor.device}, this backend runs on {self.device}",
                    A=x.shape, B=y.shape,
                )
            if _largest_offset(tensor) > MAX_OFFSET:
                raise self.input_error(
                    "matmul", f"{label} spans more than 2**31 elements, past the kernels' 32-bit offsets",
                    A=x.shape, B=y.shape,
                )
        if x.shape[0] * y.shape[1] > MAX_OFFSET:
            raise self.input_error(
                "matmul", "C would hold more than 2**31 elements, past the kernels' 32-bit offsets",
                A=x.shape, B=y.shape,
            )
        return x, y, "ieee" if dtype_name(a) == "float32" else "tf32"

    def empty_result(self, c: Any, k: int) -> bool:
        """Finish ``c`` without a launch when the problem is empty; True when that was done.

        An empty C needs no work; K == 0 makes C all zeros. Either way no grid is launched.
        """
        if c.numel() == 0:
            return True
        if k == 0:
            c.zero_()
            return True
        return False

    @staticmethod
    def result(c: Any, a: Any) -> Any:
        """``c`` in the caller's mode: a :class:`TF32Array` when A was one."""
        return TF32Array(c) if isinstance(a, TF32Array) else c


def _largest_offset(tensor: Any) -> int:
    """The largest element offset a kernel computes into ``tensor`` (0 when it is empty)."""
    if tensor.numel() == 0:
        return 0
    return sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
