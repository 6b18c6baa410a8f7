"""The one format of gemmzoo's result files, and the check every file passes before it is used.

A result file (``gemmzoo bench --json``, each ``--shard`` part, ``gemmzoo bench --merge``'s
output, every JSON file in ``docs/results/``) is one JSON object::

    {"format": "gemmzoo-results", "version": 1,
     "created": ISO date, "command": text, "environment": {device kind: {...}},
     "settings": {...},                                   # how it was measured (optional)
     "shard": {"index", "count", "grid", "points"},       # one part of a split grid (optional)
     "devices": [...], "merged_from": [file, ...],        # workers, merged parts (optional)
     "title": text, "context": {...},                     # what the run was for, what else it found
     "results": [result, ...], "summary": [...]}

Each result is one backend on one problem; :data:`RESULT_FIELDS` declares every field, its type
and its bounds. A result of a problem class beyond gemm (:mod:`gemmzoo.problems.classes`) says so in
``class`` and names its problem in ``problem`` (its text form, which must agree with ``class``,
``m``, ``n``, ``k`` and ``dtype``); a result without ``class`` is a ``gemm`` one, so files written
before the classes existed read as they always did. Fields a file has that are not declared
are kept (and written back on merge) if they are plain, bounded JSON values; declared fields must
have their declared type. Files written before the format was versioned (no ``format`` key, the
same layout) are read as version 1; a newer version is refused with a message that says so.

:func:`parse_document` reads the text (no ``NaN``/``Infinity``, bounded size, numbers and
nesting), :func:`check_document` checks it whole. A failure is a :class:`ResultFileError` whose
one-line message names the file, the entry and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import GemmError
from gemmzoo.problems.classes import CLASSES

FORMAT = "gemmzoo-results"
VERSION = 1

MAX_FILE_BYTES = 64 * 2**20
MAX_RESULTS = 200_000
MAX_PARTS = 10_000  # ``--shard I/N``: N at most this
MAX_SIZE = 2**31 - 1  # M, N, K
MAX_SAMPLES = 10**9
MAX_SECONDS = 1e6  # per GEMM: anything longer is not a timing
MAX_NUMBER = 1e30  # any other number (TFLOPS, error ratios, clocks)
MAX_NAME = 200  # backend names, dtypes, methods, labels
MAX_TEXT = 65_536  # details, commands
MAX_DEPTH = 12  # nesting of free-form values (environment, gpu state, worker reports)
MAX_ITEMS = 100_000  # entries of one free-form list or object
MAX_INT_DIGITS = 100

STATUSES = ("ok", "wrong", "error", "unsupported", "timeout")
LAYOUTS = ("NN", "NT", "TN", "TT")
DEVICES = ("cpu", "cuda")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # tabs and newlines allowed, no escapes
_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ResultFileError(GemmError):
    """A result file that is not one gemmzoo can use; the message names file, entry and field."""


class FieldError(Exception):
    """A check of one value failed; ``where`` names the field (and what encloses it)."""

    def __init__(self, message: str, where: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message, self.where = message, where


def shown(value: Any) -> str:
    """A short, plain rendering of a value (from a file) for a message."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    text = _NAME_CONTROL.sub("?", text)
    return text if len(text) <= 40 else text[:37] + "..."


Check = Callable[[Any], Any]


def text(limit: int = MAX_NAME, nullable: bool = True, lines: bool = False) -> Check:
    """A string of at most ``limit`` characters without control characters (tab and newline
    allowed where ``lines``)."""
    pattern = _CONTROL if lines else _NAME_CONTROL

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise FieldError(f"must be text, got {shown(value)}")
        if len(value) > limit:
            raise FieldError(f"text longer than {limit} characters ({len(value)})")
        if pattern.search(value):
            raise FieldError("text holds control characters")
        return value

    return check


def choice(options: tuple[str, ...], nullable: bool = False) -> Check:
    """One of ``options``."""

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or value not in options:
            raise FieldError(f"must be one of {', '.join(options)}; got {shown(value)}")
        return value

    return check


def integer(low: int, high: int, nullable: bool = True) -> Check:
    """An integer in [low, high] (not a boolean, not a float)."""

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(f"must be an integer, got {shown(value)}")
        if not low <= value <= high:
            raise FieldError(f"must be between {low} and {high}, got {shown(value)}")
        return value

    return check


