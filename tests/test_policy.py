"""The rules that guard the disk (`sakura_http._policy`): which headers are credentials, how
echoes of secrets are found and redacted, how bodies are decoded, and what is refused.

Each defect of the security issue has its regression test here, written to fail on the code
before the fix; the transport-level ones run for sync and async clients of httpx and httpx2.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import anyio
import brotli
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http import (
    CassetteMiss,
    CredentialHeaderError,
    RecordingTransport,
    UndecodableBodyError,
    _decoding,
)
from sakura_http._cassette import load_cassette
from sakura_http._decoding import BodyDecoder, check_redactable
from sakura_http._exchange import RequestData
from sakura_http._format import Exchange, encode_exchange, encode_header
from sakura_http._matching import DEFAULT_IGNORE_HEADERS, Matcher, explain_miss
from sakura_http._policy import (
    NOT_CREDENTIAL_HEADERS,
    SHOWN_CHARS,
    SHOWN_HEAD,
    Redactor,
    SecretMemory,
    is_credential_header,
    names_a_secret,
    refuse_credentials,
    secrets_of,
    shown_header_value,
    shown_url,
    shown_value,
)
from sakura_http.cli import main
from sakura_http.cli._lint import lint_bytes
from sakura_http.proxy import serve
from tests.cli_support import run, write_cassette
from tests.drive import Driver
from tests.proxy_support import HANG_GUARD, start_upstream
from tests.servers import start_echo_server
from tests.test_streaming import IGNORE_HTTPX_ASYNCGEN

URL = "https://api.example.test/v1/items"


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]


def record(drive: Driver, path: Path, handler: Any, **options: Any) -> RecordingTransport:
    options.setdefault("mode", "new_episodes")
    return drive.transport(path, outer=drive.mock(handler), **options)


# --- which headers are credentials ------------------------------------------------------------

#: Credential-shaped names that recording, the proxy and `convert` let through (issue 23).
ISSUE_23_NAMES = (
    "x-password", "passwd", "x-apitoken", "x-jwt", "x-session-id", "cookie2",
    "x-hub-signature-256", "bearer", "x-credential", "x-secret-value", "x-csrftoken", "x-pat",
)  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        # the six historical names
        "authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token", "cookie",
        # provider credential headers seen in real cassettes
        "x-goog-api-key", "ocp-apim-subscription-key", "x-amz-security-token", "private-token",
        "x-functions-key", "x-vault-token",
        # credential shapes
        "x-custom-key", "x-session-token", "client-secret", "x-hub-signature", "x-apikey",
        "my-api-key-v2", "x-authentication", "X_API_KEY", "token", "apikey",
        # the names of issue 23 that got through: each shape word in any part of the name
        *ISSUE_23_NAMES,
    ],
)  # fmt: skip
def test_credential_header_names(name: str) -> None:
    assert is_credential_header(name)
    with pytest.raises(CredentialHeaderError) as caught:
        refuse_credentials([(name.lower(), "value")], frozenset())
    assert caught.value.header == name.lower()
    refuse_credentials([(name.lower(), "value")], frozenset({name.lower()}))  # declared: fine


@pytest.mark.parametrize(
    "name",
    ["accept", "content-type", "x-request-id", "idempotency-key", "x-idempotency-key",
     "sec-websocket-key", "x-keyboard", "anthropic-version", "openai-organization",
     # what httpx, requests and the SDKs send (the Stainless SDKs of Anthropic and OpenAI)
     "user-agent", "accept-encoding", "connection", "x-stainless-lang",
     "x-stainless-package-version", "x-stainless-os", "x-stainless-arch", "x-stainless-runtime",
     "x-stainless-runtime-version", "x-stainless-async", "x-stainless-retry-count",
     "x-stainless-read-timeout", "x-stainless-timeout", "x-stainless-helper-method",
     "x-stainless-stream-helper", "x-stainless-poll-helper", "x-stainless-raw-response",
     "anthropic-beta", "openai-project", "x-goog-user-project", "x-goog-api-client",
     # browsers, tracing, clouds: parts that look like a shape word but are not one
     "sec-fetch-mode", "sec-fetch-site", "sec-ch-ua-platform", "sec-websocket-version",
     "sec-websocket-protocol", "upgrade-insecure-requests", "traceparent", "baggage",
     "sentry-trace", "x-forwarded-for", "x-amz-date", "x-amz-content-sha256", "x-path",
     "x-patch-mode", "x-compat", "x-http-method-override", "x-ms-client-request-id",
     "x-github-api-version"],
)  # fmt: skip
def test_ordinary_header_names(name: str) -> None:
    assert not is_credential_header(name)
    refuse_credentials([(name, "value")], frozenset())


def test_allow_names_headers_that_are_not_credentials() -> None:
    assert not is_credential_header("x-cache-key", allow={"x-cache-key"})
    refuse_credentials([("x-cache-key", "v")], frozenset(), allow=frozenset({"x-cache-key"}))
    with pytest.raises(CredentialHeaderError):
        refuse_credentials([("x-cache-key", "v")], frozenset())


def test_idempotency_keys_are_volatile() -> None:
    assert {"idempotency-key", "x-idempotency-key"} <= DEFAULT_IGNORE_HEADERS


def test_provider_headers_are_refused_before_anything_is_sent(
    drive: Driver, tmp_path: Path
) -> None:
    sent: list[Any] = []
    transport = record(drive, tmp_path / "c.jsonl", lambda r: sent.append(r))
    for name in ("x-goog-api-key", "ocp-apim-subscription-key", "x-amz-security-token"):
        with pytest.raises(CredentialHeaderError, match=f'secret_headers=\\["{name}"\\]'):
            drive.send(transport, "GET", URL, headers={name: "AIzaSyFAKE-0123456789"})
    assert sent == []
    assert not (tmp_path / "c.jsonl").exists()


#: Every word that makes a header name a credential wherever it appears in the name.
SHAPE_WORDS = (
    "password", "passwd", "pwd", "secret", "token", "jwt", "session", "csrf", "xsrf",
    "signature", "credential", "bearer", "cookie", "auth", "apikey", "api-key", "api_key",
)  # fmt: skip
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_.!#$%&'*+^`|~"


@given(
    before=st.text(_NAME_CHARS, max_size=12),
    word=st.sampled_from(SHAPE_WORDS),
    after=st.text(_NAME_CHARS, max_size=12),
    upper=st.lists(st.booleans(), max_size=40),
)
@settings(max_examples=300, derandomize=True)
def test_a_shape_word_anywhere_in_a_name_makes_it_a_credential(
    before: str, word: str, after: str, upper: list[bool]
) -> None:
    name = "".join(
        c.upper() if flip else c
        for c, flip in zip(before + word + after, upper + [False] * 40, strict=False)
    )
    assert is_credential_header(name)
    assert not is_credential_header(name, allow={name.lower()})


@given(
    parts=st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1), max_size=4),
    at=st.integers(min_value=0, max_value=4),
    separators=st.lists(st.sampled_from("-_."), min_size=5, max_size=5),
)
@settings(max_examples=200, derandomize=True)
def test_pat_as_a_whole_part_makes_a_name_a_credential(
    parts: list[str], at: int, separators: list[str]
) -> None:
    parts.insert(min(at, len(parts)), "pat")
    name = parts[0] + "".join(sep + part for sep, part in zip(separators, parts[1:], strict=False))
    assert is_credential_header(name)


def test_pat_inside_a_word_is_not_a_credential() -> None:
    for name in ("x-path", "x-patch", "x-pattern", "x-compat", "x-spat", "patch"):
        assert not is_credential_header(name)


def test_the_exceptions_hold_no_shape_word() -> None:
    # An exception must stay one: no name in it may hold a word that would make it a
    # credential in another spelling.
    for name in NOT_CREDENTIAL_HEADERS:
        assert not any(word in name for word in SHAPE_WORDS)


def test_issue_23_names_are_refused_unless_declared_or_allowed(
    drive: Driver, tmp_path: Path
) -> None:
    sent: list[Any] = []

    def answer(request: Any) -> Any:
        sent.append(request)
        return drive.lib.Response(200, text="ok")

    refusing = record(drive, tmp_path / "refused.jsonl", answer)
    for name in ISSUE_23_NAMES:
        with pytest.raises(CredentialHeaderError, match=f'secret_headers=\\["{name}"\\]'):
            drive.send(refusing, "GET", URL, headers={name: "fake-test-value-0123456789"})
    assert sent == []
    assert not (tmp_path / "refused.jsonl").exists()

    declared = record(drive, tmp_path / "declared.jsonl", answer, secret_headers=ISSUE_23_NAMES)
    drive.send(declared, "GET", URL, headers=dict.fromkeys(ISSUE_23_NAMES, "fake-test-value-01"))
    assert [dict(r.headers)[n] for r in sent for n in ISSUE_23_NAMES] == ["fake-test-value-01"] * 12
    assert "fake-test-value" not in (tmp_path / "declared.jsonl").read_text()

    allowed = record(drive, tmp_path / "allowed.jsonl", answer, allow_headers=ISSUE_23_NAMES)
    drive.send(allowed, "GET", URL, headers=dict.fromkeys(ISSUE_23_NAMES, "not-a-secret"))
    [written] = lines(tmp_path / "allowed.jsonl")
    assert {n: v for n, v in written["headers"] if n in ISSUE_23_NAMES} == dict.fromkeys(
        ISSUE_23_NAMES, "not-a-secret"
    )


def test_issue_23_names_are_allowed_by_the_plugin_ini(pytester: pytest.Pytester) -> None:
    names = "".join(f"\n    {name}" for name in ISSUE_23_NAMES)  # a linelist option
    with start_echo_server() as server:
        pytester.makepyfile(
            test_allowed=f"""
