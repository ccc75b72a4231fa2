"""The write pipeline: everything that decides what of an exchange reaches the disk.

Every exchange written goes through `prepare`: a response read whole or streamed, a
`stream_through` capture ended or closed early, a recorded transport fault, in every mode, from
the transport and from the proxy.  It takes the exchange as captured from the live traffic
(decoded, unredacted: what the caller gets) and runs these stages, in this order, each a pure
function that returns the very exchange it was given when it changes nothing:

1. `drop_secrets`: the declared secret request headers are left out (their names are kept in
   the optional ``secret_headers`` field, for `sakura-http verify`).
2. `redact_echoes`: every form of every secret the session knows (`Redactor`) is replaced by
   ``<redacted>`` in every field written: the URL (with the URL-encoded marker, so a client
   following a redacted redirect asks for the URL written), header names and values, both
   bodies, the fault's message, the id, the extra fields.  A response body that changed in
   length becomes one chunk; one cut short (`truncated`) loses a last part that could begin a
   secret whose rest never arrived.
3. `blank_cookies`: the values of `set-cookie` and `set-cookie2` become ``<redacted>``.
4. `apply_scrubs`: the `Scrub` steps of `Rules`, on every string written: the URL, header
   values, both bodies (chunk boundaries kept where they still apply), the fault's message.
5. `run_before_record`: the user's hook; None means nothing is written.
6. `check_again`, only when the hook changed the exchange: undeclared credential headers are
   refused, bodies held to `max_body_bytes`, and stages 1-3 run again over every field, the
   bodies searched in every encoding the redactor knows, so the hook cannot put a secret back.
7. `validate`, only when the hook changed the exchange: the exchange as the loader reads it
   back (`_format.read_back`, the loader's own rules); one the loader would refuse raises
   `UnwritableExchangeError` naming the hook and the field, and nothing is written.

The stages before the hook build what the loader reads by construction (tests/test_pipeline.py
holds them to it), so an exchange no hook changed is not read back.  The caller gets the live
exchange, never the one written.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from ._config import CassetteConfig
from ._exceptions import ConfigurationError, CredentialHeaderError, UnwritableExchangeError
from ._format import Exchange, FaultInfo, Headers, read_back
from ._policy import (
    EVERY_ENCODING,
    REDACTED,
    REDACTED_RESPONSE_HEADERS,
    Redactor,
    charset_of,
    check_body_size,
    refuse_credentials,
)
from ._rules import Rules, scrub_written, with_notes

__all__ = [
    "apply_scrubs",
    "blank_cookies",
    "check_again",
    "drop_secrets",
    "prepare",
    "redact_echoes",
    "run_before_record",
    "validate",
]


def prepare(captured: Exchange, config: CassetteConfig, redactor: Redactor) -> Exchange | None:
    """The exchange to write for `captured` (None: the `before_record` hook declined it), under
    `config` (its secret headers, rules, limits), with `redactor` searching for every secret
    the session knows.  Raises the `UnsafeExchangeError` of a stage that refuses it."""
    exchange = drop_secrets(captured, config.secret_headers)
    exchange = redact_echoes(exchange, redactor)
    exchange = blank_cookies(exchange)
    rules = config.rules
    if not rules:
        return exchange
    exchange = apply_scrubs(exchange, rules)
    if rules.before_record is None:
        return exchange
    extra = copy.deepcopy(exchange.extra) if exchange.extra else {}  # (a hook may edit it in place)
    hooked = run_before_record(exchange, rules)
    if hooked is None or (hooked is exchange and hooked.extra == extra):
        return hooked
    hook = _name_of(rules.before_record)
    exchange = check_again(hooked, config, redactor, hook=hook)
    return validate(exchange, hook=hook, redactor=redactor)


# --- the stages, in order -----------------------------------------------------------------------


def drop_secrets(exchange: Exchange, secret_headers: frozenset[str]) -> Exchange:
    """`exchange` without its declared secret request headers (forwarded, never written).

    Their names are kept in the exchange's ``secret_headers`` field (sorted, no values), so
    `sakura-http verify` can say which credentials a re-sent request needs."""
    if not secret_headers:
        return exchange
    kept = tuple([(n, v) for n, v in exchange.headers if n not in secret_headers])
    if len(kept) == len(exchange.headers):
        return exchange
    names = {n for n, _ in exchange.headers if n in secret_headers}
    known = exchange.extra.get("secret_headers")  # (a hook may have put anything there)
    if isinstance(known, list):
        names.update(n for n in known if isinstance(n, str) and n)
    extra = {**exchange.extra, "secret_headers": sorted(names)}
    return dataclasses.replace(exchange, headers=kept, extra=extra)


def redact_echoes(
    exchange: Exchange, redactor: Redactor, *, every_encoding: bool = False
) -> Exchange:
    """`exchange` with every echo of a secret `redactor` searches for replaced, in every field
    written.  Bodies are searched in UTF-8, Latin-1 and their declared charset, or, with
    `every_encoding`, in every encoding the redactor knows (UTF-16 and UTF-32 too)."""
    if not redactor:
        return exchange
    changes: dict[str, Any] = {}
    method = redactor.text(exchange.method)
    if method != exchange.method:
        changes["method"] = method
    url = redactor.url(exchange.url)
    if url != exchange.url:
        changes["url"] = url
    headers = _redacted_headers(exchange.headers, redactor)
    if headers is not exchange.headers:
        changes["headers"] = headers
    charset = EVERY_ENCODING if every_encoding else charset_of(exchange.headers)
    body = redactor.body(exchange.body, charset)
    if body != exchange.body:
        changes["body"] = body
    response_headers = _redacted_headers(exchange.response_headers, redactor)
    charset = EVERY_ENCODING if every_encoding else charset_of(exchange.response_headers)
    response_body = redactor.body(exchange.response_body, charset)
    if exchange.truncated:  # the rest of a secret cut short here never arrived to be found
        response_body = redactor.cut_partial(response_body, charset)
    if response_body != exchange.response_body:
        # The sizes changed: the chunk boundaries (and their arrival times) no longer apply.
        changes.update(response_body=response_body, chunks=None, timings_ms=None)
        response_headers = _with_length(response_headers, response_body, exchange.response_body)
    if response_headers is not exchange.response_headers:
        changes["response_headers"] = response_headers
    error = exchange.error
    if error is not None:
        fault = FaultInfo(redactor.text(error.type), redactor.text(error.message))
        if fault != error:
            changes["error"] = fault
    if exchange.id is not None and redactor.text(exchange.id) != exchange.id:
        changes["id"] = redactor.text(exchange.id)
    for name in _OTHER_FIELDS:  # `extra`, and any field a later version adds
        value = getattr(exchange, name)
        redacted = _redacted_value(value, redactor)
        if redacted is not value:
            changes[name] = redacted
    return dataclasses.replace(exchange, **changes) if changes else exchange


def blank_cookies(exchange: Exchange) -> Exchange:
    """`exchange` with the value of every cookie the server set (`set-cookie`, `set-cookie2`)
    written as ``<redacted>``."""
    headers = exchange.response_headers
    if not any(name in REDACTED_RESPONSE_HEADERS for name, _ in headers):
        return exchange
    blanked = tuple([(n, REDACTED if n in REDACTED_RESPONSE_HEADERS else v) for n, v in headers])
    return dataclasses.replace(exchange, response_headers=blanked)


def apply_scrubs(exchange: Exchange, rules: Rules) -> Exchange:
    """`exchange` under the `Scrub` steps of `rules`: URL, request header values and body,
    response header values and body (its chunk boundaries kept where they still apply), the
    fault's message and the id.  What a scrub had to cut is said in the exchange's notes."""
    if not rules.scrub:
        return exchange
    headers = rules.scrub_request_headers(exchange.headers)
    body, _, notes = scrub_written(rules, headers, exchange.body, part="request body")
    changes: dict[str, Any] = {
        "url": rules.scrub_url(exchange.url),
        "headers": _with_length(headers, body, exchange.body),
        "body": body,
    }
    if exchange.status is not None:
        response_headers = rules.scrub_response_headers(exchange.response_headers)
        response_body, chunks, response_notes = scrub_written(
            rules,
            response_headers,
            exchange.response_body,
            exchange.chunks or (len(exchange.response_body),),
            truncated=exchange.truncated,
        )
        notes += response_notes
        changes["response_headers"] = _with_length(
            response_headers, response_body, exchange.response_body
        )
        changes["response_body"] = response_body
        changes["chunks"] = chunks if len(chunks) > 1 else None
        if exchange.timings_ms is not None and len(chunks) != len(exchange.timings_ms):
            changes["timings_ms"] = None
    if exchange.error is not None:
        message = rules.scrub_text(exchange.error.message)
        changes["error"] = FaultInfo(exchange.error.type, message)
    if exchange.id is not None:
        changes["id"] = rules.scrub_text(exchange.id)
    if notes:
        changes["extra"] = with_notes(exchange.extra, notes)
    return dataclasses.replace(exchange, **changes)


def run_before_record(exchange: Exchange, rules: Rules) -> Exchange | None:
    """The `before_record` hook's result for `exchange` (None: do not record it)."""
    hook = rules.before_record
    if hook is None:
        return exchange
    result = hook(exchange)
    if result is not None and not isinstance(result, Exchange):
        raise ConfigurationError(
            f"before_record returned {type(result).__name__}; return an Exchange (use "
            "dataclasses.replace(exchange, ...)) or None to skip recording it"
        )
    return result


