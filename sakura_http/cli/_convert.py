"""Importing a vcrpy cassette into the sakura-http format: the logic behind
`sakura-http convert`.

vcrpy (version 1 of its format) stores ``{"version": 1, "interactions": [...]}`` as YAML or
JSON, each interaction being::

    request:  {method, uri, body, headers: {name: [value, ...]}}
    response: {status: {code, message}, headers: {name: [value, ...]}, body: {string}}

Older vcrpy recorded httpx responses as ``{status_code, headers, content}``; both are read.
Bodies come as text, as bytes (YAML ``!!binary``, base64 on disk) or as null.  On the way in,
the same safety rules as recording apply (see `_policy.py`): credential request headers are
dropped (and reported, so the caller can warn), `set-cookie` values become `<redacted>`,
gzip/deflate/br/zstd response bodies are stored decoded, and bodies over 16 MiB are refused.

YAML is read with a safe loader only: it builds plain data and nothing else.  Python-specific
tags (``!!python/object:...`` and friends, found in cassettes from old vcrpy versions) are
refused with `VcrImportError` rather than constructed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from .._exceptions import BodyTooLargeError
from .._format import Exchange, Headers, encode_exchange, encode_header
from .._policy import (
    DEFAULT_MAX_BODY_BYTES,
    REDACTED,
    BodyDecoder,
    check_body_size,
    is_credential_header,
)

__all__ = [
    "ConvertResult",
    "VcrImportError",
    "convert_vcr_file",
    "load_vcr",
    "vcr_to_exchanges",
    "write_atomically",
]


class VcrImportError(Exception):
    """A vcrpy cassette cannot be imported; the message names the file and what to do.

    Deliberately not a `CassetteError`: the file at fault is not a sakura-http cassette.
    """


class _SafeCassetteLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that names the Python tags it refuses instead of a generic error."""


class _PythonTag(Exception):
    def __init__(self, tag: str, line: int) -> None:
        self.tag = tag
        self.line = line


def _refuse_python_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    raise _PythonTag(f"!!python/{suffix}", node.start_mark.line + 1)


_SafeCassetteLoader.add_multi_constructor("tag:yaml.org,2002:python/", _refuse_python_tag)


