"""The write pipeline: what of an exchange reaches the disk (`sakura_http._pipeline`).

First through the transport, as users meet it (the regressions of issue 23: secrets a hook puts
back, echoes in forms the redactor did not know, hook results the loader would refuse, scrubs of
a fault's message); then each stage on its own, as the pure function it is; then the hook fuzz:
random edits of every field of the exchange a hook returns, after which the cassette is always
readable and holds the exchange exactly when no error was raised.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakura_http import (
    EMAIL_PATTERN,
    BodyTooLargeError,
    CassetteConfig,
    CassetteError,
    ConfigurationError,
    CredentialHeaderError,
    Exchange,
    FaultInfo,
    RecordingTransport,
    Rules,
    Scrub,
    UnwritableExchangeError,
)
from sakura_http import _pipeline as pipeline
from sakura_http._cassette import load_cassette
from sakura_http._pipeline import (
    apply_scrubs,
    blank_cookies,
    check_again,
    drop_secrets,
    prepare,
    redact_echoes,
    run_before_record,
    validate,
)
from sakura_http._policy import Redactor

URL = "https://api.example.test/v1/items"
HEADER = b'{"schema_version":"1.0","kind":"cassette"}\n'
ENCODINGS = ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "latin-1")


def every_string_written(path: Path) -> list[tuple[str, bytes]]:
    """The file's bytes, and every field of every exchange it holds, in every encoding a text
    field could be read in."""
    out: list[tuple[str, bytes]] = [("file", path.read_bytes())]
    for number, exchange in enumerate(load_cassette(path).exchanges, 1):
        texts = [("url", exchange.url), ("id", exchange.id or "")]
        texts += [(f"header {n}", f"{n}: {v}") for n, v in exchange.headers]
        texts += [(f"response header {n}", f"{n}: {v}") for n, v in exchange.response_headers]
        if exchange.error is not None:
            texts += [("error", f"{exchange.error.type}: {exchange.error.message}")]
        texts += [("extra", json.dumps(exchange.extra))]
        out += [(f"#{number} {where}", text.encode()) for where, text in texts]
        out += [(f"#{number} body", exchange.body)]
        out += [(f"#{number} response body", exchange.response_body)]
    return out


def assert_never_written(path: Path, *secrets: str) -> None:
    for where, data in every_string_written(path):
        for secret in secrets:
            for encoding in ENCODINGS:
                try:
                    form = secret.encode(encoding)
                except UnicodeEncodeError:
                    continue
                assert form not in data, f"{secret!r} ({encoding}) in {where}"


# --- through the transport: secrets after the hook (issue 23 item 2) ----------------------------

EARLIER = "tok-Earlier-Request-Value-7d1c"
TOKEN = "tok-Put-Back-By-The-Hook-4f9e2a"

PUT_BACK: dict[str, Any] = {
    "a request header value": lambda e, t: dataclasses.replace(
        e, headers=(*e.headers, ("x-note", f"sent with {t}"))
    ),
    "a request header name": lambda e, t: dataclasses.replace(
        e, headers=(*e.headers, (f"x-{t}", "1"))
    ),
    "a url-encoded request header value": lambda e, t: dataclasses.replace(
        e, headers=(*e.headers, ("x-note", quote(f"Bearer {t}", safe="")))
    ),
    "the id": lambda e, t: dataclasses.replace(e, id=f"call-{t}"),
    "the id, base64": lambda e, t: dataclasses.replace(e, id=base64.b64encode(t.encode()).decode()),
    "a UTF-16 request body": lambda e, t: dataclasses.replace(
        e, body=f"note: {t}".encode("utf-16")
    ),
    "a UTF-32 response body": lambda e, t: dataclasses.replace(
        e, response_body=f"echo: {t}".encode("utf-32-be"), chunks=None
    ),
    "a response header": lambda e, t: dataclasses.replace(
        e, response_headers=(*e.response_headers, ("x-echo", t))
    ),
    "the url": lambda e, t: dataclasses.replace(e, url=f"{e.url}?next={t}"),
    "an extra field": lambda e, t: dataclasses.replace(e, extra={"note": {"token": [t]}}),
    "an error message": lambda e, t: dataclasses.replace(
        e, status=None, error=FaultInfo("ConnectError", f"refused {t}")
    ),
}


@pytest.mark.parametrize("where", list(PUT_BACK))
@pytest.mark.parametrize("secret", [TOKEN, EARLIER])
def test_a_hook_cannot_put_a_secret_back(tmp_path: Path, where: str, secret: str) -> None:
    # EARLIER is a secret of an earlier request of the session; TOKEN is this request's.
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="fine"))
    hooked: list[Exchange] = []

    def put_back(exchange: Exchange) -> Exchange:
        if not exchange.url.endswith("/2"):
            return exchange
        hooked.append(exchange)
        return PUT_BACK[where](exchange, secret)  # type: ignore[no-any-return]

    with RecordingTransport(
        path, outer=outer, mode="new_episodes", secret_headers=["authorization"],
        rules=Rules(before_record=put_back),
    ) as transport:  # fmt: skip
        client = httpx.Client(transport=transport)
        client.get(URL + "/1", headers={"authorization": f"Bearer {EARLIER}"})
        client.get(URL + "/2", headers={"authorization": f"Bearer {TOKEN}"})
    assert hooked, "the hook ran"
    assert len(load_cassette(path).exchanges) == 2
    assert_never_written(path, TOKEN, EARLIER)


# --- echoes the redactor did not know (issue 23 item 5) -----------------------------------------


def test_a_secret_query_value_echoed_in_the_response_is_redacted(tmp_path: Path) -> None:
    key = "AIzaFAKE-query-secret-93kd"

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"x-echo-url": str(request.url)},
            json={"key": request.url.params.get("api_key"), "url": str(request.url)},
        )

    path = tmp_path / "c.jsonl"
    with RecordingTransport(path, outer=httpx.MockTransport(echo), mode="new_episodes") as t:
        client = httpx.Client(transport=t)
        live = client.get("https://maps.example.test/tiles", params={"api_key": key, "z": 3})
        assert live.json()["key"] == key  # the caller gets the live answer
        # A later request echoing it (a redirect's next hop, a paging link) is redacted too.
        client.get(f"https://maps.example.test/next?from={key}")
    assert_never_written(path, key)
    assert (
        load_cassette(path).exchanges[1].url == "https://maps.example.test/next?from=%3Credacted%3E"
    )


GO_ESCAPED = "tok<&>=go-escaped-secret-51"


@pytest.mark.parametrize(
    "spelling",
    [
        # Go's encoding/json escapes <, > and & (HTML-safe); Gson also = and '; .NET also +,
        # with upper-case hex digits.
        "tok\\u003c\\u0026\\u003e=go-escaped-secret-51",
        "tok\\u003c\\u0026\\u003e\\u003dgo-escaped-secret-51",
        "tok\\u003C\\u0026\\u003E=go-escaped-secret-51",
    ],
)
def test_json_escapes_of_other_encoders_are_redacted(tmp_path: Path, spelling: str) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        body = '{"you_sent": "Bearer ' + spelling + '"}'
        return httpx.Response(200, headers={"content-type": "application/json"}, text=body)

    path = tmp_path / "c.jsonl"
    with RecordingTransport(
        path, outer=httpx.MockTransport(echo), mode="new_episodes",
        secret_headers=["authorization"],
    ) as transport:  # fmt: skip
        httpx.Client(transport=transport).get(
            URL, headers={"authorization": f"Bearer {GO_ESCAPED}"}
        )
    [exchange] = load_cassette(path).exchanges
    assert spelling.encode() not in exchange.response_body
    assert json.loads(exchange.response_body) == {"you_sent": "<redacted>"}


# --- scrubs reach a fault's message (issue 23 item 12) ------------------------------------------


def test_scrubs_apply_to_a_fault_message(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("cannot reach bob.b@corp.example: connection refused")

    path = tmp_path / "c.jsonl"
    rules = Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>")])
    with RecordingTransport(
        path, outer=httpx.MockTransport(refuse), mode="new_episodes", record_errors=True,
        rules=rules,
    ) as transport, pytest.raises(httpx.ConnectError):  # fmt: skip
        httpx.Client(transport=transport).get(URL + "?owner=bob.b@corp.example")
    assert b"bob.b@corp.example" not in path.read_bytes()
    [exchange] = load_cassette(path).exchanges
    assert exchange.error == FaultInfo("ConnectError", "cannot reach <email>: connection refused")


# --- a hook result the loader would refuse writes nothing (issue 23 item 7) ---------------------


def streamed(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=iter([b"one ", b"two ", b"three"]))


def _edited_body(exchange: Exchange) -> Exchange:
    return dataclasses.replace(exchange, response_body=exchange.response_body + b" (edited)")


BAD_RESULTS: dict[str, tuple[Any, str]] = {
    "a streamed body edited": (_edited_body, "chunks"),
    "status 0": (lambda e: dataclasses.replace(e, status=0), "status"),
    "status None without an error": (lambda e: dataclasses.replace(e, status=None), "status"),
    "timings without chunks": (lambda e: dataclasses.replace(e, chunks=None), "timings_ms"),
    "NaN timings": (
        lambda e: dataclasses.replace(e, timings_ms=(float("nan"),) * len(e.chunks or ())),
        "timings_ms",
    ),
    "an int header value": (
        lambda e: dataclasses.replace(e, headers=(*e.headers, ("x-count", 3))),
        "headers",
    ),
    "a bytes url": (lambda e: dataclasses.replace(e, url=e.url.encode()), "url"),
    "a text body": (lambda e: dataclasses.replace(e, body="text"), "body"),
    "a header name outside Latin-1": (
        lambda e: dataclasses.replace(e, response_headers=(("x-\u263a", "1"),)),
        "response_headers",
    ),
    "an extra field that is not JSON": (
        lambda e: dataclasses.replace(e, extra={"note": {1, 2}}),
        "extra",
    ),
}


@pytest.mark.parametrize("case", list(BAD_RESULTS))
def test_a_hook_result_the_loader_would_refuse_writes_nothing(tmp_path: Path, case: str) -> None:
    edit, field = BAD_RESULTS[case]

    def reviewed(exchange: Exchange) -> Exchange:
        return edit(exchange)  # type: ignore[no-any-return]

    path = tmp_path / "c.jsonl"
    path.write_bytes(
        HEADER + b'{"method":"GET","url":"https://api.example.test/old","headers":[],"body":"",'
        b'"status":200,"response_headers":[],"response_body":"old"}\n'
    )
    before = path.read_bytes()
    with RecordingTransport(
        path, outer=httpx.MockTransport(streamed), mode="new_episodes", record_timings=True,
        rules=Rules(before_record=reviewed),
    ) as transport, pytest.raises(CassetteError) as raised:  # fmt: skip
        httpx.Client(transport=transport).get(URL)
    message = str(raised.value)
    assert "reviewed" in message and repr(field) in message, message
    if field == "chunks":  # the way out, said
        assert "sets chunks=None and timings_ms=None" in message
    assert getattr(raised.value, "field", None) == field
    assert path.read_bytes() == before
    assert len(load_cassette(path).exchanges) == 1


# --- each stage on its own ------------------------------------------------------------------------

SECRET = "tok-Stage-Secret-Value-93c1e0"
REDACTOR = Redactor((), (), [SECRET])
PLAIN = Exchange(
    "POST",
    "https://api.example.test/v1/items?q=1",
    (("accept", "*/*"), ("content-type", "application/json")),
    b'{"q": 1}',
    200,
    (("content-type", "text/plain"), ("content-length", "11")),
    b"hello world",
    chunks=(6, 5),
    timings_ms=(1.0, 2.0),
)
CONFIG = CassetteConfig(secret_headers=frozenset({"authorization"}))


def test_every_stage_returns_an_exchange_it_does_not_change_as_it_is() -> None:
    rules = Rules(scrub=[Scrub.regex("never-matches-[0-9]{40}")])
    assert drop_secrets(PLAIN, frozenset({"authorization"})) is PLAIN
    assert redact_echoes(PLAIN, REDACTOR) is PLAIN
    assert redact_echoes(PLAIN, Redactor((), ())) is PLAIN
    assert redact_echoes(PLAIN, REDACTOR, every_encoding=True) is PLAIN
    assert blank_cookies(PLAIN) is PLAIN
    assert apply_scrubs(PLAIN, Rules()) is PLAIN
    assert apply_scrubs(PLAIN, rules) == PLAIN
    assert run_before_record(PLAIN, Rules()) is PLAIN
    assert prepare(PLAIN, CONFIG, REDACTOR) is PLAIN  # the exchange as captured is written


def test_drop_secrets_leaves_the_declared_headers_out() -> None:
    sent = dataclasses.replace(PLAIN, headers=(("authorization", "Bearer x"), *PLAIN.headers))
    assert drop_secrets(sent, frozenset({"authorization"})).headers == PLAIN.headers
    assert drop_secrets(sent, frozenset()) is sent


def test_drop_secrets_keeps_the_names_of_the_headers_it_left_out() -> None:
    # `sakura-http verify` says which credentials a re-sent request needs: the names only.
    sent = dataclasses.replace(
        PLAIN, headers=(("x-api-key", "k-1"), ("authorization", "Bearer x"), *PLAIN.headers)
    )
    dropped = drop_secrets(sent, frozenset({"authorization", "x-api-key", "x-other"}))
    assert dropped.extra["secret_headers"] == ["authorization", "x-api-key"]
    assert "k-1" not in repr(dropped) and "Bearer x" not in repr(dropped)
    again = drop_secrets(
        dataclasses.replace(dropped, headers=(("x-other", "o"), *dropped.headers)),
        frozenset({"x-other"}),
    )
    assert again.extra["secret_headers"] == ["authorization", "x-api-key", "x-other"]


def test_the_names_of_secret_headers_are_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    with RecordingTransport(path, outer=outer, mode="all", secret_headers=["authorization"]) as t:
        httpx.Client(transport=t).get(
            "https://api.example.test/", headers={"authorization": "Bearer tok-123"}
        )
    text = path.read_text()
    assert "tok-123" not in text and '"secret_headers":["authorization"]' in text
    (exchange,) = load_cassette(path).exchanges
    assert exchange.extra["secret_headers"] == ["authorization"]


def test_redact_echoes_searches_every_field() -> None:
    echo = dataclasses.replace(
        PLAIN,
        method=f"GET-{SECRET}",
        url=f"https://api.example.test/cb?code={SECRET}",
        headers=(("x-echo", f"Bearer {SECRET}"), (f"x-{SECRET.lower()}", "1")),
        body=f"body {SECRET}".encode(),
        response_headers=(("location", f"/next?t={quote(SECRET)}"), ("content-length", "99")),
        response_body=f'{{"token": "{SECRET}"}}'.encode(),
        error=FaultInfo("ConnectError", f"refused {SECRET}"),
        id=f"id-{SECRET}",
        extra={"notes": [f"saw {SECRET}"], SECRET: 1},
    )
    written = redact_echoes(echo, REDACTOR)
    assert written.method == "GET-<redacted>"
    assert written.url == "https://api.example.test/cb?code=%3Credacted%3E"
    assert written.headers == (("x-echo", "Bearer <redacted>"), ("x-<redacted>", "1"))
    assert written.body == b"body <redacted>"
    assert written.response_headers == (
        ("location", "/next?t=<redacted>"),
        ("content-length", str(len(written.response_body))),  # still true of the body
    )
    assert written.response_body == b'{"token": "<redacted>"}'
    assert (written.chunks, written.timings_ms) == (None, None)  # the sizes changed
    assert written.error == FaultInfo("ConnectError", "refused <redacted>")
    assert written.id == "id-<redacted>"
    assert written.extra == {"notes": ["saw <redacted>"], "<redacted>": 1}


def test_redact_echoes_in_every_encoding_only_when_asked() -> None:
    utf16 = dataclasses.replace(PLAIN, body=f"note {SECRET}".encode("utf-16-le"))
    assert redact_echoes(utf16, REDACTOR) is utf16  # no charset said so, no byte order mark
    written = redact_echoes(utf16, REDACTOR, every_encoding=True)
    assert written.body.decode("utf-16-le") == "note <redacted>"  # the marker in UTF-16 too
    with_bom = dataclasses.replace(PLAIN, body=f"note {SECRET}".encode("utf-16"))
    assert redact_echoes(with_bom, REDACTOR).body.decode("utf-16") == "note <redacted>"


def test_redact_echoes_cuts_a_truncated_body_before_a_partial_secret() -> None:
    cut = dataclasses.replace(
        PLAIN, response_body=b"data: " + SECRET[:9].encode(), chunks=None, timings_ms=None,
        truncated=True,
    )  # fmt: skip
    assert redact_echoes(cut, REDACTOR).response_body == b"data: "


def test_blank_cookies_blanks_both_cookie_headers() -> None:
    cookies = dataclasses.replace(
        PLAIN,
        response_headers=(("set-cookie", "a=1"), ("set-cookie2", "b=2"), ("x-cookie", "c")),
    )
    assert blank_cookies(cookies).response_headers == (
        ("set-cookie", "<redacted>"), ("set-cookie2", "<redacted>"), ("x-cookie", "c"),
    )  # fmt: skip


def test_apply_scrubs_reaches_every_string_and_keeps_the_chunks() -> None:
    rules = Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>"), Scrub.query("q")])
    mail = "ada@mail.example"
    exchange = dataclasses.replace(
        PLAIN,
        url="https://api.example.test/v1/items?q=secret&to=" + mail,
        headers=(("x-from", mail), ("content-length", str(len(mail) + 2))),
        body=f"[{mail}]".encode(),
        response_body=b"hello " + mail.encode() + b", bye",
        chunks=(8, 19),
        timings_ms=(1.0, 2.0),
        id=mail,
    )
    written = apply_scrubs(exchange, rules)
    assert written.url == "https://api.example.test/v1/items?q=<scrubbed>&to=<email>"
    assert written.headers == (("x-from", "<email>"), ("content-length", "9"))
    assert written.body == b"[<email>]"
    assert written.response_body == b"hello <email>, bye"
    assert written.chunks == (13, 5)  # the boundary inside the match moved to its end
    assert written.timings_ms == (1.0, 2.0)
    assert written.id == "<email>"
    fault = dataclasses.replace(
        PLAIN, status=None, error=FaultInfo("ConnectError", f"cannot reach {mail}")
    )
    assert apply_scrubs(fault, rules).error == FaultInfo("ConnectError", "cannot reach <email>")


def test_run_before_record() -> None:
    assert run_before_record(PLAIN, Rules(before_record=lambda e: None)) is None
    edited = run_before_record(PLAIN, Rules(before_record=lambda e: dataclasses.replace(e, id="x")))
    assert edited is not None and edited.id == "x"
    with pytest.raises(ConfigurationError, match="before_record returned dict"):
        run_before_record(PLAIN, Rules(before_record=lambda e: {}))  # type: ignore[arg-type,return-value]


def test_check_again_refuses_and_redacts_what_a_hook_put_back() -> None:
    back = dataclasses.replace(
        PLAIN,
        headers=(("Authorization", f"Bearer {SECRET}"), ("x-note", SECRET)),
        body=SECRET.encode("utf-32"),
        response_headers=(("Set-Cookie", "s=1"),),
    )
    written = check_again(back, CONFIG, REDACTOR)
    assert written.headers == (("x-note", "<redacted>"),)  # the name lower-cased first, dropped
    assert written.body.decode("utf-32") == "<redacted>"
    assert written.response_headers == (("set-cookie", "<redacted>"),)
    with pytest.raises(CredentialHeaderError):
        check_again(dataclasses.replace(PLAIN, headers=(("x-api-key", "k"),)), CONFIG, REDACTOR)
    small = dataclasses.replace(CONFIG, max_body_bytes=4)
    with pytest.raises(BodyTooLargeError):
        check_again(dataclasses.replace(PLAIN, body=b"12345"), small, REDACTOR)


def test_validate_reads_back_or_names_the_hook_and_the_field() -> None:
    spelled = dataclasses.replace(PLAIN, headers=[["Accept", "*/*"]], chunks=[6, 5])
    back = validate(spelled)
    assert back.headers == (("accept", "*/*"),) and back.chunks == (6, 5)
    with pytest.raises(UnwritableExchangeError) as raised:
        validate(dataclasses.replace(PLAIN, status=0, id=SECRET), hook="review", redactor=REDACTOR)
    assert (raised.value.field, raised.value.hook) == ("status", "review")
    assert "review" in str(raised.value) and "'status'" in str(raised.value)
    with pytest.raises(UnwritableExchangeError) as raised:
        validate(dataclasses.replace(PLAIN, method=SECRET.encode()), redactor=REDACTOR)
    assert raised.value.field == "method" and raised.value.hook is None


def test_prepare_checks_again_only_what_the_hook_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Exchange] = []

    def read_back(exchange: Exchange) -> Exchange:
        read.append(exchange)
        return exchange

    monkeypatch.setattr(pipeline, "read_back", read_back)
    keep = dataclasses.replace(CONFIG, rules=Rules(before_record=lambda e: e))
    assert prepare(PLAIN, keep, REDACTOR) is PLAIN
    assert read == []  # the hook changed nothing: nothing to check again
    extra: dict[str, Any] = {}

    def in_place(exchange: Exchange) -> Exchange:
        exchange.extra["note"] = SECRET  # type: ignore[index]
        return exchange

    captured = dataclasses.replace(PLAIN, extra=extra)
    written = prepare(
        captured, dataclasses.replace(CONFIG, rules=Rules(before_record=in_place)), REDACTOR
    )
    assert written is not None and written.extra == {"note": "<redacted>"}
    assert read  # an exchange edited in place is checked again


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    body=st.binary(max_size=40),
    pieces=st.lists(st.integers(min_value=1, max_value=9), max_size=5),
    text=st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
    truncated=st.booleans(),
    fault=st.booleans(),
    cookie=st.booleans(),
)
def test_the_stages_before_the_hook_write_what_the_loader_reads(
    body: bytes, pieces: list[int], text: str, truncated: bool, fault: bool, cookie: bool
) -> None:
    # Whatever was captured (secrets echoed anywhere, scrubbed values, chunks, a fault), the
    # exchange the stages before the hook give is one the loader reads back unchanged.
    response = (text + SECRET + " ada@mail.example " + text).encode() + body
    rest = len(response) - sum(pieces)
    chunks = (*pieces, rest) if rest > 0 else None
    captured = Exchange(
        "GET",
        f"https://api.example.test/{quote(text)}?token={SECRET}",
        (("authorization", f"Bearer {SECRET}"), ("x-echo", text + SECRET)),
        body,
        None if fault else 200,
        ()
        if fault
        else (("content-type", "text/plain"), *((("set-cookie", text),) if cookie else ())),
        b"" if fault else response,
        error=FaultInfo("ConnectError", text + SECRET) if fault else None,
        chunks=None if fault else chunks,
        timings_ms=tuple(float(n) for n in range(len(chunks))) if chunks and not fault else None,
        truncated=truncated and not fault,
    )
    config = dataclasses.replace(
        CONFIG, rules=Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>"), Scrub.json("a.b")])
    )
    written = prepare(captured, config, REDACTOR)
    assert written is not None
    assert validate(written) == written


# --- the hook fuzz --------------------------------------------------------------------------------
# Random edits of every field of the exchange a hook returns (values of the right type and of
# every wrong one), and sometimes a secret of the session put back in a string field.  The
# property: the cassette stays readable, and it holds the exchange exactly when no error was
# raised (an error writes nothing); no secret reaches it.  `HOOK_FUZZ_EXAMPLES` in the default
# run (derandomized, so the same on every machine); ``SAKURA_HTTP_LONG_TESTS=1`` runs
# `LONG_HOOK_FUZZ_EXAMPLES`, with a fresh seed.

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"
HOOK_FUZZ_EXAMPLES = 60
LONG_HOOK_FUZZ_EXAMPLES = 3000
FUZZ_TOKEN = "tok-Fuzzed-Into-The-Hook-0b7e11"

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),  # lone surrogates included
    st.binary(max_size=8),
    st.lists(st.integers(min_value=-1, max_value=9), max_size=3),
    st.dictionaries(_TEXT, st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
)
_PAIRS = st.lists(
    st.one_of(
        st.tuples(_TEXT, _TEXT),
        st.tuples(st.sampled_from(["content-type", "X-Upper", "x-\u263a", "set-cookie"]), _TEXT),
        st.tuples(_TEXT, _ANY),
        st.lists(_TEXT, max_size=3),
    ),
    max_size=3,
).map(tuple)
_SIZES = st.lists(st.integers(min_value=-1, max_value=40), max_size=4).map(tuple)
_TIMES = st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4).map(tuple)
#: Values of the right type for each field (not always right values: statuses out of range,
#: chunks that do not add up, NaN timings, upper-case or non-Latin-1 header names...).
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "method": st.sampled_from(["GET", "post", ""]),
    "url": st.one_of(st.just("https://api.example.test/x?y=1"), _TEXT),
    "headers": _PAIRS,
    "body": st.binary(max_size=20),
    "status": st.one_of(st.none(), st.integers(min_value=-1, max_value=1200)),
    "response_headers": _PAIRS,
    "response_body": st.binary(max_size=20),
    "error": st.one_of(st.none(), st.builds(FaultInfo, _TEXT, _TEXT)),
    "id": st.one_of(st.none(), _TEXT),
    "chunks": st.one_of(st.none(), _SIZES),
    "truncated": st.booleans(),
    "timings_ms": st.one_of(st.none(), _TIMES),
    "response_header_charset": st.sampled_from(["utf-8", "latin-1", "ascii"]),
    "extra": st.dictionaries(
        st.one_of(_TEXT, st.sampled_from(["chunks", "status", "notes", "error", "url"])),
        st.one_of(_TEXT, st.lists(_TEXT, max_size=2), st.integers()),
        max_size=3,
    ),
}


@st.composite
def hook_edits(draw: st.DrawFn) -> dict[str, Any]:
    """Changes to some fields of the exchange (every field of `Exchange` may be drawn), each a
    value of the field's type three times in four, else a value of any type."""
    names = [f.name for f in dataclasses.fields(Exchange)]
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
    edits = {}
    for name in chosen:
        wrong = name not in FIELD_VALUES or draw(st.integers(0, 3)) == 0
        edits[name] = draw(_ANY if wrong else FIELD_VALUES[name])
    strings = [name for name, value in edits.items() if isinstance(value, str)]
    if strings and draw(st.booleans()):  # a secret of the session put back
        name = draw(st.sampled_from(strings))
        edits[name] = edits[name] + FUZZ_TOKEN
    return edits


