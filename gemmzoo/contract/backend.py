"""The :class:`Backend` base class every GEMM backend derives from."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import GemmInputError


def shape_text(shape: Any) -> str:
    """``(3, 4)``: the way error messages write a shape."""
    return str(tuple(int(n) for n in shape))


class TF32Array:
    """A float32 native array whose matrix products use TF32 tensor-core math.

    Backends that declare the ``"tf32"`` dtype mode return this wrapper from
    ``from_numpy(x, "tf32")`` and from ``matmul`` on such operands, so that the mode travels with
    the data instead of living in global state. It supports the view operations the conformance
    suite uses (``.T`` and basic slicing); ``data`` is the underlying float32 array.
    """

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def dtype(self) -> str:
        return "tf32"

    @property
    def T(self) -> TF32Array:  # noqa: N802 - mirrors the array libraries' name
        return TF32Array(self.data.T)

    def __getitem__(self, key: Any) -> TF32Array:
        return TF32Array(self.data[key])

    def __repr__(self) -> str:
        return f"TF32Array({self.data!r})"


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(x: Any) -> str:
    """The gemmzoo dtype name of a native array (``"float16"``, ``"tf32"``, ...), or its own name."""
    if isinstance(x, TF32Array):
        return "tf32"
    dtype = getattr(x, "dtype", None)
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):  # not seen yet, or an unhashable dtype object
        pass
    name = type(x).__name__ if dtype is None else str(dtype).removeprefix("torch.")
    if dtype is not None:
        # str() of a dtype costs microseconds; a process meets few dtype objects
        with contextlib.suppress(TypeError):
            _DTYPE_NAMES[dtype] = name
    return name


_SELF_CHECKING: weakref.WeakSet[Any] = weakref.WeakSet()


def self_checking(run: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Declare that ``run``, a plan from :meth:`Backend.prepare`, raises by itself when B's dtype or
    device is not A's (as ``torch.mm`` does, the meta device aside), and return it.

    ``gemmzoo.matmul`` keys the plans of torch operands on A's dtype and device only (and on
    whether B is on the meta device): it checks B's before calling a plan, except a plan declared
    here, called with plain tensors on a real device. When a plan raises, the operands are checked
    again, so bad input still gets the error that names the shapes and what is wrong.
    """
    _SELF_CHECKING.add(run)
    return run


def is_self_checking(run: Any) -> bool:
    """Whether ``run`` was declared to reject a B of another dtype or device itself (see
    :func:`self_checking`)."""
    return run in _SELF_CHECKING


class Switched(NamedTuple):
    """A precision switch a plan holds while it launches ``torch.mm`` (see :func:`declare_torch_mm`)."""

    lock: Any
    """Held while the switch is read, set, launched with and restored."""
    read: Callable[[], Any]
    """The switch's value (a pair when ``pair``: the value, then a part written back as read)."""
    write: Callable[..., Any] | None
    """Sets the switch: ``write(value)``, or ``write(value, second)`` for a pair; ``None``: the
    plan itself runs whenever the switch reads otherwise."""
    wanted: Any
    """The value the product needs."""
    pair: bool


_TORCH_MM_FORMS: weakref.WeakKeyDictionary[Any, tuple[()] | Switched] = weakref.WeakKeyDictionary()


def declare_torch_mm(run: Callable[[Any, Any], Any],
                     switched: Switched | None = None) -> Callable[[Any, Any], Any]:
    """Declare that ``run``, a plan from :meth:`Backend.prepare`, computes exactly ``torch.mm(a, b)``
    on two torch tensors (``TF32Array(torch.mm(a.data, b.data))`` on two TF32Array), and return it;
    with ``switched``, with that precision switch at ``switched.wanted`` (the caller's value back
    after the launch).

    The compiled dispatch (:mod:`gemmzoo.native`) then launches the product itself (holding the
    switch's lock, and setting the switch where it must) instead of calling ``run``.
    """
    _TORCH_MM_FORMS[run] = () if switched is None else switched
    return run


def torch_mm_form(run: Any) -> tuple[()] | Switched | None:
    """``()`` when ``run`` was declared to be ``torch.mm``, its switch when declared with one,
    else ``None`` (see :func:`declare_torch_mm`)."""
    try:
        return _TORCH_MM_FORMS.get(run)
    except TypeError:  # not weakly referenceable: never declared
        return None


