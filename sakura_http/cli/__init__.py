"""The `sakura-http` command: show, diff, lint, convert, repair cassettes, and git-setup.

Exit codes, for every subcommand:

* 0 - done, nothing found (`diff`: the cassettes are equal; `lint`: no errors);
* 1 - the check found something (`diff`: they differ; `lint`: an error, or a warning with
  `--strict`; `repair`: a problem it must not fix);
* 2 - a usage error or an unreadable input, with a one-line reason on stderr.

The subcommands' logic lives in `_show.py`, `_diff.py`, `_lint.py`, `_convert.py` (with
`_foreign.py` reading vcrpy and cassetter files), `_repair.py` and `_git.py`; this module parses
arguments and renders results as text or JSON.  A new subcommand is one handler function and
one `command(...)` call in `build_parser`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, NoReturn

import orjson

from .._cassette import load_cassette
from .._exceptions import CassetteError, CassetteFormatError
from .._format import CassetteContent, Exchange, parse_cassette
from .._policy import shown_value
from ._convert import ConvertResult, VcrImportError, convert_file
from ._diff import CassetteDiff, Change, ExchangeRef, diff_cassettes
from ._git import (
    DRIVER,
    BlobReader,
    GitError,
    PatternError,
    blob_ids,
    files_at_revision,
    kind_at_revision,
    setup_textconv,
    show_at_revision,
)
from ._lint import Finding, lint_file, not_a_cassette
from ._migrate import add_migrate_command
from ._proxy import add_proxy_commands
from ._repair import RepairRefused, repair_cassette
from ._show import (
    body_lines,
    exchanges_json,
    html_page,
    human_size,
    masked_line,
    textconv_lines,
    url_shown,
)
from ._usage import UsageError as _UsageError
from ._verify import add_verify_command

__all__ = ["main"]

PROG = "sakura-http"

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2


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
    """Load a cassette named on the command line: unlike replay, a missing file is an error,
    and so is a folder or a file that is not a cassette (said as such, never with the advice
    to re-record it)."""
    if not path.exists():
        raise _UsageError(f"{path}: no such file")
    if path.is_dir():
        raise _UsageError(f"{path} is a directory, not a cassette: name a cassette file in it")
    try:
        return load_cassette(path)
    except CassetteFormatError as exc:
        with path.open("rb") as file:
            other = not_a_cassette(file.read(1 << 16), str(path))
        raise _UsageError(str(exc) if other is None else f"{path}: {other}") from None
    except OSError as exc:
        raise _UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _status_text(exchange: Exchange) -> str:
    return "ERR" if exchange.status is None else str(exchange.status)


def _describe(ref: ExchangeRef) -> str:
    ex = ref.exchange
    ident = f" id={ex.id}" if ex.id is not None else ""
    outcome = _status_text(ex) if ex.error is None else f"error {ex.error.type}"
    return f"#{ref.index + 1}{ident} {ex.method} {url_shown(ex.url)} -> {outcome}"


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


def _textconv(path: Path) -> int:
    """For git: print whatever can be printed and exit 0, or `git diff` fails as a whole."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        content = parse_cassette(data, path)
    except CassetteFormatError as exc:
        _out(
            f"# sakura-http: not a readable cassette ({exc.problem}); its lines as they are, "
            "credential values hidden:"
        )
        text = data.decode("utf-8", "replace")
        sys.stdout.write("\n".join(masked_line(line) for line in text.split("\n")))
        if data and not data.endswith(b"\n"):
            _out()
        return EXIT_OK
    for line in textconv_lines(content):
        _out(line)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    if args.textconv:
        return _textconv(Path(args.cassette))
    content = _load(Path(args.cassette))
    if args.json:
        _dump_json(exchanges_json(content))
        return EXIT_OK
    if args.html is not None:
        target = Path(args.html)
        page = html_page(content, f"{args.cassette}", _show_totals(content.exchanges))
        try:
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise _UsageError(f"{target}: cannot write it ({exc.strerror or exc})") from None
        _out(f"wrote {target}: {_plural(len(content.exchanges), 'exchange')}")
        return EXIT_OK
    exchanges = content.exchanges
    index_width = len(str(len(exchanges)))
    id_width = max((len(ex.id) for ex in exchanges if ex.id is not None), default=0)
    method_width = max((len(ex.method) for ex in exchanges), default=0)
    sizes = [(human_size(len(ex.body)), human_size(len(ex.response_body))) for ex in exchanges]
    sent_width = max((len(sent) for sent, _ in sizes), default=0)
    received_width = max((len(received) for _, received in sizes), default=0)
    for index, (ex, (sent, received)) in enumerate(zip(exchanges, sizes, strict=True)):
        ident = f"{ex.id or '-':<{id_width}}  " if id_width else ""
        _out(
            f"#{index + 1:<{index_width}}  {ident}{ex.method:<{method_width}}  "
            f"{_status_text(ex):>3}  {sent:>{sent_width}} -> {received:<{received_width}}  "
            f"{url_shown(ex.url)}{_markers(ex)}"
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
                    for line in body_lines(headers, body):
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
        parts.append(f"bodies {human_size(sent)} sent, {human_size(received)} received")
    return "; ".join(parts)


# --- diff ------------------------------------------------------------------------------------


def _values(values: list[str] | None) -> str:
    if values is None:
        return "(absent)"
    return ", ".join(shown_value(v) for v in values)


def _change_lines(change: Change) -> list[str]:
    label = {"headers": "request header", "response_headers": "response header"}.get(change.field)
    if label is not None:
        return [f"{label} {change.name}: {_values(change.old)} -> {_values(change.new)}"]
    if change.diff:
        head = f"{change.field}: {human_size(change.old)} -> {human_size(change.new)}"
        return [head, *(f"    {line}" for line in change.diff)]
    if change.field == "url":  # a URL is printed whole (`_diff` hid its secret query values)
        return [f"url: {change.old} -> {change.new}"]
    name = f" {change.name}" if change.name is not None else ""
    return [f"{change.field}{name}: {shown_value(change.old)} -> {shown_value(change.new)}"]


def _render_diff(result: CassetteDiff, verbose: bool) -> None:
    for ref in result.removed:
        _out(f"removed {_describe(ref)}")
    for ref in result.added:
        _out(f"added   {_describe(ref)}")
    for changed in result.changed:
        notes = []
        if changed.old.index != changed.new.index:
            notes.append(f"was #{changed.old.index + 1}")
        if changed.pairing == "method and url":
            notes.append("the request changed")
        _out(f"changed {_describe(changed.new)}{''.join(f' ({note})' for note in notes)}")
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


# A comparison of several cassettes (`diff A B` of two folders, `diff REV -- PATH...`): each
# cassette has a name as printed and up to two sides, read only when they may differ.


@dataclass(frozen=True)
class _Side:
    """One side of a cassette compared: `label` names it in messages, `read` gives its bytes,
    `blob` is git's id of them when it is known without reading them."""

    label: str
    read: Callable[[], bytes]
    blob: str | None = None


@dataclass(frozen=True)
class _Compared:
    """A cassette compared: `old` or `new` is None when only the other side has it."""

    name: str
    old: _Side | None
    new: _Side | None


_CASSETTES = "*.jsonl"  # the files of a folder that are compared


def _parse(data: bytes, label: str) -> CassetteContent:
    try:
        return parse_cassette(data, label)
    except CassetteFormatError as exc:
        other = not_a_cassette(data, label)
        raise _UsageError(str(exc) if other is None else f"{label}: {other}") from None


def _disk_side(path: Path) -> _Side:
    def read() -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise _UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None

    return _Side(str(path), read)


def _git_side(
    revision: str, path: Path, blob: str | None = None, reader: BlobReader | None = None
) -> _Side:
    def read() -> bytes:
        try:
            if reader is not None and blob is not None:
                data: bytes | None = reader.read(blob)
            else:
                data = show_at_revision(revision, path)
        except GitError as exc:
            raise _UsageError(str(exc)) from None
        return data or b""

    return _Side(f"{revision}:{path}", read, blob)


def _folder_files(folder: Path) -> dict[str, Path]:
    """The cassettes of `folder`: every `*.jsonl` file below it, by its path below it."""
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob(_CASSETTES))
        if path.is_file()
    }


