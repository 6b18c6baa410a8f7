"""The shipped prior: which backend answers a problem before anything is measured.

A pure function of the problem (sizes, dtype, layout), the device (kind and architecture), the
caller's array library, and the routes the backends declare (:attr:`gemmzoo.Backend.prior_routes`).
It returns a backend name, or ``None`` when no route matches. It knows no verdicts and no timings:
whoever uses its answer still checks that backend's conformance before its first use (unless the
call is then the caller's library's own product, which nothing of gemmzoo's computes: see
:attr:`gemmzoo.Backend.library_product`), and any measured answer replaces it.

The rules live with the backends that they route to (each plugin declares its own), so the core
names no bundled backend. A route is a mapping; every key it has must match the problem:

``device``
    ``"cpu"`` or ``"cuda"``.
``library``
    the caller's array library: ``"numpy"``, ``"torch"`` or ``"cupy"``.
``dtypes``
    the dtype names the route covers.
``arch``
    architecture prefixes (``"sm_90"``, ``"sm_8"``, ``"x86_64"``): the device's must start with one.
``misaligned_bytes``
    an integer ``B``: the route matches only when a row of A, B or C (as stored, by ``layout``)
    is not a multiple of ``B`` bytes long, the case where vendor BLAS leaves its fast kernels.
``min_flops``
    a number ``F``: the route matches only when the product's 2·M·N·K is at least ``F`` (a
    route whose backend adds a fixed cost per call, such as copies into padded buffers, pays
    off only on products large enough to hide it).

The route with the most keys wins (the most specific); equals go to the smaller backend name.

:func:`shipped` is this prior as a session's hook (:attr:`gemmzoo.Session.prior`, the default):
it gathers the routes of the backends the current session offers for the problem and asks
:func:`route`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gemmzoo.tuning.choose import Problem

#: The keys a route may have; a route with any other key is ignored (it cannot be matched safely).
ROUTE_KEYS = frozenset({"device", "library", "dtypes", "arch", "misaligned_bytes", "min_flops"})
#: Bytes per stored element of each dtype (tf32 is stored as fp32).
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "tf32": 4, "float64": 8, "float8_e4m3fn": 1}


def row_lengths(shape: tuple[int, int, int], layout: str) -> tuple[int, int, int]:
    """Elements per stored row of A, B and C for ``shape = (M, N, K)`` and a BLAS-style layout."""
    m, n, k = shape
    a_row = k if layout[:1] != "T" else m
    b_row = n if layout[1:2] != "T" else k
    return a_row, b_row, n


def misaligned(shape: tuple[int, int, int], dtype: str, layout: str, alignment: int) -> bool:
    """True when a stored row of A, B or C is not a multiple of ``alignment`` bytes."""
    size = ITEMSIZE[dtype]
    return any((length * size) % alignment for length in row_lengths(shape, layout))


def _matches(rule: Mapping[str, Any], shape: tuple[int, int, int], dtype: str, layout: str,
             device: str, arch: str, library: str | None) -> bool:
    if not set(rule) <= ROUTE_KEYS:
        return False
    if "device" in rule and rule["device"] != device:
        return False
    if "library" in rule and rule["library"] != library:
        return False
    if "dtypes" in rule and dtype not in rule["dtypes"]:
        return False
    if "arch" in rule and not any(arch.startswith(prefix) for prefix in rule["arch"]):
        return False
    if "min_flops" in rule:
        floor = rule["min_flops"]
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not floor >= 0:
            return False
        m, n, k = shape
        if 2 * m * n * k < floor:
            return False
    if "misaligned_bytes" in rule:
        alignment = rule["misaligned_bytes"]
        if not isinstance(alignment, int) or alignment <= 0:
            return False
        if not misaligned(shape, dtype, layout, alignment):
            return False
    return True


def route_matches(rule: Mapping[str, Any], shape: tuple[int, int, int], dtype: str, layout: str,
                  device: str, arch: str, library: str | None) -> bool:
    """Whether one route matches the problem (every key it has; a route with an unknown key
    never matches); an empty product matches no route keyed on alignment."""
    if "misaligned_bytes" in rule and min(shape) == 0:
        return False
    return _matches(rule, shape, dtype, layout, device, arch, library)


def route(shape: tuple[int, int, int], dtype: str, layout: str, device: str, arch: str,
          library: str | None, routes: Mapping[str, Iterable[Mapping[str, Any]]]) -> str | None:
    """The backend the prior sends a problem to, or ``None``.

    ``routes`` maps each candidate backend's name to the routes it declares. An empty product
    (a size of 0) has no alignment to speak of: routes keyed on alignment do not match it.
    """
    best: tuple[int, str] | None = None
    for name, rules in routes.items():
        for rule in rules:
            if not isinstance(rule, Mapping):
                continue
            if "misaligned_bytes" in rule and min(shape) == 0:
                continue
            if _matches(rule, shape, dtype, layout, device, arch, library):
                rank = (-len(rule), name)
                if best is None or rank < best:
                    best = rank
    return None if best is None else best[1]


def offered(problem: Problem) -> dict[str, Any]:
    """The backends the current session offers for ``problem``, by name: on its device, computing
    its dtype, of an accuracy class the caller accepts, and selectable by default or named in
    the session's ``backends``."""
    from gemmzoo.config import active, current_config
    from gemmzoo.contract.accuracy import accepts, accuracy_of
    from gemmzoo.contract.backend import declared

    session = active()  # called as the current session's prior; with none yet, the process's backends
    if session is None:
        from gemmzoo.plugins.registry import get_registry

        config = current_config()
        offered = get_registry(config).select(list(config.backends))
    else:
        config, offered = session.config, session.select()
    named = set(config.backends)
    return {b.name: b for b in offered
            if b.device == problem.device and problem.dtype in b.dtypes
            and accepts(problem.accuracy, accuracy_of(b)) and (declared(b, "selectable") or b.name in named)}


def shipped(problem: Problem) -> str | None:
    """The shipped prior's backend for ``problem`` among those the current session offers
    (:func:`offered`), by the routes they declare (:attr:`gemmzoo.Backend.prior_routes`)."""
    from gemmzoo.contract.backend import declared

    routes = {name: declared(b, "prior_routes") or () for name, b in offered(problem).items()}
    return route(problem.shape, problem.dtype, problem.layout, problem.device, device_arch(problem.device),
                 problem.library, routes)


def device_arch(device: str) -> str:
    """The architecture the prior's routes are keyed by: ``sm_XY`` for a CUDA device, else the
    host's machine name (``x86_64``, ``aarch64``)."""
    if device == "cuda":
        from gemmzoo.measure.device import cuda_properties

        capability = str(cuda_properties().get("capability", ""))
        return "sm_" + capability.replace(".", "") if capability else "sm_unknown"
    import platform

    return platform.machine()