def check_again(
    hooked: Exchange, config: CassetteConfig, redactor: Redactor, *, hook: str | None = None
) -> Exchange:
    """The safety rules once more, on an exchange a hook changed: it must be one the loader
    reads (`validate`: nothing else can be searched), stages 1-3 run again over every field,
    the bodies searched in every encoding the redactor knows, and it may carry no undeclared
    credential header and no body over `max_body_bytes`."""
    exchange = validate(hooked, hook=hook, redactor=redactor)
    exchange = drop_secrets(exchange, config.secret_headers)
    exchange = redact_echoes(exchange, redactor, every_encoding=True)
    exchange = blank_cookies(exchange)
    try:
        refuse_credentials(exchange.headers, config.secret_headers, config.allow_headers)
    except CredentialHeaderError as exc:
        # The request could not have carried it (it is refused before it is sent): the hook
        # added it, and the message says so.
        raise CredentialHeaderError(exc.header, hook=hook or "before_record") from None
    check_body_size(len(exchange.body), config.max_body_bytes, "request")
    check_body_size(len(exchange.response_body), config.max_body_bytes, "response")
    return exchange


def validate(
    exchange: Exchange, *, hook: str | None = None, redactor: Redactor | None = None
) -> Exchange:
    """`exchange` as the loader reads it back (`_format.read_back`); raises
    `UnwritableExchangeError` naming `hook` (the hook that returned it) and the field at fault
    for one the loader would refuse, its problem told with `redactor`'s secrets redacted."""
    try:
        return read_back(exchange)
    except UnwritableExchangeError as exc:
        problem = exc.problem if redactor is None else redactor.text(exc.problem)
        raise UnwritableExchangeError(exc.field, problem, hook=hook) from None


