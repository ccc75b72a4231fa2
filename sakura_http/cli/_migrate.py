"""`sakura-http migrate`: move a vcrpy / pytest-recording suite over in one command.

The steps, each a function of its own:

1. **find** (`plan_migration`): the test modules and conftests under PATH, parsed with libcst (a
   concrete syntax tree: the rewrite keeps every comment, blank line and quote as it was); the
   tests marked ``@pytest.mark.vcr`` (on the function, its class or the module's
   ``pytestmark``), ``@pytest.mark.default_cassette``, ``vcr.use_cassette(...)``; the
   cassettes they replay (pytest-recording's ``<tests>/cassettes/<module>/<test>.yaml``, the
   names a marker gives, ``cassette_library_dir``); and any other vcrpy or cassetter file;
2. **convert** each cassette with `convert_file` (the code of `sakura-http convert`: recorded
   under the recording rules, then verified by replay) into a scratch folder, so a refusal
   stops the run before anything is written;
3. **plan**: the unified diff of every file it would change, the cassettes it would write
   (where the plugin looks by default, ``<tests>/fixtures/<module>/<test>.jsonl``; names kept
   for explicit ones), and what it leaves in place with the sakura-http equivalent;
4. **write** (``--write``): cassettes, then files; ``--remove-old`` deletes the sources;
5. **run** the suite once offline (unless ``--no-run``), with this module loaded as a pytest
   plugin (``-p sakura_http.cli._migrate``) that writes each test's outcome and the misses it
   raised as JSON lines; ``--loosen`` then gives each test that missed only because its
   request drifted ``rules=sakura_http.Rules.method_and_url()``, with a comment, and runs
   those tests again.

This module never imports `sakura_http.cli` (the package imports it to register the command);
it reports its own errors and returns the exit code.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._cassette import RECORDING_ESCAPES, cassette_stem, default_fixtures_folder
from .._hosts import DEFAULT_PORTS
from ._convert import ConvertResult, VcrImportError, convert_file
from ._foreign import sniff

__all__ = ["MigrationError", "MigrationPlan", "add_migrate_command", "plan_migration"]

PROG = "sakura-http migrate"
MIGRATE_EXTRA_HINT = "pip install 'sakura-http[migrate]'"
#: The environment variable naming the file the run's outcomes are appended to.
REPORT_ENV = "SAKURA_HTTP_MIGRATE_REPORT"
LOOSE_RULES = "sakura_http.Rules.method_and_url()"

_FOREIGN_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
_SKIPPED_DIRS = {"node_modules", "__pycache__", "site-packages", "build", "dist"}
_SDK_CLIENT = re.compile(r"\b(?:Async)?(?:Anthropic|OpenAI|AzureOpenAI)\s*\(")
# Clients patch_clients does not cover (it covers httpx, httpx2, requests and aiohttp).
_OTHER_CLIENTS = re.compile(r"^\s*(?:import|from)\s+(urllib3|boto3)\b", re.M)
#: vcrpy's match_on names that sakura-http's method and URL cover.
_URL_MATCHERS = {"method", "scheme", "host", "port", "path", "query", "uri"}


class MigrationError(Exception):
    """The migration cannot go on; the message says why and what to do.  Nothing is written."""


# --- the plan ----------------------------------------------------------------------------------


@dataclass(slots=True)
class CassetteMove:
    """One foreign cassette and where its conversion goes; `why` names the test(s) using it."""

    source: Path
    target: Path
    why: str
    result: ConvertResult | None = None


@dataclass(slots=True)
class _Settings:
    """What the suite's vcr_config says, as the plugin spells it."""

    secret_headers: set[str] = field(default_factory=set)
    secret_query: list[str] = field(default_factory=list)
    loose_matching: bool = False  # match_on leaves out the body and headers
    hosts: set[str] = field(default_factory=set)


