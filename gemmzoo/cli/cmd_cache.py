"""``gemmzoo cache``: where the tuning database is, how big, how many rows; ``--clear``; and
``--build-dispatch``, which builds the compiled dispatch (:mod:`gemmzoo.native`) into the same
directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from gemmzoo.cli.console import messages
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit

if TYPE_CHECKING:
    from rich.console import Console

COLUMNS = (
    Column("bytes", "size", justify="right"),
    Column("measurements", "measurements", justify="right"),
    Column("verdicts", "verdicts", justify="right"),
    Column("path", "database", text=True),  # last: a path longer than the terminal folds on its own
)
# SQLite keeps these beside the database while it is open or after a crash.
_SIDE_FILES = ("-wal", "-shm", "-journal")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_format_arguments(parser)
    parser.add_argument("--clear", action="store_true",
                        help="delete the tuning database (measurements, conformance verdicts, recorded "
                             "problems); gemmzoo measures again when next asked")
    parser.add_argument("--build-dispatch", action="store_true",
                        help="build gemmzoo.matmul's compiled dispatch for torch tensors (needs torch, a C++ "
                             "compiler and ninja; about ten seconds, once per torch and Python version), "
                             "then show the cache")


def _files(database: Path) -> list[Path]:
    candidates = (database, *(database.with_name(database.name + suffix) for suffix in _SIDE_FILES))
    return [path for path in candidates if path.exists()]


def _size(size: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1000  # type: ignore[assignment]
    return str(size)


def run(args: argparse.Namespace) -> int:
    from gemmzoo.session import current
    from gemmzoo.tuning.db import DB_NAME, default_cache_dir

    database = default_cache_dir() / DB_NAME
    say = messages(args.format)
    if args.build_dispatch and not _build_dispatch(say):
        return 1
    if args.clear:
        removed = _files(database)
        if database.exists():
            # emptied in place, not removed: a tune writing meanwhile keeps the rows it stores next
            store = current().store()
            if store.persistent and store.path == database:
                store.clear()
                current().close()  # nothing this process remembers of the rows outlives them
                say.print(f"cleared {database}", markup=False, soft_wrap=True)
                return 0
        current().close()  # an unreadable database: this process's connection closed before it goes
        for path in removed:
            path.unlink(missing_ok=True)
        say.print(f"cleared {database}" if removed else f"nothing to clear: no database at {database}",
                  markup=False, soft_wrap=True)
        return 0
    size, measurements, verdicts = sum(p.stat().st_size for p in _files(database)), 0, 0
    if database.exists():  # opening creates a database: only look at one that is there
        store = current().store()
        measurements, verdicts = store.count(), len(store.all_conformance())
    row = {"path": str(database), "bytes": _size(size), "measurements": str(measurements),
           "verdicts": str(verdicts)}
    from gemmzoo import native

    compiled = native.status()
    record = {"path": str(database), "exists": database.exists(), "bytes": size,
              "measurements": measurements, "conformance_verdicts": verdicts,
              "compiled_dispatch": {"built": compiled.built, "reason": compiled.reason,
                                    "path": str(compiled.path) if compiled.path else None}}
    listing = Listing("gemmzoo tuning database (GEMMZOO_CACHE_DIR moves it)", COLUMNS, [row], [record])
    if args.format == "csv":
        listing.rows = [{**row, "bytes": str(size)}]
    emit(listing, args.format, args.wide)
    say.print(f"compiled dispatch: built, {compiled.path}" if compiled.built
              else f"compiled dispatch: not used ({compiled.reason})", markup=False)
    return 0


def _build_dispatch(say: Console) -> bool:
    """Build the compiled dispatch (or find it built), saying how long it took or why it failed."""
    import time

    from gemmzoo import native
    from gemmzoo.dispatch import matmul as dispatch

    started = time.perf_counter()
    try:
        dispatch.use_compiled(native.build())
    except native.CompiledDispatchError as error:
        say.print(f"gemmzoo cache: {error}", markup=False, soft_wrap=True)
        return False
    say.print(f"compiled dispatch ready in {time.perf_counter() - started:.1f} s", markup=False)
    return True
