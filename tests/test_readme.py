"""The README is a user guide that stays true: short, its links resolve, CI runs its test command,
and it names every bundled backend and every dtype of the contract."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

import gemmzoo
from gemmzoo.contract.dtypes import DTYPES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", README, flags=re.S)


def test_the_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    install, tests = _commands()[:2]
    assert ci == tests
    assert install.startswith('python3 -m pip install -e ".[jax]" && ') and "gemmzoo bench" in install
    assert "ruff check ." in tests and "requirements-cpu.txt" in tests


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert local
    for link in local:
        assert (ROOT / link).exists(), link


def test_every_bundled_backend_and_dtype_is_named():
    ours = {ep.value.split(":")[0] for ep in entry_points(group="gemmzoo")
            if ep.dist and ep.dist.name == "gemmzoo"}
    bundled = [b.name for b in gemmzoo.backends() if type(b).__module__.split(".")[0] in ours]
    assert bundled
    for name in bundled:
        if name.endswith("-cuda"):  # the GPU form of a CPU backend, described with it
            continue
        assert f"`{name}`" in README, name
    contract = next(line for line in README.splitlines() if line.startswith("| `dtypes` |"))
    for dtype in DTYPES:
        assert f"`{dtype}`" in contract, dtype