@dataclass
class MigrationPlan:
    """Everything `--write` would do: `moves` (cassettes), `edits` (path -> (old text, new
    text); old is None for a new file), `notes` (what is left in place, with the sakura-http
    equivalent), `sdk_tests` (tests building anthropic/openai clients: patch_clients=True)."""

    root: Path
    moves: list[CassetteMove] = field(default_factory=list)
    edits: dict[Path, tuple[str | None, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sdk_tests: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    settings: _Settings = field(default_factory=_Settings)

    def diff(self) -> str:
        """The unified diff of every file the plan changes or creates."""
        chunks: list[str] = []
        for path, (old, new) in sorted(self.edits.items()):
            name = self._shown(path)
            chunks.extend(
                difflib.unified_diff(
                    (old or "").splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    "/dev/null" if old is None else f"a/{name}",
                    f"b/{name}",
                )
            )
        return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)

    def _shown(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def _import_libcst() -> Any:
    try:
        import libcst
    except ImportError:
        raise MigrationError(
            f"migrate rewrites tests with libcst, which is not installed: {MIGRATE_EXTRA_HINT}"
        ) from None
    return libcst


def _walk(root: Path) -> Iterator[Path]:
    """Files under `root`, skipping hidden folders, virtualenvs and build output."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIPPED_DIRS
            and not (here / d / "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            yield here / name


def _is_test_module(path: Path) -> bool:
    return path.suffix == ".py" and (
        fnmatch.fnmatch(path.name, "test_*.py") or fnmatch.fnmatch(path.name, "*_test.py")
    )


def _dotted(node: Any) -> str | None:
    cst = _import_libcst()
    if isinstance(node, cst.Name):
        return str(node.value)
    if isinstance(node, cst.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr.value}"
    return None


def _called(node: Any) -> tuple[str | None, Any]:
    """(dotted name, the Call or None) of a decorator or marker expression."""
    cst = _import_libcst()
    if isinstance(node, cst.Call):
        return _dotted(node.func), node
    return _dotted(node), None


def _is_mark(name: str | None, mark: str) -> bool:
    return name is not None and (name == f"mark.{mark}" or name.endswith(f".mark.{mark}"))


def _literal(node: Any) -> Any:
    """The value of a literal expression node, or raise ValueError."""
    cst = _import_libcst()
    return ast.literal_eval(cst.Module([]).code_for_node(node).strip())


def _literal_args(call: Any) -> tuple[list[Any], dict[str, Any]] | None:
    """(positional, keyword) literal arguments of `call`, None when one is not a literal."""
    if call is None:
        return [], {}
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    try:
        for arg in call.args:
            if arg.star:
                return None
            value = _literal(arg.value)
            if arg.keyword is None:
                positional.append(value)
            else:
                keywords[arg.keyword.value] = value
    except (ValueError, SyntaxError):
        return None
    return positional, keywords


def _marker(old: Any, name: str | None, keywords: Sequence[tuple[str, str]]) -> Any:
    """`old` (a ``...mark.vcr`` expression, called or not) as ``...mark.cassette(name, k=v)``."""
    cst = _import_libcst()
    func = old.func if isinstance(old, cst.Call) else old
    if isinstance(func, cst.Attribute):
        func = func.with_changes(attr=cst.Name("cassette"))
    else:
        func = cst.parse_expression("pytest.mark.cassette")
    args = [cst.Arg(cst.SimpleString(json.dumps(name)))] if name is not None else []
    args += [
        cst.Arg(
            cst.parse_expression(value),
            keyword=cst.Name(key),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        for key, value in keywords
    ]
    return cst.Call(func=func, args=args)


# --- reading the suite's vcr configuration -------------------------------------------------------


def _returned_dict(function: Any) -> Any:
    """The dict literal a fixture returns as its only statement (after a docstring), or None."""
    cst = _import_libcst()
    statements = [
        s
        for s in function.body.body
        if not (
            isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, cst.SimpleString)
        )
    ]
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        return None
    statement = statements[0].body[0]
    if isinstance(statement, cst.Return) and isinstance(statement.value, cst.Dict):
        return statement.value
    return None


_TRANSLATED = {
    "filter_headers",
    "filter_query_parameters",
    "match_on",
    "record_mode",
    "decode_compressed_response",
    "cassette_library_dir",
    "serializer",
}
_EQUIVALENTS = {
    "before_record_request": "Rules(before_record=...) or Scrub steps (docs/matching.md)",
    "before_record_response": "Rules(before_record=...) or Scrub.response_header / Scrub.json",
    "filter_post_data_parameters": "Rules(scrub=[Scrub.json(...)]) and ignore_json=",
    "ignore_hosts": "passthrough_hosts= (a marker keyword) for hosts never recorded",
    "ignore_localhost": "nothing: loopback is never blocked and not recorded unless sent",
    "allow_playback_repeats": "allow_repeats= (a marker keyword; repeats are allowed by default)",
    "custom_patches": "patch_clients=True or the transport= of the client",
}


def _read_vcr_config(plan: MigrationPlan, where: str, entries: dict[str, Any]) -> bool:
    """Fold a vcr_config dict into the plan's settings; True when every key was translated."""
    settings = plan.settings
    complete = True
    for key, value in entries.items():
        if key == "filter_headers":
            for item in value:
                settings.secret_headers.add(str(item[0] if isinstance(item, tuple) else item))
        elif key == "filter_query_parameters":
            for item in value:
                name = str(item[0] if isinstance(item, tuple) else item)
                if name not in settings.secret_query:
                    settings.secret_query.append(name)
        elif key == "match_on":
            names = set(value)
            unknown = names - _URL_MATCHERS - {"body", "headers", "raw_body"}
            if unknown:
                plan.notes.append(
                    f"{where}: match_on {sorted(unknown)} (custom matchers) left out: match "
                    "with Rules(ignore_query=..., ignore_json=..., ignore_body=...) instead"
                )
            if not names & {"body", "raw_body", "headers"}:
                settings.loose_matching = True
        elif key == "record_mode":
            plan.notes.append(
                f"{where}: record_mode={value!r} dropped: sakura-http replays by default; "
                "`pytest --record` records what is missing, `pytest --record-all` re-records"
            )
        elif key in _TRANSLATED:
            pass  # decoding is what convert does; the cassettes' folder is read by the plan
        else:
            complete = False
            equivalent = _EQUIVALENTS.get(key, "see docs/migrating.md")
            plan.notes.append(f"{where}: vcr_config[{key!r}] left in place: use {equivalent}")
    return complete


def _library_dir(module: Any, base: Path, root: Path) -> Path | None:
    """A literal ``cassette_library_dir`` given to vcr.VCR(...) or in vcr_config, or None."""
    code = module.code
    found = re.search(r"""cassette_library_dir["']?\s*[=:]\s*(?:r?)["']([^"']+)["']""", code)
    if found is None:
        return None
    path = Path(found.group(1))
    return path if path.is_absolute() else root / path


# --- rewriting a test module -----------------------------------------------------------------


@dataclass(slots=True)
class _Module:
    path: Path
    stem: str
    cassettes: Path  # pytest-recording's vcr_cassette_dir
    library: Path | None  # vcrpy's cassette_library_dir, for use_cassette paths
    fixtures: Path


def _transformer_class() -> Any:
    cst = _import_libcst()

    class Rewriter(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        """Rewrites one test module; records cassettes and notes in the plan."""

        def __init__(self, plan: MigrationPlan, module: _Module, marked: bool) -> None:
            super().__init__()
            self.plan = plan
            self.module = module
            self.module_marked = marked
            self.classes: list[tuple[str, bool]] = []
            self.depth = 0

        def _where(self, name: str) -> str:
            rel = self.plan._shown(self.module.path)
            parts = [rel, *(c for c, _ in self.classes), name]
            return "::".join(parts)

        # classes ---------------------------------------------------------------------
        def visit_ClassDef(self, node: Any) -> bool:
            marks = [_called(d.decorator) for d in node.decorators]
            marked = any(_is_mark(name, "vcr") and call is None for name, call in marks)
            if any(_is_mark(name, "vcr") and call is not None for name, call in marks):
                self.plan.notes.append(
                    f"{self._where(node.name.value)}: a class-level vcr marker with arguments "
                    "left in place: put @pytest.mark.cassette(...) on its tests"
                )
            self.classes.append((node.name.value, marked))
            return True

        def leave_ClassDef(self, original: Any, updated: Any) -> Any:
            self.classes.pop()
            decorators = [
                d.with_changes(decorator=_marker(d.decorator, None, [("patch_clients", "True")]))
                if _is_mark(_called(d.decorator)[0], "vcr") and _called(d.decorator)[1] is None
                else d
                for d in updated.decorators
            ]
            return updated.with_changes(decorators=decorators)

        # pytestmark -------------------------------------------------------------------
        def leave_Assign(self, original: Any, updated: Any) -> Any:
            if self.depth or self.classes:
                return updated
            targets = [_dotted(t.target) for t in updated.targets]
            if targets != ["pytestmark"]:
                return updated

            def swap(node: Any) -> Any:
                name, call = _called(node)
                if _is_mark(name, "vcr") and call is None:
                    return _marker(node, None, [("patch_clients", "True")])
                return node

            value = updated.value
            if isinstance(value, (cst.List, cst.Tuple)):
                elements = [e.with_changes(value=swap(e.value)) for e in value.elements]
                return updated.with_changes(value=value.with_changes(elements=elements))
            return updated.with_changes(value=swap(value))

        # functions --------------------------------------------------------------------
        def visit_FunctionDef(self, node: Any) -> bool:
            self.depth += 1
            return True

        def leave_FunctionDef(self, original: Any, updated: Any) -> Any:
            self.depth -= 1
            name = updated.name.value
            in_class = bool(self.classes)
            if self.depth or not name.startswith("test"):
                return updated
            if in_class and not self.classes[-1][0].startswith("Test"):
                return updated
            return self._test(updated, name)

        def _test(self, node: Any, name: str) -> Any:
            where = self._where(name)
            inherited = self.module_marked or any(marked for _, marked in self.classes)
            vcr_decorator = default = use = None
            for decorator in node.decorators:
                dotted, _ = _called(decorator.decorator)
                if _is_mark(dotted, "vcr"):
                    vcr_decorator = decorator
                elif _is_mark(dotted, "default_cassette"):
                    default = decorator
                elif dotted is not None and dotted.endswith(".use_cassette"):
                    use = decorator
            wrapped = self._whole_body_with(node)
            if use is None and wrapped is None:
                self._inner_use_cassette(node, where)
            if not (vcr_decorator or inherited or use or wrapped):
                return node
            explicit: str | None = None
            sources: list[tuple[Path, str]] = []  # (source, marker name or "")
            if vcr_decorator is not None or default is not None:
                args = (
                    _literal_args(_called(vcr_decorator.decorator)[1])
                    if vcr_decorator
                    else ([], {})
                )
                default_args = _literal_args(_called(default.decorator)[1]) if default else ([], {})
                if (
                    args is None
                    or default_args is None
                    or len(args[0]) > 1
                    or len(default_args[0]) > 1
                ):
                    self.plan.notes.append(
                        f"{where}: left on vcr: its markers name several cassettes or a name "
                        "that is not a literal; sakura-http reads one cassette per marker "
                        '(@pytest.mark.cassette("name.jsonl"); sakura_recording() for more)'
                    )
                    return node
                for key, value in args[1].items():
                    if key != "record_mode":
                        self.plan.notes.append(
                            f"{where}: left on vcr: its marker sets {key}=; give the "
                            "sakura-http option to @pytest.mark.cassette(...) (see "
                            "docs/migrating.md)"
                        )
                        return node
                    self.plan.notes.append(
                        f"{where}: record_mode={value!r} dropped (`pytest --record` records)"
                    )
                named = default_args[0] or args[0]
                if args[0] and not default_args[0]:
                    # pytest-recording reads a vcr marker's names beside the test's own
                    # cassette and records into its own one: keep the one that holds it.
                    kept = self._extra_or_own(where, name, self._yaml(args[0][0]))
                    if kept is None:
                        return node
                    named = kept
                if named:
                    explicit = self._yaml(named[0])
                    sources.append((self.module.cassettes / explicit, explicit))
            source_of_use = use or wrapped
            if source_of_use is not None:
                call = source_of_use.decorator if use is not None else wrapped.items[0].item
                args = _literal_args(call)
                if args is None or len(args[0]) != 1 or set(args[1]) - {"record_mode"}:
                    self.plan.notes.append(
                        f"{where}: vcr.use_cassette(...) left in place: its arguments are not "
                        'one literal path; use @pytest.mark.cassette("name.jsonl", '
                        "patch_clients=True)"
                    )
                    return node
                used = str(args[0][0])
                explicit = used
                base = self.module.library or self.plan.root
                sources.append((base / used, Path(used).name))
            if not sources:
                sources = self._default_sources(name)
            for source, given in sources:
                if given:
                    target = self.module.fixtures / Path(given).with_suffix(".jsonl")
                else:
                    stem = cassette_stem(source.stem)  # as the plugin names the test's
                    target = self.module.fixtures / self.module.stem / f"{stem}.jsonl"
                if source.is_file():
                    self.plan.moves.append(CassetteMove(source, target, where))
                else:
                    self.plan.notes.append(
                        f"{where}: no cassette at {self.plan._shown(source)}; the test "
                        "records one with `pytest --record`"
                    )
            self.plan.tests.append(where)
            code = cst.Module([]).code_for_node(node)
            if _SDK_CLIENT.search(code):
                self.plan.sdk_tests.append(where)
            marker_name = (
                None if explicit is None else Path(sources[0][1]).with_suffix(".jsonl").as_posix()
            )
            node = self._rewrite_decorators(
                node, vcr_decorator, default, use, marker_name, inherited
            )
            if wrapped is not None:
                node = node.with_changes(body=node.body.with_changes(body=wrapped.body.body))
            return self._cassette_view(node, where)

        def _inner_use_cassette(self, node: Any, where: str) -> None:
            """Note a ``with ....use_cassette(...)`` block the rewrite leaves (it is not the
            test's whole body): the test still records with vcrpy."""
            code = cst.Module([]).code_for_node(node.body)
            found = re.search(r"with\s+([\w.]*use_cassette)\(", code)
            if found is not None:
                self.plan.notes.append(
                    f"{where}: with {found.group(1)}(...) left in place: it is not the test's "
                    "whole body; move the rest out of it, or give the test "
                    '@pytest.mark.cassette("name.jsonl", patch_clients=True) and remove the block'
                )

        @staticmethod
        def _yaml(name: Any) -> str:
            text = str(name)
            return text if Path(text).suffix else text + ".yaml"

        def _extra_or_own(self, where: str, name: str, extra: str) -> list[str] | None:
            """For ``@pytest.mark.vcr("x.yaml")``: ``[extra]`` when the test plays that
            cassette, ``[]`` when it plays only its own (pytest-recording wrote there), None
            (the test left on vcr, with a note) when it plays both."""
            own = [source for source, _ in self._default_sources(name) if source.is_file()]
            if not (self.module.cassettes / extra).is_file():
                if own:
                    self.plan.notes.append(
                        f"{where}: its vcr marker names {extra}, which does not exist; "
                        "pytest-recording recorded the test into its own cassette, which it keeps"
                    )
                    return []
                return [extra]
            if own:
                self.plan.notes.append(
                    f"{where}: left on vcr: it plays {extra} and its own cassette "
                    f"{self.plan._shown(own[0])} together; sakura-http reads one cassette per "
                    'marker: merge them into one (@pytest.mark.cassette("name.jsonl")), or open '
                    "the other with sakura_recording()"
                )
                return None
            return [extra]

        def _default_sources(self, name: str) -> list[tuple[Path, str]]:
            base = ".".join([*(c for c, _ in self.classes), name])
            base = base.translate(RECORDING_ESCAPES)  # pytest-recording's name of the test
            folder = self.module.cassettes
            if not folder.is_dir():
                return [(folder / f"{base}.yaml", "")]
            found = [
                p
                for p in sorted(folder.iterdir())
                if p.suffix in _FOREIGN_SUFFIXES
                and (p.stem == base or (p.stem.startswith(base + "[") and p.stem.endswith("]")))
            ]
            return [(p, "") for p in found] or [(folder / f"{base}.yaml", "")]

        def _whole_body_with(self, node: Any) -> Any:
            body = [
                s
                for s in node.body.body
                if not (
                    isinstance(s, cst.SimpleStatementLine)
                    and isinstance(s.body[0], cst.Expr)
                    and isinstance(s.body[0].value, cst.SimpleString)
                )
            ]
            if len(body) != 1 or len(node.body.body) != 1:
                return None
            statement = body[0]
            if not isinstance(statement, cst.With) or len(statement.items) != 1:
                return None
            dotted, call = _called(statement.items[0].item)
            if call is None or dotted is None or not dotted.endswith(".use_cassette"):
                return None
            if statement.items[0].asname is not None or statement.asynchronous is not None:
                return None
            return statement

        def _rewrite_decorators(
            self,
            node: Any,
            vcr_decorator: Any,
            default: Any,
            use: Any,
            name: str | None,
            inherited: bool,
        ) -> Any:
            removed = [d for d in (vcr_decorator, default, use) if d is not None]
            needs_own = bool(removed) or name is not None or not inherited
            decorators = []
            placed = False
            for decorator in node.decorators:
                if any(decorator is d for d in removed):
                    if not placed:
                        old = vcr_decorator.decorator if vcr_decorator is not None else None
                        expr = _marker(
                            old if old is not None else cst.parse_expression("pytest.mark.vcr"),
                            name,
                            [("patch_clients", "True")],
                        )
                        decorators.append(decorator.with_changes(decorator=expr))
                        placed = True
                    continue
                decorators.append(decorator)
            if needs_own and not placed:
                expr = _marker(
                    cst.parse_expression("pytest.mark.vcr"), name, [("patch_clients", "True")]
                )
                decorators.insert(0, cst.Decorator(expr))
            return node.with_changes(decorators=decorators)

        def _cassette_view(self, node: Any, where: str) -> Any:
            """A `vcr` fixture parameter read for vcr.requests / play_count / all_played
            becomes the plugin's `sakura_cassette` view."""
            params = node.params
            if not any(p.name.value == "vcr" for p in params.params):
                return node
            view = _ViewRewriter()
            body = node.body.visit(view)
            if view.left:
                self.plan.notes.append(
                    f"{where}: the vcr fixture's {', '.join(sorted(view.left))} left in place: "
                    "sakura_cassette gives exchanges, play_count and unplayed() (docs/pytest.md)"
                )
                return node
            renamed = [
                p.with_changes(name=cst.Name("sakura_cassette")) if p.name.value == "vcr" else p
                for p in params.params
            ]
            return node.with_changes(params=params.with_changes(params=renamed), body=body)

    class _ViewRewriter(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        """vcr.requests -> sakura_cassette.exchanges (and .uri -> .url on its items),
        vcr.play_count -> sakura_cassette.play_count, vcr.all_played -> not unplayed()."""

        def __init__(self) -> None:
            super().__init__()
            self.left: set[str] = set()

        def leave_Attribute(self, original: Any, updated: Any) -> Any:
            value = updated.value
            if isinstance(value, cst.Name) and value.value == "vcr":
                attr = updated.attr.value
                if attr in ("requests", "play_count"):
                    new = "exchanges" if attr == "requests" else attr
                    return cst.Attribute(cst.Name("sakura_cassette"), cst.Name(new))
                if attr == "all_played":
                    return cst.parse_expression("(not sakura_cassette.unplayed())")
                self.left.add(f"vcr.{attr}")
                return updated
            if updated.attr.value == "uri" and _reads_exchanges(value):
                return updated.with_changes(attr=cst.Name("url"))
            return updated

        def leave_Name(self, original: Any, updated: Any) -> Any:
            return updated

    def _reads_exchanges(node: Any) -> bool:
        if isinstance(node, cst.Subscript):
            return _reads_exchanges(node.value)
        return (
            isinstance(node, cst.Attribute)
            and node.attr.value == "exchanges"
            and isinstance(node.value, cst.Name)
            and node.value.value == "sakura_cassette"
        )

    return Rewriter


def _module_marked(module: Any) -> bool:
    cst = _import_libcst()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and [_dotted(t.target) for t in small.targets] == [
                "pytestmark"
            ]:
                value = small.value
                items = (
                    [e.value for e in value.elements]
                    if isinstance(value, (cst.List, cst.Tuple))
                    else [value]
                )
                if any(
                    _is_mark(_called(item)[0], "vcr") and _called(item)[1] is None for item in items
                ):
                    return True
    return False


# --- conftest: vcr_config -> ini options and sakura_rules ------------------------------------


def _rules_fixture() -> str:
    return (
        "@pytest.fixture\n"
        "def sakura_rules() -> sakura_http.Rules:\n"
        '    """The matching rules of every cassette (vcr_config, by sakura-http migrate)."""\n'
        "    return {rules}\n"
    )


def _rules_code(settings: _Settings) -> str | None:
    parts = []
    if settings.loose_matching:
        parts.append(LOOSE_RULES)
    if settings.secret_query:
        names = ", ".join(json.dumps(n) for n in settings.secret_query)
        parts.append(
            f"sakura_http.Rules(ignore_query=[{names}], scrub=[sakura_http.Scrub.query({names})])"
        )
    return " | ".join(parts) if parts else None


def _read_conftest(plan: MigrationPlan, path: Path, module: Any) -> int | None:
    """Fold the conftest's vcr_config into the plan; its index in the module's body when it
    was translated whole (so it can go), else None."""
    cst = _import_libcst()
    where = plan._shown(path)
    for number, statement in enumerate(module.body):
        if not (isinstance(statement, cst.FunctionDef) and statement.name.value == "vcr_config"):
            continue
        entries = _returned_dict(statement)
        config = None
        if entries is not None:
            try:
                config = _literal(entries)
            except (ValueError, SyntaxError):
                config = None
        if config is None:
            plan.notes.append(
                f"{where}: vcr_config left in place: it does not return a dict of literals; "
                "translate it by hand (ini options sakura_secret_headers, sakura_record_hosts; "
                "a sakura_rules fixture; docs/migrating.md)"
            )
            return None
        return number if _read_vcr_config(plan, f"{where}::vcr_config", config) else None
    return None


def _conftest_edits(plan: MigrationPlan, conftests: list[Path]) -> None:
    """Each conftest without its translated vcr_config; the first one with a vcr_config (or
    a new tests/conftest.py) gets the sakura_rules fixture the settings need."""
    cst = _import_libcst()
    read = []
    for path in conftests:
        text = path.read_text(encoding="utf-8")
        if "vcr_config" not in text:
            continue
        module = cst.parse_module(text)
        read.append((path, text, module, _read_conftest(plan, path, module)))
    rules = _rules_code(plan.settings)
    fixture = None if rules is None else cst.parse_statement(_rules_fixture().format(rules=rules))
    for path, text, module, index in read:
        body = list(module.body)
        if index is not None and fixture is not None:
            body[index] = fixture.with_changes(leading_lines=body[index].leading_lines)
        elif index is not None:
            del body[index]
        elif fixture is not None:
            body.append(fixture.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        new = module.with_changes(body=body).code
        if fixture is not None:
            new = _ensure_import(_ensure_import(new, "sakura_http"), "pytest")
            fixture = None
        if new != text:
            plan.edits[path] = (text, new)
    if fixture is not None:
        folder = plan.root / "tests" if (plan.root / "tests").is_dir() else plan.root
        path = folder / "conftest.py"
        code = "import pytest\n\nimport sakura_http\n\n\n" + _rules_fixture().format(rules=rules)
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            new = text.rstrip("\n") + "\n\n\n" + _rules_fixture().format(rules=rules)
            plan.edits[path] = (text, _ensure_import(_ensure_import(new, "sakura_http"), "pytest"))
        else:
            plan.edits[path] = (None, code)


def _ensure_import(text: str, name: str) -> str:
    """`text` with ``import name`` after its last top-level import (or at the top)."""
    cst = _import_libcst()
    module = cst.parse_module(text)
    last = -1
    for number, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(
            statement.body[0], (cst.Import, cst.ImportFrom)
        ):
            small = statement.body[0]
            if isinstance(small, cst.Import) and any(
                _dotted(alias.name) == name and alias.asname is None for alias in small.names
            ):
                return text
            last = number
    body = list(module.body)
    body.insert(last + 1, cst.parse_statement(f"import {name}\n"))
    return str(module.with_changes(body=body).code)


# --- ini options -------------------------------------------------------------------------------


def _ini_lines(options: dict[str, list[str]], toml: bool) -> list[str]:
    lines = []
    for key, values in options.items():
        if toml:
            lines.append(f"{key} = [{', '.join(json.dumps(v) for v in values)}]\n")
        else:
            lines.append(f"{key} =\n" + "".join(f"    {v}\n" for v in values))
    return lines


def _ini_edit(plan: MigrationPlan, options: dict[str, list[str]]) -> None:
    """Add the options to the project's pytest configuration (created as pytest.ini if none)."""
    options = {k: v for k, v in options.items() if v}
    if not options:
        return
    root = plan.root
    candidates = [
        (root / "pytest.ini", "[pytest]", False),
        (root / "pyproject.toml", "[tool.pytest.ini_options]", True),
        (root / "tox.ini", "[pytest]", False),
        (root / "setup.cfg", "[tool:pytest]", False),
    ]
    for path, header, toml in candidates:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for number, line in enumerate(lines):
            if line.strip() == header:
                kept = {}
                for key, values in options.items():
                    if re.search(rf"^\s*{key}\s*=", text, re.M):
                        plan.notes.append(
                            f"{plan._shown(path)}: {key} is set already; add {values} to it"
                        )
                    else:
                        kept[key] = values
                new = [*lines[: number + 1], *_ini_lines(kept, toml), *lines[number + 1 :]]
                plan.edits[path] = (text, "".join(new))
                return
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        tail = "" if text.endswith("\n") or not text else "\n"
        added = "".join(_ini_lines(options, True))
        plan.edits[pyproject] = (text, f"{text}{tail}\n[tool.pytest.ini_options]\n{added}")
        return
    plan.edits[root / "pytest.ini"] = (None, "[pytest]\n" + "".join(_ini_lines(options, False)))


# --- planning ----------------------------------------------------------------------------------


def _host(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    port = parts.port
    if port is None or port == DEFAULT_PORTS.get(parts.scheme):
        return parts.hostname
    return f"{parts.hostname}:{port}"


def plan_migration(root: Path, scratch: Path) -> MigrationPlan:
    """Find the suite under `root` and plan its migration, converting (and verifying) every
    cassette into `scratch`.  Raises `MigrationError` when two sources would land on one
    file or a cassette cannot be converted; nothing under `root` is written."""
    cst = _import_libcst()
    root = root.resolve()
    if not root.is_dir():
        raise MigrationError(f"{root}: no such folder")
    plan = MigrationPlan(root)
    files = list(_walk(root))
    rewriter = _transformer_class()
    conftests = [p for p in files if p.name == "conftest.py"]
    for path in files:
        if not _is_test_module(path):
            continue
        text = path.read_text(encoding="utf-8")
        if "vcr" not in text:
            continue
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            plan.notes.append(f"{plan._shown(path)}: not rewritten, libcst cannot parse it: {exc}")
            continue
        info = _Module(
            path,
            path.stem,
            path.parent / "cassettes" / path.stem,
            _library_dir(module, path.parent, root),
            default_fixtures_folder(path, root),
        )
        new = module.visit(rewriter(plan, info, _module_marked(module))).code
        if new != text and "pytest.mark.cassette" in new:
            new = _ensure_import(new, "pytest")  # a vcrpy module need not import it
        other = _OTHER_CLIENTS.search(text)
        if other is not None and new != text:
            plan.notes.append(
                f"{plan._shown(path)}: imports {other.group(1)}: sakura-http records httpx, "
                "httpx2, requests and aiohttp clients in-process; send other clients through "
                "the recording proxy (sakura_proxy fixture, docs/proxy.md)"
            )
        if new != text:
            plan.edits[path] = (text, new)
    _conftest_edits(plan, conftests)
    for path in [*conftests, *(p for p in files if _is_test_module(p))]:
        if "def vcr_cassette_dir" in path.read_text(encoding="utf-8"):
            plan.notes.append(
                f"{plan._shown(path)}: a vcr_cassette_dir fixture: its cassettes were looked "
                "for in pytest-recording's default folder; convert the others with "
                '`sakura-http convert` and name them with @pytest.mark.cassette("...")'
            )
    _orphans(plan, files)
    _check_collisions(plan)
    _convert_all(plan, scratch)
    secret = set(plan.settings.secret_headers)
    hosts: set[str] = set()
    for move in plan.moves:
        assert move.result is not None
        secret |= set(move.result.dropped_headers)
        hosts |= {h for e in move.result.exchanges if (h := _host(e.url)) is not None}
    plan.settings.hosts = hosts
    plan.settings.secret_headers = secret
    if plan.settings.secret_query:
        plan.notes.append(
            "filter_query_parameters: the plugin has no ini option for secret query parameters; "
            "they became ignore_query and Scrub.query in the sakura_rules fixture (a conftest)"
        )
    _ini_edit(
        plan,
        {"sakura_secret_headers": sorted(secret), "sakura_record_hosts": sorted(hosts)},
    )
    return plan


def _orphans(plan: MigrationPlan, files: list[Path]) -> None:
    """Foreign cassettes no test names: converted beside the others, names kept."""
    claimed = {m.source.resolve() for m in plan.moves}
    for path in files:
        if path.suffix not in _FOREIGN_SUFFIXES or path.resolve() in claimed:
            continue
        try:
            with path.open("rb") as file:
                kind = sniff(file.read(1 << 16))
        except OSError:
            continue
        if kind is None:
            continue
        fixtures = default_fixtures_folder(path, plan.root)
        anchor = next((p for p in path.parents if p.name == "cassettes"), path.parent)
        target = fixtures / path.relative_to(anchor).with_suffix(".jsonl")
        plan.moves.append(CassetteMove(path, target, f"a {kind} cassette no test names"))
        plan.notes.append(
            f"{plan._shown(path)}: no test names it; converted to {plan._shown(target)}: use "
            f'@pytest.mark.cassette("{target.relative_to(fixtures).as_posix()}") in its test'
        )


def _check_collisions(plan: MigrationPlan) -> None:
    by_target: dict[Path, CassetteMove] = {}
    for move in plan.moves:
        other = by_target.get(move.target)
        if other is not None and other.source != move.source:
            raise MigrationError(
                f"{plan._shown(other.source)} ({other.why}) and {plan._shown(move.source)} "
                f"({move.why}) would both be written to {plan._shown(move.target)}; give one "
                "of the tests another cassette name, then run migrate again (nothing was written)"
            )
        by_target[move.target] = move
        if move.target.exists():
            raise MigrationError(
                f"{plan._shown(move.target)} exists already; {plan._shown(move.source)} "
                f"({move.why}) would replace it: move one of them, then run migrate again "
                "(nothing was written)"
            )
    unique: dict[Path, CassetteMove] = {}
    for move in plan.moves:
        unique.setdefault(move.target, move)
    plan.moves = list(unique.values())


def _convert_all(plan: MigrationPlan, scratch: Path) -> None:
    refused = []
    for number, move in enumerate(plan.moves):
        staged = scratch / f"{number}.jsonl"
        try:
            move.result = convert_file(move.source, staged, overwrite=True)
        except VcrImportError as exc:
            refused.append(str(exc))
        except OSError as exc:
            refused.append(f"{plan._shown(move.source)}: {exc.strerror or exc}")
    if refused:
        raise MigrationError(
            "cannot convert "
            + ("; ".join(refused))
            + " -- fix or remove the file (`sakura-http convert` explains each refusal), then "
            "run migrate again (nothing was written)"
        )


# --- writing -----------------------------------------------------------------------------------


def write_plan(plan: MigrationPlan, scratch: Path, remove_old: bool) -> None:
    """Write the converted cassettes (moved from `scratch`), then the edited files."""
    for number, move in enumerate(plan.moves):
        move.target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(scratch / f"{number}.jsonl"), str(move.target))
    for path, (_, new) in plan.edits.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new, encoding="utf-8")
    if remove_old:
        for move in plan.moves:
            move.source.unlink(missing_ok=True)


# --- running the suite -------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """One test's result in the offline run: "passed", "missed" or "failed" (or "skipped")."""

    nodeid: str
    outcome: str
    reason: str = ""
    drifted: bool = False  # every miss had a recorded exchange with its method and URL


def run_suite(root: Path, only: Sequence[str] = ()) -> list[Outcome]:
    """Run pytest once in `root`, offline, and read each test's outcome."""
    with tempfile.TemporaryDirectory(prefix="sakura-migrate-") as folder:
        report = Path(folder) / "outcomes.jsonl"
        env = {k: v for k, v in os.environ.items() if k != "SAKURA_HTTP_RECORD"}
        env[REPORT_ENV] = str(report)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "sakura_http.cli._migrate",
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=no",
            "--no-header",
            *only,
        ]
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, check=False
        )
        lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
    if not lines and done.returncode not in (0, 5):  # 5: no tests collected
        said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise MigrationError(
            f"pytest did not run the suite (exit {done.returncode}"
            + (f": {said[-1].strip()}" if said else "")
            + "); the migration is written: fix that, then run pytest"
        )
    outcomes: dict[str, Outcome] = {}
    misses: dict[str, list[bool]] = {}
    for line in lines:
        record = json.loads(line)
        nodeid = record["nodeid"]
        if record["kind"] == "miss":
            misses.setdefault(nodeid, []).append(record["drifted"])
            continue
        current = outcomes.get(nodeid)
        if current is None or record["outcome"] in ("failed", "skipped"):
            if current is not None and current.outcome == "failed":
                continue
            outcomes[nodeid] = Outcome(nodeid, record["outcome"], record["reason"])
    for nodeid, outcome in outcomes.items():
        if outcome.outcome == "failed" and nodeid in misses:
            outcome.outcome = "missed"
            outcome.drifted = all(misses[nodeid])
    return list(outcomes.values())


def _drifted(miss: Any) -> bool:
    """Whether the cassette of a `CassetteMiss` holds an exchange with its method and URL."""
    from .._cassette import load_cassette
    from .._matching import canonical_url

    try:
        exchanges = load_cassette(miss.path).exchanges
    except Exception:
        return False
    wanted = (miss.method.upper(), canonical_url(miss.url))
    return any((e.method.upper(), canonical_url(e.url)) == wanted for e in exchanges)


def _append(record: dict[str, Any]) -> None:
    target = os.environ.get(REPORT_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        todo += list(getattr(current, "exceptions", ()))


# pytest hooks: active only in the run `run_suite` starts (`-p sakura_http.cli._migrate`).


def pytest_exception_interact(node: Any, call: Any, report: Any) -> None:
    if not os.environ.get(REPORT_ENV) or call.excinfo is None:
        return
    from .._exceptions import CassetteMiss

    for exc in _chain(call.excinfo.value):
        if isinstance(exc, CassetteMiss):
            _append({"kind": "miss", "nodeid": report.nodeid, "drifted": _drifted(exc)})


def pytest_collectreport(report: Any) -> None:
    if os.environ.get(REPORT_ENV) and report.failed:
        _append(
            {
                "kind": "outcome",
                "nodeid": report.nodeid,
                "outcome": "failed",
                "reason": f"cannot be collected: {_first_line(report)}",
            }
        )


def _first_line(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[-1][1:] if errors else lines[0]).strip()


def pytest_runtest_logreport(report: Any) -> None:
    if not os.environ.get(REPORT_ENV):
        return
    if report.when != "call" and report.passed:
        return
    reason = "" if report.passed else _first_line(report)
    _append(
        {"kind": "outcome", "nodeid": report.nodeid, "outcome": report.outcome, "reason": reason}
    )


# --- --loosen -----------------------------------------------------------------------------------


def loosen(root: Path, nodeids: Sequence[str]) -> dict[Path, tuple[str, str]]:
    """Give each test in `nodeids` ``rules=sakura_http.Rules.method_and_url()`` on its marker,
    with a comment; returns the edits (path -> (old, new)), written."""
    cst = _import_libcst()
    wanted: dict[Path, set[tuple[str, ...]]] = {}
    for nodeid in nodeids:
        file, *names = nodeid.split("::")
        names[-1] = names[-1].split("[")[0]
        wanted.setdefault(root / file, set()).add(tuple(names))
    edits = {}
    for path, tests in wanted.items():
        text = path.read_text(encoding="utf-8")
        new = cst.parse_module(text).visit(_loosener(tests)).code
        new = _ensure_import(new, "sakura_http")
        if new != text:
            path.write_text(new, encoding="utf-8")
            edits[path] = (text, new)
    return edits


def _loosener(tests: set[tuple[str, ...]]) -> Any:
    cst = _import_libcst()
    notes = (
        "# sakura-http migrate: this test's request drifted since its cassette was recorded;",
        "# to tighten it, run `pytest --record-all` on this test, then remove rules= below.",
    )

    class Loosen(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.scope: list[str] = []

        def visit_ClassDef(self, node: Any) -> bool:
            self.scope.append(node.name.value)
            return True

        def leave_ClassDef(self, original: Any, updated: Any) -> Any:
            self.scope.pop()
            return updated

        def leave_FunctionDef(self, original: Any, updated: Any) -> Any:
            if (*self.scope, updated.name.value) not in tests:
                return updated
            rule = cst.Arg(
                cst.parse_expression(LOOSE_RULES),
                keyword=cst.Name("rules"),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
            note = [cst.EmptyLine(comment=cst.Comment(text)) for text in notes]
            decorators = list(updated.decorators)
            for number, decorator in enumerate(decorators):
                name, call = _called(decorator.decorator)
                if not _is_mark(name, "cassette"):
                    continue
                if call is None:
                    call = cst.Call(func=decorator.decorator, args=[])
                args = list(call.args)
                if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                    args[-1] = args[-1].with_changes(
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                    )
                decorators[number] = decorator.with_changes(
                    decorator=call.with_changes(args=[*args, rule]),
                    leading_lines=[*decorator.leading_lines, *note],
                )
                return updated.with_changes(decorators=decorators)
            expr = cst.parse_expression(
                f"pytest.mark.cassette(patch_clients=True, rules={LOOSE_RULES})"
            )
            if decorators:
                first = decorators[0]
                decorators[0] = first.with_changes(leading_lines=[])
                decorators.insert(
                    0, cst.Decorator(expr, leading_lines=[*first.leading_lines, note])
                )
                return updated.with_changes(decorators=decorators)
            return updated.with_changes(
                decorators=[cst.Decorator(expr, leading_lines=note)],
                leading_lines=updated.leading_lines,
            )

    return Loosen()


# --- the command -------------------------------------------------------------------------------


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _print_plan(plan: MigrationPlan, write: bool) -> None:
    verb = "converted" if write else "to convert"
    _out(f"sakura-http migrate: {len(plan.tests)} test(s) on vcr under {plan.root}")
    for move in plan.moves:
        assert move.result is not None
        count = len(move.result.exchanges)
        _out(
            f"  cassette {verb}: {plan._shown(move.source)} -> {plan._shown(move.target)} "
            f"({count} exchange{'s' if count != 1 else ''}, verified by replay; {move.why})"
        )
    for path, (old, _) in sorted(plan.edits.items()):
        _out(f"  {'new file' if old is None else 'rewrite'}: {plan._shown(path)}")
    if plan.sdk_tests:
        _out(
            "  SDK clients built in the test (patch_clients=True sends them through the cassette):"
        )
        for where in plan.sdk_tests:
            _out(f"    {where}")
    if plan.notes:
        _out("  left in place or changed by hand (with the sakura-http equivalent):")
        for note in plan.notes:
            _out(f"    {note}")
    if not write:
        _out()
        sys.stdout.write(plan.diff())
        _out()
        _out("nothing was written; run again with --write to apply this plan")


def _print_run(outcomes: list[Outcome], loosened: Sequence[str]) -> int:
    counts: dict[str, int] = {}
    _out()
    _out("offline run:")
    for outcome in sorted(outcomes, key=lambda o: o.nodeid):
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
        reason = ""
        if outcome.outcome == "missed":
            why = (
                "the request drifted: its method and URL are recorded, its body or headers differ"
                if outcome.drifted
                else outcome.reason
            )
            reason = f" ({why})"
        elif outcome.reason:
            reason = f" ({outcome.reason})"
        tag = " [loosened]" if outcome.nodeid in loosened else ""
        _out(f"  {outcome.outcome:<7} {outcome.nodeid}{reason}{tag}")
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    _out(f"summary: {summary or 'no tests ran'}")
    return 0 if not (counts.get("failed") or counts.get("missed")) else 1


def _migrate(args: argparse.Namespace) -> int:
    root = Path(args.path)
    if args.remove_old and not args.write:
        _err("--remove-old deletes the old cassettes, so it needs --write")
        return 2
    try:
        scratch_dir = tempfile.mkdtemp(
            prefix=".sakura-migrate-", dir=root if args.write and root.is_dir() else None
        )
        scratch = Path(scratch_dir)
        try:
            plan = plan_migration(root, scratch)
            _print_plan(plan, args.write)
            if not args.write:
                return 0
            write_plan(plan, scratch, args.remove_old)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except MigrationError as exc:
        _err(str(exc))
        return 2
    except OSError as exc:
        _err(f"{exc.filename or root}: {exc.strerror or exc}")
        return 2
    if args.no_run:
        _out("the suite was not run (--no-run); run pytest to check it")
        return 0
    try:
        outcomes, loosened = _run_and_loosen(plan, args.loosen)
    except MigrationError as exc:
        _err(str(exc))
        return 1
    return _print_run(outcomes, loosened)


def _run_and_loosen(plan: MigrationPlan, loose: bool) -> tuple[list[Outcome], list[str]]:
    """The offline run; with `loose`, the drifted tests loosened and run again."""
    outcomes = run_suite(plan.root)
    drifted = [o.nodeid for o in outcomes if o.outcome == "missed" and o.drifted]
    if not drifted:
        return outcomes, []
    if not loose:
        _out(
            "some tests missed because their requests drifted: --loosen matches them by method "
            "and URL"
        )
        return outcomes, []
    edits = loosen(plan.root, drifted)
    for path in sorted(edits):
        _out(f"loosened: {plan._shown(path)}")
    again = {o.nodeid: o for o in run_suite(plan.root, drifted)}
    return [_rerun(again, o) for o in outcomes], drifted


def _rerun(again: dict[str, Outcome], before: Outcome) -> Outcome:
    """`before`'s outcome in the second run: its own, or its module's collection error."""
    if before.nodeid in again:
        return again[before.nodeid]
    module = again.get(before.nodeid.split("::")[0])
    if module is not None:
        return Outcome(before.nodeid, module.outcome, module.reason)
    return before


def _err(text: str) -> None:
    sys.stderr.write(f"{PROG}: error: {text}\n")


def add_migrate_command(
    command: Callable[
        [str, Callable[[argparse.Namespace], int], str, str], argparse.ArgumentParser
    ],
) -> None:
    """Register `migrate` through the CLI's `command(name, handler, summary, details)` helper."""
    migrate = command(
        "migrate",
        _migrate,
        "Move a vcrpy / pytest-recording suite to sakura-http: convert its cassettes, rewrite "
        "its markers and vcr_config, then run it offline and report.",
        "Without --write it prints the plan and the diff of every file and writes nothing. "
        f"Needs libcst ({MIGRATE_EXTRA_HINT}).",
    )
    migrate.add_argument("path", metavar="PATH", nargs="?", default=".")
    migrate.add_argument("--write", action="store_true", help="apply the plan")
    migrate.add_argument(
        "--remove-old", action="store_true", help="delete the converted vcrpy cassettes"
    )
    migrate.add_argument("--no-run", action="store_true", help="do not run the suite after writing")
    migrate.add_argument(
        "--loosen",
        action="store_true",
        help="match the tests whose requests drifted by method and URL only "
        f"(rules={LOOSE_RULES}, with a comment)",
    )
