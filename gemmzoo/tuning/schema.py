"""What a tuning row may hold: the one check of a tuning file's rows before import, and of the
rows read back from the database before they are used.

Every field has a type, and numbers have a range: times are finite and positive (a spread may be
0), sizes are positive integers up to :data:`MAX_SIZE`, dtypes and layouts are the known ones,
strings are of bounded length, ``device`` and ``versions`` are flat objects of bounded size.
A row that breaks a rule is described by :class:`RowError` (the field and what is wrong), so
that a caller can name the file and the entry.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.contract.validation import NAME_PATTERN
from gemmzoo.problems.grids import LAYOUTS

MAX_SIZE = 2**31
"""The largest M, N or K a row may hold."""
MAX_SECONDS = 1e5
"""The longest time a row may hold (a median, a spread, a host time)."""
MAX_SAMPLES = 10**9
MAX_CHECKS = 10**6
MAX_NAME = 64
MAX_TEXT = 256
#: The longest text form of a class problem (a grouped problem names every group's rows).
MAX_PROBLEM_TEXT = 8192
MAX_DETAIL = 2000
"""The longest ``detail`` a row may hold; exports cut longer ones to this length."""
MAX_KEYS = 32
"""The most keys a ``device`` or ``versions`` object may hold."""
FUTURE_SLACK_S = 86400.0
"""How far in the future a row's ``created`` may be (clocks differ between machines); a row
stamped later would win over every newer measurement."""
STATUSES = ("ok", "wrong", "failed")
DEVICE_KINDS = ("cpu", "cuda")

MEASUREMENT_FIELDS = ("device", "versions", "backend", "m", "n", "k", "dtype", "layout", "status",
                      "median_s", "spread_s", "error_ratio", "samples", "detail", "created")
MEASUREMENT_OPTIONAL = ("host_s", "host_spread_s", "loop_s", "loop_spread_s")
VERDICT_FIELDS = ("device", "versions", "backend", "dtype", "passed", "checks", "failures", "detail",
                  "created")
CLASS_MEASUREMENT_FIELDS = ("device", "versions", "backend", "problem_class", "problem", "dtype", "status",
                            "median_s", "created")
#: The problem classes a class measurement may name (plain products are ``measurements`` rows).
CLASS_KINDS = ("batched", "scaled", "grouped")


class RowError(ValueError):
    """A row field that breaks the schema: ``field`` names it, the message says why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to about ``limit`` characters (for error messages)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...(cut)"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def seconds(row: dict[str, Any], field: str, *, required: bool, zero: bool = False) -> None:
    """``row[field]`` is a finite time in (0, MAX_SECONDS] ([0, ...] with ``zero``), or null."""
    value = row.get(field)
    if value is None:
        if required:
            raise RowError(field, "required: a time in seconds")
        return
    low = "non-negative" if zero else "positive"
    if not _number(value) or not math.isfinite(value):
        raise RowError(field, f"must be a finite {low} number of seconds, got {shown(value)}")
    if value < 0 or (value == 0 and not zero) or value > MAX_SECONDS:
        raise RowError(field, f"must be a {low} number of seconds up to {MAX_SECONDS:g}, got {shown(value)}")


def integer(row: dict[str, Any], field: str, low: int, high: int, *, required: bool = True) -> None:
    """``row[field]`` is an integer in [low, high] (a float with an integer value is refused too)."""
    value = row.get(field)
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise RowError(field, f"must be an integer, got {shown(value)}")
    if not low <= value <= high:
        raise RowError(field, f"must be between {low} and {high}, got {shown(value)}")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(field: str, value: str, lines: bool = False) -> None:
    """``value`` holds no control characters (escape sequences would reach the terminal); with
    ``lines``, newlines and tabs are allowed."""
    found = (_CONTROL_BUT_LINES if lines else _CONTROL).search(value)
    if found:
        raise RowError(field, f"must be plain text, holds the control character {found.group()!r}")


def text(row: dict[str, Any], field: str, limit: int, choices: tuple[str, ...] = (),
         lines: bool = False) -> None:
    """``row[field]`` is a string of at most ``limit`` characters of plain text (one of
    ``choices`` if given; newlines and tabs allowed with ``lines``)."""
    value = row.get(field)
    if not isinstance(value, str):
        raise RowError(field, f"must be a string, got {shown(value)}")
    if len(value) > limit:
        raise RowError(field, f"must be at most {limit} characters, got {len(value)}")
    if choices and value not in choices:
        raise RowError(field, f"must be one of {', '.join(choices)}; got {shown(value)}")
    plain(field, value, lines)


def created(row: dict[str, Any], now: float) -> None:
    """``row["created"]``: seconds since the epoch, not far in the future."""
    value = row.get("created")
    if not _number(value) or not math.isfinite(value) or value < 0:
        raise RowError("created", f"must be a time in seconds since the epoch, got {shown(value)}")
    if value > now + FUTURE_SLACK_S:
        raise RowError("created", f"is {value - now:.0f} s in the future")


