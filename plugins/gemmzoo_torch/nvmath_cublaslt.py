"""``nvmath-cublaslt``: cuBLASLt through nvmath-python's stateful ``Matmul``, autotuned per problem.

cuBLAS (``torch.mm``) runs the one algorithm its heuristic picks. cuBLASLt's heuristic returns
several for a problem, ranked; nvmath-python's ``Matmul.autotune`` times each of them on the
device and reorders them by measured time. This backend runs the fastest, so a kernel "faster
than cuBLAS" can be held against cuBLASLt's best algorithm, not only its default pick.

What a problem costs, and when:

- :meth:`NvmathCublasLtBackend.prepare` (once per problem: shapes, strides, dtype, device) builds a
  ``Matmul`` from the operands, ``plan``\\ s it (the heuristic's candidates, at most
  :data:`ALGORITHM_LIMIT`) and ``autotune``\\ s it (each candidate timed
  :data:`AUTOTUNE_ITERATIONS` times, nvmath flushing the L2 cache between runs): a fraction of a
  second to seconds per new problem, so the backend declares ``compiles_per_problem``. Problems of
  fewer than :data:`MIN_AUTOTUNE_WORK` multiply-adds run the heuristic's first pick. The plan is
  kept by the backend (``kept_plans`` problems, :data:`KEPT_PLANS` by default, the least recently
  used dropped), so ``matmul`` and later ``prepare`` calls of the same problem run the same algorithm.
- a call resets the ``Matmul``'s operands, executes it and releases the operands again (a plan
  keeps no operand alive): nvmath allocates a new result tensor each call, on torch's current
  stream, and returns it without waiting.

The rules a call's operands meet:

- Layouts: a row-major or column-major operand (any leading dimension, transposed views
  included) goes to cuBLASLt as it is; one with no unit stride (a strided slice) or whose
  leading stride overlaps its rows (a broadcast view) is copied into a contiguous tensor first,
  a choice made once per problem.
- Alignment: cuBLASLt's heuristic is told how the planned operands' addresses are aligned
  (up to 256 bytes), and its algorithms may rely on it. A call whose operand is less aligned
  (a view that starts inside an allocation) runs an algorithm planned and autotuned for that
  alignment, made the first time it is met.
- Numerics: float16 and bfloat16 accumulate in fp32 (``COMPUTE_32F``) and split-K partial sums
  are reduced in fp32 in the workspace (reductions in the output type are not allowed);
  float32 is IEEE (``COMPUTE_32F``); ``tf32`` is ``COMPUTE_32F_FAST_TF32``; float64 is
  ``COMPUTE_64F``. float8_e4m3fn is not offered: nvmath takes fp8 only with M, N and K
  multiples of 16, 16-byte aligned operands and A transposed, so every other suite problem
  would run on padded copies, not on cuBLASLt as a caller calls it.
- Empty products (M, N or K = 0) launch nothing: C is a new tensor of zeros.
- Threads: nvmath's ``Matmul`` belongs to the thread that made it (its cuBLASLt handle is cached
  per thread and destroyed when the thread ends), so each thread that calls a plan gets a
  ``Matmul`` of its own, planned with the algorithm autotuning chose (no second autotune).
  Each call releases its workspace (stream-ordered, through torch's caching allocator), so calls
  on different streams never share one.

torch and nvmath are imported inside the methods only.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.arrays.torch_tensors import TorchTensors
from gemmzoo.contract.backend import dtype_name
from gemmzoo_torch.backend import cuda_missing_reason, torch_missing_reason

NVMATH_HINT = "pip install 'gemmzoo[nvmath]'"

#: cuBLAS compute type of each dtype (names of ``nvmath.linalg.ComputeType``).
COMPUTE_TYPES = {
    "float16": "COMPUTE_32F",
    "bfloat16": "COMPUTE_32F",
    "float32": "COMPUTE_32F",
    "tf32": "COMPUTE_32F_FAST_TF32",
    "float64": "COMPUTE_64F",
}
#: The split-K reduction schemes allowed per dtype (names of
#: ``nvmath.linalg.advanced.MatmulReductionScheme``): for the 16-bit dtypes only reductions in the
#: compute type (fp32, in the workspace; no split-K is always allowed), since ``INPLACE`` and
#: ``OUTPUT_TYPE`` add partial sums in float16 or bfloat16; every scheme for the others, whose
#: output type is the accumulator's.
REDUCTION_SCHEMES = {
    "float16": "COMPUTE_TYPE",
    "bfloat16": "COMPUTE_TYPE",
    "float32": "MASK",
    "tf32": "MASK",
    "float64": "MASK",
}
#: Candidates asked of cuBLASLt's heuristic (nvmath's default).
ALGORITHM_LIMIT = 8
#: Timed runs of each candidate when autotuning (nvmath's default).
AUTOTUNE_ITERATIONS = 10
#: Multiply-adds (M·N·K) from which a problem is autotuned: below (under 256³) every candidate runs
#: in microseconds, and each of autotuning's timed runs (candidates × iterations) follows an L2
#: flush from the host, far costlier than the microseconds a call could save.
MIN_AUTOTUNE_WORK = 1 << 24
#: Problems whose plans the backend keeps.
KEPT_PLANS = 256
#: The largest alignment (bytes) nvmath tells cuBLASLt's heuristic about.
MAX_ALIGNMENT = 256


def nvmath_missing_reason() -> str | None:
    """Why nvmath-python is not importable here (told without importing it), or ``None``."""
    if importlib.util.find_spec("nvmath") is None:
        return f"nvmath-python is not installed ({NVMATH_HINT})"
    return None


def alignment(address: int) -> int:
    """The largest power of two, at most :data:`MAX_ALIGNMENT`, that divides ``address`` (bytes)."""
    return min(MAX_ALIGNMENT, address & -address) if address else MAX_ALIGNMENT


def in_place(shape: tuple[int, int], strides: tuple[int, int]) -> bool:
    """Whether cuBLASLt, through nvmath, reads a 2-D operand of ``shape`` and element ``strides``
    as it is: column-major (unit row stride, columns at least a column apart) or row-major (unit
    column stride, rows at least a row apart), a single row or column with any stride. nvmath
    takes a unit first stride as column-major before a unit second one; this follows that order,
    so an operand it would misread (a broadcast view, whose leading stride is below its extent)
    or refuse (no unit stride) is said not to be."""
    (rows, cols), (row_stride, col_stride) = shape, strides
    if row_stride == 1:
        return cols == 1 or col_stride >= rows
    if col_stride == 1:
        return rows == 1 or row_stride >= cols
    return rows == 1 or cols == 1


class _ThreadMatmul:
    """A thread's ``Matmul`` for one algorithm; freed (its cuBLASLt descriptors destroyed) when
    the thread that holds it ends or drops it."""

    __slots__ = ("__weakref__", "matmul")

    def __init__(self, matmul: Any) -> None:
        self.matmul = matmul
        weakref.finalize(self, matmul.free).atexit = False  # never into CUDA while it shuts down


class ChosenAlgorithm:
    """One problem at one alignment of its operands: the algorithm autotuning chose for it, and
    each calling thread's ``Matmul`` running it."""

    def __init__(self, x: Any, y: Any, options: Any, preferences: Any, iterations: int) -> None:
        from nvmath.linalg.advanced import Matmul

        matmul = Matmul(x, y, options=options)
        try:
            matmul.plan(preferences=preferences)
            if iterations:
                matmul.autotune(iterations=iterations, release_workspace=True)
            matmul.release_operands()
        except BaseException:
            matmul.free()
            raise
        self.algorithm = matmul.algorithms[0]
        #: The alignments (bytes) of A's and B's addresses it was planned for.
        self.alignments = (alignment(x.data_ptr()), alignment(y.data_ptr()))
        self._options = options
        self._local = threading.local()
        self._local.held = _ThreadMatmul(matmul)

    def _thread_matmul(self, x: Any, y: Any) -> Any:
        """This thread's ``Matmul``, planned with the chosen algorithm (no heuristic, no timing)."""
        held = getattr(self._local, "held", None)
        if held is not None:
            return held.matmul
        from nvmath.linalg.advanced import Matmul

        matmul = Matmul(x, y, options=self._options)
        try:
            matmul.plan(algorithms=[self.algorithm])
            matmul.release_operands()
        except BaseException:
            matmul.free()
            raise
        self._local.held = _ThreadMatmul(matmul)
        return matmul

    def __call__(self, x: Any, y: Any) -> Any:
        matmul = self._thread_matmul(x, y)
        # the checked reset (nvmath's unchecked one is experimental): operands unlike the planned
        # ones (shapes, strides, dtype, device) raise instead of being read wrongly
        matmul.reset_operands(a=x, b=y)
        try:
            return matmul.execute(release_workspace=True)
        finally:
            matmul.release_operands()


