"""Which of gemmzoo's modules run during a first ``gemmzoo.matmul`` of a stored problem.

    python benchmarks/first_call_modules.py [--json FILE]

A tuning database is made in a temporary folder holding, for one CPU problem (96x80x64 float32,
layout NN), a measurement of ``numpy`` and one of ``torch-cpu`` and both backends' conformance
verdicts (their suites run here first). Then, in this process (warm: gemmzoo imported and its
plugins loaded by an earlier call in another session), a fresh :class:`gemmzoo.Session` of that
folder is opened and ``gemmzoo.matmul`` is called once on operands of that problem under
``sys.setprofile``. The modules listed are those whose Python functions ran, from
``gemmzoo.dispatch.matmul.matmul`` on, in the order first met: every module of ``gemmzoo`` and of
the bundled plugins (``gemmzoo_*``), ``<module>`` bodies of modules imported meanwhile included.

Four cases: NumPy arrays and torch CPU tensors, each with the stored winner the caller's own
library's backend (the plan is that library's call) and with the other library's backend (the
plan converts and runs that backend's prepared product). Each case is counted twice: ``first
choice`` (the session's first answer, which loads the store's rows of this machine into the
session) and ``stored problem`` (the session's store already loaded by a choice of another
problem: what every later new stored problem costs). With each case, the deepest chain of
modules met on one call stack (the entry ``gemmzoo.dispatch.matmul`` first).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHAPE = (96, 80, 64)
OTHER = (40, 24, 16)


def _ours(name: str) -> bool:
    return name == "gemmzoo" or name.startswith(("gemmzoo.", "gemmzoo_"))


def modules_run(call: Callable[[], Any], chain: list[str] | None = None) -> list[str]:
    """The gemmzoo modules (``gemmzoo`` and ``gemmzoo_*``) whose Python functions ran during
    ``call()``, in the order first met. ``chain``, where given, receives the longest chain of
    modules met on one call stack: gemmzoo's modules from the outermost frame in, each module
    once for a run of frames in it (``a -> b -> a`` counts three), frames of other packages
    between them skipped."""
    seen: dict[str, None] = {}
    longest: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = frame.f_globals.get("__name__") or ""
        if not _ours(name):
            return
        seen.setdefault(name, None)
        if chain is None:
            return
        stack: list[str] = []
        while frame is not None:
            module = frame.f_globals.get("__name__") or ""
            if _ours(module) and (not stack or stack[-1] != module):
                stack.append(module)
            frame = frame.f_back
        if len(stack) > len(longest):
            longest[:] = stack

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    if chain is not None:
        chain[:] = longest[::-1]
    return list(seen)


def store_problem(cache_dir: Path, winner: str, shapes: tuple[tuple[int, int, int], ...]) -> None:
    """Store measurements of numpy and torch-cpu at ``shapes`` (``winner`` ten times faster) and
    earn both backends' float32 verdicts here, in ``cache_dir``'s database."""
    import gemmzoo
    from gemmzoo.tuning.db import Record
    from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions
    from gemmzoo.tuning.tune import conformance_verdict

    with gemmzoo.Session(cache_dir=cache_dir, backends=()) as session:
        registry = session.registry
        rows = []
        for m, n, k in shapes:
            for name in ("numpy", "torch-cpu"):
                median = 1e-5 if name == winner else 1e-4
                rows.append(Record(device_fingerprint("cpu"), library_versions(name, registry), name, m, n, k,
                                   "float32", "NN", "ok", median, median / 100, 0.1, 50, "", time.time(),
                                   median / 2, median / 200))
        store = session.store()
        store.add(rows)
        for name in ("numpy", "torch-cpu"):
            assert conformance_verdict(store, registry.get(name), "float32", run=True) is True, name
        session.close()


def operands(library: str, shape: tuple[int, int, int]) -> tuple[Any, Any]:
    """Random float32 operands of ``shape`` in ``library``'s arrays."""
    import numpy as np

    m, n, k = shape
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if library == "torch":
        import torch

        return torch.from_numpy(a), torch.from_numpy(b)
    return a, b


def measure_case(library: str, winner: str, loaded: bool) -> dict[str, Any]:
    """One case: a fresh session of a new database holding ``winner`` fastest; with ``loaded``,
    the session answers another stored problem first."""
    import numpy as np

    import gemmzoo

    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        store_problem(cache, winner, (SHAPE, OTHER))
        with gemmzoo.Session(cache_dir=cache, backends=()) as session:
            if loaded:
                gemmzoo.matmul(*operands(library, OTHER))
            a, b = operands(library, SHAPE)
            out: list[Any] = []
            chain: list[str] = []
            modules = modules_run(lambda: out.append(gemmzoo.matmul(a, b)), chain)
            expected = np.asarray(a) @ np.asarray(b)
            got = np.asarray(out[0])
            assert np.allclose(got, expected, rtol=1e-4, atol=1e-4), "wrong product"
            served = gemmzoo.dispatch.matmul.choice_for(a, b)
            session.close()
    after = "stored problem" if loaded else "first choice"
    return {"library": library, "stored_winner": winner, "after": after,
            "served": served.backend.name, "source": served.source, "modules": modules, "count": len(modules),
            "deepest_chain": chain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the cases here")
    args = parser.parse_args()
    import numpy as np
    import torch

    import gemmzoo

    with tempfile.TemporaryDirectory() as warm:  # the process imports and loads its plugins once
        with gemmzoo.Session(cache_dir=Path(warm)) as session:
            gemmzoo.matmul(*operands("numpy", (8, 8, 8)))
            gemmzoo.matmul(*operands("torch", (8, 8, 8)))
            session.close()
    cases = [measure_case(library, winner, loaded) for loaded in (False, True)
             for library in ("numpy", "torch") for winner in ("numpy", "torch-cpu")]
    for case in cases:
        print(f"{case['library']:6} arrays, stored winner {case['stored_winner']:9}, {case['after']:14}: "
              f"{case['count']:2} modules (served by {case['served']}, {case['source']})")
        print("    " + ", ".join(case["modules"]))
        chain = case["deepest_chain"]
        print(f"    deepest chain ({len(chain)} modules): " + " -> ".join(chain))
    if args.json:
        facts = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                 "gemmzoo": gemmzoo.__version__, "machine": platform.machine(), "cases": cases}
        args.json.write_text(json.dumps(facts, indent=1) + "\n")


if __name__ == "__main__":
    main()