def flat_object(row: dict[str, Any], field: str) -> dict[str, Any]:
    """``row[field]``: an object of at most :data:`MAX_KEYS` short keys whose values are short
    strings, numbers, booleans or null (the device fingerprint, the versions)."""
    value = row.get(field)
    if not isinstance(value, dict):
        raise RowError(field, f"must be an object, got {shown(value)}")
    if len(value) > MAX_KEYS:
        raise RowError(field, f"must have at most {MAX_KEYS} keys, got {len(value)}")
    for key, item in value.items():
        if len(key) > MAX_NAME:
            raise RowError(f"{field}.{key[:MAX_NAME]}...", f"key longer than {MAX_NAME} characters")
        plain(f"{field}.{shown(key)}", key)
        if isinstance(item, str):
            if len(item) > MAX_TEXT:
                raise RowError(f"{field}.{key}", f"must be at most {MAX_TEXT} characters, got {len(item)}")
            plain(f"{field}.{key}", item)
        elif _number(item):
            if not math.isfinite(item):
                raise RowError(f"{field}.{key}", f"must be finite, got {shown(item)}")
        elif item is not None and not isinstance(item, bool):
            raise RowError(f"{field}.{key}", f"must be a string, number, boolean or null, got {shown(item)}")
    if field == "device" and value.get("kind") not in DEVICE_KINDS:
        kind = shown(value.get("kind"))
        raise RowError("device.kind", f"must be one of {', '.join(DEVICE_KINDS)}; got {kind}")
    return value


def _fields(row: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    if not isinstance(row, dict):
        raise RowError("(row)", f"must be an object, got {shown(row)}")
    missing = [name for name in required if name not in row]
    if missing:
        raise RowError(missing[0], "missing")
    unknown = sorted(set(row) - set(required) - set(optional))
    if unknown:
        raise RowError(shown(unknown[0], MAX_NAME), "not a field of this format")


def _backend(row: dict[str, Any]) -> None:
    text(row, "backend", MAX_NAME)
    if not NAME_PATTERN.match(row["backend"]):
        raise RowError("backend", f"must be a lowercase kebab-case backend name, got {shown(row['backend'])}")


def _times(row: dict[str, Any]) -> None:
    text(row, "status", 16, STATUSES)
    seconds(row, "median_s", required=row["status"] == "ok")
    seconds(row, "spread_s", required=False, zero=True)
    seconds(row, "host_s", required=False)
    seconds(row, "host_spread_s", required=False, zero=True)
    seconds(row, "loop_s", required=False)
    seconds(row, "loop_spread_s", required=False, zero=True)
    ratio = row.get("error_ratio")
    if ratio is not None and (not _number(ratio) or not math.isfinite(ratio) or not 0 <= ratio <= 1e6):
        raise RowError("error_ratio", f"must be a finite number from 0 up, or null, got {shown(ratio)}")
    integer(row, "samples", 1, MAX_SAMPLES, required=False)


def check_measurement(row: Any, now: float | None = None) -> None:
    """Raise :class:`RowError` unless ``row`` is a measurement of the export format (``device`` and
    ``versions`` as objects)."""
    _fields(row, MEASUREMENT_FIELDS, MEASUREMENT_OPTIONAL)
    flat_object(row, "device")
    flat_object(row, "versions")
    _problem_and_times(row)
    text(row, "detail", MAX_DETAIL, lines=True)
    created(row, time.time() if now is None else now)


def _problem_and_times(row: Any) -> None:
    """The backend, the problem (sizes, dtype, layout) and the times of a measurement row."""
    _backend(row)
    for size in ("m", "n", "k"):
        integer(row, size, 1, MAX_SIZE)
    text(row, "dtype", MAX_NAME, DTYPES)
    text(row, "layout", 2, LAYOUTS)
    _times(row)


def check_verdict(row: Any, now: float | None = None) -> None:
    """Raise :class:`RowError` unless ``row`` is a conformance verdict of the export format."""
    _fields(row, VERDICT_FIELDS)
    flat_object(row, "device")
    flat_object(row, "versions")
    _backend(row)
    text(row, "dtype", MAX_NAME, DTYPES)
    if not isinstance(row["passed"], bool):
        raise RowError("passed", f"must be true or false, got {shown(row['passed'])}")
    integer(row, "checks", 0, MAX_CHECKS)
    integer(row, "failures", 0, MAX_CHECKS)
    text(row, "detail", MAX_DETAIL, lines=True)
    created(row, time.time() if now is None else now)


def check_class_measurement(row: Any, now: float | None = None) -> None:
    """Raise :class:`RowError` unless ``row`` is a measurement of a problem of another class than
    gemm in the export format: its ``problem`` must be the text form
    (:meth:`gemmzoo.problems.classes.Problem.text`) of a problem of ``problem_class`` and ``dtype``."""
    from gemmzoo.problems.classes import parse_problem

    _fields(row, CLASS_MEASUREMENT_FIELDS)
    flat_object(row, "device")
    flat_object(row, "versions")
    _backend(row)
    text(row, "problem_class", MAX_NAME, CLASS_KINDS)
    text(row, "dtype", MAX_NAME, DTYPES)
    text(row, "problem", MAX_PROBLEM_TEXT)
    try:
        parsed = parse_problem(row["problem"], dtype=row["dtype"])
    except ValueError as error:
        raise RowError("problem", str(error)[:200]) from None
    if (parsed.kind, parsed.text(), parsed.dtype) != (row["problem_class"], row["problem"], row["dtype"]):
        raise RowError("problem", f"is not a {row['problem_class']} problem of {row['dtype']} in its text "
                                  f"form (it reads as {shown(parsed.text())}, {parsed.kind}, {parsed.dtype})")
    text(row, "status", 16, STATUSES)
    seconds(row, "median_s", required=row["status"] == "ok")
    created(row, time.time() if now is None else now)


def stored_measurement_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a measurement read back from the database (``device`` and ``versions``
    as the stored strings), in one line; ``None`` when it may be used."""
    try:
        for field in ("device", "versions"):
            text(row, field, 64 * MAX_KEYS * 4)
        _problem_and_times(row)
        if not isinstance(row.get("detail"), str):
            raise RowError("detail", f"must be a string, got {shown(row.get('detail'))}")
    except RowError as error:
        return str(error)
    return None
