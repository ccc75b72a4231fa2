"""Rendering a cassette for people and tools: the logic behind `sakura-http show`'s
`--bodies`, `--textconv`, `--json` and `--html`.

* `body_lines` - a body as lines: JSON pretty-printed with sorted keys (`_matching`'s
  pretty-printer, the same as miss messages use), text as recorded, binary as its size and
  SHA-256.
* `textconv_lines` - the whole cassette as stable, line-oriented text for git's `textconv`:
  one field per line, bodies pretty-printed, no line numbers or positions, so a changed field
  is a changed line in `git diff`.
* `exchanges_json` - the exchanges as JSON-ready dicts, in the cassette's own encoding (bodies
  as text, or base64 under `*_b64`), with their 1-based `index` and `line`.
* `html_page` - one self-contained HTML page (inline CSS, no script, no external asset):
  collapsible exchanges with pretty-printed bodies, server-sent events one block each, and
  chunk sizes and arrival times.  Every recorded string is HTML-escaped.
* `status_text` and `exchange_marks` - an exchange's status and its marks (chunked, truncated,
  error), as the listing and the HTML page show them.

Every view, like `sakura-http diff`, prints the value of a credential header (a request
credential, a declared secret, a `set-cookie` the server set) only as its length
(`shown_header_value`) and a URL without its secret query values (`shown_url`, the default
`secret_query_params` and every credential-shaped name): a cassette recorded before a header was
declared secret must not reach a terminal or a CI log through `show`.  Bodies are shown as
recorded.

The views do no I/O; the end of the module is the `show` subcommand itself (its parser and
handler, `add_show_command`), which reads the cassette and prints them.  `load_named` reads a
cassette named on the command line, for every command.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from .._cassette import load_cassette
from .._config import DEFAULT_SECRET_QUERY_PARAMS
from .._exceptions import CassetteFormatError
from .._exceptions import human_size as _human_size
from .._exchange import media_type
from .._format import CassetteContent, Exchange, Headers, encode_exchange, parse_cassette
from .._matching import pretty_body
from .._policy import names_a_secret, shown_header_value, shown_url
from ._lint import not_a_cassette
from ._usage import EXIT_OK, AddCommand, UsageError, dump_json, out, plural

__all__ = [
    "add_show_command",
    "body_lines",
    "exchange_marks",
    "exchanges_json",
    "html_page",
    "human_size",
    "load_named",
    "masked_line",
    "shown_headers",
    "status_text",
    "textconv_lines",
    "url_shown",
]


def url_shown(url: str) -> str:
    """`url` as every command prints it: the values of the default secret query parameters and
    of credential-shaped ones replaced by their length (`_policy.shown_url`)."""
    return shown_url(url, DEFAULT_SECRET_QUERY_PARAMS)


def shown_headers(headers: Headers) -> list[list[str]]:
    """`headers` as every command prints them: credential values as their length."""
    return [[name, shown_header_value(name, value)] for name, value in headers]


# A JSON string as it appears in a line, or its start when the line is cut short inside it.
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)(?:"|$)', re.DOTALL)
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")


def masked_line(line: str) -> str:
    """A line of a file `show --textconv` cannot read as a cassette, as it prints it: after a
    string naming a credential header (`names_a_secret`), every string up to the next closing
    bracket as its length (the values of a ``["authorization", ...]`` pair, of an
    ``"authorization": ...`` member), and secret query values (`url_shown`) hidden; the rest
    as it is.  It reads the line as JSON strings only, so that a line cut short or malformed is
    masked all the same (a dict may lose more than the one value: better more than less)."""
    out: list[str] = []
    end = 0
    hiding = False
    for string in _JSON_STRING.finditer(line):
        between = line[end : string.start()]
        if "]" in between or "}" in between:
            hiding = False
        out.append(between)
        whole, text = string[0], string[1]
        if hiding:
            out.append(f'"{_hidden_text(text)}{whole[len(text) + 1 :]}')
        else:
            out.append(f'"{url_shown(text)}{whole[len(text) + 1 :]}' if "?" in text else whole)
            hiding = bool(_NAME.fullmatch(text)) and names_a_secret(text)
        end = string.end()
    out.append(line[end:])
    return "".join(out)


def _hidden_text(text: str) -> str:
    return shown_header_value("authorization", text)


def human_size(n: int) -> str:
    """`n` bytes for a listing: "46 B", "1.5 KiB" (`_exceptions.human_size`, rounded)."""
    return _human_size(n, rounded=True)


def body_lines(headers: Headers, body: bytes) -> list[str]:
    """`body` as lines for people (see the module docstring)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        digest = hashlib.sha256(body).hexdigest()[:12]
        return [f"<{human_size(len(body))} of binary data, sha256 {digest}>"]
    return pretty_body(headers, body)


