"""The Triton plugin's layout: one folder per kernel family over a shared ``core``, no import
circles, variants as backend options (not module settings)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

PLUGIN = Path(__file__).resolve().parent.parent / "plugins" / "gemmzoo_triton"
FAMILIES = ("basic", "grouped", "splitk", "fp8")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PLUGIN.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module of the plugin and the plugin modules it imports, at its top or in a function."""
    modules = {_module_name(path): path for path in PLUGIN.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gemmzoo_triton"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[name].add(target if target in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name.startswith("gemmzoo_triton."))
    return {name: {t for t in targets if t in modules and t != name} for name, targets in graph.items()}


def test_the_plugin_has_a_folder_per_kernel_family_and_a_core():
    folders = sorted(p.name for p in PLUGIN.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(["core", *FAMILIES])
    assert sorted(p.name for p in PLUGIN.glob("*.py")) == ["__init__.py"]


def test_no_import_circles():
    graph = _imports()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            assert state.get(target) != 1, " -> ".join([*path, node, target])
            if target not in state:
                visit(target, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_core_imports_no_family_and_families_import_only_core_and_themselves():
    for module, targets in _imports().items():
        parts = module.split(".")
        if len(parts) < 3:
            continue  # the package itself registers every family's backends
        for target in targets:
            folder = target.split(".")[1] if target.count(".") else ""
            if parts[1] == "core":
                assert folder == "core", (module, target)
            else:
                assert folder in ("core", parts[1]), (module, target)


def test_no_module_setting_chooses_a_kernel():
    settings = ("USE_GLUON", "C_OUTPUT", "COPIER", "VARIANT", "PERSISTENT_MIN_WAVES")
    for path in PLUGIN.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            assert not names & set(settings), (path, names)


# Options and variants ---------------------------------------------------------------------------


def test_triton_grouped_tma_is_registered_and_never_chosen_unless_named():
    import gemmzoo

    variant = gemmzoo.get_backend("triton-grouped-tma")
    assert variant.gluon is False and variant.selectable is False
    assert gemmzoo.get_backend("triton-grouped").gluon is True
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    if variant.device == "cpu":  # Triton's interpreter: the same kernels as triton-grouped
        assert "same kernels as triton-grouped" in variant.unavailable_reason()


def test_a_grouped_backend_with_options_serves_gemmzoo_matmul():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import gemmzoo
    from gemmzoo_triton import TritonGroupedBackend

    backend = TritonGroupedBackend(contiguous_c=True, gluon=False)
    if backend.unavailable_reason() is not None:
        pytest.skip(backend.unavailable_reason())
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((33, 20)).astype(np.float32), rng.standard_normal((20, 27)).astype(np.float32)
    c = gemmzoo.matmul(a, b, backend=backend)
    assert isinstance(c, np.ndarray) and c.shape == (33, 27)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_fp8_options_are_keywords_and_a_negative_promotion_is_refused():
    from gemmzoo_triton import TritonFp8Backend

    backend = TritonFp8Backend(promote=32, tma=False, gluon=False)
    assert (backend.promote, backend.tma, backend.gluon) == (32, False, False)
    default = TritonFp8Backend()
    assert (default.promote, default.tma, default.gluon) == (None, True, True)
    with pytest.raises(ValueError, match=r"triton-fp8: promote=-1"):
        TritonFp8Backend(promote=-1)


def test_the_architecture_page_names_every_module_of_the_plugin():
    page = (PLUGIN.parent.parent / "docs" / "architecture.md").read_text()
    for path in PLUGIN.rglob("*.py"):
        if path.name != "__init__.py":
            assert f"`{path.name}`" in page, path.relative_to(PLUGIN)
    for folder in ("core", *FAMILIES):
        assert f"`{folder}/`" in page, folder