class CublasLtPlan:
    """``run(a, b)`` for one problem: copies of operands cuBLASLt cannot read in place, then the
    algorithm chosen for the operands' alignment (the planned one, or one made for a less aligned
    address the first time it is met)."""

    def __init__(self, backend: NvmathCublasLtBackend, a: Any, b: Any) -> None:
        import torch

        self.tf32 = isinstance(a, TF32Array)
        x, y = (a.data, b.data) if self.tf32 else (a, b)
        (m, k), n = x.shape, y.shape[1]
        self.shape = (m, n)
        self.empty = m == 0 or n == 0 or k == 0
        self._zeros = dict(dtype=x.dtype, device=x.device)
        self._torch = torch
        self.copy_a = not self.empty and not in_place(tuple(x.shape), x.stride())
        self.copy_b = not self.empty and not in_place(tuple(y.shape), y.stride())
        self._backend = backend
        self._dtype = dtype_name(a)
        self._lock = threading.Lock()
        self._others: dict[tuple[int, int], ChosenAlgorithm] = {}
        self._main: ChosenAlgorithm | None = None
        if not self.empty:
            x, y = self._operands(x, y)
            self._main = backend.choose(x, y, self._dtype)

    def _operands(self, x: Any, y: Any) -> tuple[Any, Any]:
        return (x.contiguous() if self.copy_a else x), (y.contiguous() if self.copy_b else y)

    def _for(self, x: Any, y: Any) -> ChosenAlgorithm:
        """The algorithm for operands at these addresses."""
        main = self._main
        align_a, align_b = main.alignments
        if x.data_ptr() % align_a == 0 and y.data_ptr() % align_b == 0:
            return main
        key = (alignment(x.data_ptr()), alignment(y.data_ptr()))
        with self._lock:
            chosen = self._others.get(key)
            if chosen is None:
                chosen = self._others[key] = self._backend.choose(x, y, self._dtype)
        return chosen

    def __call__(self, a: Any, b: Any) -> Any:
        if self.tf32:
            a, b = a.data, b.data
        if self.empty:
            c = self._torch.zeros(self.shape, **self._zeros)
        else:
            x, y = self._operands(a, b)
            c = self._for(x, y)(x, y)
        return TF32Array(c) if self.tf32 else c