def status_text(exchange: Exchange) -> str:
    """The status as listed: the code, or "ERR" for a recorded transport error."""
    return "ERR" if exchange.status is None else str(exchange.status)


def exchange_marks(exchange: Exchange) -> list[str]:
    """What is unusual about an exchange, as every listing marks it: `chunked:N` (recorded as
    N chunks), `truncated` (the caller closed the stream early), `error:TYPE` (a recorded
    transport error); none for a plain exchange."""
    marks = []
    if exchange.chunks is not None:
        marks.append(f"chunked:{len(exchange.chunks)}")
    if exchange.truncated:
        marks.append("truncated")
    if exchange.error is not None:
        marks.append(f"error:{exchange.error.type}")
    return marks


# --- textconv --------------------------------------------------------------------------------


def _textconv_exchange(exchange: Exchange) -> Iterator[str]:
    yield "=" * 72
    if exchange.id is not None:
        yield f"id: {exchange.id}"
    yield f"request: {exchange.method} {url_shown(exchange.url)}"
    for name, value in exchange.headers:
        yield f"request header {name}: {shown_header_value(name, value)}"
    if exchange.body:
        yield "request body:"
        yield from (f"    {line}".rstrip() for line in body_lines(exchange.headers, exchange.body))
    if exchange.error is not None:
        yield f"error: {exchange.error.type}: {exchange.error.message}"
    if exchange.status is not None:
        yield f"status: {exchange.status}"
        for name, value in exchange.response_headers:
            yield f"response header {name}: {shown_header_value(name, value)}"
        if exchange.response_body:
            yield "response body:"
            yield from (
                f"    {line}".rstrip()
                for line in body_lines(exchange.response_headers, exchange.response_body)
            )
    if exchange.chunks is not None:
        yield f"chunks: {', '.join(map(str, exchange.chunks))}"
    if exchange.truncated:
        yield "truncated: the caller closed the stream early"
    if exchange.recorded_at is not None:
        yield f"recorded_at: {exchange.recorded_at}"
    for key, value in sorted(exchange.extra.items()):
        yield f"extra {key}: {orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()}"


def textconv_lines(content: CassetteContent) -> list[str]:
    """The cassette as stable text for `git diff` (see the module docstring)."""
    lines = [f"# sakura-http cassette, schema {content.header.get('schema_version', '1.0')}"]
    for exchange in content.exchanges:
        lines.extend(_textconv_exchange(exchange))
    return lines


# --- json ------------------------------------------------------------------------------------


def exchanges_json(content: CassetteContent) -> list[dict[str, Any]]:
    """The exchanges as the cassette format encodes them, each with `index` and `line` first;
    credential header values and secret query values as their length (see the module
    docstring)."""
    out = []
    for index, exchange in enumerate(content.exchanges):
        line = content.line_numbers[index] if content.line_numbers else None
        encoded = orjson.loads(encode_exchange(exchange))
        encoded["url"] = url_shown(exchange.url)
        encoded["headers"] = shown_headers(exchange.headers)
        if "response_headers" in encoded:
            encoded["response_headers"] = shown_headers(exchange.response_headers)
        out.append({"index": index + 1, "line": line, **encoded})
    return out