class Backend:
    """One GEMM implementation: converts arrays to its native type and multiplies them.

    Subclasses set ``name``, ``device`` and ``dtypes`` and implement ``from_numpy``,
    ``to_numpy`` and ``matmul``; ``unavailable_reason`` and ``synchronize`` have defaults for
    backends that are always usable and synchronous. Construction must stay cheap: import heavy
    frameworks inside the methods.
    """

    name: str = ""
    device: str = "cpu"
    dtypes: frozenset[str] = frozenset()
    #: False for a backend that exists to be compared against (a teaching baseline such as
    #: ``triton-naive``): ``best_backend`` and ``gemmzoo.matmul`` consider it only when it is named
    #: (``backend=``, ``GEMMZOO_BACKENDS``). Benchmarks and the conformance suite run it as usual.
    selectable: bool = True
    #: True for a backend that compiles and autotunes each new problem when it is first met,
    #: taking seconds (``torch-compile``): ``best_backend`` neither runs its conformance suite nor
    #: measures it to answer a shape it has never seen, so first answers stay fast; ``gemmzoo
    #: check`` and ``gemmzoo tune`` do, and from then on its stored timings rank it as usual.
    compiles_per_problem: bool = False
    #: True for a backend whose conformance cases compile kernels while holding the GIL (Triton's
    #: JIT: each layout and edge case of the suite is a specialization of its own): the suite
    #: shares its checks among worker processes where the machine has cores to spare
    #: (:mod:`gemmzoo.conformance.shards`), as threads would compile one kernel at a time.
    suite_compiles: bool = False
    #: Names of backends whose kernels this backend's own per-problem search times among its
    #: candidates (Inductor's max-autotune measures ATen's ``mm``, the ``torch`` backend, beside its
    #: templates). Where ``best_backend`` finds this backend tied with one of those at a shape
    #: both were measured at, it ranks this one first: by its own measurement of that problem it
    #: is at least as fast.
    searches_over: tuple[str, ...] = ()
    #: True for a CUDA backend whose kernels run in order on the caller's current CUDA stream
    #: (torch's current stream, which CuPy's default stream is too), so that CUDA events recorded
    #: there bracket its work. A backend that launches on streams of its own (JAX) sets it False:
    #: its device time is then the wall time of loops of calls, each loop ended by its
    #: ``synchronize`` (:mod:`gemmzoo.measure.timers`), an upper bound that includes launch time.
    stream_ordered: bool = True
    #: How close to the exact product the result is promised to be (``gemmzoo.contract.accuracy``):
    #: ``"componentwise"`` (every classical GEMM) or the weaker ``"normwise"`` (Strassen-like
    #: algorithms). The conformance suite checks the declared class's bound, and ``best_backend``
    #: and ``gemmzoo.matmul`` pick a normwise backend only for a caller who accepts that class.
    accuracy: str = "componentwise"
    #: The problem classes this backend computes (:mod:`gemmzoo.problems.classes`): ``"gemm"`` (``matmul``,
    #: every backend), ``"batched"`` (:meth:`bmm`), ``"scaled"`` (:meth:`scaled_mm`) and
    #: ``"grouped"`` (:meth:`grouped_mm`). A backend declares a class only when it implements its
    #: method; the conformance suite checks each declared class, and ``gemmzoo.matmul``,
    #: ``gemmzoo.scaled_mm`` and ``gemmzoo.grouped_mm`` pick only among backends declaring it.
    classes: frozenset[str] = frozenset({"gemm"})

    def for_tuning(self) -> Backend:
        """The backend ``gemmzoo tune`` measures in this one's place: itself, unless measuring
        it should first search harder than a call does (an autotuned kernel's ``full`` mode)."""
        return self

    #: Top-level modules this backend imports to run (``("torch",)``): ``gemmzoo list`` says a
    #: backend whose module is not installed is unavailable without importing anything, and leaves
    #: asking a backend whose modules are installed but not yet imported to ``gemmzoo list -v``.
    requires: tuple[str, ...] = ()
    #: The shipped prior's routes to this backend (:mod:`gemmzoo.tuning.prior`): mappings of
    #: problem traits (device, the caller's array library, dtypes, architecture, misaligned rows)
    #: under which it answers a problem that nothing is measured for yet. Never a verdict: the
    #: backend's suite still runs before its first use, and measurements replace the route.
    prior_routes: tuple[Mapping[str, Any], ...] = ()
    #: The array library (``"numpy"``, ``"torch"``) whose own matrix product this backend's
    #: ``matmul`` is on that library's arrays, apart from precision switches it holds at gemmzoo's
    #: values (``torch`` holds fp32 reduction for the 16-bit types and IEEE math for float32), or
    #: ``None``. Where the shipped prior routes a problem nothing is measured for to this backend,
    #: ``gemmzoo.matmul`` on that library's arrays calls the library's own product under the
    #: caller's switches instead (:func:`gemmzoo.arrays.libraries.own_product`): the call it replaces, so as
    #: accurate and as fast as that call by construction, with no backend of gemmzoo's to check.
    library_product: str | None = None
    #: Where this backend can be the fastest (:mod:`gemmzoo.tuning.contenders`): routes in the
    #: prior's keys plus ``max_m`` and ``max_mn``, and a ``why`` saying what it runs elsewhere.
    #: ``gemmzoo tune --recorded`` and a first answer time it only at problems one of them matches
    #: (a first answer keeps it where it is the only one to time); empty: everywhere.
    contends: tuple[Mapping[str, Any], ...] = ()

    def unavailable_reason(self) -> str | None:
        """``None`` when usable here; otherwise one line saying why not."""
        return None

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        """A native array on this backend's device holding ``x`` converted to ``dtype``."""
        raise NotImplementedError

    def to_numpy(self, y: Any) -> np.ndarray:
        """A host copy of ``y`` (float32 for 16-bit dtypes)."""
        raise NotImplementedError

    def matmul(self, a: Any, b: Any) -> Any:
        """A new native array ``C = A @ B`` of the operands' dtype; A and B stay unchanged."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Return when this backend's queued work is done."""
        return None

    def warm_up(self) -> None:
        """Do now what this process's first use of the backend does once whatever the problem
        (a JIT compiler's hash of its own files, a lazy import), launching nothing. A suite
        worker waiting for its checks calls it (:mod:`gemmzoo.conformance.shards`); nothing
        depends on it having run."""
        return None

    # Optional members, one per problem class beyond "gemm" (declared in ``classes``) -------------

    def bmm(self, a: Any, b: Any) -> Any:
        """The ``"batched"`` class: native arrays A (…×M×K) and B (…×K×N) of one dtype whose batch
        dimensions broadcast as ``torch.matmul``'s do → a new native array C (…×M×N), each
        matrix ``A[i] @ B[i]`` as :meth:`matmul` computes it (bfloat16 for float8_e4m3fn)."""
        raise NotImplementedError

    def scaled_mm(self, a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: str) -> Any:
        """The ``"scaled"`` class: float8_e4m3fn native arrays A (M×K) and B (K×N), float32
        scales (native arrays or NumPy arrays) of the shapes
        :func:`gemmzoo.problems.classes.scale_shapes` gives for tensorwise, rowwise or blockwise scaling
        → a new native array C (M×N) of ``out_dtype`` (``"bfloat16"``, ``"float16"`` or
        ``"float32"``) holding ``(A·scale_a)(B·scale_b)``, each scale multiplying the elements of
        its row or block, as ``torch._scaled_mm`` does."""
        raise NotImplementedError

    def grouped_mm(self, a: Any, b: Any, offsets: Any) -> Any:
        """The ``"grouped"`` class: a native array A (total M×K), native B (G×K×N) of A's dtype,
        and ``offsets``, G cumulative end rows (int32, non-decreasing, the last at most M; a
        native array or a NumPy array) → a new native array C (total M×N) whose rows
        ``offsets[g-1]:offsets[g]`` are those rows of A times ``B[g]``, as ``torch._grouped_mm``
        takes them; rows past the last offset are unspecified. bfloat16 for float8_e4m3fn."""
        raise NotImplementedError

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """Decide once what every product of operands like ``a`` and ``b`` needs; return ``run``.

        ``run(a, b)`` computes ``C = A @ B`` exactly as :meth:`matmul` does, doing only what must
        happen per call. Operands are *like* ``a`` and ``b`` when they have the same native array
        type, shapes, strides, dtype (mode) and device: callers (``gemmzoo.matmul``, the
        benchmarks, the conformance suite) make a plan once per such problem and call it with
        operands of that problem only. The values and the addresses of the operands may differ
        from call to call, so whatever depends on them (an alignment, say) is checked by ``run``.

        Bad input raises here, with the same clear error :meth:`matmul` gives. A plan must not
        keep ``a`` or ``b`` alive.

        This default checks the operands and returns :meth:`matmul`, so a backend that implements
        only the contract's members has a plan too; override it to move per-problem work (checks,
        dtype decisions, precision switches, launch grids) out of the per-call path.
        """
        self.check_operands(a, b)
        return self.matmul

    # Helpers for implementations -------------------------------------------------------------

    def input_error(self, operation: str, problem: str, **shapes: Any) -> GemmInputError:
        """A :class:`GemmInputError` naming this backend, the operation and the shapes."""
        named = ", ".join(f"{label} {shape_text(s)}" for label, s in shapes.items())
        where = f" of {named}" if named else ""
        return GemmInputError(f"{self.name}: {operation}{where}: {problem}")

    def check_dtype(self, dtype: str, shape: Any) -> None:
        """Raise unless ``dtype`` is one this backend declares (for ``from_numpy``)."""
        if dtype in self.dtypes:
            return
        known = "known" if dtype in DTYPES else "not a gemmzoo dtype"
        supported = ", ".join(sorted(self.dtypes))
        raise self.input_error(
            "from_numpy", f"dtype {dtype!r} ({known}) is not supported; supported: {supported}",
            x=shape,
        )

    def check_operands(self, a: Any, b: Any) -> tuple[int, int, int]:
        """Validate ``matmul`` operands and return ``(M, N, K)``.

        Both must be 2-D, agree on K, share one dtype, and that dtype must be declared.
        """
        a_shape, b_shape = a.shape, b.shape
        if len(a_shape) == 2 and len(b_shape) == 2 and a_shape[1] == b_shape[0]:
            a_dtype = dtype_name(a)
            if a_dtype in self.dtypes and dtype_name(b) == a_dtype:
                return a_shape[0], b_shape[1], a_shape[1]
        a_shape, b_shape = tuple(a_shape), tuple(b_shape)

        def fail(problem: str) -> GemmInputError:
            return self.input_error("matmul", problem, A=a_shape, B=b_shape)

        if len(a_shape) != 2 or len(b_shape) != 2:
            raise fail("A and B must be 2-D")
        a_dtype, b_dtype = dtype_name(a), dtype_name(b)
        if a_dtype != b_dtype:
            raise fail(f"A is {a_dtype} but B is {b_dtype}; both must have one dtype")
        if a_dtype not in self.dtypes:
            raise fail(f"dtype {a_dtype} is not supported; supported: {', '.join(sorted(self.dtypes))}")
        raise fail(f"inner dimensions differ (A has K={a_shape[1]}, B has K={b_shape[0]})")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"


