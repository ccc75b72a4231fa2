"""Secret fuzzing: random secret names and values through every recording path, asserting that
no form of the value a server plausibly echoes ever reaches the cassette or a message.

For each example a declared secret header carries a random value (any printable Unicode, with
a random nonce so it cannot occur by chance), the scripted server echoes it back in every form
(raw UTF-8 and Latin-1, URL-encoded, JSON-escaped, base64, inside a longer base64 text) in
headers and bodies, and the test then searches the file's bytes and every decoded field of
every exchange for every form, and every message a sakura-http error carried.

The paths: plain, gzip, deflate, br and zstd bodies, streamed chunks split at random points,
`stream_through` closed early, a redirect to another origin, a recorded transport fault, mode
"all", and a miss.  Examples per path: `FUZZ_EXAMPLES` (a few seconds in all);
``SAKURA_HTTP_LONG_TESTS=1`` runs `LONG_FUZZ_EXAMPLES` per path.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import brotli
import httpx
import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sakura_http import CassetteMiss, RecordingTransport
from sakura_http._cassette import load_cassette

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"
FUZZ_EXAMPLES = 15
LONG_FUZZ_EXAMPLES = 300
FUZZ = settings(
    max_examples=LONG_FUZZ_EXAMPLES if LONG else FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=not LONG,  # the default run is the same on every machine; the long one explores
)

URL = "https://api.example.test/v1/items"
PLACEHOLDER_WORDS = ("redacted", "filtered", "scrubbed", "sanitized", "censored", "placeholder")
PATHS = [
    "plain", "gzip", "deflate", "br", "zstd", "streamed", "stream-through-early-close",
    "redirect", "fault", "mode-all", "miss",
]  # fmt: skip

# Printable text of any script; no controls, no surrogates, no line separators.
_CHARS = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp", "Co", "Cn"))
_COOKIE_CHARS = st.characters(
    codec="utf-8",
    exclude_categories=("Cc", "Cs", "Zl", "Zp", "Zs", "Co", "Cn"),
    exclude_characters=';,"\\',
)


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, str, str]:
    """(header name, header value, the secret inside it)."""
    name = draw(
        st.sampled_from(["authorization", "x-api-key", "cookie", "x-goog-api-key"])
        | st.from_regex(r"x-[a-z]{1,8}-(key|token|secret)", fullmatch=True)
    )
    nonce = draw(st.from_regex(r"[0-9a-f]{6}", fullmatch=True))
    chars = _COOKIE_CHARS if name == "cookie" else _CHARS
    left, right = draw(st.text(chars, max_size=12)), draw(st.text(chars, max_size=12))
    secret = (left + nonce + right).strip()
    # A value holding a placeholder's marker word (hypothesis draws `<redacted>` from the
    # source) is taken for one another tool wrote, not for a secret (`_placeholders`).
    assume(not any(word in secret.lower() for word in PLACEHOLDER_WORDS))
    if name == "authorization":
        scheme = draw(st.sampled_from(["Bearer", "Token", "Basic"]))
        if scheme == "Basic":
            pair = base64.b64encode(f"user:{secret}".encode()).decode()
            return name, f"Basic {pair}", secret
        return name, f"{scheme} {secret}", secret
    if name == "cookie":
        return name, f"theme=ok; session={secret}", secret
    return name, secret, secret


def forms(secret: str) -> set[bytes]:
    """Every form of `secret` that must never be on disk or in a message."""
    data = secret.encode()
    texts = {
        secret,
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        orjson.dumps(secret).decode()[1:-1],
        base64.b64encode(data).decode(),
        base64.urlsafe_b64encode(data).decode(),
    }
    out = {t.encode() for t in texts}
    with contextlib.suppress(UnicodeEncodeError):
        out.add(secret.encode("latin-1"))
    return out


def echoes(secret: str) -> str:
    """Text in which the secret is echoed in every form, each on its own line."""
    lines = [
        secret,
        quote(secret, safe=""),
        re.sub("%..", lambda m: m.group().lower(), quote(secret, safe="")),
        quote_plus(secret),
        json.dumps({"token": secret}),
        json.dumps({"token": secret}, ensure_ascii=False),
        base64.b64encode(secret.encode()).decode(),
        base64.urlsafe_b64encode(secret.encode()).decode().rstrip("="),
        base64.b64encode(f"prefix:{secret}:suffix".encode()).decode(),
    ]
    return "\n".join(lines) + "\n"


def echo_headers(secret: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"x-echo-raw", secret.encode()),
        (b"x-echo-quoted", quote(secret, safe="").encode()),
        (b"set-cookie", f"session={quote(secret, safe='')}".encode()),
    ]


def compress(encoding: str, data: bytes) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data, mtime=0)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        return bytes(brotli.compress(data))
    return bytes(zstandard.ZstdCompressor().compress(data))


def written(path: Path) -> Iterator[tuple[str, bytes]]:
    """Everything written: the raw file, and each decoded field of each exchange."""
    yield "file", path.read_bytes()
    for number, exchange in enumerate(load_cassette(path).exchanges, 1):
        fields: list[tuple[str, str | bytes]] = [
            ("url", exchange.url),
            ("body", exchange.body),
            ("response_body", exchange.response_body),
        ]
        fields += [(f"headers.{n}", v) for n, v in exchange.headers]
        fields += [(f"response_headers.{n}", v) for n, v in exchange.response_headers]
        if exchange.error is not None:
            fields.append(("error", exchange.error.message))
        for field, value in fields:
            if isinstance(value, str):
                yield f"#{number} {field}", value.encode()
                # A header httpx decoded as Latin-1 holds the bytes it arrived as.
                yield f"#{number} {field} (as Latin-1)", value.encode("latin-1", "ignore")
            else:
                yield f"#{number} {field}", value


class Scenario:
    """One recording run: the scripted server, and everything that was said about it."""

    def __init__(self, path: Path, name: str, value: str, secret: str, cut: int) -> None:
        self.path = path
        self.name, self.value, self.secret, self.cut = name, value, secret, cut
        self.messages: list[str] = []

    def handler(self, route: str) -> Any:
        secret, body = self.secret, echoes(self.secret).encode()

        def handle(request: httpx.Request) -> httpx.Response:
            if route in ("gzip", "deflate", "br", "zstd"):
                headers = [*echo_headers(secret), (b"content-encoding", route.encode())]
                return httpx.Response(200, headers=headers, content=compress(route, body))
            if route in ("streamed", "stream-through-early-close"):
                cut = min(self.cut, len(body))
                chunks = [body[:cut], body[cut:]]
                if route == "stream-through-early-close":
                    # The first chunk ends inside the secret.
                    raw = secret.encode()
                    chunks = [b"head " + raw[: max(1, len(raw) // 2)], raw + b" tail\n"]
                return httpx.Response(200, headers=echo_headers(secret), content=iter(chunks))
            if route == "redirect" and request.url.host == "api.example.test":
                location = f"https://cb.example.test/next?t={quote(secret, safe='')}"
                return httpx.Response(302, headers={"location": location})
            if route == "redirect":
                return httpx.Response(200, text=f"you asked for {request.url}")
            if route == "fault":
                raise httpx.ConnectError(f"refused {secret} {quote(secret, safe='')}")
            latin = [(b"content-type", b"text/plain; charset=iso-8859-1")]
            try:
                latin_body = body + b"latin-1: " + secret.encode("latin-1") + b"\n"
                latin.append((b"x-echo-latin1", secret.encode("latin-1")))
            except UnicodeEncodeError:
                latin_body = body
            return httpx.Response(200, headers=echo_headers(secret)[1:] + latin, content=latin_body)

        return handle

    def run(self, route: str) -> None:
        headers = [(self.name.encode(), self.value.encode())]
        transport = RecordingTransport(
            self.path,
            outer=httpx.MockTransport(self.handler(route)),
            mode="all" if route == "mode-all" else "new_episodes",
            secret_headers=[self.name],
            record_errors=True,
            stream_through=route == "stream-through-early-close",
        )
        client = httpx.Client(transport=transport, follow_redirects=True)
        try:
            if route == "stream-through-early-close":
                with client.stream("GET", URL, headers=headers) as response:
                    next(response.iter_raw())
            elif route == "miss":
                client.get(URL, headers=headers)
                replay = RecordingTransport(self.path, secret_headers=[self.name])
                httpx.Client(transport=replay).post(
                    URL, headers=headers, json={"q": self.secret, "n": 1}
                )
            else:
                client.get(URL, headers=headers)
        except CassetteMiss as exc:
            if route != "miss":
                raise
            self.messages += [str(exc), *exc.nearest]
        except httpx.ConnectError:
            if route != "fault":  # the live error is the caller's; only the file must be clean
                raise
        finally:
            transport.close()

    def check(self, route: str) -> None:
        assert self.path.exists(), "nothing was recorded"
        for where, data in written(self.path):
            for form in forms(self.secret):
                assert form not in data, f"{route}: {form!r} in {where}"
        for message in self.messages:
            for form in forms(self.secret):
                assert form.decode("utf-8", "replace") not in message, f"{route}: in a message"
        if route == "stream-through-early-close":
            [exchange] = load_cassette(self.path).exchanges
            raw = self.secret.encode()
            body = exchange.response_body
            assert exchange.truncated
            assert not any(body.endswith(raw[:k]) for k in range(1, len(raw) + 1))


@pytest.mark.parametrize("route", PATHS)
@FUZZ
@given(secret=secrets(), cut=st.integers(min_value=0, max_value=400))
def test_no_form_of_a_secret_reaches_the_file_or_a_message(
    route: str, secret: tuple[str, str, str], cut: int
) -> None:
    name, value, raw = secret
    with tempfile.TemporaryDirectory() as folder:
        scenario = Scenario(Path(folder) / "c.jsonl", name, value, raw, cut)
        scenario.run(route)
        scenario.check(route)


# --- a long session: many tokens, two transports, a redirect chain -------------------------------
# At least 50 random secrets go through one transport of a cassette; then a redirect chain
# crosses origins, each hop through the transport mounted for its origin (two transports of the
# same cassette), each `location` echoing an earlier token, the last answer echoing others in
# every form.  Nothing of any of them may reach the file: the session remembers every secret
# any of its users saw, for its life.  `SESSION_EXAMPLES` sessions in the default run,
# `LONG_SESSION_EXAMPLES` with ``SAKURA_HTTP_LONG_TESTS=1``.

SESSION_EXAMPLES = 3
LONG_SESSION_EXAMPLES = 60
SESSION_FUZZ = settings(
    max_examples=LONG_SESSION_EXAMPLES if LONG else SESSION_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not LONG,
)
API, CALLBACK = "https://api.example.test", "https://cb.example.test"


@SESSION_FUZZ
@given(
    tokens=st.lists(secrets(), min_size=50, max_size=60, unique_by=lambda t: t[2]),
    picks=st.lists(st.integers(min_value=0, max_value=49), min_size=4, max_size=4),
)
def test_no_token_of_a_long_session_reaches_the_file(
    tokens: list[tuple[str, str, str]], picks: list[int]
) -> None:
    raw = [secret for _, _, secret in tokens]
    first, second, third, echoed = (raw[n] for n in picks)

    def api(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/login":
            return httpx.Response(302, headers={"location": f"{CALLBACK}/hop?t={quote(first)}"})
        if request.url.path == "/final":
            return httpx.Response(200, text=echoes(echoed) + echoes(third))
        return httpx.Response(200, headers=echo_headers(raw[int(request.url.path[7:])]))

    def callback(request: httpx.Request) -> httpx.Response:
        location = f"{API}/final?t={quote(second, safe='')}&back={quote(request.url.path)}"
        return httpx.Response(302, headers={"location": location}, text=echoes(first))

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "session.jsonl"
        options: dict[str, Any] = {
            "mode": "new_episodes",
            # (`cookie` too: the client's jar sends back the cookies the echoes set)
            "secret_headers": sorted({"cookie", *(name for name, _, _ in tokens)}),
        }
        mounts: dict[str, Any] = {
            API: RecordingTransport(path, outer=httpx.MockTransport(api), **options),
            CALLBACK: RecordingTransport(path, outer=httpx.MockTransport(callback), **options),
        }
        with httpx.Client(mounts=mounts, follow_redirects=True) as client:
            for n, (name, value, _) in enumerate(tokens):
                client.get(f"{API}/items/{n}", headers=[(name.encode(), value.encode())])
            name, value, _ = tokens[-1]
            final = client.get(f"{API}/login", headers=[(name.encode(), value.encode())])
        assert final.status_code == 200 and len(final.history) == 2
        assert len(load_cassette(path).exchanges) == len(tokens) + 3
        never = {form for secret in raw for form in forms(secret)}
        for where, data in written(path):
            for form in never:
                assert form not in data, f"{form!r} in {where}"


# --- a secret in a URL the client built ---------------------------------------------------------
# A redirect's `location` echoes a token raw; the client escapes what its own URL parser escapes
# (httpx, as browsers do: only a space, quotes, `<`, `>` and `#` in a query), so the next hop's
# URL holds the token in a form no `urllib.parse.quote` call writes: `ab:cd%20ef|gh`.

URL_SECRETS = ["ab:cd ef|gh12:xy", "pass word@host/x^{y}", "100% sure=yes;ok$!", "a'b c(d)*e"]


@pytest.mark.parametrize("where", ["query", "path", "fragment"])
@pytest.mark.parametrize("secret", URL_SECRETS)
def test_a_secret_in_a_url_the_client_built_is_redacted(
    tmp_path: Path, secret: str, where: str
) -> None:
    location = {"query": "/next?t={}", "path": "/next/{}/end", "fragment": "/next#{}"}[where]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "api.example.test":
            return httpx.Response(302, headers={"location": CALLBACK + location.format(secret)})
        return httpx.Response(200, text="ok")

    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        path, outer=httpx.MockTransport(handle), mode="new_episodes", secret_headers=["x-api-key"]
    )
    with httpx.Client(transport=transport, follow_redirects=True) as client:
        response = client.get(URL, headers={"x-api-key": secret})
    assert response.status_code == 200
    written_url = load_cassette(path).exchanges[1].url
    assert "%3Credacted%3E" in written_url
    for where_written, data in written(path):
        for form in forms(secret) | {str(response.url).encode()}:
            assert form not in data, f"{form!r} in {where_written}"


# --- the proxy's answers and logs ---------------------------------------------------------------
# What the proxy answers a client and logs (both end in CI logs) names the request's URL; a
# secret query value in it is printed as its length, as in every other message.

PROXY_SECRET = "sk-proxy-query-0123456789abcdef"


@pytest.mark.parametrize("case", ["unreachable upstream", "unknown prefix", "path in forward"])
def test_the_proxy_never_prints_a_secret_query_value(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    from sakura_http.proxy import serve

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{unused.getsockname()[1]}"  # bound, never listening
        options: dict[str, Any] = {
            "unreachable upstream": {"upstream": down},
            "unknown prefix": {"upstream": {"api": down}},
            "path in forward": {},
        }[case]
        target = f"/other/v1?q=1&api_key={PROXY_SECRET}&password={PROXY_SECRET}x"
        with (
            caplog.at_level(logging.WARNING, logger="sakura_http.proxy"),
            serve(tmp_path / "p.jsonl", mode="new_episodes", **options) as proxy,
            httpx.Client(base_url=proxy.url, timeout=60.0) as client,
        ):
            response = client.get(target)
    assert response.status_code in (400, 502)
    assert "api_key=" in response.text  # the URL is named, its secret values hidden
    for printed in (response.text, caplog.text):
        assert PROXY_SECRET not in printed


def test_the_proxy_replays_a_body_echoing_its_own_secret_query_value(tmp_path: Path) -> None:
    # Written with the echo as <redacted>, it must match as written (it missed on replay).
    from sakura_http.proxy import serve
    from tests.proxy_support import start_upstream

    target = f"/v1/items?api_key={PROXY_SECRET}"
    body = json.dumps({"key": PROXY_SECRET}).encode()
    path = tmp_path / "p.jsonl"
    with start_upstream() as upstream:
        for mode in ("new_episodes", "none"):
            with (
                serve(path, upstream=upstream.url, mode=mode) as proxy,
                httpx.Client(base_url=proxy.url, timeout=60.0) as client,
            ):
                response = client.post(target, content=body)
            assert response.status_code == 200, response.text
            assert PROXY_SECRET not in path.read_text()
        assert len(upstream.requests) == 1


@pytest.mark.parametrize("codec", ["utf-16", "utf-32"])
def test_a_stream_cut_short_inside_a_secret_in_a_body_its_byte_order_mark_tells(
    tmp_path: Path, codec: str
) -> None:
    # No charset declared: the byte order mark says UTF-16 (or 32), which the search of a whole
    # body honoured but the cut of a body closed early did not, so half the secret was written.
    secret = "sk-live-0123456789abcdefXYZ"
    data = f"data {secret} end".encode(codec)
    cut = len(f"data {secret[:14]}".encode(codec))  # after 14 characters of the secret

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([data[:cut], data[cut:]]))

    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        path,
        outer=httpx.MockTransport(handle),
        mode="new_episodes",
        secret_headers=["x-api-key"],
        stream_through=True,
    )
    with (
        httpx.Client(transport=transport) as client,
        client.stream("GET", URL, headers={"x-api-key": secret}) as response,
    ):
        next(response.iter_raw())
    [exchange] = load_cassette(path).exchanges
    assert exchange.truncated
    # (cut where any encoding's form could begin, so the last code unit may be cut in half)
    text = exchange.response_body.decode(codec, "ignore")
    assert text.rstrip() == "data", text