def _git_kind(revision: str, path: Path) -> str | None:
    try:
        return kind_at_revision(revision, path)
    except GitError as exc:
        raise _UsageError(str(exc)) from None


def _disk_kind(path: Path) -> str | None:
    return "directory" if path.is_dir() else "file" if path.exists() else None


def _git_compared(revisions: list[str], paths: list[str], reader: BlobReader) -> list[_Compared]:
    """The cassettes named by `paths` (files or folders) at `revisions[0]` and on disk, or at
    `revisions[1]`."""
    old_rev = revisions[0]
    new_rev = revisions[1] if len(revisions) == 2 else None
    where = "on disk" if new_rev is None else f"at {new_rev}"
    compared: dict[str, _Compared] = {}
    for name in paths:
        path = Path(name)
        old_kind = _git_kind(old_rev, path)
        new_kind = _disk_kind(path) if new_rev is None else _git_kind(new_rev, path)
        if old_kind is None and new_kind is None:
            raise _UsageError(f"{path}: no such file or directory, at {old_rev} or {where}")
        if "directory" not in (old_kind, new_kind):
            new_side = _disk_side(path) if new_rev is None else _git_side(new_rev, path)
            compared[str(path)] = _Compared(
                str(path),
                _git_side(old_rev, path) if old_kind else None,
                new_side if new_kind else None,
            )
            continue
        if None not in (old_kind, new_kind) and old_kind != new_kind:
            raise _UsageError(
                f"{path} is a {old_kind} at {old_rev} and a {new_kind} {where}: name the "
                "cassettes to compare"
            )
        try:
            old_files = files_at_revision(old_rev, path) if old_kind else {}
            if new_rev is not None:
                new_blobs = files_at_revision(new_rev, path) if new_kind else {}
                new_files = {
                    rel: _git_side(new_rev, path / rel, blob, reader)
                    for rel, blob in new_blobs.items()
                    if fnmatch(rel, _CASSETTES)
                }
            else:
                on_disk = _folder_files(path) if new_kind else {}
                blobs = blob_ids(list(on_disk.values()))
                new_files = {
                    rel: replace(_disk_side(file), blob=blob)
                    for (rel, file), blob in zip(on_disk.items(), blobs, strict=True)
                }
        except GitError as exc:
            raise _UsageError(str(exc)) from None
        old_sides = {
            rel: _git_side(old_rev, path / rel, blob, reader)
            for rel, blob in old_files.items()
            if fnmatch(rel, _CASSETTES)
        }
        for rel in sorted(old_sides.keys() | new_files.keys()):
            shown = (path / rel).as_posix()
            compared[shown] = _Compared(shown, old_sides.get(rel), new_files.get(rel))
    return list(compared.values())