def number(high: float = MAX_NUMBER, low: float = 0.0, nullable: bool = True) -> Check:
    """A finite number in [low, high]."""

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FieldError(f"must be a number, got {shown(value)}")
        if not math.isfinite(value) or not low <= value <= high:
            raise FieldError(f"must be a finite number between {low:g} and {high:g}, got {shown(value)}")
        return float(value)

    return check


def either(*checks: Check) -> Check:
    """The first of ``checks`` that accepts the value; the last one's complaint otherwise."""

    def check(value: Any) -> Any:
        for number, one in enumerate(checks):
            try:
                return one(value)
            except FieldError:
                if number == len(checks) - 1:
                    raise
        return value

    return check


def flag(nullable: bool = True) -> Check:
    """``true`` or ``false``."""

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, bool):
            raise FieldError(f"must be true or false, got {shown(value)}")
        return value

    return check


def free(kind: type | None = None, nullable: bool = True) -> Check:
    """Any plain JSON value of bounded nesting and size (of type ``kind`` when given); its text
    has no control characters."""

    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if kind is not None and not isinstance(value, kind):
            raise FieldError(f"must be {'an object' if kind is dict else 'a list'}, got {shown(value)}")
        _check_free(value)
        return value

    return check


def _check_free(value: Any) -> None:
    """Bounded depth, bounded entries, finite numbers, texts without control characters;
    iterative, so nesting cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise FieldError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            if len(item) > MAX_ITEMS:
                raise FieldError(f"more than {MAX_ITEMS} entries")
            for key, inner in item.items():
                _KEY(key)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            if len(item) > MAX_ITEMS:
                raise FieldError(f"more than {MAX_ITEMS} entries")
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            text(MAX_TEXT, lines=True)(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise FieldError("holds a number that is not finite")


_KEY = text(MAX_NAME, nullable=False)
_SECONDS = number(MAX_SECONDS)
_RATE = number()

#: Every declared field of a result: its check. ``None`` in a file reads as "not measured".
RESULT_FIELDS: dict[str, Check] = {
    "backend": text(nullable=False),
    "class": choice(CLASSES, nullable=True),  # absent or null: "gemm"
    "problem": text(),  # a class problem's text form (gemmzoo.problems.classes)
    "device": choice(DEVICES),
    "point": text(),
    "m": integer(1, MAX_SIZE, nullable=False),
    "n": integer(1, MAX_SIZE, nullable=False),
    "k": integer(1, MAX_SIZE, nullable=False),
    "dtype": choice(DTYPES),
    "layout": choice(LAYOUTS),
    "accuracy": text(),
    "status": choice(STATUSES),
    # device time per GEMM (seconds): median and quartiles over ``samples`` timed calls
    "median_s": _SECONDS, "q1_s": _SECONDS, "q3_s": _SECONDS,
    "samples": integer(0, MAX_SAMPLES),
    "method": text(),
    "host_s": _SECONDS, "host_q1_s": _SECONDS, "host_q3_s": _SECONDS, "caller_s": _SECONDS,
    "launch_bound": flag(),
    "tflops": _RATE, "caller_tflops": _RATE, "gbps": _RATE, "bandwidth_gbps": _RATE,
    "roofline_bound": text(), "roofline_percent": _RATE,
    "peak_tflops": _RATE, "peak_percent": _RATE,
    "error_ratio": _RATE, "rel_error": _RATE,
    "detail": text(MAX_TEXT, lines=True),
    "gpu": free(dict),
    # how the measurement went (written by the engine where it knows)
    "timer": text(),
    "threads": either(integer(1, 1 << 16), free(dict)),  # a count, or one per thread pool
    "converged": flag(),
    "noise": number(1e6),  # relative spread of the median the stopping rule reached (0.01 = 1%)
    "throttled": flag(),
    # whether a CPU timing shared its cores (gemmzoo.measure.contention)
    "cpu_share": number(1.0), "others_load": number(1e6), "contended": flag(),
    # the machine's calibration timed between a CPU row's samples (gemmzoo.measure.calibration)
    "calibration": text(), "calibration_s": _SECONDS, "calibration_q1_s": _SECONDS,
    "calibration_q3_s": _SECONDS, "calibration_samples": integer(0, MAX_SAMPLES),
    "calibration_noise": number(1e6),
    # the row's samples over the calibration's nearby median, summarised (a ratio, not seconds)
    "in_calibrations": _RATE, "in_calibrations_q1": _RATE, "in_calibrations_q3": _RATE,
    "in_calibrations_noise": number(1e6), "in_calibrations_converged": flag(),
    "beyond_roofline": flag(),  # faster than the device's roofline floor: not a speed to trust
    "round": integer(0, MAX_SAMPLES),
}

_REQUIRED = ("backend", "m", "n", "k", "dtype", "status")

_SHARD_FIELDS: dict[str, Check] = {
    "index": integer(1, MAX_PARTS, nullable=False),
    "count": integer(1, MAX_PARTS, nullable=False),
    "grid": text(nullable=False),
    "points": integer(0, MAX_RESULTS, nullable=False),
}

#: Every declared top-level field of a file but ``results``.
DOCUMENT_FIELDS: dict[str, Check] = {
    "format": choice((FORMAT,)),
    "version": integer(1, 1_000_000),
    "created": text(),
    "command": text(MAX_TEXT),
    "environment": free(dict),
    "settings": free(dict),
    "devices": free(list),
    "merged_from": free(list),
    "summary": free(list),
    "title": text(MAX_TEXT),
    "context": free(dict),  # what else the run recorded (conformance verdicts, wall times), for its report
    "notes": text(MAX_TEXT, lines=True),
}


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by ``None``, at any depth: JSON
    has no such numbers, and a result file holding them would not read back."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(inner) for inner in value]
    return value


def parse_document(path: str | Path) -> Any:
    """The JSON value in ``path``: at most :data:`MAX_FILE_BYTES`, no ``NaN`` or ``Infinity``,
    numbers that fit a float, integers of at most :data:`MAX_INT_DIGITS` digits."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ResultFileError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ResultFileError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not a result file")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultFileError(f"{path}: not UTF-8 text (byte {error.start})") from None
    try:
        return json.loads(source, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int)
    except FieldError as error:
        raise ResultFileError(f"{path}: {error.message}") from None
    except RecursionError:
        raise ResultFileError(f"{path}: JSON nested too deeply") from None
    except ValueError as error:
        raise ResultFileError(f"{path}: not JSON: {_first_line(str(error))}") from None


