"""The layout docs/architecture.md describes: every engine module documented, front ends that
import only the engine (and each other's public API), never each other's private modules."""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
from pathlib import Path

import pytest

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


def _import_graph() -> dict[str, set[str]]:
    """Each sakura_http module and the sakura_http modules it imports: imports inside functions
    included, those under ``if TYPE_CHECKING:`` left out (they never run); ``from . import x``
    imports the package (which runs its ``__init__``) as well as ``x``."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        hidden = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for statement in node.body
            for child in ast.walk(statement)
        }
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        imported = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    name = ".".join([*base, *(node.module.split(".") if node.module else [])])
                else:
                    name = node.module or ""
                imported.add(name)
                imported.update(f"{name}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[module] = {name for name in imported if name in modules and name != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> dict[frozenset[str], list[str]]:
    """Each group of modules that import each other (a strongly connected component of
    `graph`), with one cycle through it: the modules along it, the first repeated at the end."""
    found = {}
    for start in sorted(graph):
        if any(start in group for group in found):
            continue
        group = frozenset(m for m in _reachable(graph, start) if start in _reachable(graph, m))
        if not group:
            continue
        # The shortest way back to `start`, breadth first (it stays within the group).
        paths = {start: [start]}
        queue = [start]
        while group not in found:
            module = queue.pop(0)
            for name in sorted(graph[module] & group):
                if name == start:
                    found[group] = [*paths[module], start]
                    break
                if name not in paths:
                    paths[name] = [*paths[module], name]
                    queue.append(name)
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def test_no_import_cycles() -> None:
    # A cycle makes the order of imports matter and hides which module owns what; one that
    # runs only inside a function is a cycle all the same.  A name two modules need goes to a
    # small module both import.
    cycles = [" -> ".join(cycle) for cycle in _cycles(_import_graph()).values()]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert list(_cycles(graph).values()) == [["a", "b", "c", "a"], ["e", "f", "e"]]


def test_importing_the_package_and_plugin_imports_no_optional_dependency() -> None:
    code = (
        "import sys, sakura_http, sakura_http.pytest_plugin\n"
        "bad = [m for m in ('yaml', 'cryptography', 'anthropic', 'openai', 'httpx2') "
        "if m in sys.modules]\n"
        "print(bad)\n"
    )
    assert _printed_by(code) == "[]"


def test_importing_the_package_and_plugin_imports_nothing_a_first_request_does_not_need() -> None:
    # On top of httpx and pytest (which every user has loaded), only orjson: anyio waits for
    # the first async request, difflib for the first miss, importlib.metadata for __version__.
    code = (
        "import sys, httpx, pytest\n"
        "before = set(sys.modules)\n"
        "import sakura_http, sakura_http.pytest_plugin\n"
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith('sakura_http')))\n"
    )
    assert set(ast.literal_eval(_printed_by(code))) <= {"orjson", "orjson.orjson"}


def _printed_by(code: str) -> str:
    """What `code` prints, run in a fresh interpreter (nothing imported yet)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout.strip()


def test_the_test_process_refuses_every_host_but_loopback() -> None:
    # The sentinel tests/conftest.py installs under every guard (see tests/offline.py).
    from tests import offline

    offline.ATTEMPTS.clear()
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("api.example.test", 443)
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("192.0.2.1", 443))
    assert socket.getaddrinfo("127.0.0.1", 80)  # loopback passes
    assert offline.ATTEMPTS == ["api.example.test", "192.0.2.1"]
    assert all(offline.is_reserved(host) for host in offline.ATTEMPTS)
    assert not offline.is_reserved("api.anthropic.com")
    offline.ATTEMPTS.clear()


# --- httpx internals in one module ------------------------------------------------------------

#: The one module that reads private names of httpx and httpx2 (docs/architecture.md lists them).
INTERNALS = "_httpx_internals.py"
#: Private names used elsewhere on purpose, each with the reason.
ALLOWED_PRIVATE = {
    ("pytest_plugin/_patch.py", "_transport_for_url"): "the hook patch_clients wraps",
    ("pytest_plugin/_patch.py", "_request"): "aiohttp's ClientSession._request, not httpx's",
    ("aiohttp/_response.py", "_headers"): "aiohttp's ClientResponse, not httpx's",
}