def _folders_compared(old: Path, new: Path) -> list[_Compared]:
    """The cassettes of two folders, paired by their path below each."""
    mine, theirs = _folder_files(old), _folder_files(new)
    return [
        _Compared(
            rel,
            _disk_side(mine[rel]) if rel in mine else None,
            _disk_side(theirs[rel]) if rel in theirs else None,
        )
        for rel in sorted(mine.keys() | theirs.keys())
    ]


def _content(side: _Side | None, data: bytes | None) -> CassetteContent:
    """The cassette read from `side` (`data`); an empty one when the side has none."""
    return _parse(data or b"", "" if side is None else side.label)


def _diff_many(args: argparse.Namespace, compared: list[_Compared], ignore: frozenset[str]) -> int:
    """Diff each cassette of `compared`: the ones that differ are shown (all of them with
    --verbose), each under a `=== NAME` line, then the counts of cassettes."""
    counts = Counter[str]()
    shown: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    for item in compared:
        old, new = item.old, item.new
        blob = None if old is None or new is None or old.blob != new.blob else old.blob
        if blob is not None and not args.verbose:  # git's ids say they are equal: none is read
            counts["unchanged"] += 1
            continue
        try:
            old_data = None if old is None else old.read()
            new_data = None if new is None else new.read()
            if old_data == new_data and not args.verbose:
                counts["unchanged"] += 1
                continue
            result = diff_cassettes(_content(old, old_data), _content(new, new_data), ignore)
        except _UsageError as exc:
            unreadable.append({"path": item.name, "reason": str(exc)})
            continue
        status = (
            "added" if old is None else "removed" if new is None
            else "changed" if result else "unchanged"
        )  # fmt: skip
        counts[status] += 1
        if status == "unchanged" and not args.verbose:
            continue
        if args.json:
            shown.append({"path": item.name, "status": status, **result.as_dict(args.verbose)})
            continue
        _out(f"=== {item.name}" + ("" if status in ("changed", "unchanged") else f" ({status})"))
        _render_diff(result, args.verbose)
    summary = {key: counts[key] for key in ("added", "removed", "changed", "unchanged")}
    if args.json:
        _dump_json({"cassettes": shown, "summary": summary, "unreadable": unreadable})
    else:
        line = "cassettes: " + ", ".join(f"{n} {key}" for key, n in summary.items())
        differ = summary["added"] or summary["removed"] or summary["changed"]
        _out(line if differ else f"no differences ({line})")
    for problem in unreadable:
        _err(f"{PROG} diff: error: {problem['reason']}")
    if unreadable:
        return EXIT_USAGE
    return EXIT_FOUND if summary["added"] or summary["removed"] or summary["changed"] else EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    ignore = frozenset(name.lower() for name in args.ignore_header)
    paths: list[str] | None = args.git_paths
    if args.git is not None:  # diff --git REV PATH...
        paths, revisions = [args.old, *([args.new] if args.new is not None else [])], [args.git]
    elif paths is not None:  # diff REV [REV2] -- PATH...
        revisions = [args.old] if args.new is None else [args.old, args.new]
    else:
        if args.new is None:
            raise _UsageError(
                "name two cassettes or directories (diff OLD NEW), or a git revision and "
                "cassettes or directories (diff HEAD -- PATH...); see `sakura-http diff --help`"
            )
        old, new = Path(args.old), Path(args.new)
        if not old.exists() and new.exists():
            raise _UsageError(
                f"{old}: no such file or directory; to compare {new} with the git revision "
                f"{old}, run `sakura-http diff {old} -- {new}`"
            )
        if old.is_dir() and new.is_dir():
            return _diff_many(args, _folders_compared(old, new), ignore)
        for one, other in ((old, new), (new, old)):
            if one.is_dir() and other.exists():
                raise _UsageError(
                    f"{one} is a directory and {other} a file: name two directories (their "
                    f"{_CASSETTES} files are paired by their path below each) or two cassettes"
                )
        return _diff_one(args, _load(old), _load(new), ignore)
    if not paths:
        raise _UsageError(
            "name the cassettes or directories to compare after `--`: diff REV -- PATH"
        )
    with BlobReader() as reader:
        compared = _git_compared(revisions, paths, reader)
        if len(paths) == 1 and [item.name for item in compared] == [str(Path(paths[0]))]:
            (only,) = compared  # one cassette, named as such: the diff of one file
            return _diff_one(
                args,
                _content(only.old, None if only.old is None else only.old.read()),
                _content(only.new, None if only.new is None else only.new.read()),
                ignore,
            )
        return _diff_many(args, compared, ignore)


