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
        {"device": {...}, "versions": {..., "suite": 2, "accuracy": "componentwise"},
         "backend": "torch", "dtype": "float16",
         "passed": true, "checks": 65, "failures": 0, "detail": "", "created": 1795429990.0},
        ...
      ]
    }

``device`` is the device fingerprint and ``versions`` the library versions that every row is keyed
by (:mod:`gemmzoo.tuning.fingerprint`), written as objects; a verdict's ``versions`` also hold the
conformance suite's revision and the backend's accuracy class
(:func:`gemmzoo.tuning.tune.verdict_versions`). An export holds, for every device, versions,
backend and problem, the newest measurement, and the newest conformance verdict of every backend
and dtype.

Import (``gemmzoo tune --import FILE``) keeps the rows whose device fingerprint and versions are
exactly this machine's (for a verdict, this suite's revision and the backend's class too) and
ignores the others, saying so in one line: a measurement is only valid where it was made. A row
is added only when it is newer than what the database holds for the same device, versions,
backend and problem, so importing a file twice changes nothing and importing files from several
machines keeps the newest measurement of each problem.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gemmzoo.errors import GemmError
from gemmzoo.tuning.db import ConformanceRecord, Record, TuningStore
from gemmzoo.tuning.fingerprint import canonical, device_fingerprint, library_versions

FORMAT = "gemmzoo-tuning"
VERSION = 1


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
    return data


def export_tuning(store: TuningStore, path: str | Path) -> tuple[int, int]:
    """Write the newest measurement of every problem and the newest verdict of every backend and
    dtype to ``path``; returns (measurements, verdicts) written."""
    from gemmzoo import __version__

    records = _newest(store.all_records(), _problem)
    verdicts = _newest(store.all_conformance(), _verdict_key)
    data = {
        "format": FORMAT,
        "version": VERSION,
        "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gemmzoo": __version__,
        "measurements": [_as_json(r) for r in records],
        "conformance": [_as_json(v) for v in verdicts],
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return len(records), len(verdicts)


@dataclass
class ImportReport:
    """What an import did: rows added, rows already known (or older than the database's), and
    rows ignored because they were made elsewhere, by reason."""

    added: int = 0
    verdicts_added: int = 0
    known: int = 0
    ignored: dict[str, int] = field(default_factory=dict)
    example: str = ""

    @property
    def ignored_count(self) -> int:
        return sum(self.ignored.values())

    def summary(self) -> str:
        """One line: added, already known, and (if any) ignored with why."""
        text = (f"imported {self.added} measurements and {self.verdicts_added} conformance verdicts; "
                f"{self.known} rows already known or older than the database's")
        if self.ignored:
            reasons = ", ".join(f"{count} {why}" for why, count in sorted(self.ignored.items()))
            text += f"; ignored {self.ignored_count} made elsewhere ({reasons}{self.example})"
        return text


class _Here:
    """This machine's device fingerprints and each backend's library versions, asked once."""

    def __init__(self) -> None:
        from gemmzoo.registry import get_registry

        self.registry = get_registry()
        self.names = {b.name: b for b in self.registry.backends()}
        self._devices: dict[str, str | None] = {}
        self._versions: dict[tuple[str, bool], str] = {}

    def device(self, kind: str) -> str | None:
        if kind not in self._devices:
            self._devices[kind] = self._fingerprint(kind)
        return self._devices[kind]

    def _fingerprint(self, kind: str) -> str | None:
        if kind == "cpu":
            return device_fingerprint("cpu")
        if kind == "cuda":
            from gemmzoo.tuning import state

            gpu = any(b.device == "cuda" and state.unavailable_reason(b) is None for b in self.names.values())
            return device_fingerprint("cuda") if gpu else None
        return None

    def versions(self, backend: str, verdict: bool) -> str:
        """What a row of ``backend`` is keyed by besides the device: the library versions, and for a
        conformance verdict also the suite's revision and the backend's accuracy class."""
        key = (backend, verdict)
        if key not in self._versions:
            if verdict:
                from gemmzoo.tuning.tune import verdict_versions

                self._versions[key] = verdict_versions(self.names[backend])
            else:
                self._versions[key] = library_versions(backend, self.registry)
        return self._versions[key]


def _mismatch(row: dict[str, Any], here: _Here, verdict: bool) -> tuple[str, str] | None:
    """Why ``row`` does not belong on this machine (a reason and an example), or ``None``."""
    device, versions = row["device"], row["versions"]
    kind = device.get("kind", "?")
    mine = here.device(kind)
    if mine is None:
        return f"on a {kind} device, which this machine lacks", f"{device.get('name', kind)}"
    if canonical(device) != mine:
        return "on another device", f"{device.get('name') or device.get('model')}; here {json.loads(mine)}"
    if row["backend"] not in here.names:
        return "by a backend not installed here", row["backend"]
    if canonical(versions) != here.versions(row["backend"], verdict):
        ours = json.loads(here.versions(row["backend"], verdict))
        diff = sorted(k for k in set(versions) | set(ours) if versions.get(k) != ours.get(k))
        example = ", ".join(f"{k} {versions.get(k, '-')} (here {ours.get(k, '-')})" for k in diff[:3])
        return "with other library versions", example
    return None


def _load(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise TuningFileError(f"{path}: cannot read a gemmzoo tuning file: {error}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TuningFileError(f"{path}: not a gemmzoo tuning file (no \"format\": \"{FORMAT}\")")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise TuningFileError(f"{path}: tuning file format version {version!r}; this gemmzoo reads "
                              f"version {VERSION} and older (upgrade gemmzoo to import it)")
    return data


def import_tuning(store: TuningStore, path: str | Path) -> ImportReport:
    """Add the rows of ``path`` made on this machine's device with its library versions (see the
    module docstring); returns what was done."""
    data = _load(path)
    here = _Here()
    report = ImportReport()

    def accept(row: dict[str, Any], verdict: bool = False) -> dict[str, Any] | None:
        why = _mismatch(row, here, verdict)
        if why is None:
            return {**row, "device": canonical(row["device"]), "versions": canonical(row["versions"])}
        report.ignored[why[0]] = report.ignored.get(why[0], 0) + 1
        if not report.example:
            report.example = f"; e.g. {why[1]}"
        return None

    try:
        records = [Record(**kept) for row in data.get("measurements", []) if (kept := accept(row))]
        verdicts = [ConformanceRecord(**kept) for row in data.get("conformance", [])
                    if (kept := accept(row, verdict=True))]
    except (KeyError, TypeError, AttributeError) as error:
        raise TuningFileError(f"{path}: malformed row: {error}") from None
    fresh = []
    newest: dict[tuple[Any, ...], float] = {}
    for record in sorted(records, key=lambda r: r.created):
        key = _problem(record)
        if key not in newest:
            stored = store.records(record.device, record.dtype, record.layout, (record.m, record.n, record.k))
            newest[key] = max((r.created for r in stored if _problem(r) == key), default=-1.0)
        if record.created > newest[key]:
            fresh.append(record)
            newest[key] = record.created
        else:
            report.known += 1
    store.add(fresh)
    report.added = len(fresh)
    for verdict in sorted(verdicts, key=lambda v: v.created):
        stored_verdict = store.conformance(*_verdict_key(verdict))
        if stored_verdict is None or verdict.created > stored_verdict.created:
            store.add_conformance(verdict)
            report.verdicts_added += 1
        else:
            report.known += 1
    return report