# --- helpers --------------------------------------------------------------------------------------

#: The fields `redact_echoes` searches by what they hold, not by name: `extra`, and any field a
#: later version adds (a string, or JSON-like values holding strings).
_OTHER_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(Exchange)
    if f.name
    not in {
        "method", "url", "headers", "body", "status", "response_headers", "response_body",
        "error", "id", "chunks", "truncated", "timings_ms", "response_header_charset",
    }
)  # fmt: skip


def _redacted_headers(headers: Headers, redactor: Redactor) -> Headers:
    """`headers` with every echo replaced in names and values (the same tuple if none was)."""
    redacted = tuple([(redactor.name(n), redactor.text(v)) for n, v in headers])
    return headers if redacted == headers else redacted


def _redacted_value(value: Any, redactor: Redactor) -> Any:
    """A JSON-like value with every echo replaced in its strings (keys too); the same object
    when none was."""
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, Mapping):
        items = list(value.items())
        pairs = [(_redacted_value(k, redactor), _redacted_value(v, redactor)) for k, v in items]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, items, strict=True)):
            return value
        return dict(pairs)
    if isinstance(value, (list, tuple)):
        redacted = [_redacted_value(item, redactor) for item in value]
        if all(new is old for new, old in zip(redacted, value, strict=True)):
            return value
        return redacted if isinstance(value, list) else tuple(redacted)
    return value


def _with_length(headers: Headers, body: bytes, before: bytes) -> Headers:
    """`headers` with a content-length that is still true of `body`, which replaced `before`."""
    if len(body) == len(before):
        return headers
    size = str(len(body))
    return tuple([(n, size if n == "content-length" else v) for n, v in headers])


def _name_of(hook: Any) -> str:
    """How a message names a hook: its qualified name, as the code that defines it spells it."""
    return str(getattr(hook, "__qualname__", None) or repr(hook))