def _diff_one(
    args: argparse.Namespace, old: CassetteContent, new: CassetteContent, ignore: frozenset[str]
) -> int:
    result = diff_cassettes(old, new, ignore)
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

_FOREIGN_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def _convert_plan(sources: list[Path], out: Path) -> list[tuple[Path, Path]]:
    """(source, target) pairs: one file to OUT, like `cp`; several files or a directory into
    the directory OUT (a directory's tree is kept, every output named `<stem>.jsonl`)."""
    for source in sources:
        if not source.exists():
            raise _UsageError(f"{source}: no such file")
    if len(sources) == 1 and sources[0].is_file() and not out.is_dir():
        return [(sources[0], out)]
    pairs: list[tuple[Path, Path]] = []
    for source in sources:
        if source.is_dir():
            found = sorted(
                p for p in source.rglob("*") if p.is_file() and p.suffix in _FOREIGN_SUFFIXES
            )
            pairs += [(p, out / p.relative_to(source).with_suffix(".jsonl")) for p in found]
        else:
            pairs.append((source, out / source.with_suffix(".jsonl").name))
    targets = Counter(target for _, target in pairs)
    clashes = sorted(str(target) for target, n in targets.items() if n > 1)
    if clashes:
        raise _UsageError(
            f"several sources would be written to {clashes[0]}; convert them separately"
        )
    return pairs


def _convert_one(source: Path, target: Path, force: bool) -> ConvertResult:
    try:
        return convert_file(source, target, overwrite=force)
    except VcrImportError as exc:
        raise _UsageError(str(exc)) from None
    except FileExistsError:
        raise _UsageError(
            f"{target} already exists; pass --force to replace it (nothing was written)"
        ) from None
    except CassetteError as exc:  # the target is being re-recorded by another process
        raise _UsageError(f"{target}: {exc}") from None
    except OSError as exc:
        raise _UsageError(f"{exc.filename or source}: {exc.strerror or exc}") from None


