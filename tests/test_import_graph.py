"""The core's structure, read from its source: no import circle among gemmzoo's modules (neither
at import time nor through the imports inside functions), no module-level mutable state beyond the
per-process pieces docs/architecture.md lists, no private ``os.environ._data``, and no test that
resets module state or patches a module constant (a setting is passed instead)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "gemmzoo"

# What stays per process, by module, each justified in docs/architecture.md ("What stays per
# process"). A new entry needs a reason there; state that belongs to a user belongs on the Session.
PER_PROCESS = {
    "gemmzoo.config": {"_current", "_default", "_default_lock"},
    "gemmzoo.plugins.registry": {"_lock", "_registry", "_availability", "_trusted"},
    "gemmzoo.plugins.watchdog": {"_quarantine", "_timeouts", "_lock", "_local", "_idle"},
    "gemmzoo.tuning.db": {"_local"},
    "gemmzoo.arrays.libraries": {"_KINDS", "_DTYPE_NAMES", "_NATIVE", "_CONVERTERS"},
    "gemmzoo.contract.backend": {"_DTYPE_NAMES", "_SELF_CHECKING", "_TORCH_MM_FORMS"},
    "gemmzoo.measure.reference": {"_reference_cache"},
    "gemmzoo.measure.threads": {"_confined"},
    "gemmzoo.measure.adaptors": {"_NVBENCH_NAMES"},
    "gemmzoo.native": {"_lock", "_loaded"},
    "gemmzoo.conformance.shards": {"_zygotes", "_zygote_lock"},
    "gemmzoo.dispatch.matmul": {"_KEYS", "_ROUTES", "_compiled_tried"},
}
# The layers of docs/architecture.md ("Layers"), bottom to top: a module imports (anywhere in it)
# only modules of its own layer or of a layer below. A module belongs to the layer of the longest
# name below that names it or a package above it.
LAYERS = (
    ("foundations", ("gemmzoo.errors", "gemmzoo.hookspecs", "gemmzoo.config", "gemmzoo.contract",
                     "gemmzoo.problems.classes", "gemmzoo.problems.class_math",
                     "gemmzoo.problems.model_grids", "gemmzoo.dispatch.plan_cache", "gemmzoo.adapters",
                     "gemmzoo.measure.host_work", "gemmzoo.measure.ties")),
    ("plugin host", ("gemmzoo.plugins",)),
    ("problems, arrays, checking, timing and the store",
     ("gemmzoo.problems", "gemmzoo.arrays", "gemmzoo.conformance", "gemmzoo.measure", "gemmzoo.tuning.known",
      "gemmzoo.tuning.choose", "gemmzoo.tuning.fingerprint", "gemmzoo.tuning.prior", "gemmzoo.tuning.schema",
      "gemmzoo.tuning.db", "gemmzoo.tuning.contenders")),
    ("session state", ("gemmzoo.tuning.state",)),
    ("work in the current session", ("gemmzoo.tuning", "gemmzoo.dispatch", "gemmzoo.native",
                                     "gemmzoo.measure.roofline", "gemmzoo.measure.timers",
                                     "gemmzoo.measure.measurement", "gemmzoo.measure.nvbench_child")),
    ("public face", ("gemmzoo.session", "gemmzoo.__init__")),
    ("applications", ("gemmzoo.results", "gemmzoo.scale", "gemmzoo.pytest", "gemmzoo.cli", "gemmzoo.testing",
                      "gemmzoo.benchmarks", "gemmzoo.__main__")),
)

CONTAINERS = {"dict", "list", "set", "bytearray", "WeakSet", "WeakKeyDictionary", "WeakValueDictionary",
              "defaultdict", "OrderedDict", "deque", "Counter"}
HOLDERS = {"local", "Lock", "RLock", "count", "ContextVar"}
MUTATORS = {"append", "add", "update", "setdefault", "clear", "pop", "popitem", "extend", "insert",
            "remove", "discard", "__setitem__"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The gemmzoo module that importing ``name`` runs last (a name inside a module: the module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def _targets(node: ast.Import | ast.ImportFrom, module: str, package: bool) -> set[str]:
    """The gemmzoo modules one import statement of ``module`` names: for ``from X import y``, the
    module ``X.y`` where there is one (``from gemmzoo import tuning``: the package), else ``X``."""
    if isinstance(node, ast.Import):
        return {r for alias in node.names if (r := _resolve(alias.name))}
    base = node.module or ""
    if node.level:
        parts = module.split(".") if package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    found = set()
    for alias in node.names:
        target = f"{base}.{alias.name}"
        resolved = _resolve(target if target in MODULES else base)
        if resolved:
            found.add(resolved)
    return found


def all_imports(source: str, module: str, package: bool = False) -> set[str]:
    """Every gemmzoo module that ``module`` (whose text is ``source``) imports anywhere: at its
    top level, inside functions and methods, and under ``if TYPE_CHECKING:`` (a dependency all
    the same)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _targets(node, module, package)
    found.discard(module)
    return found