def _httpx_private_names() -> set[str]:
    """Every private name of httpx and httpx2: their private modules, the private attributes
    of their classes, and those a request, response, URL, headers and client set on
    themselves."""
    import httpx
    import httpx2

    names = set()
    for lib in (httpx, httpx2):
        samples = [
            lib.Response(200, content=b"x", request=lib.Request("GET", "http://a.test/")),
            lib.Headers({"a": "b"}),
            lib.URL("http://a.test/"),
            lib.Request("GET", "http://a.test/"),
            lib.Client(),
            lib.AsyncClient(),
            lib.Cookies(),
        ]
        samples[0].read()
        for name in dir(lib):
            value = getattr(lib, name)
            if isinstance(value, type):
                for cls in value.__mro__:
                    if cls.__module__.startswith(lib.__name__):
                        names.update(vars(cls))
        for sample in samples:
            names.update(vars(sample))
        names.update(name for name in vars(lib) if name.startswith("_"))
        names.update(("_stream", "_decoders"))  # the bound streams' and the decoders' module
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _private_uses(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each use of one of `names` in `source`: an attribute read or written
    on anything but ``self`` or ``cls``, a string constant (``getattr(x, "_list")``), an import
    of a private httpx module, or a string naming one (``"httpx._decoders"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in names or node.value.startswith(("httpx._", "httpx2._")):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("httpx"):
            parts = (node.module or "").split(".")
            private = [a.name for a in node.names if a.name.startswith("_")]
            if any(p.startswith("_") for p in parts) or private:
                found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("httpx") and "._" in alias.name:
                    found.append((node.lineno, alias.name))
    return found


def test_only_the_internals_module_uses_private_names_of_httpx() -> None:
    pytest.importorskip("httpx2")
    names = _httpx_private_names()
    assert {"_list", "_uri_reference", "_content", "_transport_for_url"} <= names
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == INTERNALS:
            continue
        for line, name in _private_uses(path.read_text(), names):
            if (where, name) not in ALLOWED_PRIVATE:
                wrong.append(f"sakura_http/{where}:{line}: {name}")
    assert wrong == [], (
        "private names of httpx/httpx2 outside sakura_http/_httpx_internals.py (add a named "
        "function and a probe in tests/test_libraries.py there instead):\n" + "\n".join(wrong)
    )


def test_the_private_name_scan_finds_every_kind_of_use() -> None:
    source = (
        "import httpx._decoders\n"
        "from httpx import _decoders\n"
        "from httpx._models import Headers\n"
        "entries = headers._list\n"
        "built._content = b''\n"
        "present = getattr(url, '_uri_reference', None)\n"
        "module = importlib.import_module('httpx2._decoders')\n"
        "self._list = []\n"
    )
    assert _private_uses(source, {"_list", "_content", "_uri_reference"}) == [
        (1, "httpx._decoders"),
        (2, "httpx"),
        (3, "httpx._models"),
        (4, "_list"),
        (5, "_content"),
        (6, "_uri_reference"),
        (7, "httpx2._decoders"),
    ]


# --- tests mirror the engine -------------------------------------------------------------------

#: Engine modules whose tests live in another module's test file, and why.
TESTED_WITH = {
    "_credentials": "test_policy",  # split out of _policy; the disk's rules are tested together
    "_shown": "test_policy",
    "_format_fast": "test_format",  # the fast decoder is held equal to the plain one there
    "_front_end": "test_transport",  # what every front end shows, through each front end
    "_httpx_internals": "test_libraries",  # the probes, beside what relies on them
}


def test_every_engine_module_has_its_own_test_module() -> None:
    tests = ROOT / "tests"
    missing = []
    for path in sorted(PACKAGE.glob("_*.py")):
        name = path.stem
        if name.startswith("__"):
            continue
        home = TESTED_WITH.get(name, f"test_{name.lstrip('_')}")
        if not (tests / f"{home}.py").exists():
            missing.append(f"sakura_http/{path.name}: no tests/{home}.py")
    assert missing == [], "\n".join(missing)
