"""The `sakura-http` command: show, diff, lint, convert and repair cassettes.

Exit codes, for every subcommand:

* 0 - done, nothing found (`diff`: the cassettes are equal; `lint`: no errors);
* 1 - the check found something (`diff`: they differ; `lint`: an error, or a warning with
  `--strict`; `repair`: a problem it must not fix);
* 2 - a usage error or an unreadable input, with a one-line reason on stderr.

The subcommands' logic lives in `_lint.py`, `_diff.py`, `_convert.py` and `_repair.py`; this
module parses arguments and renders results as text or JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

from .._cassette import load_cassette
from .._exceptions import CassetteFormatError
from .._format import CassetteContent, Exchange, Headers
from ._convert import VcrImportError, convert_vcr_file
from ._diff import CassetteDiff, Change, ExchangeRef, diff_cassettes
from ._lint import Finding, lint_file
from ._proxy import add_proxy_commands
from ._repair import RepairRefused, repair_cassette

__all__ = ["main"]

PROG = "sakura-http"

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    """A usage error or unreadable input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), pointing at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# --- shared helpers --------------------------------------------------------------------------


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _dump_json(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")


def _load(path: Path) -> CassetteContent:
    """Load a cassette named on the command line: unlike replay, a missing file is an error."""
    if not path.exists():
        raise _UsageError(f"{path}: no such file")
    try:
        return load_cassette(path)
    except CassetteFormatError as exc:
        raise _UsageError(str(exc)) from None
    except OSError as exc:
        raise _UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    raise AssertionError("unreachable")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _status_text(exchange: Exchange) -> str:
    return "ERR" if exchange.status is None else str(exchange.status)


def _describe(ref: ExchangeRef) -> str:
    ex = ref.exchange
    ident = f" id={ex.id}" if ex.id is not None else ""
    outcome = _status_text(ex) if ex.error is None else f"error {ex.error.type}"
    return f"#{ref.index + 1}{ident} {ex.method} {ex.url} -> {outcome}"


# --- show ------------------------------------------------------------------------------------


def _markers(exchange: Exchange) -> str:
    marks = []
    if exchange.chunks is not None:
        marks.append(f"chunked:{len(exchange.chunks)}")
    if exchange.truncated:
        marks.append("truncated")
    if exchange.error is not None:
        marks.append(f"error:{exchange.error.type}")
    return f"  [{', '.join(marks)}]" if marks else ""


def _content_type(headers: Headers) -> str:
    return next((value for name, value in headers if name == "content-type"), "")


def _body_lines(headers: Headers, body: bytes) -> list[str]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return [f"<{_size(len(body))} of binary data>"]
    mime = _content_type(headers).partition(";")[0].strip().lower()
    if mime == "application/json" or mime.endswith("+json"):
        with contextlib.suppress(orjson.JSONDecodeError):  # invalid JSON is shown as recorded
            text = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    return text.splitlines()


def _show(args: argparse.Namespace) -> int:
    content = _load(Path(args.cassette))
    exchanges = content.exchanges
    index_width = len(str(len(exchanges)))
    id_width = max((len(ex.id) for ex in exchanges if ex.id is not None), default=0)
    method_width = max((len(ex.method) for ex in exchanges), default=0)
    sizes = [(_size(len(ex.body)), _size(len(ex.response_body))) for ex in exchanges]
    sent_width = max((len(sent) for sent, _ in sizes), default=0)
    received_width = max((len(received) for _, received in sizes), default=0)
    for index, (ex, (sent, received)) in enumerate(zip(exchanges, sizes, strict=True)):
        ident = f"{ex.id or '-':<{id_width}}  " if id_width else ""
        _out(
            f"#{index + 1:<{index_width}}  {ident}{ex.method:<{method_width}}  "
            f"{_status_text(ex):>3}  {sent:>{sent_width}} -> {received:<{received_width}}  "
            f"{ex.url}{_markers(ex)}"
        )
        if args.bodies:
            if ex.error is not None:
                _out(f"    error: {ex.error.type}: {ex.error.message}")
            for label, headers, body in (
                ("request body", ex.headers, ex.body),
                ("response body", ex.response_headers, ex.response_body),
            ):
                if body:
                    _out(f"    {label}:")
                    for line in _body_lines(headers, body):
                        _out(f"      {line}".rstrip())
    _out(_show_totals(exchanges))
    return EXIT_OK


def _show_totals(exchanges: Sequence[Exchange]) -> str:
    statuses = Counter(ex.status for ex in exchanges if ex.status is not None)
    with_id = sum(ex.id is not None for ex in exchanges)
    parts = [_plural(len(exchanges), "exchange") + (f" ({with_id} with id)" if with_id else "")]
    if statuses:
        parts.append(", ".join(f"{n} x {status}" for status, n in sorted(statuses.items())))
    for count, word in (
        (sum(ex.error is not None for ex in exchanges), "error"),
        (sum(ex.chunks is not None for ex in exchanges), "chunked"),
        (sum(ex.truncated for ex in exchanges), "truncated"),
    ):
        if count:
            parts.append(_plural(count, word) if word == "error" else f"{count} {word}")
    sent = sum(len(ex.body) for ex in exchanges)
    received = sum(len(ex.response_body) for ex in exchanges)
    if exchanges:
        parts.append(f"bodies {_size(sent)} sent, {_size(received)} received")
    return "; ".join(parts)


# --- diff ------------------------------------------------------------------------------------


def _values(values: list[str] | None) -> str:
    if values is None:
        return "(absent)"
    return ", ".join(repr(v) for v in values)


def _change_lines(change: Change) -> list[str]:
    label = {"headers": "request header", "response_headers": "response header"}.get(change.field)
    if label is not None:
        return [f"{label} {change.name}: {_values(change.old)} -> {_values(change.new)}"]
    if change.diff:
        head = f"{change.field}: {_size(change.old)} -> {_size(change.new)}"
        return [head, *(f"    {line}" for line in change.diff)]
    name = f" {change.name}" if change.name is not None else ""
    return [f"{change.field}{name}: {change.old!r} -> {change.new!r}"]


def _render_diff(result: CassetteDiff, verbose: bool) -> None:
    for ref in result.removed:
        _out(f"removed {_describe(ref)}")
    for ref in result.added:
        _out(f"added   {_describe(ref)}")
    for changed in result.changed:
        moved = "" if changed.old.index == changed.new.index else f" (was #{changed.old.index + 1})"
        _out(f"changed {_describe(changed.new)}{moved}")
        for change in changed.changes:
            for line in _change_lines(change):
                _out(f"    {line}")
    if verbose:
        for _, new in result.unchanged:
            _out(f"same    {_describe(new)}")
    counts = (
        f"{len(result.added)} added, {len(result.removed)} removed, "
        f"{len(result.changed)} changed, {len(result.unchanged)} unchanged"
    )
    _out(counts if result else f"no differences ({counts})")


def _diff(args: argparse.Namespace) -> int:
    old = _load(Path(args.old))
    new = _load(Path(args.new))
    result = diff_cassettes(old, new)
    if args.json:
        _dump_json(result.as_dict(verbose=args.verbose))
    else:
        _render_diff(result, args.verbose)
    return EXIT_FOUND if result else EXIT_OK


# --- lint ------------------------------------------------------------------------------------


def _lint(args: argparse.Namespace) -> int:
    findings: list[Finding] = []
    unreadable: list[dict[str, str]] = []
    for name in args.cassettes:
        try:
            findings.extend(lint_file(name))
        except OSError as exc:
            reason = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror
            unreadable.append({"path": name, "reason": f"cannot read it ({reason or exc})"})
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if args.json:
        _dump_json(
            {
                "files": list(args.cassettes),
                "errors": errors,
                "warnings": warnings,
                "findings": [f.as_dict() for f in findings],
                "unreadable": unreadable,
            }
        )
    else:
        for finding in findings:
            _out(str(finding))
        checked = _plural(len(args.cassettes) - len(unreadable), "file")
        _out(f"{checked} checked: {_plural(errors, 'error')}, {_plural(warnings, 'warning')}")
    for problem in unreadable:
        _err(f"{PROG} lint: error: {problem['path']}: {problem['reason']}")
    if unreadable:
        return EXIT_USAGE
    if errors or (args.strict and warnings):
        return EXIT_FOUND
    return EXIT_OK


# --- convert ---------------------------------------------------------------------------------


def _convert(args: argparse.Namespace) -> int:
    source, target = Path(args.vcr), Path(args.out)
    if not source.is_file():
        raise _UsageError(f"{source}: no such file")
    try:
        result = convert_vcr_file(source, target, overwrite=args.force)
    except VcrImportError as exc:
        raise _UsageError(str(exc)) from None
    except FileExistsError:
        raise _UsageError(
            f"{target} already exists; pass --force to replace it (nothing was written)"
        ) from None
    except OSError as exc:
        raise _UsageError(f"{exc.filename or source}: {exc.strerror or exc}") from None
    for name, numbers in sorted(result.dropped_headers.items()):
        listed = ", ".join(map(str, numbers))
        _err(
            f"{PROG} convert: warning: dropped request header {name} "
            f"(interaction{'s' if len(numbers) > 1 else ''} {listed}): credentials never go "
            f'into a cassette; replay with RecordingTransport(..., secret_headers=["{name}"])'
        )
    notes = []
    if result.redacted_cookies:
        notes.append(f"set-cookie redacted in {result.redacted_cookies}")
    if result.decoded_bodies:
        notes.append(f"{result.decoded_bodies} content-encoded bodies decoded")
    suffix = f" ({'; '.join(notes)})" if notes else ""
    _out(f"wrote {target}: {_plural(len(result.exchanges), 'exchange')} from {source}{suffix}")
    return EXIT_OK


# --- repair ----------------------------------------------------------------------------------


def _repair(args: argparse.Namespace) -> int:
    path = Path(args.cassette)
    if not path.is_file():
        raise _UsageError(f"{path}: no such file")
    try:
        result = repair_cassette(path)
    except RepairRefused as exc:
        _err(f"{PROG} repair: refused: {exc}")
        return EXIT_FOUND
    except OSError as exc:
        raise _UsageError(f"{path}: {exc.strerror or exc}") from None
    if result.action == "none":
        _out(f"{path}: nothing to repair")
    elif result.action == "removed":
        _out(
            f"{path}: removed the torn last line {result.line} ({_size(result.removed_bytes)}); "
            f"backup at {result.backup}"
        )
    else:
        _out(
            f"{path}: line {result.line} was a complete exchange without its newline: added "
            f"the newline, kept the exchange; backup at {result.backup}"
        )
    return EXIT_OK


# --- wiring ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `sakura-http`, with one subparser per subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Review, check and repair sakura-http cassettes.",
        epilog="Exit codes: 0 ok, 1 the check found something, 2 usage error or unreadable input.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    show = command("show", _show, "List the exchanges of a cassette, one line each, then totals.")
    show.add_argument("cassette", metavar="CASSETTE")
    show.add_argument("--bodies", action="store_true", help="also print the bodies")

    diff = command(
        "diff",
        _diff,
        "Compare two cassettes exchange by exchange (by id, else by match key and ordinal). "
        "Exit 1 when they differ.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.add_argument("--verbose", action="store_true", help="also list unchanged exchanges")

    lint = command(
        "lint",
        _lint,
        "Check cassettes for format errors, credentials and unredacted cookies. "
        "Exit 1 on an error (or, with --strict, a warning).",
    )
    lint.add_argument("cassettes", metavar="CASSETTE", nargs="+")
    lint.add_argument("--strict", action="store_true", help="fail on warnings too")
    lint.add_argument("--json", action="store_true", help="print the findings as JSON")

    convert = command(
        "convert",
        _convert,
        "Import a vcrpy cassette (YAML or JSON) into the sakura-http format.",
    )
    convert.add_argument("vcr", metavar="VCR_CASSETTE")
    convert.add_argument("out", metavar="OUT.jsonl")
    convert.add_argument("--force", action="store_true", help="replace OUT if it exists")

    repair = command(
        "repair",
        _repair,
        "Remove a torn last line left by a crash (a backup is written first); "
        "refuse anything else.",
    )
    repair.add_argument("cassette", metavar="CASSETTE")

    add_proxy_commands(command)  # proxy, ca: sakura_http.proxy is imported when they run
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `sakura-http` with `argv` (default: the process arguments); return the exit code.

    Usage errors and unreadable inputs print one line on stderr and return 2; `--help` prints
    help and returns 0.  Nothing is raised for those, so callers can `sys.exit(main())`.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except _UsageError as exc:
        _err(f"{PROG} {args.command}: error: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`sakura-http show big.jsonl | head`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FOUND
