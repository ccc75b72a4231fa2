"""The openai SDK streaming through the proxy in reverse mode, against a fake provider on
127.0.0.1: the stream is recorded with its chunk boundaries, replays offline event by event,
and a miss reaches the SDK as a 502 it does not retry (``x-should-retry: false``).

The SDK is a dev dependency of the LLM helpers; without it this module is skipped (the same SSE
path is covered with httpx-sse in tests/test_proxy.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from sakura_http.proxy import serve
from tests.proxy_support import HANG_GUARD
from tests.servers import _QuietServer, _serving

openai = pytest.importorskip("openai")

WORDS = ["Hello", ", ", "proxy", "!"]


def _chunk(n: int, delta: dict[str, str], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def sse_chunks() -> list[bytes]:
    chunks = [_chunk(0, {"role": "assistant", "content": ""})]
    chunks += [_chunk(i + 1, {"content": word}) for i, word in enumerate(WORDS)]
    return [*chunks, _chunk(len(WORDS) + 1, {}, "stop"), b"data: [DONE]\n\n"]


class _Provider(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions`` with ``"stream": true``: one HTTP chunk per SSE event."""

    protocol_version = "HTTP/1.1"
    calls: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.calls.append(self.path)
        self.send_response_only(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in sse_chunks():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def fake_provider() -> Iterator[tuple[str, list[str]]]:
    calls: list[str] = []
    handler = type("Handler", (_Provider,), {"calls": calls})
    server = _QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with _serving(server):
        yield f"http://127.0.0.1:{server.server_address[1]}", calls


def stream_words(base_url: str) -> list[str]:
    client = openai.OpenAI(api_key="sk-test-0000", base_url=base_url, timeout=HANG_GUARD)
    with client:
        stream = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        return [c.choices[0].delta.content for c in stream if c.choices[0].delta.content]


def test_an_sdk_stream_records_and_replays_through_the_proxy(tmp_path: Path) -> None:
    cassette = tmp_path / "chat.jsonl"
    options = {"secret_headers": ["authorization"]}
    with fake_provider() as (provider, calls):
        with serve(cassette, upstream=provider, mode="new_episodes", **options) as proxy:
            assert stream_words(f"{proxy.url}/v1") == WORDS
        line = json.loads(cassette.read_text().splitlines()[1])
        assert line["url"] == f"{provider}/v1/chat/completions"
        assert line["chunks"] == [len(c) for c in sse_chunks()]
        assert "sk-test" not in cassette.read_text()
        with serve(cassette, upstream=provider, **options) as proxy:
            assert stream_words(f"{proxy.url}/v1") == WORDS
        assert calls == ["/v1/chat/completions"]  # the replay stayed offline


def test_a_miss_is_not_retried_by_the_sdk(tmp_path: Path) -> None:
    with (
        fake_provider() as (provider, calls),
        serve(
            tmp_path / "empty.jsonl", upstream=provider, secret_headers=["authorization"]
        ) as proxy,
    ):
        with pytest.raises(openai.InternalServerError) as raised:
            stream_words(f"{proxy.url}/v1")
        assert len(proxy.raised) == 1  # one request: the SDK did not retry the 502
    assert raised.value.status_code == 502
    assert raised.value.response.headers["x-sakura-http-error"] == "miss"
    assert calls == []