def _convert_report(result: ConvertResult) -> None:
    for name, numbers in sorted(result.dropped_headers.items()):
        listed = ", ".join(map(str, numbers))
        _err(
            f"{PROG} convert: warning: {result.source}: dropped request header {name} "
            f"(interaction{'s' if len(numbers) > 1 else ''} {listed}): credentials never go "
            f'into a cassette; replay with RecordingTransport(..., secret_headers=["{name}"])'
        )
    if result.untagged:
        listed = ", ".join(map(str, result.untagged))
        _err(
            f"{PROG} convert: note: {result.source}: interaction"
            f"{'s' if len(result.untagged) > 1 else ''} {listed}: the body was stored already "
            "decoded but still tagged with content-encoding (as vcrpy 9 does with urllib3 2 "
            "and aiohttp); stored it decoded and dropped the header"
        )
    notes = []
    if result.redacted_cookies:
        notes.append(f"set-cookie redacted in {result.redacted_cookies}")
    if result.redacted_echoes:
        notes.append(f"echoed credentials redacted in {result.redacted_echoes}")
    if result.decoded_bodies:
        notes.append(f"{result.decoded_bodies} content-encoded bodies decoded")
    suffix = f" ({'; '.join(notes)})" if notes else ""
    _out(
        f"wrote {result.target}: {_plural(len(result.exchanges), 'exchange')} from "
        f"{result.source}{suffix}"
    )


def _convert(args: argparse.Namespace) -> int:
    pairs = _convert_plan([Path(s) for s in args.sources], Path(args.out))
    if len(pairs) == 1 and len(args.sources) == 1 and Path(args.sources[0]).is_file():
        _convert_report(_convert_one(*pairs[0], args.force))
        return EXIT_OK
    progress = sys.stderr.isatty() and len(pairs) >= 10
    converted = exchanges = 0
    for number, (source, target) in enumerate(pairs, start=1):
        if progress:
            sys.stderr.write(f"\r\x1b[K[{number}/{len(pairs)}] {source}")
            sys.stderr.flush()
        try:
            result = _convert_one(source, target, args.force)
        except _UsageError as exc:
            if progress:
                sys.stderr.write("\r\x1b[K")
            _err(f"{PROG} convert: error: {exc}")
            continue
        if progress:
            sys.stderr.write("\r\x1b[K")
        _convert_report(result)
        converted += 1
        exchanges += len(result.exchanges)
    refused = len(pairs) - converted
    _out(
        f"converted {converted} of {_plural(len(pairs), 'file')} "
        f"({_plural(exchanges, 'exchange')}); {refused} refused"
    )
    return EXIT_USAGE if refused else EXIT_OK


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
            f"{path}: removed the torn last line {result.line} "
            f"({human_size(result.removed_bytes)}); backup at {result.backup}"
        )
    else:
        _out(
            f"{path}: line {result.line} was a complete exchange without its newline: added "
            f"the newline, kept the exchange; backup at {result.backup}"
        )
    return EXIT_OK


# --- git-setup -------------------------------------------------------------------------------