def _no_constant(name: str) -> Any:
    raise FieldError(f"{name} is not allowed in a result file (JSON has no such number)")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise FieldError(f"the number {literal[:30]} does not fit a float")
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise FieldError(f"an integer of {len(literal)} digits")
    return int(literal)


def _first_line(message: str) -> str:
    return message.splitlines()[0][:200] if message else "unreadable"


def check_result(record: Any) -> dict[str, Any]:
    """``record`` checked against :data:`RESULT_FIELDS` (see the module docstring); raises
    :class:`FieldError` naming the field."""
    if not isinstance(record, dict):
        raise FieldError(f"must be an object, got {shown(record)}")
    for name in _REQUIRED:
        if record.get(name) is None:
            raise FieldError("missing", (f"field {name!r}",))
    for name, value in record.items():
        check = RESULT_FIELDS.get(name)
        try:
            if check is not None:
                check(value)
            else:
                _KEY(name)
                _check_free(value)
        except FieldError as error:
            raise FieldError(error.message, (f"field {shown(name)}",)) from None
    _check_class(record)
    if record["status"] == "ok" and record.get("median_s") is None:
        raise FieldError("missing: a result with status ok needs a time", ("field 'median_s'",))
    median = record.get("median_s")
    if median is not None and record["status"] == "ok" and median <= 0:
        raise FieldError("a measured time must be above 0", ("field 'median_s'",))
    _check_quartiles(record, "median_s", "q1_s", "q3_s")
    calibration = record.get("calibration_s")
    if calibration is not None and calibration <= 0:
        raise FieldError("a measured time must be above 0", ("field 'calibration_s'",))
    _check_quartiles(record, "calibration_s", "calibration_q1_s", "calibration_q3_s")
    _check_quartiles(record, "in_calibrations", "in_calibrations_q1", "in_calibrations_q3")
    return record