#: Every optional member of :class:`Backend` and the value a backend that does not define it has:
#: a backend of another distribution may implement only the contract's members (or not subclass
#: :class:`Backend` at all), and :func:`declared` is how gemmzoo reads these. ``for_tuning``'s
#: ``None`` stands for "the backend itself".
OPTIONAL_MEMBERS: dict[str, Any] = {
    "selectable": Backend.selectable,
    "compiles_per_problem": Backend.compiles_per_problem,
    "suite_compiles": Backend.suite_compiles,
    "searches_over": Backend.searches_over,
    "stream_ordered": Backend.stream_ordered,
    "accuracy": Backend.accuracy,
    "classes": Backend.classes,
    "requires": Backend.requires,
    "prior_routes": Backend.prior_routes,
    "library_product": Backend.library_product,
    "contends": Backend.contends,
    "for_tuning": None,
    "warm_up": None,
}


def declared(backend: Any, member: str) -> Any:
    """``backend``'s optional member ``member`` (one of :data:`OPTIONAL_MEMBERS`), or its
    declared default where the backend does not define it; ``for_tuning`` is called (the backend
    to tune); ``warm_up`` is the bound method, or ``None``. An undeclared name is a programming
    error (``KeyError``): gemmzoo never probes a backend for names the contract does not declare."""
    default = OPTIONAL_MEMBERS[member]
    if member == "for_tuning":
        method = getattr(backend, member, None)
        return backend if method is None else method()
    return getattr(backend, member, default)
