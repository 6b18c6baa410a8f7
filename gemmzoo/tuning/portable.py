"""Tuning results that travel: export the database to a JSON file, import it on another machine.

The file (``gemmzoo tune --export FILE``) is human-readable JSON::

    {
      "format": "gemmzoo-tuning",
      "version": 1,
      "exported": "2026-11-23T10:00:00+00:00",
      "gemmzoo": "0.1.0",
      "measurements": [
        {"device": {"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0", "sms": 132,
                    "driver": "570.86.15"},
         "versions": {"gemmzoo": "0.1.0", "numpy": "2.4.0", "torch": "2.11.0", ...,
                      "plugin": "gemmzoo 0.1.0"},
         "backend": "torch", "m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "layout": "NN",
         "status": "ok", "median_s": 0.000187, "spread_s": 1.2e-06, "error_ratio": 0.02,
         "samples": 1000, "detail": "", "created": 1795430000.0},
        ...
      ],
      "conformance": [
        {"device": {...}, "versions": {..., "suite": 3, "accuracy": "componentwise"},
         "backend": "torch", "dtype": "float16",
         "passed": true, "checks": 65, "failures": 0, "detail": "", "created": 1795429990.0},
        ...
      ],
      "class_measurements": [
        {"device": {...}, "versions": {...}, "backend": "torch", "problem_class": "grouped",
         "problem": "grouped:g8:4096x7168:m=512,...", "dtype": "bfloat16", "status": "ok",
         "median_s": 0.00037, "created": 1795430100.0},
        ...
      ]
    }

``device`` is the device fingerprint and ``versions`` the library versions that every row is keyed
by (:mod:`gemmzoo.tuning.fingerprint`), written as objects; a verdict's ``versions`` also hold the
conformance suite's revision and the backend's accuracy class
(:func:`gemmzoo.tuning.tune.verdict_versions`). An export holds, for every device, versions,
backend and problem, the newest measurement (``class_measurements``: problems of the classes
beyond gemm, named by their text form, :mod:`gemmzoo.problems.classes`; a file without the key is
read as having none), and the newest conformance verdict of every backend and dtype.

Import (``gemmzoo tune --import FILE``) first checks the whole file (:func:`load`): its size, that
it is JSON without duplicate keys, NaN or Infinity, and every row against
:mod:`gemmzoo.tuning.schema`. One bad row rejects the whole file, with one line naming the file,
the entry (``measurements[12]``) and the field; nothing is written. Then it keeps the
measurements whose device fingerprint and versions are exactly this machine's and ignores the
others, saying so in one line: a measurement is only valid where it was made. A row is added only
when it is newer than what the database holds for the same device, versions, backend and
problem, so importing a file twice changes nothing and importing files from several machines
keeps the newest measurement of each problem. The rows go in as one transaction.

Conformance verdicts in the file are checked like the rest and then left out: a verdict is earned
on this machine. For each backend and dtype whose measurements were taken in and that has no
verdict here yet, the import runs the conformance suite now (as ``gemmzoo check`` would) and
stores its verdict; until a backend has passed here, its rows rank nothing
(:mod:`gemmzoo.tuning.select`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gemmzoo.errors import GemmError
from gemmzoo.tuning import schema
from gemmzoo.tuning.db import ConformanceRecord, Record, TuningStore
from gemmzoo.tuning.fingerprint import canonical, device_fingerprint, library_versions

FORMAT = "gemmzoo-tuning"
VERSION = 1
MAX_FILE_BYTES = 256 * 2**20
"""The largest tuning file ``--import`` reads (about 400,000 measurements as exported)."""
MAX_ROWS = 1_000_000
"""The most rows of each list a tuning file may hold."""
MAX_OBJECTS = 3 * 2 * MAX_ROWS + 1
"""The most JSON objects a tuning file may hold: a row, its device and its versions per row."""
MAX_NUMBERS = 16 * MAX_ROWS
"""The most numbers a tuning file may hold (a measurement has about 12)."""
MAX_ARRAYS = 10_000
TOP_LEVEL = ("format", "version", "exported", "gemmzoo", "measurements", "conformance", "class_measurements")


class TuningFileError(GemmError):
    """A file that is not a gemmzoo tuning export this version of gemmzoo can read."""


def _problem(record: Record) -> tuple[Any, ...]:
    return (record.device, record.versions, record.backend, record.m, record.n, record.k, record.dtype,
            record.layout)


def _verdict_key(record: ConformanceRecord) -> tuple[str, str, str, str]:
    return (record.device, record.versions, record.backend, record.dtype)


def _newest(rows: Sequence[Any], key: Any) -> list[Any]:
    """The newest row (by ``created``, then position) per key, in the order of their keys' first rows."""
    chosen: dict[Any, Any] = {}
    for row in rows:
        found = chosen.get(key(row))
        if found is None or row.created >= found.created:
            chosen[key(row)] = row
    return list(chosen.values())


