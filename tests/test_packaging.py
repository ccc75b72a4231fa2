"""The package's metadata: extras that install what they name, floors that are tested."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info < (3, 11):  # pragma: no cover - tomllib is 3.11+
    pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)", allow_module_level=True)

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match is not None, requirement
    return match.group().lower().replace("_", "-")


def _by_name(requirements: list[str]) -> dict[str, str]:
    return {_name(r): r for r in requirements}


def test_the_all_extra_installs_every_optional_front_end() -> None:
    extras = PROJECT["project"]["optional-dependencies"]
    union: dict[str, str] = {}
    for name, requirements in extras.items():
        if name != "all":
            union.update(_by_name(requirements))
    assert _by_name(extras["all"]) == union


def test_every_extra_floor_is_the_one_the_suite_tests() -> None:
    """An extra promises its floor works: it must be the floor the dev group installs."""
    tested = _by_name([r for r in PROJECT["dependency-groups"]["dev"] if isinstance(r, str)])
    for name, requirements in PROJECT["project"]["optional-dependencies"].items():
        for requirement in requirements:
            package = _name(requirement)
            assert package in tested, f"extra {name!r}: {package} is not installed by the tests"
            assert requirement == tested[package], (name, requirement)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imported by the type checker alone."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            hidden |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    return hidden


def _imported_top_level_modules() -> set[str]:
    """What the package imports at run time (not what only the type checker reads)."""
    found: set[str] = set()
    for path in (ROOT / "sakura_http").rglob("*.py"):
        tree = ast.parse(path.read_text())
        hidden = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_third_party_import_is_declared() -> None:
    declared = set(_by_name(PROJECT["project"]["dependencies"]))
    for requirements in PROJECT["project"]["optional-dependencies"].values():
        declared |= set(_by_name(requirements))
    # Import names that differ from their distribution's name.
    distribution = {"yaml": "pyyaml", "_pytest": "pytest"}
    # Imported only where the user's environment provides them (the pytest plugin runs under
    # pytest; brotli and zstandard are httpx's own optional decoders, used when installed).
    provided = {"pytest", "brotli", "brotlicffi", "zstandard"}
    stdlib = set(sys.stdlib_module_names)
    for module in sorted(_imported_top_level_modules() - stdlib - {"sakura_http"}):
        package = distribution.get(module, module).replace("_", "-")
        assert package in declared or package in provided, f"{module} is imported, not declared"


def test_the_benchmark_chart_is_a_dependency_group_not_an_extra() -> None:
    assert "bench" not in PROJECT["project"]["optional-dependencies"]
    assert any(_name(r) == "matplotlib" for r in PROJECT["dependency-groups"]["bench"])