def _git_setup(args: argparse.Namespace) -> int:
    try:
        done = setup_textconv(args.pattern or ["*.jsonl"], args.textconv)
    except (GitError, PatternError) as exc:
        raise _UsageError(str(exc)) from None
    except OSError as exc:
        raise _UsageError(f"{exc.filename or '.gitattributes'}: {exc.strerror or exc}") from None
    for line in done.added:
        _out(f"added to {done.attributes}: {line}")
    for line in done.present:
        _out(f"already in {done.attributes}: {line}")
    _out(f'set git config diff.{DRIVER}.textconv "{done.command}" (this repository only)')
    _out("`git diff` and `git log -p` now show cassettes one field per line")
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
        name: str, handler: Callable[[argparse.Namespace], int], summary: str, details: str = ""
    ) -> argparse.ArgumentParser:
        """Register a subcommand: `summary` is listed by `sakura-http --help`, `details`
        follows it in the subcommand's own --help."""
        description = f"{summary} {details}".strip()
        sub = commands.add_parser(name, help=summary, description=description)
        sub.set_defaults(handler=handler)
        return sub

    show = command("show", _show, "List the exchanges of a cassette, one line each, then totals.")
    show.add_argument("cassette", metavar="CASSETTE")
    form = show.add_mutually_exclusive_group()
    form.add_argument("--bodies", action="store_true", help="also print the bodies")
    form.add_argument(
        "--json", action="store_true", help="print the exchanges as a JSON array, for scripts"
    )
    form.add_argument(
        "--textconv",
        action="store_true",
        help="print the cassette as stable line-oriented text, for git's textconv "
        "(see `sakura-http git-setup`)",
    )
    form.add_argument(
        "--html",
        metavar="OUT.html",
        help="write one self-contained HTML page listing the exchanges, for reviewers",
    )

    diff = command(
        "diff",
        _diff,
        "Compare two cassettes or directories of cassettes, or cassettes with a git "
        "revision; exit 1 when they differ.",
        "Exchanges pair by id, else by match key and ordinal, then by method and URL, and "
        "show what changed, bodies as unified diffs. Two directories pair their *.jsonl "
        "files by their path below each. OLD may be a git revision: `diff HEAD -- PATH...` "
        "or `diff --git HEAD PATH...` compares each cassette or directory PATH with its "
        "committed version, `diff REV1 REV2 -- PATH...` two revisions; only the cassettes "
        "that differ are shown.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW", nargs="?")
    diff.add_argument(
        "--git",
        metavar="REV",
        help="compare the cassettes or directories OLD (and NEW) with their version at REV",
    )
    diff.add_argument(
        "--ignore-header",
        metavar="NAME",
        action="append",
        default=[],
        help="do not report changes of this request or response header (repeatable), "
        "e.g. --ignore-header date",
    )
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.add_argument(
        "--verbose", action="store_true", help="also list unchanged exchanges and cassettes"
    )
    diff.set_defaults(git_paths=None)

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
        "Import vcrpy (YAML, JSON) or cassetter (YAML, TOML) cassettes.",
        "One file is written to OUT; several files or directories into the directory OUT. "
        "Each file is recorded under the recording rules and replayed to check it before it "
        "is written; what cannot be converted exactly is refused (exit 2).",
    )
    convert.add_argument("sources", metavar="SOURCE", nargs="+")
    convert.add_argument("out", metavar="OUT")
    convert.add_argument("--force", action="store_true", help="replace outputs that exist")

    git_setup = command(
        "git-setup",
        _git_setup,
        "Make `git diff` and `git log -p` show cassettes readably in this repository.",
        "Adds a diff attribute to .gitattributes and sets its textconv to "
        "`PYTHON -m sakura_http show --textconv` in the repository's git config, PYTHON being "
        "the interpreter running this command, so `git diff` works from any shell.",
    )
    git_setup.add_argument(
        "--pattern",
        action="append",
        metavar="GLOB",
        help="the files that are cassettes, as a .gitattributes pattern (repeatable; "
        "default *.jsonl)",
    )
    git_setup.add_argument(
        "--command",
        dest="textconv",  # not "command": that is the subcommand's name
        metavar="COMMAND",
        help="the textconv command git runs, through the shell, with a file name appended "
        "(default: this Python with -m sakura_http show --textconv)",
    )

    repair = command(
        "repair",
        _repair,
        "Remove a torn last line left by a crash (a backup is written first); "
        "refuse anything else.",
    )
    repair.add_argument("cassette", metavar="CASSETTE")

    add_proxy_commands(command)  # proxy, ca: sakura_http.proxy is imported when they run
    add_migrate_command(command)  # migrate: libcst is imported when it runs
    add_verify_command(command)  # verify: re-sends recorded requests, compares shapes
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `sakura-http` with `argv` (default: the process arguments); return the exit code.

    Usage errors and unreadable inputs print one line on stderr and return 2; `--help` prints
    help and returns 0.  Nothing is raised for those, so callers can `sys.exit(main())`.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    for arg in argv:  # only main() called from Python can be given one: no process argument can
        if "\0" in arg:
            where = f"{PROG} {argv[0]}" if argv[0] != arg else PROG
            _err(
                f"{where}: error: the argument {arg!r} holds a NUL character, which no file "
                "name, pattern or option value can hold"
            )
            return EXIT_USAGE
    git_paths = None
    if argv[:1] == ["diff"] and "--" in argv:  # git's form: diff REV [REV2] -- PATH
        cut = argv.index("--")
        argv, git_paths = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if git_paths is not None:
        args.git_paths = git_paths
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