import httpx

def test_send(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("{server.url}/me", headers=dict.fromkeys({ISSUE_23_NAMES!r}, "plain"))
"""
        )
        pytester.makeini("[pytest]\nsakura_record_hosts = 127.0.0.1\n")
        pytester.runpytest("--record").assert_outcomes(failed=1)  # refused, nothing sent
        assert server.requests == []
        pytester.makeini(
            f"[pytest]\nsakura_record_hosts = 127.0.0.1\nsakura_allow_headers = {names}\n"
        )
        pytester.runpytest("--record").assert_outcomes(passed=1)
        assert len(server.requests) == 1


def test_issue_23_names_are_refused_by_the_proxy(tmp_path: Path) -> None:
    cassette = tmp_path / "proxy.jsonl"
    with start_upstream() as upstream:
        with (
            serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
            httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http,
        ):
            for name in ISSUE_23_NAMES:
                response = http.get("/v1/me", headers={name: "fake-test-value-0123456789"})
                assert response.status_code == 502
                assert response.headers["x-sakura-http-error"] == "credential"
                assert f"header {name} belongs in secret_headers" in response.text
        assert upstream.requests == []
        assert not cassette.exists()
        with (
            serve(
                cassette, upstream=upstream.url, mode="new_episodes", allow_headers=["x-session-id"]
            ) as proxy,
            httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http,
        ):
            assert http.get("/v1/me", headers={"x-session-id": "not-a-secret"}).is_success
    assert "not-a-secret" in cassette.read_text()


def test_issue_23_names_are_dropped_by_convert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "vcr.json", tmp_path / "out.jsonl"
    interaction = {
        "request": {
            "body": None,
            "headers": {
                name: [f"fake-test-value-{i:02}-0123456789"]
                for i, name in enumerate(ISSUE_23_NAMES)
            }
            | {"accept": ["*/*"]},
            "method": "GET",
            "uri": URL,
        },
        "response": {
            "body": {"string": "ok"},
            "headers": {"set-cookie2": ["session=fake-test-cookie2-value"]},
            "status": {"code": 200, "message": "OK"},
        },
    }
    source.write_text(json.dumps({"interactions": [interaction], "version": 1}))
    result = run(capsys, "convert", source, target)
    assert result.code == 0, result.err
    for name in ISSUE_23_NAMES:
        assert f"dropped request header {name} (interaction 1)" in result.err
    written = target.read_text()
    assert "fake-test-value" not in written and "fake-test-cookie2" not in written
    [exchange] = load_cassette(target).exchanges
    assert exchange.headers == (("accept", "*/*"),)
    assert exchange.response_headers == (("set-cookie2", "<redacted>"),)


def test_set_cookie2_is_redacted_like_set_cookie(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    cookies = [("set-cookie2", "session=fake-test-cookie2"), ("set-cookie", "a=fake-test-1")]
    transport = record(drive, path, lambda r: drive.lib.Response(200, headers=cookies))
    live = drive.send(transport, "GET", URL)
    assert live.headers.get_list("set-cookie2") == ["session=fake-test-cookie2"]  # live: as sent
    assert lines(path)[0]["response_headers"][:2] == [
        ["set-cookie2", "<redacted>"],
        ["set-cookie", "<redacted>"],
    ]
    # and with a declared secret, on the path that also searches for echoes
    secret_path = tmp_path / "s.jsonl"
    transport = record(
        drive,
        secret_path,
        lambda r: drive.lib.Response(200, headers=cookies),
        secret_headers=["authorization"],
    )
    drive.send(transport, "GET", URL, headers={"authorization": "Bearer fake-test-0123"})
    assert "fake-test" not in secret_path.read_text()
    findings = lint_bytes(path.read_bytes().replace(b"<redacted>", b"fake-test-cookie2", 1), path)
    assert [(f.check, f.field) for f in findings] == [
        ("set-cookie", "response_headers.set-cookie2")
    ]


def test_a_miss_never_prints_a_credential_value() -> None:
    # A cassette recorded before the header was refused still holds its value: the miss must
    # name the header, never print the key.
    key = "AIzaSyFAKE-never-printed-0123"
    recorded = Exchange("GET", URL, headers=(("x-goog-api-key", key),), status=200)
    matcher = Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset({"authorization"}))
    request = RequestData("GET", URL, (("x-goog-api-key", "AIzaSyOTHER-0000"),), b"", "h", 443)
    [(_, _, diffs)] = explain_miss(request, [recorded], matcher)
    text = "\n".join(diffs)
    assert "header x-goog-api-key: request '<hidden, 16 chars>'" in text
    assert key not in text and "AIzaSyOTHER" not in text
    assert shown_header_value("accept", "*/*") == "*/*"
    assert shown_header_value("x-thing", "v", frozenset({"x-thing"})) == "<hidden, 1 chars>"


def test_a_miss_never_prints_a_secret_query_value(drive: Driver, tmp_path: Path) -> None:
    # `session_token` has a credential shape (and is no default secret parameter); `sig` is a
    # declared secret parameter (a default one) that a cassette recorded before it was declared
    # still holds raw.
    recorded = (
        "https://api.example.test/v1?session_token=recorded-0123456789&sig=rec-sig-0123456&q=1"
    )
    path = write_cassette(tmp_path / "c.jsonl", [Exchange("GET", recorded, status=200)])
    transport = drive.transport(path, mode="none")
    live = "https://api.example.test/v1?session_token=live-value-0123456789&sig=live-sig-0123&q=2"
    with pytest.raises(CassetteMiss) as caught:
        drive.send(transport, "GET", live)
    text = str(caught.value)
    for value in ("recorded-0123456789", "rec-sig-0123456", "live-value-0123456789", "live-sig"):
        assert value not in text, text
    assert "session_token=<hidden, 21 chars>" in text
    assert "q=1" in text and "q=2" in text  # the rest of the URL still says what differs


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("*/*", "'*/*'"),
        ("x" * SHOWN_CHARS, repr("x" * SHOWN_CHARS)),
        ("y" * 1234, f"{'y' * SHOWN_HEAD!r}... (1,234 chars)"),
        (b"z" * 50, f"{b'z' * SHOWN_HEAD!r}... (50 bytes)"),
        (200, "200"),
        (None, "None"),
        (["a", "b", "c"], "['a', 'b', 'c']"),
        (["Authorization", "Bearer sk-0123456789", "x"],
         "['Authorization', <hidden, 20 chars>, <hidden, 1 chars>]"),
        (["x-session-id", 7, ["tok"]], "['x-session-id', <hidden int>, <hidden list>]"),
        (["set-cookie2", b"sid=1"], "['set-cookie2', <hidden, 5 bytes>]"),
        ({"x-api-key": "k-0123456789", "a": 1}, "{'x-api-key': <hidden, 12 chars>, 'a': 1}"),
        ([["cookie", "c=1"]], "[['cookie', <hidden, 3 chars>]]"),
        (list(range(10)), "[0, 1, 2, 3, 4, 5, ... 4 more]"),
        ([[[["deep"]]]], "[[[<list of 1>]]]"),
    ],
)  # fmt: skip
def test_shown_value_quotes_no_credential_and_no_wall_of_text(value: object, shown: str) -> None:
    assert shown_value(value) == shown


def test_shown_value_hides_what_it_is_told_is_secret() -> None:
    assert shown_value("hunter2-0123", hidden=True) == "<hidden, 12 chars>"
    assert shown_value({"a": 1}, hidden=True) == "<hidden dict>"
    assert shown_value(10**5000) == "<int too long to show>"  # more digits than str() makes


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h.test/a?q=1", "https://h.test/a?q=1"),
        ("https://h.test/a?password=pw-0123&q=1",
         "https://h.test/a?password=<hidden, 7 chars>&q=1"),
        ("https://h.test/?sig=abc&api_key=k1&key=k2",
         "https://h.test/?sig=<hidden, 3 chars>&api_key=<hidden, 2 chars>&key=<hidden, 2 chars>"),
        ("https://h.test/?X_Token=t1#frag", "https://h.test/?X_Token=<hidden, 2 chars>#frag"),
        ("https://h.test/?pass%77ord=p1", "https://h.test/?pass%77ord=<hidden, 2 chars>"),
        ("https://h.test/?token=<redacted>&token=%3Credacted%3E",
         "https://h.test/?token=<redacted>&token=%3Credacted%3E"),
        ("https://h.test/?token=&token", "https://h.test/?token=&token"),
        ("https://user:pw-0123@h.test/a", "https://<hidden, 12 chars>@h.test/a"),
        ("https://ghp_tok0123@h.test/a?b=1", "https://<hidden, 11 chars>@h.test/a?b=1"),
        ("not a url ?session=s-0123", "not a url ?session=<hidden, 6 chars>"),
    ],
)  # fmt: skip
def test_shown_url_hides_secret_query_values_and_userinfo(url: str, shown: str) -> None:
    assert shown_url(url, frozenset({"sig"})) == shown


def test_a_credential_header_value_is_shown_by_its_length_but_the_marker_as_it_is() -> None:
    assert shown_header_value("x-session-id", "s-0123") == "<hidden, 6 chars>"
    assert shown_header_value("set-cookie", "sid=1") == "<hidden, 5 chars>"
    assert shown_header_value("set-cookie", "<redacted>") == "<redacted>"
    assert shown_header_value("x-request-id", "r-1") == "r-1"
    assert names_a_secret("Set-Cookie2") and names_a_secret("x-thing", {"x-thing"})
    assert not names_a_secret("accept")


# --- finding echoes ---------------------------------------------------------------------------

TOKEN = "tok+Sakura/Secret=42é"


def redactor(*headers: tuple[str, str]) -> Redactor:
    return Redactor(headers, frozenset(name for name, _ in headers))


def test_a_cookie_value_echoed_alone_is_redacted() -> None:
    # Regression: the redactor searched only "session=..." and the part after the first space.
    r = redactor(("cookie", "theme=dark; session=s3cr3t-session-value"))
    assert r.body(b'{"session": "s3cr3t-session-value"}') == b'{"session": "<redacted>"}'
    assert r.body(b"dark mode") == b"<redacted> mode"  # each cookie's value, 4 chars or more
    assert r.text("s3cr3t-session-value") == "<redacted>"


def test_a_bare_token_echoed_without_its_scheme_is_redacted() -> None:
    # Deleting the scheme branch must fail this test: only the token is echoed.
    for scheme in ("Bearer", "Token", "token"):
        r = redactor(("authorization", f"{scheme} sk-test-bare-token-123"))
        assert r.body(b'{"token":"sk-test-bare-token-123"}') == b'{"token":"<redacted>"}'


def test_basic_credentials_are_searched_decoded_too() -> None:
    pair = base64.b64encode(b"alice:hunter2-password").decode()
    r = redactor(("authorization", f"Basic {pair}"))
    assert r.body(b"user alice:hunter2-password") == b"user <redacted>"
    assert r.body(b"pw=hunter2-password") == b"pw=<redacted>"
    assert r.text(pair) == "<redacted>"


@pytest.mark.parametrize(
    "echo",
    [
        TOKEN.encode(),  # raw UTF-8
        TOKEN.encode("latin-1"),  # raw Latin-1
        quote(TOKEN, safe="").encode(),  # URL-encoded
        re.sub("%..", lambda m: m.group().lower(), quote(TOKEN, safe="")).encode(),
        json.dumps(TOKEN)[1:-1].encode(),  # JSON-escaped, ASCII only
        json.dumps(TOKEN).replace("/", "\\/")[1:-1].encode(),  # JSON with "\/"
        base64.b64encode(TOKEN.encode()),  # base64
        base64.urlsafe_b64encode(TOKEN.encode()),  # URL-safe base64
    ],
)
def test_encoded_echoes_are_redacted(echo: bytes) -> None:
    r = redactor(("x-api-key", TOKEN))
    written = r.body(b"before " + echo + b" after")
    assert echo not in written
    assert written.startswith(b"before ") and written.endswith(b" after")


def test_an_echo_inside_a_longer_base64_text_is_redacted_at_any_alignment() -> None:
    r = redactor(("x-api-key", "sk-test-aligned-0123456789"))
    for prefix in (b"", b"u", b"us", b"use", b"user:"):
        encoded = base64.b64encode(prefix + b"sk-test-aligned-0123456789" + b":tail")
        written = r.body(encoded)
        assert b"<redacted>" in written, prefix
        assert b"sk-test-aligned-0123456789" not in base64.b64decode(
            written.replace(b"<redacted>", b""), validate=False
        )


def test_a_declared_charset_is_searched() -> None:
    r = redactor(("x-api-key", TOKEN))
    echo = TOKEN.encode("utf-16-le")
    assert echo in r.body(echo)  # not a charset anyone declared
    assert echo not in r.body(echo, "utf-16")


def test_header_text_decoded_as_latin1_is_searched() -> None:
    r = redactor(("x-api-key", TOKEN))
    assert r.text(TOKEN.encode().decode("latin-1")) == "<redacted>"


def test_a_url_gets_the_url_encoded_marker() -> None:
    r = redactor(("x-api-key", TOKEN))
    assert r.url(f"https://cb.example.test/?t={quote(TOKEN, safe='')}") == (
        "https://cb.example.test/?t=%3Credacted%3E"
    )
    assert str(httpx.URL("https://cb.example.test/?t=<redacted>")).endswith("t=%3Credacted%3E")


def test_a_truncated_body_loses_a_partial_secret() -> None:
    r = redactor(("authorization", "Bearer sk-test-secret-value"))
    assert r.cut_partial(b'{"tok":"sk-test-se') == b'{"tok":"'
    assert r.cut_partial(b'{"tok":"sk-test-secret-value"}') == b'{"tok":"sk-test-secret-value"}'
    assert r.cut_partial(b'{"n":1}') == b'{"n":1}'


def test_short_values_and_no_secrets() -> None:
    assert not redactor(("x-api-key", "abc"))
    assert redactor(("x-api-key", "abc")).body(b"abc") == b"abc"
    assert not Redactor([("accept", "long-enough-value")], frozenset())


def test_secret_memory_keeps_earlier_secrets() -> None:
    memory = SecretMemory()
    memory.learn(secrets_of([("authorization", "Bearer first-token-1234")], {"authorization"}))
    later = memory.redactor  # a cross-origin redirect drops authorization
    assert later.url("https://other.example.test/cb?code=first-token-1234").endswith(
        "code=%3Credacted%3E"
    )


def test_secret_memory_keeps_every_secret_for_its_life() -> None:
    # A signature that changes on every request: every one of them stays searched for, and the
    # search set, extended one secret at a time, is the one built from all of them at once.
    memory = SecretMemory()
    signatures = [f"signature-{n:04d}" for n in range(300)]
    for signature in signatures:
        memory.learn({signature}).body(b"searched in UTF-16 from the start", "utf-16")
        assert memory.learn({signature}) is memory.redactor  # the same request again
    later = memory.redactor
    assert later.secrets == frozenset(signatures)
    assert all(later.text(s) == "<redacted>" for s in signatures)
    whole = Redactor((), (), signatures)
    assert later.body(b"x signature-0000 y", "utf-16") == whole.body(b"x signature-0000 y")
    assert later._needles is not None and whole._needles is not None
    assert later._needles.text == whole._needles.text
    assert later._needles.bytes_for("utf-16") == whole._needles.bytes_for("utf-16")


# --- through the transport --------------------------------------------------------------------


def test_a_cookie_echoed_bare_never_reaches_the_file(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    transport = record(
        drive,
        path,
        lambda r: drive.lib.Response(200, json={"session": "s3cr3t-session-value"}),
        secret_headers=["cookie"],
    )
    drive.send(transport, "GET", URL, headers={"cookie": "theme=ok; session=s3cr3t-session-value"})
    assert b"s3cr3t-session-value" not in path.read_bytes()
    assert lines(path)[0]["response_body"] == '{"session":"<redacted>"}'


def test_encoded_echoes_never_reach_the_file(drive: Driver, tmp_path: Path) -> None:
    token = "tok+Sakura/Secret=42"
    quoted = quote(token, safe="")

    def handler(request: Any) -> Any:
        if request.url.host == "api.example.test":
            return drive.lib.Response(
                302,
                headers={"location": f"https://cb.example.test/done?t={quoted}"},
                text=f"moved; {base64.b64encode(token.encode()).decode()}",
            )
        raise drive.lib.ConnectError(f"refused for {request.url}")

    path = tmp_path / "c.jsonl"
    transport = record(drive, path, handler, secret_headers=["x-api-key"], record_errors=True)
    with pytest.raises(drive.lib.ConnectError):
        drive.send(transport, "GET", URL, headers={"x-api-key": token}, follow_redirects=True)
    data = path.read_bytes()
    for form in (token, quoted, base64.b64encode(token.encode()).decode()):
        assert form.encode() not in data
    first, second = lines(path)
    assert ["location", "https://cb.example.test/done?t=<redacted>"] in first["response_headers"]
    # While recording the client follows the live location; the next hop is written redacted.
    assert second["url"] == "https://cb.example.test/done?t=%3Credacted%3E"
    assert second["error"]["message"] == "refused for https://cb.example.test/done?t=<redacted>"
    # The redirect replays: the redacted location leads to the URL written.
    with pytest.raises(drive.lib.ConnectError):
        drive.send(
            drive.transport(path, secret_headers=["x-api-key"]),
            "GET",
            URL,
            headers={"x-api-key": token},
            follow_redirects=True,
        )


def test_a_latin1_echo_never_reaches_the_file(drive: Driver, tmp_path: Path) -> None:
    token = "clé-secrète-0042"
    path = tmp_path / "c.jsonl"
    body = f"echo: {token}".encode("latin-1")
    transport = record(
        drive,
        path,
        lambda r: drive.lib.Response(
            200, headers={"content-type": "text/plain; charset=iso-8859-1"}, content=body
        ),
        secret_headers=["x-api-key"],
    )
    headers = {"x-api-key": token.encode("utf-8")}
    drive.send(transport, "GET", URL, headers=headers)
    assert lines(path)[0]["response_body"] == "echo: <redacted>"


# --- content decoding -------------------------------------------------------------------------


def brotli_with_literal(token: bytes) -> bytes:
    """A small brotli stream that holds `token` literally (quality 0 stores short input)."""
    raw = brotli.compress(b'{"t":"' + token + b'"}', quality=0)
    assert token in raw
    return raw


@pytest.mark.parametrize("bounded", [True, False], ids=["brotli", "brotlicffi-like"])
def test_a_brotli_body_holding_the_token_literally_records_and_replays(
    drive: Driver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounded: bool
) -> None:
    # Regression: with a brotli library that cannot cap its output (brotlicffi), `br` bodies
    # were stored raw, redaction rewrote the compressed bytes, and recording and replay both
    # failed with DecodingError.
    monkeypatch.setattr(_decoding, "_brotli_can_bound", lambda module: bounded)
    token = b"sk-test-brotli-literal-1"
    raw = brotli_with_literal(token)
    path = tmp_path / "c.jsonl"
    transport = record(
        drive,
        path,
        lambda r: drive.lib.Response(200, headers={"content-encoding": "br"}, content=raw),
        secret_headers=["authorization"],
    )
    headers = {"authorization": f"Bearer {token.decode()}"}
    drive.send(transport, "GET", URL, headers=headers)
    assert token not in path.read_bytes()
    assert lines(path)[0]["response_body"] == '{"t":"<redacted>"}'
    replayed = drive.send(drive.transport(path, secret_headers=["authorization"]), "GET", URL)
    assert replayed.json() == {"t": "<redacted>"}


def test_brotli_without_a_bounded_decoder_uses_httpx_s_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # brotlicffi (and brotli < 1.2) cannot cap their output: httpx's own BrotliDecoder is fed
    # in slices instead, and a bomb still stops at the limit.
    monkeypatch.setattr(_decoding, "_brotli_can_bound", lambda module: False)
    body = b"hello brotli " * 1000
    decoder = BodyDecoder((("content-encoding", "br"),), 1 << 20)
    assert decoder.feed(brotli.compress(body)) + decoder.tail() == body
    bomb = brotli.compress(b"\0" * (8 << 20))
    decoder = BodyDecoder((("content-encoding", "br"),), 1 << 20)
    with pytest.raises(_decoding.BodyTooLargeError):
        decoder.feed(bomb)


def bad_crc_gzip(body: bytes) -> bytes:
    raw = bytearray(gzip.compress(body, mtime=0))
    raw[-8] ^= 0xFF  # the CRC32 in the trailer
    return bytes(raw)


@pytest.mark.parametrize(
    ("encoding", "content"),
    [
        ("x-custom", b"\x89\xffsk-test-never-seen-0001"),
        ("gzip", bad_crc_gzip(b'{"t":"sk-test-never-seen-0001"}')),
        ("br", b"\x8b\x03\x80not really brotli sk-test-never-seen-0001"),
    ],
    ids=["unknown", "bad-crc", "corrupt-br"],
)
def test_an_undecodable_body_with_a_secret_is_refused(
    drive: Driver, tmp_path: Path, encoding: str, content: bytes
) -> None:
    path = tmp_path / "c.jsonl"
    transport = record(
        drive,
        path,
        lambda r: drive.lib.Response(
            200, headers={"content-encoding": encoding}, stream=drive.lib.ByteStream(content)
        ),
        secret_headers=["authorization"],
    )
    with pytest.raises(UndecodableBodyError, match="accept-encoding: identity") as caught:
        drive.send(
            transport, "GET", URL, headers={"authorization": "Bearer sk-test-never-seen-0001"}
        )
    assert encoding in caught.value.reason
    assert not path.exists()


def test_check_redactable_only_refuses_when_a_secret_may_be_inside() -> None:
    decoder = BodyDecoder((("content-encoding", "x-custom"),), 1024)
    assert decoder.feed(b"abc") == b"abc"
    check_redactable(decoder, redactor(("accept", "x")))  # no declared secret: kept raw
    with pytest.raises(UndecodableBodyError, match="x-custom cannot be decoded"):
        check_redactable(decoder, redactor(("authorization", "Bearer long-token")))


# --- stream_through closed early ----------------------------------------------------------------


class AsyncChunks:
    """An async iterable of chunks that needs no closing (an async generator would)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> AsyncChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


def chunked(drive: Driver, chunks: list[bytes]) -> Any:
    return AsyncChunks(chunks) if drive.is_async else iter(chunks)


def read_first_chunk(drive: Driver, transport: Any, headers: dict[str, str]) -> bytes:
    """Open a stream, read one chunk, close it early."""
    if not drive.is_async:
        with (
            drive.lib.Client(transport=transport) as client,
            client.stream("GET", URL, headers=headers) as response,
        ):
            return bytes(next(response.iter_raw()))

    async def go() -> bytes:
        async with (
            drive.lib.AsyncClient(transport=transport) as client,
            client.stream("GET", URL, headers=headers) as response,
        ):
            chunks = response.aiter_raw()
            try:
                return bytes(await chunks.__anext__())
            finally:
                await chunks.aclose()

    result: bytes = anyio.run(go, backend=drive.flavor)
    return result


@IGNORE_HTTPX_ASYNCGEN  # httpx's own stream of the mocked response, left to the collector
def test_stream_through_closed_early_writes_no_secret_prefix(drive: Driver, tmp_path: Path) -> None:
    token = "sk-test-secret-value-77"
    path = tmp_path / "c.jsonl"
    transport = record(
        drive,
        path,
        lambda r: drive.lib.Response(
            200, content=chunked(drive, [b'{"tok":"sk-test-se', b'cret-value-77"}'])
        ),
        secret_headers=["authorization"],
        stream_through=True,
    )
    first = read_first_chunk(drive, transport, {"authorization": f"Bearer {token}"})
    assert first == b'{"tok":"sk-test-se'
    drive.close(transport)
    [exchange] = lines(path)
    assert exchange["truncated"] is True
    assert exchange["response_body"] == '{"tok":"'


def test_no_secret_no_cut(lib: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        path,
        outer=lib.MockTransport(lambda r: lib.Response(200, content=iter([b"abc", b"def"]))),
        mode="new_episodes",
        stream_through=True,
    )
    with lib.Client(transport=transport) as client, client.stream("GET", URL) as response:
        next(response.iter_raw())
    assert lines(path)[0]["response_body"] == "abc"


def test_a_miss_with_a_secret_in_the_body_shows_it_redacted(
    lib: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(path, secret_headers=["authorization"])
    with pytest.raises(CassetteMiss) as caught:
        lib.Client(transport=transport).post(
            URL,
            headers={"authorization": "Bearer sk-test-in-body-1"},
            json={"k": "sk-test-in-body-1"},
        )
    assert "sk-test-in-body-1" not in str(caught.value)


def test_diff_never_prints_a_credential_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def cassette(name: str, key: str) -> Path:
        headers = (("x-goog-api-key", key), ("accept", "*/*"))
        exchange = Exchange("GET", URL, headers=headers, id="paired-by-id")
        return write_cassette(tmp_path / name, [exchange])

    old, new = cassette("old.jsonl", "AIzaSyOLD-0000000001"), cassette("new.jsonl", "AIzaSyNEW-1")
    for argv in (("diff", old, new), ("diff", "--json", old, new)):
        result = run(capsys, *argv)
        assert "x-goog-api-key" in result.out
        assert "AIzaSy" not in result.out + result.err


def test_convert_drops_every_credential_header(tmp_path: Path) -> None:
    source, target = tmp_path / "vcr.json", tmp_path / "out.jsonl"
    request = {
        "method": "GET",
        "uri": URL,
        "body": None,
        "headers": {"X-Goog-Api-Key": ["AIzaSyFAKE-convert-0001"], "Accept": ["*/*"]},
    }
    response = {"status": {"code": 200}, "headers": {}, "body": {"string": ""}}
    source.write_text(json.dumps({"interactions": [{"request": request, "response": response}]}))
    assert main(["convert", str(source), str(target)]) == 0
    assert b"AIzaSyFAKE" not in target.read_bytes()


def test_lint_names_credential_headers(tmp_path: Path) -> None:
    exchange = Exchange(
        "GET",
        URL,
        headers=(("x-goog-api-key", "AIzaSyFAKE-lint-000001"), ("x-cache-key", "page-1-v2")),
    )
    findings = lint_bytes(encode_header() + encode_exchange(exchange), tmp_path / "c.jsonl")
    assert [(f.severity, f.field) for f in findings if f.check == "credential-header"] == [
        ("error", "headers.x-goog-api-key"),
        ("warning", "headers.x-cache-key"),  # a credential's shape: perhaps allowed on purpose
    ]


@pytest.mark.parametrize(
    ("name", "value", "searched"),
    [
        ("cookie", "__cf_bm=REDACTED", set()),
        (
            "cookie",
            "__cf_bm=REDACTED; session=s3cr3t-value",
            {"__cf_bm=REDACTED; session=s3cr3t-value", "session=s3cr3t-value", "s3cr3t-value"},
        ),
        ("authorization", "Bearer FILTERED", set()),
        ("authorization", "Bearer [scrubbed]", set()),
        ("x-api-key", "sk-ant-REDACTED", set()),
        # Only a marker word makes one: a word or a shape of a placeholder may be a real
        # secret (a test server's password, a PIN), so it is still searched for.
        ("x-api-key", "<API_KEY>", {"<API_KEY>"}),
        ("x-api-key", "000000", {"000000"}),
        (
            "authorization",
            "Basic dXNlcjpwYXNzd2Q=",
            {"Basic dXNlcjpwYXNzd2Q=", "dXNlcjpwYXNzd2Q=", "user:passwd", "passwd"},
        ),
        ("x-api-key", "secret", {"secret"}),
    ],
)
def test_placeholders_another_tool_wrote_are_not_secrets(
    name: str, value: str, searched: set[str]
) -> None:
    # Searching for REDACTED would rewrite every REDACTED-RAY and req_REDACTED of the responses.
    assert secrets_of([(name, value)], {name}) == searched
    redactor = Redactor([(name, value)], {name})
    assert (
        redactor.text("cf-ray: REDACTED-RAY, req_FILTERED") == "cf-ray: REDACTED-RAY, req_FILTERED"
    )


@pytest.mark.parametrize("library", ["httpx", "requests", "yarl"])
def test_a_secret_in_a_url_a_client_library_escaped_is_redacted(library: str) -> None:
    # Each library escapes a URL it is given raw (a redirect's location) by its own rules:
    # httpx by the WHATWG sets (`|`, `^`, `:` kept), requests and yarl keep other characters,
    # yarl writes a query's space as `+`; none of these is a form `quote` writes.
    import requests.utils
    import yarl

    build = {
        "httpx": lambda url: str(httpx.URL(url)),
        "requests": requests.utils.requote_uri,
        "yarl": lambda url: str(yarl.URL(url)),
    }[library]
    for secret in ["ab:cd ef|gh12:xy", "pass word@x^{y}`q", "tok:é€xyz12", "a'b c(d)*e;f=g$"]:
        r = redactor(("x-api-key", secret))
        url = build(f"https://cb.example.test/p/{secret}/end?t={secret}&u=1#{secret}")
        assert secret not in url  # escaped by the library
        written = r.url(url)
        assert written.count("%3Credacted%3E") == 3, (url, written)


def test_a_body_echoing_its_own_secret_query_value_replays(drive: Driver, tmp_path: Path) -> None:
    # Recording writes the echo as <redacted>; matching searched only for the secret headers'
    # values, so the request recorded never matched again, and its miss printed the value.
    secret = "sk-query-echo-0123456789abcdef"
    url = f"https://api.example.test/v1?api_key={secret}"
    body = json.dumps({"key": secret, "n": 1}).encode()
    path = tmp_path / "c.jsonl"
    outer = drive.mock(lambda request: drive.lib.Response(200, text="ok"))
    recorder = drive.transport(path, outer=outer, mode="new_episodes")
    drive.send(recorder, "POST", url, content=body)
    drive.close(recorder)
    assert secret not in path.read_text()
    replayer = drive.transport(path, mode="none")
    assert drive.send(replayer, "POST", url, content=body).status_code == 200
    drive.close(replayer)
    missing = drive.transport(path, mode="none")
    with pytest.raises(CassetteMiss) as caught:
        drive.send(missing, "POST", url, content=body.replace(b"1", b"2"))
    drive.close(missing)
    assert secret not in str(caught.value)
    assert "<redacted>" in str(caught.value)