def _check_quartiles(record: Mapping[str, Any], median_key: str, q1_key: str, q3_key: str) -> None:
    """A median between its quartiles, the quartiles in order, where all three are given."""
    median, q1, q3 = record.get(median_key), record.get(q1_key), record.get(q3_key)
    if median is None or q1 is None or q3 is None:
        return
    slack = 1e-9 * max(median, q3) + 1e-15
    if not q1 <= q3:
        raise FieldError(f"quartiles out of order (q1 {q1:g} > q3 {q3:g})", (f"field {q1_key!r}",))
    if not q1 - slack <= median <= q3 + slack:
        raise FieldError(f"median {median:g} outside its quartiles [{q1:g}, {q3:g}]",
                         (f"field {median_key!r}",))


def result_class(record: Mapping[str, Any]) -> str:
    """The problem class of a checked result: its ``class``, or ``"gemm"`` when it has none."""
    return record.get("class") or "gemm"


def _check_class(record: dict[str, Any]) -> None:
    """A class result's ``problem`` must parse and agree with its class, sizes and dtype."""
    kind, text_form = result_class(record), record.get("problem")
    if text_form is None:
        if kind != "gemm":
            raise FieldError(f"missing: a {kind} result names its problem", ("field 'problem'",))
        return
    from gemmzoo.problems.classes import parse_problem

    try:
        problem = parse_problem(text_form, dtype=record["dtype"])
    except ValueError as error:
        raise FieldError(str(error), ("field 'problem'",)) from None
    if problem.kind != kind or problem.shape != (record["m"], record["n"], record["k"]):
        raise FieldError(f"problem {text_form!r} is not the {kind} problem of M, N, K "
                         f"{record['m']}x{record['n']}x{record['k']}", ("field 'problem'",))


def check_document(data: Any, path: str | Path) -> dict[str, Any]:
    """``data`` (from :func:`parse_document`) checked whole as a result file; raises
    :class:`ResultFileError` naming ``path``, the entry and the field."""
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: not a gemmzoo bench result file (the JSON is not an object)")
    if not isinstance(data.get("results"), list):
        raise ResultFileError(f"{path}: not a gemmzoo bench result file (no \"results\" list)")
    version = data.get("version", VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise ResultFileError(f"{path}: written in version {version} of the result format; this gemmzoo "
                              f"reads version {VERSION} (upgrade gemmzoo)")
    for name, value in data.items():
        if name == "results":
            continue
        try:
            _KEY(name)
            if name == "shard":
                _check_shard(value)
            else:
                DOCUMENT_FIELDS.get(name, free())(value)
        except FieldError as error:
            raise ResultFileError(f"{path}: {' '.join((f'field {shown(name)}', *error.where))}: "
                                  f"{error.message}") from None
    results = data["results"]
    if len(results) > MAX_RESULTS:
        raise ResultFileError(f"{path}: {len(results)} results, more than the {MAX_RESULTS} a file may hold")
    for number, record in enumerate(results):
        try:
            check_result(record)
        except FieldError as error:
            where = "".join(f" {w}" for w in error.where)
            raise ResultFileError(f"{path}: {describe(number, record)}{where}: {error.message}") from None
    return data


def _check_shard(value: Any) -> None:
    if not isinstance(value, dict):
        raise FieldError(f"must be an object, got {shown(value)}")
    for name, check in _SHARD_FIELDS.items():
        if name not in value:
            raise FieldError("missing", (f"{name!r}",))
        try:
            check(value[name])
        except FieldError as error:
            raise FieldError(error.message, (f"{name!r}",)) from None
    if value["index"] > value["count"]:
        raise FieldError(f"part {value['index']} of {value['count']} does not exist", ("'index'",))


def describe(number: int, record: Any, what: str = "result") -> str:
    """``result 3 (backend 'numpy', 64x64x64)``, from whatever of that is readable."""
    label = f"{what} {number}"
    if not isinstance(record, Mapping):
        return label
    parts = []
    backend = record.get("backend")
    if isinstance(backend, str):
        parts.append(f"backend {shown(backend)}")
    sizes = [record.get(k) for k in ("m", "n", "k")]
    if all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= MAX_SIZE for s in sizes):
        parts.append("x".join(map(str, sizes)))
    return f"{label} ({', '.join(parts)})" if parts else label


def load_document(path: str | Path) -> dict[str, Any]:
    """:func:`parse_document` then :func:`check_document`."""
    return check_document(parse_document(path), path)