class NvmathCublasLtBackend(TorchTensors, Backend):
    """cuBLASLt through nvmath-python's ``Matmul`` on torch CUDA tensors, its heuristic's
    algorithms autotuned once per problem of at least ``min_autotune_work`` multiply-adds
    (``autotune=False``: the heuristic's first pick everywhere, as nvmath's ``plan`` gives it, for
    comparison); ``iterations`` timed runs of each of at most ``limit`` candidates.

    Not ``searches_over`` the ``torch`` backend: the candidates it times are cuBLASLt's heuristic
    list for its own workspace and alignment preferences, which need not hold the kernel that
    ``torch.mm`` (cuBLAS, with torch's workspace) launches.
    """

    name = "nvmath-cublaslt"
    device = "cuda"
    requires = ("torch", "nvmath")
    dtypes = frozenset(COMPUTE_TYPES)
    #: The device type of the tensors it computes on (a test double may say "cpu").
    tensor_device = "cuda"

    def __init__(self, autotune: bool = True, *, iterations: int = AUTOTUNE_ITERATIONS,
                 limit: int = ALGORITHM_LIMIT, min_autotune_work: int = MIN_AUTOTUNE_WORK,
                 kept_plans: int = KEPT_PLANS, name: str | None = None) -> None:
        settings = (("iterations", iterations), ("limit", limit), ("min_autotune_work", min_autotune_work),
                    ("kept_plans", kept_plans))
        for label, value in settings:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {label} must be a positive int, not {value!r}")
        if name is not None:
            self.name = name
        self.autotune = autotune
        self.iterations = iterations if autotune else 0
        self.limit = limit
        self.min_autotune_work = min_autotune_work
        self.kept_plans = kept_plans
        #: Autotuning times every candidate on the device, a fraction of a second to seconds per
        #: new problem; the heuristic's pick alone is milliseconds.
        self.compiles_per_problem = autotune
        self._problem_plans: OrderedDict[tuple[Any, ...], CublasLtPlan] = OrderedDict()
        self._problem_plans_lock = threading.Lock()

    def unavailable_reason(self) -> str | None:
        missing = torch_missing_reason(cuda=True) or nvmath_missing_reason()
        if missing:
            return missing
        missing = cuda_missing_reason()
        if missing:
            return missing
        return _probe_reason()

    def choose(self, x: Any, y: Any, dtype: str) -> ChosenAlgorithm:
        """Plan (and unless ``autotune`` is off, autotune) the product of torch tensors ``x`` and
        ``y`` laid out as cuBLASLt takes them, for ``dtype``."""
        from nvmath.linalg import ComputeType
        from nvmath.linalg.advanced import MatmulOptions, MatmulPlanPreferences, MatmulReductionScheme

        options = MatmulOptions(compute_type=getattr(ComputeType, COMPUTE_TYPES[dtype]),
                                logger=logging.getLogger(__name__))
        preferences = MatmulPlanPreferences(
            reduction_scheme_mask=getattr(MatmulReductionScheme, REDUCTION_SCHEMES[dtype]), limit=self.limit)
        tuned = x.shape[0] * y.shape[1] * x.shape[1] >= self.min_autotune_work
        try:
            return ChosenAlgorithm(x, y, options, preferences, self.iterations if tuned else 0)
        except Exception as error:  # said with the problem: which product nvmath could not plan
            aligned = f"{alignment(x.data_ptr())} and {alignment(y.data_ptr())} bytes"
            where = (f"A {tuple(x.shape)} strides {x.stride()}, B {tuple(y.shape)} strides {y.stride()}, "
                     f"{dtype}, addresses aligned to {aligned}")
            raise RuntimeError(f"{self.name}: nvmath could not plan cuBLASLt's product of {where}: "
                               f"{type(error).__name__}: {error}") from error

    def _check_tensors(self, a: Any, b: Any) -> None:
        """Raise unless A and B are torch tensors on one device of :attr:`tensor_device`."""
        import torch

        x, y = (a.data, b.data) if isinstance(a, TF32Array) and isinstance(b, TF32Array) else (a, b)
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            raise self.input_error("matmul", f"A and B must be torch tensors, not {type(x).__name__} and "
                                   f"{type(y).__name__}", A=a.shape, B=b.shape)
        if x.device.type != self.tensor_device or x.device != y.device:
            raise self.input_error("matmul", f"A is on {x.device} and B on {y.device}; both must be on one "
                                   f"{self.tensor_device} device", A=a.shape, B=b.shape)

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """The problem's plan: made (and autotuned) the first time the problem is met, then kept,
        so every plan and ``matmul`` of the problem runs one algorithm."""
        try:
            key = self.problem_key(a, b)
        except (AttributeError, TypeError):  # not tensors: the checks say what is wrong
            key = None
        if key is not None:
            with self._problem_plans_lock:
                plan = self._problem_plans.get(key)
                if plan is not None:
                    self._problem_plans.move_to_end(key)
                    return plan
        self.check_operands(a, b)
        self._check_tensors(a, b)
        # one problem is planned at a time: a second thread asking for the same problem waits
        # and gets the first's plan, never an algorithm of its own autotuning
        with self._problem_plans_lock:
            plan = self._problem_plans.get(key)
            if plan is None:
                plan = CublasLtPlan(self, a, b)
                self._problem_plans[key] = plan
                if len(self._problem_plans) > self.kept_plans:
                    self._problem_plans.popitem(last=False)
            return plan

    def matmul(self, a: Any, b: Any) -> Any:
        return self.prepare(a, b)(a, b)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()


