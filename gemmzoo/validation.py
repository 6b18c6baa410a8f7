"""What a registered backend must look like before gemmzoo accepts it.

Checked once, at registration: the members exist, ``name`` is a lowercase kebab-case string,
``device`` is ``"cpu"`` or ``"cuda"``, ``dtypes`` is a non-empty set of gemmzoo dtype names and
``accuracy`` (when present) is a known accuracy class. A backend that fails is refused with one
line saying what is wrong, so nothing downstream (the suite, the benchmarks, selection) meets it.
"""

from __future__ import annotations

import re
from collections.abc import Set
from typing import Any

from gemmzoo.contract.accuracy import ACCURACY_CLASSES, accuracy_of
from gemmzoo.contract.backend import declared
from gemmzoo.contract.dtypes import DTYPES

NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
BACKEND_MEMBERS = (
    "name", "device", "dtypes", "unavailable_reason", "from_numpy", "to_numpy", "matmul",
    "synchronize",
)
_METHODS = ("unavailable_reason", "from_numpy", "to_numpy", "matmul", "synchronize")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def describe_backend(backend: Any) -> str:
    """``class Foo, name 'foo'``: a backend as a message names it, never its own ``repr``."""
    try:
        name = getattr(backend, "name", None)
    except Exception:  # a name property that raises: the class alone names it
        name = None
    named = f", name {name!r}" if isinstance(name, str) else ""
    return f"class {type(backend).__qualname__}{named}"


def _dtypes_problem(dtypes: Any) -> str | None:
    known = ", ".join(DTYPES)
    if isinstance(dtypes, (str, bytes)) or not isinstance(dtypes, Set):
        return (f"dtypes must be a set of dtype names such as frozenset({{'float32'}}), not "
                f"{type(dtypes).__name__} {_one_line(repr(dtypes))[:80]}; known: {known}")
    if not dtypes:
        return f"dtypes is empty: declare at least one of {known}"
    wrong = [d for d in dtypes if not isinstance(d, str)]
    if wrong:
        return f"dtypes holds non-string entries {sorted(map(repr, wrong))}; known: {known}"
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        return f"unknown dtypes {unknown}; known: {known}"
    return None


#: The method each problem class beyond gemm needs (:attr:`gemmzoo.Backend.classes`).
_CLASS_METHODS = {"batched": "bmm", "scaled": "scaled_mm", "grouped": "grouped_mm"}


def _classes_problem(backend: Any) -> str | None:
    """What is wrong with ``backend.classes``: not a set of known class names, or a class declared
    without its method."""
    from gemmzoo.contract.backend import Backend
    from gemmzoo.problems.classes import CLASSES

    classes = declared(backend, "classes")
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (Set, tuple, list)) or not all(
            isinstance(name, str) for name in classes):
        return (f"classes must be a set of problem class names, not "
                f"{type(classes).__name__} {_one_line(repr(classes))[:80]}")
    unknown = sorted(set(classes) - set(CLASSES))
    if unknown:
        return f"classes {', '.join(map(repr, unknown))} unknown; known: {', '.join(CLASSES)}"
    for name, method in _CLASS_METHODS.items():
        found = getattr(type(backend), method, None)
        if name in classes and (not callable(found) or found is getattr(Backend, method)):
            return f"declares the {name} class but does not implement {method}"
    return None


def backend_problem(backend: Any) -> str | None:
    """What is wrong with ``backend``, in one line; ``None`` when it may be registered."""
    try:
        missing = [member for member in BACKEND_MEMBERS if not hasattr(backend, member)]
        if missing:
            return f"missing {', '.join(missing)}"
        name = backend.name
        if not isinstance(name, str):
            return f"name must be a str, not {type(name).__name__} {_one_line(repr(name))[:80]}"
        if not NAME_PATTERN.match(name):
            return f"name {name!r} is not lowercase kebab-case (like 'mylib-fp16')"
        device = backend.device
        if not isinstance(device, str) or device not in ("cpu", "cuda"):
            return f"device {_one_line(repr(device))[:80]} is neither 'cpu' nor 'cuda'"
        problem = _dtypes_problem(backend.dtypes)
        if problem:
            return problem
        not_callable = [m for m in _METHODS if not callable(getattr(backend, m))]
        if not_callable:
            return f"not callable: {', '.join(not_callable)}"
        selectable = declared(backend, "selectable")
        if not isinstance(selectable, bool):
            return f"selectable must be True or False, not {type(selectable).__name__}"
        searched = declared(backend, "searches_over")
        if isinstance(searched, (str, bytes)) or not isinstance(searched, (tuple, list)) or not all(
                isinstance(name, str) for name in searched):
            return (f"searches_over must be a tuple of backend names, not "
                    f"{type(searched).__name__} {_one_line(repr(searched))[:80]}")
        accuracy = accuracy_of(backend)
        if not isinstance(accuracy, str) or accuracy not in ACCURACY_CLASSES:
            return (f"accuracy {_one_line(repr(accuracy))[:80]} is not one of "
                    f"{', '.join(ACCURACY_CLASSES)}")
        problem = _classes_problem(backend)
        if problem:
            return problem
    except Exception as error:  # a property that raises is a malformed backend, not a crash
        try:
            text = _one_line(str(error))
        except Exception:  # nor is an exception whose own __str__ raises
            text = "<unprintable>"
        return f"reading its members raised {type(error).__name__}: {text}"
    return None
