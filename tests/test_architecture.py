"""The layout docs/architecture.md describes: every engine module documented, front ends that
import only the engine (and each other's public API), never each other's private modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sakura_http"
FRONT_ENDS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _imports(path: Path, package: str) -> set[str]:
    """Absolute names of the sakura_http modules `path` imports."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("sakura_http")}


def test_every_engine_module_and_front_end_is_in_the_architecture_doc() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    engine = sorted(p.name for p in PACKAGE.glob("_*.py") if not p.name.startswith("__"))
    for name in [*engine, *(f"{f}/" for f in FRONT_ENDS)]:
        assert f"{name}" in text, name


def test_front_ends_import_no_private_module_of_another() -> None:
    for front_end in FRONT_ENDS:
        for path in (PACKAGE / front_end).rglob("*.py"):
            for name in _imports(path, f"sakura_http.{front_end}.{path.stem}"):
                parts = name.split(".")
                if len(parts) < 2 or parts[1] in (front_end, "__init__"):
                    continue
                if parts[1] in FRONT_ENDS:
                    other = parts[1]
                    assert not any(p.startswith("_") for p in parts[2:3]), (path, name)
                    assert {front_end, other} != {"cli", "pytest_plugin"}, (path, name)


def test_importing_the_package_and_plugin_imports_no_optional_dependency() -> None:
    code = (
        "import sys, sakura_http, sakura_http.pytest_plugin\n"
        "bad = [m for m in ('yaml', 'cryptography', 'anthropic', 'openai', 'httpx2') "
        "if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip() == "[]"


def test_importing_the_package_and_plugin_imports_nothing_a_first_request_does_not_need() -> None:
    # On top of httpx and pytest (which every user has loaded), only orjson: anyio waits for
    # the first async request, difflib for the first miss, importlib.metadata for __version__.
    code = (
        "import sys, httpx, pytest\n"
        "before = set(sys.modules)\n"
        "import sakura_http, sakura_http.pytest_plugin\n"
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith('sakura_http')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert set(ast.literal_eval(out.strip())) <= {"orjson", "orjson.orjson"}