def import_time_imports(source: str, module: str, package: bool = False) -> set[str]:
    """The gemmzoo modules that importing ``module`` (whose text is ``source``) imports: its
    top-level imports and those of its class bodies and top-level blocks, not those inside
    functions (run later) nor under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and _type_checking(node):
                walk(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_targets(node, module, package))
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], (ast.stmt, ast.excepthandler)):
                    walk([getattr(h, "body", h) for h in inner] if field == "handlers" else inner)  # type: ignore[misc]

    walk(ast.parse(source).body)
    found.discard(module)
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` (module -> modules it imports) as the path that closes it, else ``None``."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path, node, target]
            if target not in state:
                found = visit(target, [*path, node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def test_no_import_circle_among_gemmzoo_modules():
    graph = {name: import_time_imports(path.read_text(), name, path.name == "__init__.py")
             for name, path in MODULES.items()}
    assert sum(len(targets) for targets in graph.values()) > 100  # the graph was read
    assert cycle(graph) is None, " -> ".join(cycle(graph) or ())


def test_the_circle_check_finds_a_circle():
    a = import_time_imports("from gemmzoo.session import current\n", "gemmzoo.config")
    b = import_time_imports("import gemmzoo.config\ndef f():\n    import gemmzoo.errors\n", "gemmzoo.session")
    late = import_time_imports("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from gemmzoo.session import Session\n", "gemmzoo.errors")
    assert a == {"gemmzoo.session"} and b == {"gemmzoo.config"} and late == set()
    assert cycle({"gemmzoo.config": a, "gemmzoo.session": b}) == ["gemmzoo.config", "gemmzoo.session",
                                                                 "gemmzoo.config"]


def test_no_import_circle_at_all_function_level_imports_included():
    """The layers of docs/architecture.md ("Layers"): every import of a gemmzoo module, wherever
    it is made, goes down or sideways, never back up."""
    graph = {name: all_imports(path.read_text(), name, path.name == "__init__.py")
             for name, path in MODULES.items()}
    assert sum(len(targets) for targets in graph.values()) > 100  # the graph was read
    assert "gemmzoo.dispatch.matmul" in graph["gemmzoo.session"]  # Session.matmul's, inside a method
    circle = cycle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or ())


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer (``gemmzoo`` itself: ``gemmzoo.__init__``)."""
    name = "gemmzoo.__init__" if module == "gemmzoo" else module
    found: tuple[int, int] | None = None
    for index, (_title, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            named = name == prefix or name.startswith(prefix + ".")
            if named and (found is None or len(prefix) > found[0]):
                found = (len(prefix), index)
    return None if found is None else found[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``graph`` that goes up the layers, as ``importer (layer) -> imported (layer)``."""
    return [f"{name} ({LAYERS[layer_of(name)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"  # type: ignore[index]
            for name, targets in sorted(graph.items()) for target in sorted(targets)
            if layer_of(target) > layer_of(name)]  # type: ignore[operator]


def test_every_import_goes_down_the_layers():
    assert [name for name in MODULES if layer_of(name) is None] == []
    graph = {name: all_imports(path.read_text(), name, path.name == "__init__.py")
             for name, path in MODULES.items()}
    assert upward_imports(graph) == []


def test_the_layer_check_finds_an_upward_import():
    order = ["gemmzoo", "gemmzoo.session", "gemmzoo.tuning.select", "gemmzoo.tuning.state",
             "gemmzoo.tuning.db", "gemmzoo.plugins.watchdog", "gemmzoo.config"]
    assert [layer_of(name) for name in order] == [5, 5, 4, 3, 2, 1, 0]
    assert upward_imports({"gemmzoo.plugins.watchdog": {"gemmzoo.tuning.state", "gemmzoo.config"}}) == [
        "gemmzoo.plugins.watchdog (plugin host) -> gemmzoo.tuning.state (session state)"]


def test_the_whole_graph_check_finds_a_circle_through_a_function():
    low = all_imports("def f():\n    from gemmzoo.session import current\n", "gemmzoo.config")
    high = all_imports("import gemmzoo.config\n", "gemmzoo.session")
    typed = all_imports("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    from gemmzoo.session import Session\n", "gemmzoo.errors")
    packages = all_imports("def f():\n    from gemmzoo import tuning, matmul\n    from . import state\n",
                           "gemmzoo.dispatch.classes")
    assert low == {"gemmzoo.session"} and high == {"gemmzoo.config"} and typed == {"gemmzoo.session"}
    assert packages == {"gemmzoo.tuning", "gemmzoo", "gemmzoo.dispatch"}
    assert cycle({"gemmzoo.config": low, "gemmzoo.session": high}) == ["gemmzoo.config", "gemmzoo.session",
                                                                      "gemmzoo.config"]


def _called(value: ast.expr | None) -> str:
    if isinstance(value, ast.Call):
        func = value.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return ""


def _container(value: ast.expr | None) -> bool:
    return isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) \
        or _called(value) in CONTAINERS


def _written(tree: ast.Module) -> set[str]:
    """Names whose container the module changes: item assignment or deletion, or a mutating method."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and isinstance(node.value, ast.Name):
            found.add(node.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name):
            found.add(node.func.value.id)
    return found


def module_state(source: str) -> set[str]:
    """Names a module binds at its top level to state: a container it changes, a lock, a
    thread-local, a context variable or a counter, and names it rebinds through ``global``
    (a container bound once and only read is a constant table)."""
    tree = ast.parse(source)
    written = _written(tree)
    found = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if _called(value) in HOLDERS:
            found |= names
        elif _container(value):
            found |= names & written
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.update(node.names)
    return found


def test_module_state_is_only_what_stays_per_process():
    found = {name: names for name, path in MODULES.items() if (names := module_state(path.read_text()))}
    unlisted = {name: names - PER_PROCESS.get(name, set()) for name, names in found.items()}
    assert {name: names for name, names in unlisted.items() if names} == {}
    gone = {name: names - found.get(name, set()) for name, names in PER_PROCESS.items()}
    assert {name: names for name, names in gone.items() if names} == {}  # keep the list true


def test_the_state_check_finds_state():
    assert module_state("_seen: dict[str, int] = {}\nLIMIT = 4\nNAMES = {'a': 1}\n"
                        "def f(x):\n    _seen[x] = NAMES[x]\n") == {"_seen"}
    assert module_state("import threading\n_local = threading.local()\n") == {"_local"}
    assert module_state("_tried = False\ndef f():\n    global _tried\n    _tried = True\n") == {"_tried"}
    assert module_state("_held = []\ndef f(x):\n    _held.append(x)\n") == {"_held"}


# The module constants a test may still replace with monkeypatch.setattr, by test file: each
# with why it is no setting that a caller could pass instead.
PATCHED_CONSTANTS = {
    # the dispatch's per-process tables (gemmzoo.dispatch.matmul), emptied to stand for a process
    # that has met no plain tensor yet
    "test_compiled_dispatch.py": {"_KEYS", "_ROUTES"},
}


def _upper(name: str) -> bool:
    bare = name.lstrip("_")
    return bool(bare) and bare[0].isalpha() and bare.upper() == bare


def patched_constants(source: str) -> set[str]:
    """The UPPER_CASE module attributes that ``source`` replaces with ``<name>.setattr(...)``
    (pytest's monkeypatch, or a ``with monkeypatch.context() as mp`` block's): by object and name,
    ``setattr(module, "NAME", value)``, or by dotted path, ``setattr("package.module.NAME", value)``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "setattr" and isinstance(node.func.value, ast.Name) and node.args):
            continue
        first, second = node.args[0], node.args[1] if len(node.args) > 1 else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            name = first.value.rpartition(".")[2]  # the dotted form: the attribute is the last part
        elif isinstance(second, ast.Constant) and isinstance(second.value, str):
            name = second.value
        else:
            continue
        if _upper(name):
            found.add(name)
    return found


def test_the_patch_check_finds_patched_constants():
    source = ("def test(monkeypatch):\n"
              "    monkeypatch.setattr(watchdog, 'IDLE_S', 0.2)\n"
              "    monkeypatch.setattr('gemmzoo.conformance.judge.PLAIN_CHUNK', 7)\n"
              "    monkeypatch.setattr(dispatch, '_ROUTES', {})\n"
              "    monkeypatch.setattr(native, 'load', lambda: None)\n"
              "    monkeypatch.setattr(sys, 'platform', 'linux')\n"
              "    monkeypatch.setattr(Tuner, 'run', run)\n"
              "    monkeypatch.setenv('GEMMZOO_TUNE', '0')\n"
              "    with monkeypatch.context() as mp:\n"
              "        mp.setattr(autotune, 'QUICK_CONFIGS', 1)\n"
              "    setattr(portable, 'MAX_ROWS', 2)\n")
    assert patched_constants(source) == {"IDLE_S", "PLAIN_CHUNK", "_ROUTES", "QUICK_CONFIGS"}


def test_tests_pass_settings_instead_of_patching_module_constants():
    """A constant a test needs changed is a setting: an argument, a constructor option or a
    configuration field, with the constant as its default."""
    found = {path.name: names for path in sorted((ROOT / "tests").rglob("*.py"))
             if (names := patched_constants(path.read_text()))}
    assert {name: names - PATCHED_CONSTANTS.get(name, set()) for name, names in found.items()
            if names - PATCHED_CONSTANTS.get(name, set())} == {}
    gone = {name: names - found.get(name, set()) for name, names in PATCHED_CONSTANTS.items()}
    assert {name: names for name, names in gone.items() if names} == {}  # keep the allowlist true


def test_no_private_environ_and_no_reset_of_module_state_in_tests():
    for path in [*CORE.rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "_data":
                assert getattr(node.value, "attr", None) != "environ", path
    here = Path(__file__).name
    for path in (ROOT / "tests").glob("*.py"):
        if path.name != here:
            assert "state.reset(" not in path.read_text(), path
