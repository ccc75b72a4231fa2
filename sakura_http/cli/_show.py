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

Every view, like `sakura-http diff`, prints the value of a credential header (a request
credential, a declared secret, a `set-cookie` the server set) only as its length
(`shown_header_value`) and a URL without its secret query values (`shown_url`, the default
`secret_query_params` and every credential-shaped name): a cassette recorded before a header was
declared secret must not reach a terminal or a CI log through `show`.  Bodies are shown as
recorded.

This module does no I/O.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterator
from typing import Any

import orjson

from .._config import DEFAULT_SECRET_QUERY_PARAMS
from .._exceptions import human_size as _human_size
from .._format import CassetteContent, Exchange, Headers, encode_exchange
from .._matching import pretty_body
from .._policy import names_a_secret, shown_header_value, shown_url

__all__ = [
    "body_lines",
    "exchanges_json",
    "html_page",
    "human_size",
    "masked_line",
    "shown_headers",
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


def _content_type(headers: Headers) -> str:
    value = next((v for n, v in headers if n == "content-type"), "")
    return value.partition(";")[0].strip().lower()


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
    if _content_type(headers) == "text/event-stream":
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
    status = "ERR" if exchange.status is None else str(exchange.status)
    marks = []
    if exchange.id is not None:
        marks.append(f"id={exchange.id}")
    if exchange.chunks is not None:
        marks.append(f"chunked:{len(exchange.chunks)}")
    if exchange.truncated:
        marks.append("truncated")
    if exchange.error is not None:
        marks.append(f"error:{exchange.error.type}")
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