#: The members of nvmath's ``Matmul`` that a plan calls (``release_operands`` came with 0.9).
MATMUL_MEMBERS = ("plan", "autotune", "algorithms", "release_operands", "reset_operands", "execute", "free")


def _probe_reason() -> str | None:
    """Why nvmath cannot run cuBLASLt here (it imports, has the ``Matmul`` members a plan calls,
    loads the library and multiplies two 1×1 matrices on torch's current device), or ``None``."""
    try:
        import torch
        from nvmath.linalg.advanced import Matmul

        lacking = [name for name in MATMUL_MEMBERS if not hasattr(Matmul, name)]
        if lacking:
            return (f"nvmath-python's Matmul lacks {', '.join(lacking)} (1.0 or later is needed: "
                    f"pip install -U 'nvmath-python>=1.0')")
        one = torch.ones((1, 1), device="cuda")
        with Matmul(one, one, options={"logger": logging.getLogger(__name__)}) as matmul:
            matmul.plan()
            product = matmul.execute()
        if float(product[0, 0]) != 1.0:
            return f"nvmath-python's 1x1 product gave {float(product[0, 0])}, not 1"
    except Exception as error:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = f"nvmath-python {version('nvmath-python')}"
        except PackageNotFoundError:
            installed = "nvmath"
        message = " ".join(str(error).split())[:300]
        return f"{installed} cannot run cuBLASLt here: {type(error).__name__}: {message}"
    return None