# --- html ------------------------------------------------------------------------------------

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem; color: #1d1d1f; }
h1 { font-size: 1.3rem; } .totals { color: #555; }
details.exchange { border: 1px solid #ccc; border-radius: 6px; margin: .5rem 0; }
details.exchange > summary { padding: .4rem .6rem; cursor: pointer; font-family: monospace; }
details.exchange[open] > summary { border-bottom: 1px solid #ddd; background: #f6f6f6; }
.part { padding: .3rem .8rem; } h3 { font-size: .95rem; margin: .6rem 0 .2rem; }
table { border-collapse: collapse; font-family: monospace; font-size: 12.5px; }
td, th { border: 1px solid #e2e2e2; padding: .1rem .4rem; text-align: left; vertical-align: top; }
pre { background: #fafafa; border: 1px solid #eee; padding: .5rem; overflow-x: auto;
      white-space: pre-wrap; word-break: break-all; margin: .2rem 0; }
.status-2 { color: #137333; } .status-3 { color: #8a6d00; } .status-4, .status-5, .error
{ color: #b3261e; } .marks { color: #666; }
details.event { margin: .2rem 0; } details.event > summary { font-family: monospace; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pre(lines: list[str]) -> str:
    return f"<pre>{_e(chr(10).join(lines))}</pre>"


def _headers_table(headers: Headers) -> str:
    rows = "".join(
        f"<tr><th>{_e(n)}</th><td>{_e(shown_header_value(n, v))}</td></tr>" for n, v in headers
    )
    return f"<table>{rows}</table>" if rows else "<p>(no headers)</p>"


def _sse_events(body: bytes) -> list[list[str]] | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    blocks = text.replace("\r\n", "\n").split("\n\n")
    return [block.split("\n") for block in blocks if block.strip()]


def _event_html(number: int, lines: list[str]) -> str:
    kind = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
    shown: list[str] = []
    for line in lines:
        field, _, value = line.partition(":")
        if field == "data":
            try:
                data = orjson.loads(value.strip())
            except orjson.JSONDecodeError:
                shown.append(line)
            else:
                pretty = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
                shown.extend(["data:", *pretty.decode().splitlines()])
        else:
            shown.append(line)
    return (
        f'<details class="event"><summary>event {number}: {_e(kind)}</summary>'
        f"{_pre(shown)}</details>"
    )


def _body_html(title: str, headers: Headers, body: bytes) -> str:
    if not body:
        return ""
    head = f"<h3>{_e(title)} ({_e(human_size(len(body)))})</h3>"
    if media_type(headers) == "text/event-stream":
        events = _sse_events(body)
        if events is not None:
            return head + "".join(_event_html(i, ev) for i, ev in enumerate(events, start=1))
    return head + _pre(body_lines(headers, body))


def _chunks_html(exchange: Exchange) -> str:
    if exchange.chunks is None:
        return ""
    timings = exchange.timings_ms or ()
    rows = "".join(
        f"<tr><td>{i}</td><td>{size:,} B</td>"
        f"<td>{_e(f'{timings[i - 1]:g} ms') if i <= len(timings) else '-'}</td></tr>"
        for i, size in enumerate(exchange.chunks, start=1)
    )
    return (
        f"<h3>{len(exchange.chunks)} chunks</h3>"
        f"<table><tr><th>#</th><th>size</th><th>arrived after</th></tr>{rows}</table>"
    )


def _exchange_html(index: int, exchange: Exchange) -> str:
    status = status_text(exchange)
    marks = [*([f"id={exchange.id}"] if exchange.id is not None else []), *exchange_marks(exchange)]
    if exchange.recorded_at is not None:
        marks.append(f"recorded {exchange.recorded_at}")
    mark_text = f' <span class="marks">[{_e(", ".join(marks))}]</span>' if marks else ""
    parts = [
        '<details class="exchange">',
        f"<summary>#{index} {_e(exchange.method)} {_e(url_shown(exchange.url))} &rarr; "
        f'<span class="status-{status[0]}">{_e(status)}</span>{mark_text}</summary>',
        '<div class="part"><h3>request headers</h3>',
        _headers_table(exchange.headers),
        _body_html("request body", exchange.headers, exchange.body),
    ]
    if exchange.error is not None:
        error = f"{exchange.error.type}: {exchange.error.message}"
        parts.append(f'<h3 class="error">error</h3>{_pre([error])}')
    if exchange.status is not None:
        parts += [
            "<h3>response headers</h3>",
            _headers_table(exchange.response_headers),
            _body_html("response body", exchange.response_headers, exchange.response_body),
        ]
    parts += [_chunks_html(exchange), "</div></details>"]
    return "".join(parts)


def html_page(content: CassetteContent, title: str, totals: str) -> str:
    """One self-contained HTML page listing the exchanges (see the module docstring)."""
    exchanges = "\n".join(
        _exchange_html(index, exchange) for index, exchange in enumerate(content.exchanges, start=1)
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n"
        f'<body><h1>{_e(title)}</h1><p class="totals">{_e(totals)}</p>\n'
        f"{exchanges}\n</body></html>\n"
    )


# --- the command -----------------------------------------------------------------------------


def load_named(path: Path) -> CassetteContent:
    """Load a cassette named on the command line: unlike replay, a missing file is an error,
    and so is a folder or a file that is not a cassette (said as such, never with the advice
    to re-record it).  Raises `UsageError`."""
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a cassette: name a cassette file in it")
    try:
        return load_cassette(path)
    except CassetteFormatError as exc:
        with path.open("rb") as file:
            other = not_a_cassette(file.read(1 << 16), str(path))
        raise UsageError(str(exc) if other is None else f"{path}: {other}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _textconv(path: Path) -> int:
    """For git: print whatever can be printed and exit 0, or `git diff` fails as a whole."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        content = parse_cassette(data, path)
    except CassetteFormatError as exc:
        out(
            f"# sakura-http: not a readable cassette ({exc.problem}); its lines as they are, "
            "credential values hidden:"
        )
        text = data.decode("utf-8", "replace")
        sys.stdout.write("\n".join(masked_line(line) for line in text.split("\n")))
        if data and not data.endswith(b"\n"):
            out()
        return EXIT_OK
    for line in textconv_lines(content):
        out(line)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    if args.textconv:
        return _textconv(Path(args.cassette))
    content = load_named(Path(args.cassette))
    if args.json:
        dump_json(exchanges_json(content))
        return EXIT_OK
    if args.html is not None:
        target = Path(args.html)
        page = html_page(content, f"{args.cassette}", _totals(content.exchanges))
        try:
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{target}: cannot write it ({exc.strerror or exc})") from None
        out(f"wrote {target}: {plural(len(content.exchanges), 'exchange')}")
        return EXIT_OK
    exchanges = content.exchanges
    index_width = len(str(len(exchanges)))
    id_width = max((len(ex.id) for ex in exchanges if ex.id is not None), default=0)
    method_width = max((len(ex.method) for ex in exchanges), default=0)
    sizes = [(human_size(len(ex.body)), human_size(len(ex.response_body))) for ex in exchanges]
    sent_width = max((len(sent) for sent, _ in sizes), default=0)
    received_width = max((len(received) for _, received in sizes), default=0)
    dated = any(ex.recorded_at is not None for ex in exchanges)  # (else no column of "-")
    for index, (ex, (sent, received)) in enumerate(zip(exchanges, sizes, strict=True)):
        ident = f"{ex.id or '-':<{id_width}}  " if id_width else ""
        day = f"{ex.recorded_at or '-'!s:<10}  " if dated else ""
        marks = exchange_marks(ex)
        mark_text = f"  [{', '.join(marks)}]" if marks else ""
        out(
            f"#{index + 1:<{index_width}}  {ident}{ex.method:<{method_width}}  "
            f"{status_text(ex):>3}  {day}{sent:>{sent_width}} -> {received:<{received_width}}  "
            f"{url_shown(ex.url)}{mark_text}"
        )
        if args.bodies:
            if ex.error is not None:
                out(f"    error: {ex.error.type}: {ex.error.message}")
            for label, headers, body in (
                ("request body", ex.headers, ex.body),
                ("response body", ex.response_headers, ex.response_body),
            ):
                if body:
                    out(f"    {label}:")
                    for line in body_lines(headers, body):
                        out(f"      {line}".rstrip())
    out(_totals(exchanges))
    return EXIT_OK


def _totals(exchanges: Sequence[Exchange]) -> str:
    statuses = Counter(ex.status for ex in exchanges if ex.status is not None)
    with_id = sum(ex.id is not None for ex in exchanges)
    parts = [plural(len(exchanges), "exchange") + (f" ({with_id} with id)" if with_id else "")]
    if statuses:
        parts.append(", ".join(f"{n} x {status}" for status, n in sorted(statuses.items())))
    for count, word in (
        (sum(ex.error is not None for ex in exchanges), "error"),
        (sum(ex.chunks is not None for ex in exchanges), "chunked"),
        (sum(ex.truncated for ex in exchanges), "truncated"),
    ):
        if count:
            parts.append(plural(count, word) if word == "error" else f"{count} {word}")
    days = sorted({ex.recorded_at for ex in exchanges if ex.recorded_at is not None})
    if days:
        undated = sum(ex.recorded_at is None for ex in exchanges)
        parts.append(
            f"recorded {days[0]}"
            + (f" to {days[-1]}" if len(days) > 1 else "")
            + (f" ({undated} undated)" if undated else "")
        )
    sent = sum(len(ex.body) for ex in exchanges)
    received = sum(len(ex.response_body) for ex in exchanges)
    if exchanges:
        parts.append(f"bodies {human_size(sent)} sent, {human_size(received)} received")
    return "; ".join(parts)


def add_show_command(command: AddCommand) -> None:
    """Register `show` through the CLI's registrar."""
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
