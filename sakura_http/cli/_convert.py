"""Importing vcrpy and cassetter cassettes: the logic behind `sakura-http convert`.

A conversion never writes a file it has not proven right:

1. the source is parsed into plain `SourceExchange`s (`_foreign.py`), refusing anything whose
   body or headers are not in a form it understands;
2. each exchange is *recorded*: sent through a real `RecordingTransport` in mode "all" whose
   outer transport answers with what the source describes.  So exactly the recording rules
   apply, by the same code: credential headers are refused unless declared secret (convert
   declares the ones it finds, drops them and says so), echoes of their values are redacted,
   `set-cookie` is redacted, bodies are decoded and capped, headers are stored as recording
   stores them;
3. the recorded cassette is loaded and every exchange replayed through `RecordingTransport`
   (mode "none"): status, headers and body must be what the source describes (apart from
   what the recording rules changed on purpose), or the file is refused;
4. only then is the target written, with `AtomicRecording` (temporary sibling, then
   `os.replace`), so it is never seen half-written.

A body that is stored decoded but still tagged ``content-encoding: gzip`` (vcrpy 9 with
requests/urllib3 2 and aiohttp writes such files) is stored plain with the header dropped,
and the caller gets a note; a tagged body that is neither valid encoded data nor text is
refused.

The end of the module is the `convert` subcommand itself (its parser and handler,
`add_convert_command`): which sources go to which targets, and what it prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .._cassette import AtomicRecording, load_cassette
from .._config import CassetteConfig
from .._exceptions import CassetteError, CassetteMiss
from .._format import Exchange, Headers, encode_exchange
from .._libraries import library_of
from .._matching import Matcher, differences
from .._policy import REDACTED, REDACTED_RESPONSE_HEADERS, shown_value
from .._transport import RecordingTransport
from ._foreign import SourceExchange, VcrImportError, load_vcr, read_foreign
from ._lint import credential_headers
from ._show import url_shown
from ._usage import EXIT_OK, EXIT_USAGE, PROG, AddCommand, UsageError, err, out, plural

__all__ = ["ConvertResult", "VcrImportError", "add_convert_command", "convert_file"]

_REDACTED = REDACTED.encode("ascii")
_UNSENT = frozenset({"host", "content-length"})  # httpx adds them; the source may not have


@dataclass(slots=True)
class ConvertResult:
    """What a conversion did.

    `exchanges` are the exchanges written; `kind` the source format ("vcrpy" or "cassetter");
    `dropped_headers` maps each dropped credential header name to the 1-based numbers of the
    interactions it was dropped from; `redacted_cookies`, `redacted_echoes` and
    `decoded_bodies` count the interactions whose `set-cookie` was redacted, whose response
    echoed a dropped credential (redacted), or whose body was content-decoded; `untagged`
    lists the interactions whose already-decoded body lost a stale `content-encoding`.
    """

    source: Path
    target: Path
    kind: str = "vcrpy"
    exchanges: list[Exchange] = field(default_factory=list)
    dropped_headers: dict[str, list[int]] = field(default_factory=dict)
    redacted_cookies: int = 0
    redacted_echoes: int = 0
    decoded_bodies: int = 0
    untagged: list[int] = field(default_factory=list)


class _Bad(Exception):
    """A problem with one interaction; turned into VcrImportError naming file and number."""

    def __init__(self, source: SourceExchange, message: str) -> None:
        self.number = source.number
        super().__init__(message)


def _encoded(headers: Headers) -> list[tuple[bytes, bytes]]:
    # httpx encodes str header values as ASCII; the source may hold UTF-8 text.
    return [(name.encode("utf-8"), value.encode("utf-8")) for name, value in headers]


def _has_encoding(headers: Headers) -> bool:
    return any(
        name == "content-encoding" and value.strip().lower() not in ("", "identity")
        for name, value in headers
    )


def _client_reads(status: int, headers: Headers, body: bytes) -> bytes:
    """The body a client reads from this response (httpx decodes content-encoding)."""
    response = httpx.Response(status, headers=_encoded(headers), stream=httpx.ByteStream(body))
    return response.read()


def _true_length(headers: Headers, body: bytes) -> Headers:
    """`headers` with a content-length that states the length of `body`, the body written
    (cassetter replays a JSON body re-serialized, so the length in its file may be another).
    An encoded body, or none (a HEAD or a 304 describes a body it did not send), keeps it."""
    if not body or _has_encoding(headers):
        return headers
    size = str(len(body))
    return tuple([(n, size if n == "content-length" else v) for n, v in headers])


def _plain_response(source: SourceExchange) -> tuple[Headers, bytes, bool]:
    """The response headers to record and what a client must read: (headers, plain, untagged)."""
    headers = _true_length(source.response_headers, source.response_body)
    try:
        return headers, _client_reads(source.status, headers, source.response_body), False
    except httpx.DecodingError as exc:
        problem = str(exc)
    except ImportError as exc:  # httpx needs brotli or zstandard for this content-encoding
        raise _Bad(source, f"cannot decode the response body: {exc}") from None
    try:
        source.response_body.decode("utf-8")
    except UnicodeDecodeError:
        encoding = ", ".join(v for n, v in headers if n == "content-encoding")
        raise _Bad(
            source,
            f"the response says content-encoding: {encoding}, but its body is neither that "
            f"({problem}) nor plain text; refusing to write a body no client could read",
        ) from None
    # Already decoded by the writer (vcrpy 9 with urllib3 2 or aiohttp) but still tagged.
    kept = tuple((n, v) for n, v in headers if n not in ("content-encoding", "content-length"))
    return kept, source.response_body, True


def _request(source: SourceExchange) -> httpx.Request:
    uri = shown_value(url_shown(source.url))
    try:
        request = httpx.Request(source.method, source.url, content=source.body)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise _Bad(source, f"the uri {uri} is not a URL httpx can send ({exc})") from None
    if not request.url.scheme:
        raise _Bad(
            source,
            f"the uri {uri} has no scheme (http:// or https://), so where the request went "
            "cannot be told (a before_record hook of the recording project may have cut it "
            "short); sakura-http matches whole URLs. Write the whole URL in the source",
        )
    if request.url.scheme not in ("http", "https") or not request.url.host:
        raise _Bad(
            source,
            f"the uri {uri} is not an http:// or https:// URL with a host, which is all "
            "sakura-http records. Fix the uri in the source",
        )
    # Exactly the source's headers: httpx would add host and content-length on its own.
    request.headers = httpx.Headers(_encoded(source.headers))
    return request


def _same_but_redacted(written: bytes, source: bytes) -> bool:
    """True when `written` is `source` with some parts replaced by `<redacted>`."""
    if written == source:
        return True
    parts = written.split(_REDACTED)
    if len(parts) == 1 or not source.startswith(parts[0]):
        return False
    position = len(parts[0])
    for part in parts[1:-1]:
        found = source.find(part, position + 1)
        if found < 0:
            return False
        position = found + len(part)
    return source.endswith(parts[-1]) and len(source) - len(parts[-1]) > position


def _check_replay(
    source: SourceExchange, headers: Headers, plain: bytes, response: httpx.Response
) -> None:
    if response.status_code != source.status:
        raise _Bad(
            source, f"replays status {response.status_code}, the source says {source.status}"
        )
    if not _same_but_redacted(response.content, plain):
        raise _Bad(
            source,
            f"replays a {len(response.content):,}-byte body that differs from the source's "
            f"{len(plain):,} bytes",
        )
    replayed = [
        (name.lower(), value)
        for name, value in response.headers.multi_items()
        if name.lower() not in ("content-encoding", "content-length")
    ]
    expected = [(n, v) for n, v in headers if n not in ("content-encoding", "content-length")]
    if len(replayed) != len(expected) or any(
        name != want_name
        or not (
            value == REDACTED
            if name in REDACTED_RESPONSE_HEADERS
            else _same_but_redacted(value.encode(), want.encode())
        )
        for (name, value), (want_name, want) in zip(replayed, expected, strict=True)
    ):
        raise _Bad(
            source,
            f"replays headers {shown_value(replayed)} where the source has {shown_value(expected)}",
        )


def _note(result: ConvertResult, source: SourceExchange, written: Exchange) -> None:
    if any(n in REDACTED_RESPONSE_HEADERS and v != REDACTED for n, v in source.response_headers):
        result.redacted_cookies += 1
    echoed = _REDACTED in written.response_body and _REDACTED not in source.response_body
    echoed = echoed or any(
        REDACTED in v and REDACTED not in w and n not in REDACTED_RESPONSE_HEADERS
        for (n, v), (_, w) in zip(written.response_headers, source.response_headers, strict=False)
    )
    result.redacted_echoes += echoed
    if _has_encoding(source.response_headers) and not _has_encoding(written.response_headers):
        result.decoded_bodies += source.number not in result.untagged


def _guarded(
    source: SourceExchange,
    send: Callable[[], httpx.Response],
    prefix: str = "",
    *,
    missed: bool = False,
) -> httpx.Response:
    """Send one request; a refusal by the recording rules or an unreadable body becomes `_Bad`
    (a `CassetteMiss` is raised as it is when `missed`: the caller explains it)."""
    try:
        response = send()
        response.read()
    except CassetteMiss:
        if missed:
            raise
        raise _Bad(source, f"{prefix}the converted cassette does not answer it") from None
    except (CassetteError, httpx.HTTPError, UnicodeError) as exc:
        raise _Bad(source, f"{prefix}{exc}") from None
    return response


#: At most this many lines of what differs go into the one-line message of a failed check.
_SHOWN_DIFFERENCES = 8


def _unanswered(
    miss: CassetteMiss, request: httpx.Request, exchange: Exchange, config: CassetteConfig
) -> str:
    """Why the exchange converted from `request` does not answer it: what differs between
    them once the matching rules apply (the miss's own words name a temporary file and how to
    record, which mean nothing here)."""
    matcher = Matcher(
        ignore=config.ignore_headers,
        secret=config.secret_headers,
        secret_query=config.secret_query_params,
        rules=config.rules,
    )
    # As matched: the URL the miss says (echoes of secrets redacted), the rest as sent.
    data = library_of(request).request_data(request, config.secret_query_params)
    found = differences(data._replace(url=miss.url), exchange, matcher, hinted=False)
    lines = [line.strip() for line in found if line.strip()]
    if len(lines) > _SHOWN_DIFFERENCES:
        lines[_SHOWN_DIFFERENCES:] = [f"and {len(lines) - _SHOWN_DIFFERENCES} more lines"]
    what = "; ".join(lines) or (
        "nothing differs once the matching rules apply, yet they do not match: a defect of "
        "sakura-http, please report it with the source file"
    )
    return (
        "verification failed: the converted exchange does not answer the request it was "
        f"converted from: {what}"
    )


def _record(
    path: Path,
    sources: tuple[SourceExchange, ...],
    prepared: list[tuple[Headers, bytes]],
    secrets: frozenset[str],
) -> None:
    pending: list[httpx.Response] = []
    outer = httpx.MockTransport(lambda request: pending.pop())
    with RecordingTransport(
        path, mode="all", outer=outer, secret_headers=secrets, environ={}
    ) as transport:
        for source, (headers, _) in zip(sources, prepared, strict=True):
            pending.append(
                httpx.Response(
                    source.status,
                    headers=_encoded(headers),
                    stream=httpx.ByteStream(source.response_body),
                )
            )
            request = _request(source)
            _guarded(source, functools.partial(transport.handle_request, request))


def _verify(
    path: Path,
    sources: tuple[SourceExchange, ...],
    prepared: list[tuple[Headers, bytes]],
    secrets: frozenset[str],
) -> list[Exchange]:
    exchanges = load_cassette(path).exchanges
    if len(exchanges) != len(sources):  # pragma: no cover - a recording that lost an exchange
        raise VcrImportError(f"recorded {len(exchanges)} exchanges of {len(sources)}")
    with RecordingTransport(
        path, mode="none", secret_headers=secrets, allow_repeats=False, environ={}
    ) as transport:
        for source, exchange, (headers, plain) in zip(sources, exchanges, prepared, strict=True):
            request = _request(source)
            try:
                response = _guarded(
                    source,
                    functools.partial(transport.handle_request, request),
                    "verification failed: ",
                    missed=True,
                )
            except CassetteMiss as miss:
                raise _Bad(source, _unanswered(miss, request, exchange, transport.config)) from None
            try:
                _check_replay(source, headers, plain, response)
            except _Bad as exc:
                raise _Bad(source, f"verification failed: the converted exchange {exc}") from None
    return exchanges


def convert_file(source: Path, target: Path, *, overwrite: bool = False) -> ConvertResult:
    """Read the vcrpy or cassetter cassette `source`, check the conversion by replaying it, and
    write its sakura-http equivalent to `target` (see the module docstring).

    Raises `OSError` when `source` cannot be read, `VcrImportError` when it cannot be
    converted right (nothing is written then), and `FileExistsError` when `target` exists and
    `overwrite` is false.  An empty cassette gives a header-only cassette.
    """
    name = str(source)
    raw = source.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VcrImportError(f"{name}: not UTF-8 text, so not a vcrpy cassette") from None
    foreign = read_foreign(load_vcr(text, name), name)
    result = ConvertResult(source, target, foreign.kind)
    secrets: set[str] = set()
    prepared: list[tuple[Headers, bytes]] = []
    try:
        for item in foreign.exchanges:
            for header in credential_headers(item.headers):
                secrets.add(header)
                result.dropped_headers.setdefault(header, []).append(item.number)
            headers, plain, untagged = _plain_response(item)
            if untagged:
                result.untagged.append(item.number)
            prepared.append((headers, plain))
        with tempfile.TemporaryDirectory(prefix="sakura-convert-") as scratch:
            recorded = Path(scratch) / "converted.jsonl"
            _record(recorded, foreign.exchanges, prepared, frozenset(secrets))
            result.exchanges = _verify(recorded, foreign.exchanges, prepared, frozenset(secrets))
    except _Bad as exc:
        raise VcrImportError(f"{name}: interaction {exc.number}: {exc}") from None
    for item, written in zip(foreign.exchanges, result.exchanges, strict=True):
        _note(result, item, written)
    # Converting is not recording: an exchange is dated by its source's recorded_at, else left
    # undated (its age is unknown), never dated today.
    result.exchanges = [
        dataclasses.replace(written, recorded_at=item.recorded_at)
        for item, written in zip(foreign.exchanges, result.exchanges, strict=True)
    ]
    if not overwrite and target.exists():
        raise FileExistsError(target)
    recording = AtomicRecording(target, {})
    try:
        # One append of every line: the header is written first, even when there are none.
        recording.append(b"".join(encode_exchange(exchange) for exchange in result.exchanges))
    except BaseException:
        recording.discard()  # a full disk: no half-written sibling left behind
        raise
    recording.replace_cassette()
    return result


# --- the command -----------------------------------------------------------------------------

_FOREIGN_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def _convert_plan(sources: list[Path], out: Path) -> list[tuple[Path, Path]]:
    """(source, target) pairs: one file to OUT, like `cp`; several files or a directory into
    the directory OUT (a directory's tree is kept, every output named `<stem>.jsonl`)."""
    for source in sources:
        if not source.exists():
            raise UsageError(f"{source}: no such file")
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
        raise UsageError(
            f"several sources would be written to {clashes[0]}; convert them separately"
        )
    return pairs


def _convert_one(source: Path, target: Path, force: bool) -> ConvertResult:
    try:
        return convert_file(source, target, overwrite=force)
    except VcrImportError as exc:
        raise UsageError(str(exc)) from None
    except FileExistsError:
        raise UsageError(
            f"{target} already exists; pass --force to replace it (nothing was written)"
        ) from None
    except CassetteError as exc:  # the target is being re-recorded by another process
        raise UsageError(f"{target}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or source}: {exc.strerror or exc}") from None


def _convert_report(result: ConvertResult) -> None:
    for name, numbers in sorted(result.dropped_headers.items()):
        listed = ", ".join(map(str, numbers))
        err(
            f"{PROG} convert: warning: {result.source}: dropped request header {name} "
            f"(interaction{'s' if len(numbers) > 1 else ''} {listed}): credentials never go "
            f'into a cassette; replay with RecordingTransport(..., secret_headers=["{name}"])'
        )
    if result.untagged:
        listed = ", ".join(map(str, result.untagged))
        err(
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
    out(
        f"wrote {result.target}: {plural(len(result.exchanges), 'exchange')} from "
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
        except UsageError as exc:
            if progress:
                sys.stderr.write("\r\x1b[K")
            err(f"{PROG} convert: error: {exc}")
            continue
        if progress:
            sys.stderr.write("\r\x1b[K")
        _convert_report(result)
        converted += 1
        exchanges += len(result.exchanges)
    refused = len(pairs) - converted
    out(
        f"converted {converted} of {plural(len(pairs), 'file')} "
        f"({plural(exchanges, 'exchange')}); {refused} refused"
    )
    return EXIT_USAGE if refused else EXIT_OK


def add_convert_command(command: AddCommand) -> None:
    """Register `convert` through the CLI's registrar."""
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