def _as_json(row: Any) -> dict[str, Any]:
    data = asdict(row)
    data["device"] = json.loads(row.device)
    data["versions"] = json.loads(row.versions)
    data["detail"] = row.detail[:schema.MAX_DETAIL]
    return data


def _class_problem(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["device"], row["versions"], row["backend"], row["problem"], row["dtype"]


def _class_as_json(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "device": json.loads(str(row["device"])), "versions": json.loads(str(row["versions"]))}


def export_tuning(store: TuningStore, path: str | Path) -> tuple[int, int]:
    """Write the newest measurement of every problem (plain products under ``measurements``, the
    other classes under ``class_measurements``) and the newest verdict of every backend and dtype
    to ``path``; returns (measurements of both kinds, verdicts) written."""
    from gemmzoo.config import VERSION as GEMMZOO_VERSION

    records = _newest(store.all_records(), _problem)
    verdicts = _newest(store.all_conformance(), _verdict_key)
    classes = _newest_rows(store.all_class_measurements())
    data = {
        "format": FORMAT,
        "version": VERSION,
        "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gemmzoo": GEMMZOO_VERSION,
        "measurements": [_as_json(r) for r in records],
        "conformance": [_as_json(v) for v in verdicts],
        "class_measurements": [_class_as_json(r) for r in classes],
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return len(records) + len(classes), len(verdicts)


def _newest_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest class measurement of each device, versions, backend, problem and dtype."""
    newest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = _class_problem(row)
        if key not in newest or float(row["created"]) >= float(newest[key]["created"]):
            newest[key] = row
    return sorted(newest.values(), key=lambda r: float(r["created"]))


def write_measurements(rows: Sequence[dict[str, Any]], path: str | Path) -> int:
    """Write ``rows`` (:func:`measurement_row`: measurements made elsewhere, e.g. by a sweep's
    workers; not checked here) to ``path`` as a tuning file, which :func:`import_tuning` checks
    whole when it takes it in; returns how many were written."""
    from gemmzoo.config import VERSION as GEMMZOO_VERSION

    data = {"format": FORMAT, "version": VERSION,
            "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"), "gemmzoo": GEMMZOO_VERSION,
            "measurements": list(rows), "conformance": []}
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return len(rows)


def measurement_row(record: Record) -> dict[str, Any]:
    """One measurement as a tuning file's row (device and versions as objects)."""
    return _as_json(record)


def read_measurements(path: str | Path) -> list[Record]:
    """The measurements of a tuning file, checked whole first (:func:`load`)."""
    return [_record(row) for row in load(path).get("measurements", [])]


@dataclass
class ImportReport:
    """What an import did: rows added, rows already known (or older than the database's), rows
    ignored because they were made elsewhere (by reason), verdicts of the file left out, and the
    conformance suite's verdicts earned here for the backends whose rows came in."""

    added: int = 0
    known: int = 0
    ignored: dict[str, int] = field(default_factory=dict)
    example: str = ""
    verdicts_left_out: int = 0
    checked: list[tuple[str, str, bool]] = field(default_factory=list)

    @property
    def ignored_count(self) -> int:
        return sum(self.ignored.values())

    def summary(self) -> str:
        """One line: added, already known, and (if any) ignored with why, verdicts left out and
        the suite's verdicts earned here."""
        text = (f"imported {self.added} measurements; {self.known} rows already known or older than "
                "the database's")
        if self.ignored:
            reasons = ", ".join(f"{count} {why}" for why, count in sorted(self.ignored.items()))
            text += f"; ignored {self.ignored_count} made elsewhere ({reasons}{self.example})"
        if self.verdicts_left_out:
            text += (f"; {self.verdicts_left_out} conformance verdicts not taken in (verdicts are earned "
                     "on this machine)")
        passed = [f"{b} {d}" for b, d, ok in self.checked if ok]
        failed = [f"{b} {d}" for b, d, ok in self.checked if not ok]
        if passed:
            text += f"; conformance suite passed here: {', '.join(passed)}"
        if failed:
            text += (f"; conformance suite FAILED here, their rows are not used: {', '.join(failed)} "
                     "(details: gemmzoo check NAME)")
        return text


class _Here:
    """This machine's device fingerprints and each backend's library versions, asked once."""

    def __init__(self) -> None:
        from gemmzoo.tuning.state import current

        self.registry = current().registry
        self.names = {b.name: b for b in self.registry.backends()}
        self._devices: dict[str, str | None] = {}
        self._versions: dict[str, str] = {}

    def device(self, kind: str) -> str | None:
        if kind not in self._devices:
            self._devices[kind] = self._fingerprint(kind)
        return self._devices[kind]

    def _fingerprint(self, kind: str) -> str | None:
        if kind == "cpu":
            return device_fingerprint("cpu")
        if kind == "cuda":
            gpu = any(b.device == "cuda" and _usable(b) for b in self.names.values())
            return device_fingerprint("cuda") if gpu else None
        return None

    def versions(self, backend: str) -> str:
        """The library versions a measurement of ``backend`` is keyed by here."""
        if backend not in self._versions:
            self._versions[backend] = library_versions(backend, self.registry)
        return self._versions[backend]


def _usable(backend: Any) -> bool:
    from gemmzoo.tuning import state

    try:
        return state.unavailable_reason(backend) is None
    except Exception:  # a backend whose question raises is not usable here
        return False


def _mismatch(row: dict[str, Any], here: _Here) -> tuple[str, str] | None:
    """Why ``row`` does not belong on this machine (a reason and an example), or ``None``."""
    device, versions = row["device"], row["versions"]
    kind = device["kind"]
    mine = here.device(kind)
    if mine is None:
        return f"on a {kind} device, which this machine lacks", kind
    if canonical(device) != mine:
        return "on another device", f"{device.get('name') or device.get('model')}; here {json.loads(mine)}"
    if row["backend"] not in here.names:
        return "by a backend not installed here", row["backend"]
    if canonical(versions) != here.versions(row["backend"]):
        ours = json.loads(here.versions(row["backend"]))
        diff = sorted(k for k in set(versions) | set(ours) if versions.get(k) != ours.get(k))
        example = ", ".join(f"{k} {versions.get(k, '-')} (here {ours.get(k, '-')})" for k in diff[:3])
        return "with other library versions", example
    return None


class _Parser:
    """``json.loads`` hooks that refuse duplicate keys, NaN and Infinity, and stop the parse once it
    has made more objects or numbers than a file of :data:`MAX_ROWS` rows per list holds (what a
    parse allocates is then bounded by the file's legitimate contents, not by its bytes)."""

    def __init__(self) -> None:
        self.objects = self.numbers = 0

    def object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        self.objects += 1
        if self.objects > MAX_OBJECTS:
            raise ValueError(f"more than {MAX_OBJECTS} objects")
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                raise ValueError(f"duplicate key {schema.shown(key)}")
            found[key] = value
        return found

    def _count(self) -> None:
        self.numbers += 1
        if self.numbers > MAX_NUMBERS:
            raise ValueError(f"more than {MAX_NUMBERS} numbers")

    def integer(self, text: str) -> int:
        self._count()
        return int(text)

    def real(self, text: str) -> float:
        self._count()
        return float(text)

    @staticmethod
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a number JSON allows")

    def loads(self, raw: bytes) -> Any:
        arrays = raw.count(b"[")
        if arrays > MAX_ARRAYS:  # a tuning file has three arrays; brackets in strings count too
            raise ValueError(f"{arrays} '[' characters, more than {MAX_ARRAYS}")
        return json.loads(raw.decode("utf-8"), object_pairs_hook=self.object, parse_int=self.integer,
                          parse_float=self.real, parse_constant=self.constant)


def load(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """Read and check a whole tuning file (see the module docstring); :class:`TuningFileError`
    names the file, the entry and the field of the first problem. A file of more than
    ``max_bytes`` is not read, and one with more than ``max_rows`` rows in a list is refused
    (defaults :data:`MAX_FILE_BYTES` and :data:`MAX_ROWS`; the parse's own bounds stay those of
    :data:`MAX_ROWS`)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TuningFileError(f"{path}: rejected, nothing imported: {size} bytes, more than the "
                                  f"{max_bytes} a tuning file may have")
        raw = path.read_bytes()
    except OSError as error:
        why = error.strerror or error
        raise TuningFileError(f"{path}: cannot read a gemmzoo tuning file: {why}") from None
    try:
        data = _Parser().loads(raw)
    except RecursionError:
        raise TuningFileError(f"{path}: rejected, nothing imported: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = str(error)[:200]
        raise TuningFileError(f"{path}: rejected, nothing imported: not valid JSON: {reason}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TuningFileError(f"{path}: not a gemmzoo tuning file (no \"format\": \"{FORMAT}\")")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise TuningFileError(f"{path}: rejected, nothing imported: version: must be a positive integer, "
                              f"got {schema.shown(version)}")
    if version > VERSION:
        raise TuningFileError(f"{path}: tuning file format version {version}; this gemmzoo reads "
                              f"version {VERSION} and older (upgrade gemmzoo to import it)")
    _check_rows(path, data, max_rows)
    return data


def _check_rows(path: Path, data: dict[str, Any], max_rows: int) -> None:
    def reject(where: str, why: str) -> TuningFileError:
        return TuningFileError(f"{path}: rejected, nothing imported: {where}: {why}")

    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise reject(schema.shown(unknown[0]), "not a field of this format")
    for name in ("exported", "gemmzoo"):
        if name in data:
            try:
                schema.text(data, name, schema.MAX_TEXT)
            except schema.RowError as error:
                raise reject(name, error.why) from None
    now = time.time()
    for name, check in (("measurements", schema.check_measurement), ("conformance", schema.check_verdict),
                        ("class_measurements", schema.check_class_measurement)):
        rows = data.get(name, [])
        if not isinstance(rows, list):
            raise reject(name, f"must be an array, got {schema.shown(rows)}")
        if len(rows) > max_rows:
            raise reject(name, f"more than {max_rows} rows ({len(rows)})")
        for index, row in enumerate(rows):
            try:
                check(row, now)
            except schema.RowError as error:
                raise reject(f"{name}[{index}].{error.field}", error.why) from None


def _record(row: dict[str, Any]) -> Record:
    def number(name: str) -> float | None:
        value = row.get(name)
        return None if value is None else float(value)

    return Record(
        device=canonical(row["device"]), versions=canonical(row["versions"]), backend=row["backend"],
        m=row["m"], n=row["n"], k=row["k"], dtype=row["dtype"], layout=row["layout"], status=row["status"],
        median_s=number("median_s"), spread_s=number("spread_s"), error_ratio=number("error_ratio"),
        samples=row["samples"], detail=row["detail"], created=float(row["created"]),
        host_s=number("host_s"), host_spread_s=number("host_spread_s"),
        loop_s=number("loop_s"), loop_spread_s=number("loop_spread_s"),
    )


def import_tuning(store: TuningStore, path: str | Path, *, check: bool = True,
                  max_bytes: int = MAX_FILE_BYTES, max_rows: int = MAX_ROWS) -> ImportReport:
    """Add the measurements of ``path`` made on this machine's device with its library versions,
    all in one transaction after the whole file passed its checks (see the module docstring), and
    (with ``check``) earn conformance verdicts here for the backends they are of; returns what
    was done. ``max_bytes`` and ``max_rows``: the file's limits (:func:`load`)."""
    data = load(path, max_bytes=max_bytes, max_rows=max_rows)
    here = _Here()
    report = ImportReport(verdicts_left_out=len(data.get("conformance", [])))
    records = sorted((_record(row) for row in _made_here(data.get("measurements", []), here, report)),
                     key=lambda r: r.created)
    report.added = store.add_newer(records)
    report.known = len(records) - report.added
    classes = sorted(((canonical(row["device"]), canonical(row["versions"]), row["backend"],
                       row["problem_class"], row["problem"], row["dtype"], row["status"],
                       row["median_s"], float(row["created"]))
                      for row in _made_here(data.get("class_measurements", []), here, report)),
                     key=lambda row: row[-1])
    added = store.add_newer_class_measurements(classes)
    report.added += added
    report.known += len(classes) - added
    if check:
        report.checked = _earn_verdicts(store, here, {(r.backend, r.dtype) for r in records})
    return report


def _made_here(rows: Sequence[dict[str, Any]], here: _Here, report: ImportReport) -> list[dict[str, Any]]:
    """The rows made on this machine's device with its library versions; the others are counted
    in ``report.ignored`` by reason, the first one's as ``report.example``."""
    kept = []
    for row in rows:
        why = _mismatch(row, here)
        if why is None:
            kept.append(row)
            continue
        report.ignored[why[0]] = report.ignored.get(why[0], 0) + 1
        if not report.example:
            report.example = f"; e.g. {why[1]}"
    return kept


def _earn_verdicts(store: TuningStore, here: _Here,
                   wanted: set[tuple[str, str]]) -> list[tuple[str, str, bool]]:
    """Run the conformance suite for each (backend, dtype) that has no verdict here yet."""
    from gemmzoo.tuning.tune import conformance_verdict

    earned = []
    for name, dtype in sorted(wanted):
        backend = here.names[name]
        if not _usable(backend) or dtype not in backend.dtypes:
            continue
        if conformance_verdict(store, backend, dtype, run=False) is None:
            earned.append((name, dtype, bool(conformance_verdict(store, backend, dtype, run=True))))
    return earned