def _hook_fuzz_example(edits: dict[str, Any], stream_through: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.jsonl"
        path.write_bytes(
            HEADER + b'{"method":"GET","url":"https://api.example.test/old","headers":[],'
            b'"body":"","status":200,"response_headers":[],"response_body":"old"}\n'
        )
        before = path.read_bytes()

        def fuzzed(exchange: Exchange) -> Exchange:
            return dataclasses.replace(exchange, **edits)

        raised: CassetteError | None = None
        with RecordingTransport(
            path, outer=httpx.MockTransport(streamed), mode="new_episodes", record_timings=True,
            secret_headers=["authorization"], stream_through=stream_through,
            rules=Rules(before_record=fuzzed),
        ) as transport:  # fmt: skip
            try:
                httpx.Client(transport=transport).get(
                    URL, headers={"authorization": f"Bearer {FUZZ_TOKEN}"}
                )
            except CassetteError as exc:
                raised = exc
        content = load_cassette(path)  # never unreadable
        if raised is not None:
            assert path.read_bytes() == before, f"{raised!r} and something was written"
            assert FUZZ_TOKEN not in str(raised)
        else:
            assert len(content.exchanges) == 2
            assert_never_written(path, FUZZ_TOKEN)


HOOK_FUZZ = settings(
    max_examples=LONG_HOOK_FUZZ_EXAMPLES if LONG else HOOK_FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not LONG,
)


@pytest.mark.parametrize("stream_through", [False, True])
@HOOK_FUZZ
@given(edits=hook_edits())
def test_hook_fuzz_the_cassette_stays_readable(edits: dict[str, Any], stream_through: bool) -> None:
    _hook_fuzz_example(edits, stream_through)


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A live body that remembers being closed."""

    def __init__(self) -> None:
        self.closed = False

    def __iter__(self) -> Any:
        yield from (b"one ", b"two")

    async def __aiter__(self) -> Any:
        for piece in (b"one ", b"two"):
            yield piece

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.parametrize("flavor", ["sync", "asyncio", "trio"])
def test_a_stream_through_capture_refused_by_the_pipeline_still_closes_the_response(
    tmp_path: Path, flavor: str
) -> None:
    body = _Body()
    outer = httpx.MockTransport(lambda request: httpx.Response(200, stream=body))
    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        path, outer=outer, mode="new_episodes", stream_through=True,
        rules=Rules(before_record=lambda e: dataclasses.replace(e, status=0)),
    )  # fmt: skip
    with pytest.raises(UnwritableExchangeError, match="'status'"):
        if flavor == "sync":
            with httpx.Client(transport=transport) as client:
                client.get(URL)
        else:

            async def get() -> None:
                async with httpx.AsyncClient(transport=transport) as client:
                    await client.get(URL)

            anyio.run(get, backend=flavor)
    assert body.closed
    assert [type(e) for e in transport.raised] == [UnwritableExchangeError]
    assert not path.exists()


@pytest.mark.parametrize("raised", [ValueError("the hook broke"), "unwritable"])
def test_a_rerecording_whose_exchange_could_not_be_written_keeps_the_old_cassette(
    tmp_path: Path, raised: Any
) -> None:
    """Mode "all": an exchange the pipeline could not write (the hook raised, or its result
    is unwritable) leaves the re-recording incomplete, even when the caller catches the error
    and closes cleanly: the old cassette is kept, never replaced without that exchange."""
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text=request.url.path))
    with httpx.Client(transport=RecordingTransport(path, outer=outer, mode="new_episodes")) as c:
        c.get("https://api.example.test/a")
        c.get("https://api.example.test/b")
    before = path.read_bytes()

    def hook(exchange: Exchange) -> Exchange:
        if exchange.url.endswith("/b"):
            if isinstance(raised, Exception):
                raise raised
            return dataclasses.replace(exchange, status=0)
        return exchange

    transport = RecordingTransport(path, outer=outer, mode="all", rules=Rules(before_record=hook))
    with httpx.Client(transport=transport) as client:
        client.get("https://api.example.test/a")
        with pytest.raises(Exception):  # noqa: B017 - the hook's own error or ours
            client.get("https://api.example.test/b")
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("*.recording"))


def test_a_credential_header_a_hook_added_is_blamed_on_the_hook(tmp_path: Path) -> None:
    """The request never carried it (it would have been refused before it was sent): the
    message names the hook and says to leave the header out there, or to declare it."""

    def add_token(exchange: Exchange) -> Exchange:
        return dataclasses.replace(exchange, headers=(*exchange.headers, ("x-token", "t-1")))

    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    transport = RecordingTransport(
        tmp_path / "c.jsonl", outer=outer, mode="new_episodes", rules=Rules(before_record=add_token)
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(CredentialHeaderError) as caught,
    ):
        client.get("https://api.example.test/v1")
    text = str(caught.value)
    assert caught.value.header == "x-token" and caught.value.hook is not None
    assert "add_token" in text and "added" in text, text
    assert "secret_headers" in text  # declaring it is still a way out
    assert "t-1" not in text
    assert (
        not (tmp_path / "c.jsonl").exists() or "x-token" not in (tmp_path / "c.jsonl").read_text()
    )
