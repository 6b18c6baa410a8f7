"""Running conformance cases against a backend; :mod:`gemmzoo.conformance.judge` judges each result."""

from __future__ import annotations

import dataclasses
import re
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemmzoo.conformance import shards
from gemmzoo.conformance.cases import Case, conformance_cases, scale_decades
from gemmzoo.conformance.class_cases import ClassCase, class_cases, run_class_case
from gemmzoo.conformance.independence import check_fresh, check_held
from gemmzoo.conformance.judge import CheckFailedError, judge_result
from gemmzoo.conformance.long_sums import same_sign_operands
from gemmzoo.conformance.random_problems import DEFAULT_MAX_WORK, random_cases
from gemmzoo.conformance.rows import same_values
from gemmzoo.contract.dtypes import DTYPES, result_dtype
from gemmzoo.contract.validation import backend_problem
from gemmzoo.measure.threads import usable_cores
from gemmzoo.plugins.inert import inert
from gemmzoo.plugins.registry import probe_availability
from gemmzoo.plugins.watchdog import BackendTimeoutError, idle_workers_ended, quarantine, quarantined
from gemmzoo.plugins.watchdog import call as watched


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: ``check`` is a case id or the name of an input check."""

    backend: str
    check: str
    passed: bool
    detail: str = ""


@dataclass
class ConformanceReport:
    """Every check run on one backend, or why none could run."""

    backend: str
    results: list[CheckResult] = field(default_factory=list)
    unavailable: str | None = None
    #: Set when a check ran past the time limit (:mod:`gemmzoo.plugins.watchdog`): what overran. The
    #: backend is then quarantined and the checks after it are not run.
    timed_out: str | None = None

    @property
    def passed(self) -> bool:
        """True when the backend was available and every check passed."""
        return (self.unavailable is None and self.timed_out is None and bool(self.results)
                and all(r.passed for r in self.results))

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]


# Inputs ----------------------------------------------------------------------------------------


#: Elements from which an operand's normal values are drawn in :data:`DRAW_CHUNKS` chunks side by
#: side (the large GPU cases), each chunk from its own generator seeded from the case's.
PARALLEL_DRAW = 1 << 22
DRAW_CHUNKS = 16


def _normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Standard normal values of ``shape`` from ``rng``; a large array is drawn in chunks by
    threads (NumPy's generators release the GIL as they fill), its values fixed by ``rng`` alone."""
    size = shape[0] * shape[1]
    if size < PARALLEL_DRAW:
        return rng.standard_normal(shape)
    seeds = rng.integers(0, 2**63, size=DRAW_CHUNKS)
    out = np.empty(shape)
    flat = out.reshape(-1)
    step = -(-size // DRAW_CHUNKS)

    def fill(chunk: int) -> None:
        np.random.default_rng(int(seeds[chunk])).standard_normal(out=flat[chunk * step:(chunk + 1) * step])

    with ThreadPoolExecutor(min(DRAW_CHUNKS, usable_cores())) as pool:
        list(pool.map(fill, range(DRAW_CHUNKS)))
    return out


def _values(case: Case, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if case.kind == "integers":
        return rng.integers(-2, 3, size=shape).astype(np.float64)
    if case.kind == "extremes":  # magnitudes 2**-12 .. 2**10: below E4M3's subnormals to past 448
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 11, size=shape)
    return _normal(rng, shape)


def _scaled(x: np.ndarray, rng: np.random.Generator, decades: float) -> np.ndarray:
    """``x`` with each row and each column multiplied by its own 10**U(-decades, decades)."""
    rows = 10.0 ** rng.uniform(-decades, decades, size=(x.shape[0], 1))
    cols = 10.0 ** rng.uniform(-decades, decades, size=(1, x.shape[1]))
    return rows * x * cols


def _operands(case: Case, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A and B for a case.

    ``scaled``: every row and column of A and of B scaled by its own power of ten, so the terms of
    one sum, and the rows and columns of C, span many orders of magnitude; an algorithm whose
    error follows the largest rows (bounded only normwise) then misses the componentwise bound on
    the small ones. ``cancel``: the same row scaling of A and column scaling of B, with the second
    half of the K sum cancelling the first to a few percent (A = [P, P + E/16], B = [Q; -Q]), so
    each C element is far smaller than the terms it sums.
    """
    if case.kind == "same-sign":
        return same_sign_operands(case.m, case.n, case.k, case.dtype, rng)
    if case.kind not in ("scaled", "cancel"):
        a, b = _values(case, rng, (case.m, case.k)), _values(case, rng, (case.k, case.n))
        if case.kind == "nonfinite":
            _plant_nonfinite(a, b)
        return a, b
    decades = scale_decades(case.dtype)
    if case.kind == "scaled":
        return (_scaled(rng.standard_normal((case.m, case.k)), rng, decades),
                _scaled(rng.standard_normal((case.k, case.n)), rng, decades))
    half = case.k // 2
    p, q = rng.standard_normal((case.m, half)), rng.standard_normal((half, case.n))
    odd = case.k - 2 * half  # an odd K's last term does not cancel
    a = np.concatenate([p, p + rng.standard_normal(p.shape) / 16, rng.standard_normal((case.m, odd))], axis=1)
    b = np.concatenate([q, -q, rng.standard_normal((odd, case.n))], axis=0)
    rows = 10.0 ** rng.uniform(-decades, decades, size=(case.m, 1))
    cols = 10.0 ** rng.uniform(-decades, decades, size=(1, case.n))
    return rows * a, b * cols


def _plant_nonfinite(a: np.ndarray, b: np.ndarray) -> None:
    """NaN and ±Inf at fixed places: a NaN row and column, Inf rows, and an Inf - Inf row."""
    a[2, 3] = np.nan
    a[5, 1] = np.inf
    a[7, 0] = -np.inf
    a[7, 4] = np.inf
    b[5, 8] = np.nan
    b[1, 3] = -np.inf


def _native(backend: Any, x: np.ndarray, dtype: str, layout: str, rng: np.random.Generator) -> Any:
    """``x`` on the backend as a plain array (N), a transposed view (T) or a strided slice (S)."""
    if layout == "N":
        return backend.from_numpy(x, dtype)
    if layout == "T":
        return backend.from_numpy(np.ascontiguousarray(x.T), dtype).T
    rows, cols = x.shape
    # The elements between the slice's are NaN: a backend that ignores the strides reads them.
    padded = np.full((2 * rows + 1, 2 * cols + 1), np.nan)
    padded[1::2, 1::2] = x
    return backend.from_numpy(padded, dtype)[1::2, 1::2]


def _prime_allocator(backend: Any, m: int, n: int, dtype: str) -> None:
    """Make and free an all-NaN M×N array of C's dtype on the backend, so that an allocator that
    reuses memory (torch's and CuPy's caching allocators, malloc) hands it back for the next C
    and an element the backend fails to write stays NaN. The array comes from ``from_numpy``, not
    from ``matmul``, so a backend that leaves elements unwritten cannot leave them unpoisoned."""
    if m * n == 0:
        return
    if result_dtype(dtype) != dtype:
        # C's dtype (bfloat16 for float8_e4m3fn) need not be one the backend declares: poison as
        # many bytes of the operands' dtype instead. -NaN in E4M3 is the byte 0xFF, and 0xFFFF
        # is a bfloat16 NaN, so C's unwritten elements read as NaN. Drawn in float32: the same
        # bytes, without float64's careful rounding.
        poison = backend.from_numpy(np.full((m, 2 * n), -np.nan, dtype=np.float32), dtype)
        backend.synchronize()
        del poison
        return
    poison = backend.from_numpy(np.full((m, n), np.nan), dtype)
    backend.synchronize()
    del poison


#: M·N·K from which a CUDA backend's case takes its float64 reference from the GPU: the large
#: GPU-only cases, whose host reference is most of the suite's time.
DEVICE_REFERENCE_WORK = 2**26


def _device_reference(backend: Any, case: Case, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(A·B, |A|·|B|)`` computed on the GPU (:func:`gemmzoo.conformance.verify.device_reference`)
    for a large case of a CUDA backend, else ``None`` (the judge computes it on the host). Never
    for float64, whose GPU reference would be a float64 product judging one, nor for the cases
    with NaN and Inf, whose reference follows IEEE rules term by term on the host."""
    if (backend.device != "cuda" or case.dtype == "float64" or case.kind == "nonfinite"
            or case.m * case.n * case.k < DEVICE_REFERENCE_WORK):
        return None
    from gemmzoo.conformance.verify import device_reference

    return device_reference(a, b)


def run_case(backend: Any, case: Case) -> CheckResult:
    """Run one conformance case; the result says what failed and where."""
    return _checked(backend, case.id, lambda: _run_case(backend, case))


def _class_check(backend: Any, case: ClassCase) -> CheckResult:
    """Run one case of a problem class beyond gemm (:mod:`gemmzoo.conformance.class_cases`)."""
    return _checked(backend, case.id, lambda: run_class_case(backend, case))


def _checked(backend: Any, label: str, run: Callable[[], str]) -> CheckResult:
    """``run``'s detail as a passed check, its :class:`CheckFailedError` or any other exception as a
    failed one; text from the backend made inert."""
    try:
        detail = run()
    except CheckFailedError as failure:
        return CheckResult(backend.name, label, False, inert(str(failure), lines=True))
    except Exception as error:  # the backend broke, or is malformed: a failed check either way
        return CheckResult(backend.name, label, False, "raised " + _exception_text(error))
    return CheckResult(backend.name, label, True, inert(detail, lines=True))


def _exception_text(error: BaseException) -> str:
    """The exception as one message, its control characters written out (:mod:`gemmzoo.plugins.inert`)."""
    try:
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
    except Exception:  # an exception whose own __str__ raises
        text = f"{type(error).__name__}: <unprintable>"
    return inert(text, lines=True)


def _unchanged(backend: Any, operands: dict[str, tuple[Any, np.ndarray]], after: str) -> None:
    for label, (operand, before) in operands.items():
        if not same_values(backend.to_numpy(operand), before):
            raise CheckFailedError(f"{label} was changed by {after}")


def _run_case(backend: Any, case: Case) -> str:
    rng = np.random.default_rng(case.seed)
    a_values, b_values = _operands(case, rng)
    a = _native(backend, a_values, case.dtype, case.layout[0], rng)
    b = _native(backend, b_values, case.dtype, case.layout[1], rng)
    a_host, b_host = backend.to_numpy(a), backend.to_numpy(b)
    # The reference is the caller's values rounded to the dtype: what the backend holds must be
    # exactly that, so judging against the held values judges against the caller's.
    check_held("A", a_values, a_host, case.dtype)
    check_held("B", b_values, b_host, case.dtype)

    _prime_allocator(backend, case.m, case.n, case.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf inputs are intended here
        # The fast path (the plan gemmzoo.matmul calls) is what users run: judge it. Every case
        # also judges matmul below, through the repeat case's second call and the input checks.
        run = backend.prepare(a, b)
        c = run(a, b)
        backend.synchronize()
    operands = {"A": (a, a_host), "B": (b, b_host)}
    _unchanged(backend, operands, "matmul (the prepared plan)")
    check_fresh(c, {"A": a, "B": b})
    verdict = judge_result(backend, case.dtype, a, c, a_host, b_host, exact_ieee=case.kind == "nonfinite",
                           reference=_device_reference(backend, case, a, b))
    detail, c_host = verdict.detail, verdict.host
    if case.kind == "repeat":
        # Call 2 through matmul, call 3 through the plan again: both paths must agree bitwise,
        # leave the operands alone and give new arrays.
        for attempt, call in ((2, backend.matmul), (3, run)):
            _prime_allocator(backend, case.m, case.n, case.dtype)
            result = call(a, b)
            backend.synchronize()
            path = "matmul" if attempt == 2 else "the prepared plan"
            _unchanged(backend, operands, f"call {attempt} ({path})")
            check_fresh(result, {"A": a, "B": b, "the result of call 1": c})
            again = backend.to_numpy(result)
            if not np.array_equal(again, c_host, equal_nan=True):
                differ = int((again != c_host).sum())
                raise CheckFailedError(f"call {attempt} ({path}) differs from call 1 in {differ} elements")
        detail += "; 3 calls bitwise identical (plan, matmul, plan)"
    if case.kind == "fresh":
        detail += "; " + _check_later_calls(backend, case, rng, c, c_host, operands)
    return detail


def _check_later_calls(backend: Any, case: Case, rng: np.random.Generator, c: Any, c_host: np.ndarray,
                       operands: dict[str, tuple[Any, np.ndarray]]) -> str:
    """Two more products of other values of the same shape, through ``matmul`` and through a
    plan: each right, each a new array, the operands unchanged, and every earlier result as it
    was (a backend that reuses one output array, or returns an operand, fails here)."""
    results: dict[str, tuple[Any, np.ndarray]] = {"the result of call 1": (c, c_host)}
    for attempt in (2, 3):
        x_values, y_values = _values(case, rng, (case.m, case.k)), _values(case, rng, (case.k, case.n))
        x, y = backend.from_numpy(x_values, case.dtype), backend.from_numpy(y_values, case.dtype)
        x_host, y_host = backend.to_numpy(x), backend.to_numpy(y)
        check_held("A", x_values, x_host, case.dtype)
        check_held("B", y_values, y_host, case.dtype)
        call = backend.matmul if attempt == 2 else backend.prepare(x, y)
        path = "matmul" if attempt == 2 else "a prepared plan"
        result = call(x, y)
        backend.synchronize()
        mine = {f"A of call {attempt}": (x, x_host), f"B of call {attempt}": (y, y_host)}
        _unchanged(backend, {**operands, **mine}, f"call {attempt} ({path})")
        check_fresh(result, {**{k: v[0] for k, v in {**operands, **mine}.items()},
                             **{k: v[0] for k, v in results.items()}})
        judged = judge_result(backend, case.dtype, x, result, x_host, y_host)
        for label, (earlier, earlier_host) in results.items():
            if not np.array_equal(backend.to_numpy(earlier), earlier_host, equal_nan=True):
                raise CheckFailedError(f"{label} changed when call {attempt} ({path}) ran: results must be "
                                       "new arrays, never reused")
        results[f"the result of call {attempt}"] = (result, judged.host)
    return "later calls give new arrays and leave earlier results alone"


# Bad input -------------------------------------------------------------------------------------

_SHAPE_PATTERNS = ("({})", "[{}]")


def _mentions_shape(message: str, shape: tuple[int, ...]) -> bool:
    compact = re.sub(r"\s+", "", message)
    joined = ",".join(str(n) for n in shape) + ("," if len(shape) == 1 else "")
    crossed = [sep.join(str(n) for n in shape) for sep in ("x", "×")]
    return any(p.format(joined) in compact for p in _SHAPE_PATTERNS) or any(c in message for c in crossed)


def _expect_clear_error(
    backend: Any, action: Callable[[], Any], shapes: Iterable[tuple[int, ...]], what: str
) -> str:
    try:
        action()
        backend.synchronize()
    except Exception as error:
        message = str(error)
        if backend.name not in message:
            raise CheckFailedError(f"{what}: the error does not name the backend: {message!r}") from None
        missing = [s for s in shapes if not _mentions_shape(message, s)]
        if missing:
            raise CheckFailedError(
                f"{what}: the error does not name the shapes {missing}: {message!r}") from None
        return f"{type(error).__name__}: {message}"
    raise CheckFailedError(f"{what}: no error was raised")


def input_checks(backend: Any) -> list[str]:
    """The names of the bad-input checks that apply to this backend."""
    names = ["inner-dimension", "not-2d", "unknown-dtype"]
    if len(backend.dtypes) > 1:
        names.append("mixed-dtypes")
    if set(DTYPES) - set(backend.dtypes):
        names.append("undeclared-dtype")
    if "float8_e4m3fn" in backend.dtypes:
        names.append("fp8-conversion")
    return names


def _fp8_conversion_values(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Values for the fp8-conversion check, as float32 so that every tie is exact: normal and
    subnormal E4M3 values and the midpoints between them (ties), random ones, then the values
    out of range (finite past 448, ±Inf) and NaN. Returns the values and a mask of the in-range
    ones."""
    from gemmzoo.contract.fp8 import E4M3

    codes = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    grid = np.unique(codes[np.isfinite(codes)])
    ties = (grid[:-1] + grid[1:]) / 2
    randoms = rng.standard_normal(200) * 2.0 ** rng.integers(-11, 9, size=200)
    in_range = np.concatenate([grid, ties, np.clip(randoms, -448, 448)]).astype(np.float32)
    outside = np.array([449.0, 463.9, 464.0, 1e4, 3e38, -464.0, -1e6, np.inf, -np.inf, np.nan], np.float32)
    values = np.concatenate([in_range, outside])
    mask = np.zeros(values.shape, dtype=bool)
    mask[: in_range.size] = True
    return values, mask


def _check_fp8_conversion(backend: Any) -> str:
    """``from_numpy(x, "float8_e4m3fn")`` must round to the nearest E4M3 value (ties to even) and
    give either ±448 (saturation) or NaN for finite values out of range; NaN stays NaN."""
    from gemmzoo.contract.fp8 import to_e4m3

    values, in_range = _fp8_conversion_values(np.random.default_rng(11))
    held = np.asarray(backend.to_numpy(backend.from_numpy(values.reshape(1, -1), "float8_e4m3fn")))
    held = held.reshape(-1).astype(np.float64)
    expected = to_e4m3(values).astype(np.float64)
    wrong = in_range & (held != expected)
    if wrong.any():
        i = int(np.argmax(wrong))
        raise CheckFailedError(f"{values[i]!r} became {held[i]!r}; the nearest E4M3 value is {expected[i]!r} "
                          f"({int(wrong.sum())} of {int(in_range.sum())} in-range values rounded wrong)")
    outside = ~in_range & ~np.isnan(values)
    saturated = held == np.sign(values) * 448.0
    if not np.all(saturated[outside] | np.isnan(held[outside])):
        i = int(np.argmax(outside & ~saturated & ~np.isnan(held)))
        raise CheckFailedError(
            f"{values[i]!r} (out of E4M3's range) became {held[i]!r}; expected ±448 or NaN"
        )
    if not np.all(np.isnan(held[np.isnan(values)])):
        raise CheckFailedError("NaN did not stay NaN")
    rule = "saturate" if np.all(saturated[outside & np.isfinite(values)]) else "NaN or saturate"
    return f"{int(in_range.sum())} in-range values rounded to nearest even; out of range: {rule}"


def run_input_check(backend: Any, check: str) -> CheckResult:
    """Run one bad-input check: the backend must raise an error naming itself and the shapes."""
    try:
        return _run_input_check(backend, check)
    except Exception as error:  # a malformed backend fails the check; it never crashes the suite
        return CheckResult(backend.name, f"bad-input-{check}", False, "raised " + _exception_text(error))


def _run_input_check(backend: Any, check: str) -> CheckResult:
    if check == "fp8-conversion":
        try:
            return CheckResult(backend.name, check, True, _check_fp8_conversion(backend))
        except CheckFailedError as failure:
            return CheckResult(backend.name, check, False, str(failure))
    rng = np.random.default_rng(7)
    dtype = "float32" if "float32" in backend.dtypes else sorted(backend.dtypes)[0]

    def native(shape: tuple[int, ...], as_dtype: str = dtype) -> Any:
        return backend.from_numpy(rng.standard_normal(shape), as_dtype)

    def product(a: Any, b: Any) -> list[Callable[[], Any]]:
        # Bad operands must be refused by matmul and by prepare (the fast path's entry) alike.
        return [lambda: backend.matmul(a, b), lambda: backend.prepare(a, b)]

    actions: dict[str, tuple[Callable[[], list[Callable[[], Any]]], list[tuple[int, ...]]]] = {
        "inner-dimension": (lambda: product(native((3, 4)), native((5, 6))), [(3, 4), (5, 6)]),
        "not-2d": (lambda: product(native((2, 3, 4)), native((4, 5))), [(2, 3, 4), (4, 5)]),
        "unknown-dtype": (lambda: [lambda: backend.from_numpy(rng.standard_normal((3, 4)), "int32")],
                          [(3, 4)]),
    }
    if check == "mixed-dtypes":
        other = sorted(backend.dtypes - {dtype})[0]
        actions[check] = (lambda: product(native((3, 4)), native((4, 5), other)), [(3, 4), (4, 5)])
    if check == "undeclared-dtype":
        missing = sorted(set(DTYPES) - set(backend.dtypes))[0]
        actions[check] = (lambda: [lambda: backend.from_numpy(rng.standard_normal((3, 4)), missing)],
                          [(3, 4)])
    make, shapes = actions[check]
    try:
        details = [_expect_clear_error(backend, action, shapes, check) for action in make()]
    except CheckFailedError as failure:
        return CheckResult(backend.name, f"bad-input-{check}", False, str(failure))
    return CheckResult(backend.name, f"bad-input-{check}", True, details[0])


# Whole backends --------------------------------------------------------------------------------


@idle_workers_ended()
def check_backend(
    backend: Any,
    dtypes: Iterable[str] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
    *,
    random: int = 0,
    seed: int = 0,
    max_work: float = DEFAULT_MAX_WORK,
    timeout: float | str | None = "default",
    classes: Iterable[str] | None = None,
    workers: int | None = None,
) -> ConformanceReport:
    """Run the whole suite on one backend (or only some of its dtypes), then ``random`` problems
    drawn by :func:`gemmzoo.conformance.random_problems.random_cases` with ``seed`` and M·N·K at most
    ``max_work``. ``classes``: the problem classes whose cases run (default: ``"gemm"`` and every
    class the backend declares); a verdict for one class is earned by that class's cases alone.

    Nothing a backend does stops the suite: a malformed backend (see
    :func:`gemmzoo.contract.validation.backend_problem`) fails a ``backend-members`` check, and a check that
    raises is a failed check with the exception's message. Each check has ``timeout`` seconds
    (``"default"``: :func:`gemmzoo.plugins.watchdog.default_timeout`; ``None``: no limit): one that
    overruns fails, sets :attr:`ConformanceReport.timed_out`, quarantines the backend
    (:mod:`gemmzoo.plugins.watchdog`) and ends its suite.

    ``workers``: processes the checks are shared among (:mod:`gemmzoo.conformance.shards`); by
    default more than one only for a backend whose cases compile kernels
    (:attr:`gemmzoo.Backend.suite_compiles`) on a machine with cores to spare. The results are
    the same, in the same order.
    """
    report = ConformanceReport(_label(backend))

    def record(result: CheckResult) -> None:
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    problem = backend_problem(backend)
    if problem is not None:
        record(CheckResult(report.backend, "backend-members", False, problem))
        return report
    reason, fault = probe_availability(backend)
    if fault is not None:
        if quarantined(backend) is not None:
            report.timed_out = fault
        record(CheckResult(report.backend, "unavailable-reason", False, fault))
        return report
    if reason is not None:
        report.unavailable = reason
        return report
    settings = SuiteSettings(None if dtypes is None else tuple(dtypes),
                             None if classes is None else tuple(classes), random, seed, max_work)
    checks = suite_checks(backend, settings)
    elsewhere = shards.start(backend, dataclasses.asdict(settings), timeout, [label for label, _ in checks],
                             workers)
    done: dict[int, CheckResult] = {}

    def take(index: int, result: CheckResult, overran: str | None) -> bool:
        done[index] = result
        if on_result is not None:
            on_result(result)
        if overran is not None:  # from a worker too: quarantined here, as if it had run here
            quarantine(backend, overran)
            report.timed_out = overran
        return overran is None

    try:
        for index in range(len(checks)) if elsewhere is None else elsewhere.here:
            if not take(index, *run_check(backend, *checks[index], timeout)):
                break
        if elsewhere is not None and report.timed_out is None:

            def here_instead(index: int) -> tuple[CheckResult, str | None]:
                return run_check(backend, *checks[index], timeout)

            for index, result, overran in elsewhere.results(here_instead, CheckResult):
                if not take(index, result, overran):
                    break
    finally:
        if elsewhere is not None:
            elsewhere.stop()
    report.results.extend(done[index] for index in sorted(done))
    return report


@dataclass(frozen=True)
class SuiteSettings:
    """What selects a suite's checks (:func:`check_backend`'s arguments): the same settings give
    the same checks in the same order in any process."""

    dtypes: tuple[str, ...] | None = None
    classes: tuple[str, ...] | None = None
    random: int = 0
    seed: int = 0
    max_work: float = DEFAULT_MAX_WORK


def suite_checks(backend: Any, settings: SuiteSettings) -> list[tuple[str, Callable[[], CheckResult]]]:
    """The suite's checks of an available backend, in order: ``(label, run)``."""
    asked = None if settings.dtypes is None else set(settings.dtypes)
    chosen = [d for d in DTYPES if d in backend.dtypes and (asked is None or d in asked)]
    wanted = None if settings.classes is None else set(settings.classes)
    gemm = wanted is None or "gemm" in wanted
    checks: list[tuple[str, Callable[[], CheckResult]]] = []
    if gemm:
        checks += [(f"bad-input-{check}", lambda check=check: run_input_check(backend, check))
                   for check in input_checks(backend)]
        checks += [(case.id, lambda case=case: run_case(backend, case))
                   for d in chosen for case in conformance_cases(d, backend.device)]
    checks += [(case.id, lambda case=case: _class_check(backend, case))
               for case in class_cases(backend, set(chosen)) if wanted is None or case.kind in wanted]
    if settings.random and chosen and gemm:
        checks += [(case.id, lambda case=case: run_case(backend, case))
                   for case in random_cases(chosen, settings.random, settings.seed, settings.max_work)]
    return checks


def _label(backend: Any) -> str:
    """The name a report and its results give ``backend``: its ``name`` where that is a string,
    else the repr of whatever it is (a malformed backend is reported too)."""
    name = getattr(backend, "name", None)
    return name if isinstance(name, str) else repr(name)


def run_check(backend: Any, label: str, check: Callable[[], CheckResult],
              timeout: float | str | None) -> tuple[CheckResult, str | None]:
    """One check within ``timeout`` (:func:`gemmzoo.plugins.watchdog.call`): its result, and what
    overran when it ran past the limit (the result then says ``TIMEOUT``), else ``None``."""
    name = _label(backend)
    try:
        return watched(backend, label, check, timeout=timeout), None
    except BackendTimeoutError as error:
        return CheckResult(name, label, False, f"TIMEOUT: {error}"), str(error)
    except Exception as error:  # run_case and run_input_check catch; this is the last guard
        return CheckResult(name, label, False, "raised " + _exception_text(error)), None
