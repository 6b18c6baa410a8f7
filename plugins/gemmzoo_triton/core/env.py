"""Where the Triton backends run: the mode (GPU or Triton's CPU interpreter), the dtypes each
mode computes right, the installed Triton's version and why the backends cannot run here.

Nothing here imports torch or triton at module import; the functions that need them import them.
"""

from __future__ import annotations

import importlib.util
import os

#: The oldest Triton with ``tl.dot(..., input_precision=...)`` (it replaced ``allow_tf32``); the
#: keyword has the same name and values ("ieee", "tf32") in Triton 3.6 and 3.9.
MIN_TRITON = (3, 0)

#: The oldest Triton whose Gluon the Gluon kernels were written and checked against; the API
#: moved fast before it, so an older Triton keeps the backends on their ``tl`` kernels.
GLUON_MIN_TRITON = (3, 6)


#: How the autotuned kernels tune a problem met for the first time (a backend's ``autotune=``):
#: see :mod:`~gemmzoo_triton.core.autotune`.
AUTOTUNE_MODES = ("quick", "full")

#: The environment variable that gives the mode of backends made without ``autotune=`` (read when
#: a backend is made).
AUTOTUNE_ENV = "GEMMZOO_TRITON_AUTOTUNE"


def autotune_mode(requested: str | None = None) -> str:
    """The autotuning mode: ``requested``, else :data:`AUTOTUNE_ENV`'s value, else ``"quick"``."""
    mode = requested
    if mode is None:
        from gemmzoo.session import current

        mode = current().config.variable(AUTOTUNE_ENV).strip().lower() or "quick"
    if mode not in AUTOTUNE_MODES:
        where = "autotune=" if requested is not None else f"{AUTOTUNE_ENV}="
        raise ValueError(f"gemmzoo_triton: {where}{mode!r}: the autotuning mode is one of "
                         f"{', '.join(AUTOTUNE_MODES)}")
    return mode


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


def triton_version() -> tuple[int, ...]:
    """The installed Triton's (major, minor) version."""
    import triton

    return tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit())


def triton_unavailable_reason() -> str | None:
    """Why the Triton backends cannot run here, or ``None``."""
    for package in ("torch", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'gemmzoo[triton]')"
    if triton_version() < MIN_TRITON:
        import triton

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
