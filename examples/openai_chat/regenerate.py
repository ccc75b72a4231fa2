"""Regenerate the synthetic cassette tests/fixtures/chat.jsonl (no network, no key needed).

The real SDK client sends the real request over a `RecordingTransport` whose outer transport is
scripted: it streams the invented chunks below, one HTTP chunk per Server-Sent Event, instead of
reaching the provider.  So the request is exactly what the SDK sends, and the reply is ours.

    python regenerate.py            # rewrites tests/fixtures/chat.jsonl
    python regenerate.py OUT_DIR    # writes it into OUT_DIR instead
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
from chat import MODEL, stream_reply

from sakura_http.llm import http_library_of, openai_client

# The synthetic cassettes name reserved hosts, never a provider's: the SDKs send there. To
# record from the real APIs, drop these two lines (and list the real hosts in
# sakura_record_hosts in pyproject.toml).
os.environ["ANTHROPIC_BASE_URL"] = "https://api.anthropic.example"
os.environ["OPENAI_BASE_URL"] = "https://api.openai.example/v1"

HTTP = http_library_of(openai)
PIECES = ["Sakura ", "petals ", "drift ", "down ", "the ", "Kamo ", "river."]


def chunks() -> Iterator[bytes]:
    """The invented stream, as the Chat Completions API streams it."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            "id": "chatcmpl-Synthetic0001",
            "object": "chat.completion.chunk",
            "created": 1775000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""})
    for piece in PIECES:
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


def scripted() -> Any:
    def answer(request: Any) -> Any:
        headers = {"content-type": "text/event-stream", "x-request-id": "req_synthetic"}
        return HTTP.Response(200, headers=headers, content=chunks())

    return HTTP.MockTransport(answer)


def record(path: Path) -> None:
    with openai_client(path, mode="all", outer=scripted(), api_key="synthetic-key") as client:
        list(stream_reply(client, "What do cherry blossoms do in April?"))


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "tests" / "fixtures"
    folder.mkdir(parents=True, exist_ok=True)
    record(folder / "chat.jsonl")
