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
from hypothesis import HealthCheck, given, settings
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

    def written(self) -> Iterator[tuple[str, bytes]]:
        """Everything written: the raw file, and each decoded field of each exchange."""
        yield "file", self.path.read_bytes()
        for number, exchange in enumerate(load_cassette(self.path).exchanges, 1):
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

    def check(self, route: str) -> None:
        assert self.path.exists(), "nothing was recorded"
        for where, data in self.written():
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