def load_vcr(text: str, name: str) -> Any:
    """Parse a vcrpy cassette's text, JSON or YAML (`name` is used in messages only).

    JSON is tried first when the text starts with `{`; everything else is YAML, read with a
    safe loader.  Raises `VcrImportError` for a syntax error or a Python-specific tag.
    """
    if text.lstrip().startswith("{"):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # YAML flow style also starts with "{"; let the YAML parser report it
    try:
        # A SafeLoader subclass: it builds plain data only (see _refuse_python_tag).
        return yaml.load(text, Loader=_SafeCassetteLoader)
    except _PythonTag as exc:
        raise VcrImportError(
            f"{name}:{exc.line}: the YAML tag {exc.tag} would construct a Python object; "
            "sakura-http reads cassettes with a safe loader only. Re-record the cassette with a "
            "current vcrpy (which writes plain YAML), or replace the tagged value by hand"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise VcrImportError(
            f"{where}: not a readable YAML or JSON vcrpy cassette ({problem})"
        ) from None


@dataclass(slots=True)
class ConvertResult:
    """What a conversion did: the exchanges and what was changed on the way in.

    `dropped_headers` maps each dropped credential header name to the 1-based numbers of the
    interactions it was dropped from; `redacted_cookies` and `decoded_bodies` count the
    interactions whose `set-cookie` was redacted or whose body was content-decoded.
    """

    exchanges: list[Exchange] = field(default_factory=list)
    dropped_headers: dict[str, list[int]] = field(default_factory=dict)
    redacted_cookies: int = 0
    decoded_bodies: int = 0


class _Bad(Exception):
    """A problem inside one interaction; turned into VcrImportError with its number."""


def _body(value: Any, what: str) -> bytes:
    if isinstance(value, Mapping):  # a response body: {"string": ...}
        if "string" not in value:
            raise _Bad(f"{what} has no 'string' key")
        value = value["string"]
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _Bad(f"{what} must be text, !!binary bytes or null, not {type(value).__name__}")


def _headers(value: Any, what: str) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _Bad(f"{what} must be a mapping of name to a list of values")
    pairs: list[tuple[str, str]] = []
    for name, values in value.items():
        if not isinstance(values, list):
            values = [values]  # old vcrpy httpx cassettes stored one value per name
        pairs.extend((str(name).lower(), _header_value(v)) for v in values)
    return tuple(pairs)


def _header_value(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


def _status(response: Mapping[str, Any]) -> int:
    status = response.get("status")
    code = status.get("code") if isinstance(status, Mapping) else response.get("status_code")
    if not isinstance(code, int) or isinstance(code, bool) or not 100 <= code <= 999:
        raise _Bad(f"the response status code must be an HTTP status, got {code!r}")
    return code


def _decode_content(headers: Headers, body: bytes) -> tuple[Headers, bytes, bool]:
    decoder = BodyDecoder(headers, DEFAULT_MAX_BODY_BYTES)
    if not decoder.decoded:
        return headers, body, False
    decoded = decoder.feed(body) + decoder.finish()
    if not decoder.decoded:  # corrupt data: keep it raw, with its content-encoding
        return headers, body, False
    return decoder.headers(len(decoded)), decoded, True


def _exchange(number: int, interaction: Any, result: ConvertResult) -> Exchange:
    if not isinstance(interaction, Mapping):
        raise _Bad("an interaction must be a mapping with 'request' and 'response'")
    request, response = interaction.get("request"), interaction.get("response")
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        raise _Bad("an interaction must have a 'request' and a 'response' mapping")
    method, uri = request.get("method"), request.get("uri")
    if not isinstance(method, str) or not isinstance(uri, str):
        raise _Bad("the request needs a string 'method' and 'uri'")

    headers: list[tuple[str, str]] = []
    for name, value in _headers(request.get("headers"), "request headers"):
        if is_credential_header(name):
            numbers = result.dropped_headers.setdefault(name, [])
            if not numbers or numbers[-1] != number:
                numbers.append(number)
        else:
            headers.append((name, value))
    body = _body(request.get("body"), "the request body")
    check_body_size(len(body), DEFAULT_MAX_BODY_BYTES, "request")

    response_headers = _headers(response.get("headers"), "response headers")
    if any(name == "set-cookie" and value != REDACTED for name, value in response_headers):
        result.redacted_cookies += 1
        response_headers = tuple(
            (name, REDACTED if name == "set-cookie" else value) for name, value in response_headers
        )
    raw = _body(response.get("body", response.get("content")), "the response body")
    check_body_size(len(raw), DEFAULT_MAX_BODY_BYTES, "response")
    response_headers, response_body, decoded = _decode_content(response_headers, raw)
    result.decoded_bodies += decoded
    return Exchange(
        method=method.upper(),
        url=uri,
        headers=tuple(headers),
        body=body,
        status=_status(response),
        response_headers=response_headers,
        response_body=response_body,
    )


def vcr_to_exchanges(data: Any, name: str) -> ConvertResult:
    """Turn a parsed vcrpy cassette into exchanges, applying the recording safety rules.

    Raises `VcrImportError` naming the interaction for a structure it cannot read, an old
    pre-1.0 vcrpy list format, or a body over 16 MiB (`BodyTooLargeError` is turned into it).
    An empty `interactions` list gives an empty result.
    """
    if isinstance(data, list):
        raise VcrImportError(
            f"{name}: this is a pre-1.0 vcrpy cassette (a bare list); migrate it with vcrpy's "
            "migration script first, or re-record it"
        )
    if not isinstance(data, Mapping) or not isinstance(data.get("interactions"), list):
        raise VcrImportError(
            f"{name}: not a vcrpy cassette (expected a mapping with an 'interactions' list)"
        )
    version = data.get("version", 1)
    if version != 1:
        raise VcrImportError(
            f"{name}: vcrpy cassette version {version!r} is not supported (this reads version 1)"
        )
    result = ConvertResult()
    for number, interaction in enumerate(data["interactions"], start=1):
        try:
            result.exchanges.append(_exchange(number, interaction, result))
        except _Bad as exc:
            raise VcrImportError(f"{name}: interaction {number}: {exc}") from None
        except BodyTooLargeError as exc:
            raise VcrImportError(f"{name}: interaction {number}: {exc}") from None
    return result


def write_atomically(path: Path, data: bytes, *, overwrite: bool) -> None:
    """Write `data` to `path` through a temporary sibling file and `os.replace`, so a reader
    never sees a half-written file.  Without `overwrite`, an existing `path` raises
    `FileExistsError` and is left untouched.  Missing parent folders are created."""
    if not overwrite and path.exists():
        raise FileExistsError(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if not overwrite and path.exists():  # created meanwhile: still never overwrite it
            raise FileExistsError(path)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def convert_vcr_file(source: Path, target: Path, *, overwrite: bool = False) -> ConvertResult:
    """Read the vcrpy cassette `source` and write its sakura-http equivalent to `target`.

    Raises `OSError` when `source` cannot be read, `VcrImportError` when it is not an
    importable vcrpy cassette (nothing is written then), and `FileExistsError` when `target`
    exists and `overwrite` is false.  An empty vcrpy cassette gives a header-only cassette.
    """
    raw = source.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VcrImportError(f"{source}: not UTF-8 text, so not a vcrpy cassette") from None
    result = vcr_to_exchanges(load_vcr(text, str(source)), str(source))
    data = encode_header() + b"".join(encode_exchange(ex) for ex in result.exchanges)
    write_atomically(target, data, overwrite=overwrite)
    return result
