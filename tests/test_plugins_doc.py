"""docs/plugins.md's shortest plugin, run as written: it registers and it conforms."""

from __future__ import annotations

import re
import types
from pathlib import Path

from gemmzoo.conformance import check_backend, conformance_cases, input_checks
from gemmzoo.plugins.registry import PluginInfo, Registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def doc_block(after: str) -> str:
    """The first fenced code block following the line ``after`` in docs/plugins.md."""
    match = re.search(re.escape(after) + r"\n\n```\w*\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert match, f"no code block after {after!r} in {DOC}"
    return match.group(1)


def test_shortest_plugin_registers_and_conforms():
    module = types.ModuleType("gemmzoo_einsum")
    exec(compile(doc_block("`gemmzoo_einsum/__init__.py`:"), str(DOC), "exec"), module.__dict__)
    registry = Registry(strict=True)

    registry.register_plugin(module, PluginInfo("gemmzoo-einsum", "gemmzoo_einsum"))
    backend = registry.get("numpy-einsum")
    report = check_backend(backend)

    assert registry.names() == ["numpy-einsum"] and backend.dtypes == {"float32", "float64"}
    assert report.passed, [(r.check, r.detail) for r in report.failures]
    everything = len(input_checks(backend)) + sum(len(conformance_cases(d)) for d in backend.dtypes)
    assert len(report.results) == everything


def test_shortest_plugin_entry_point_names_the_module():
    pyproject = doc_block("`pyproject.toml`:")
    assert '[project.entry-points.gemmzoo]\ngemmzoo-einsum = "gemmzoo_einsum"' in pyproject
