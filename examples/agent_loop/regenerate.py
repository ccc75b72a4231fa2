"""Regenerate the synthetic cassette tests/fixtures/agent.jsonl (no network, no key needed).

The real SDK client runs the real loop over a `RecordingTransport` whose outer transport is
scripted: it answers each turn with the next invented event stream below, one HTTP chunk per
Server-Sent Event, instead of reaching the provider.  So the requests are exactly what the SDK
sends (tool results included), and the responses are ours.

    python regenerate.py            # rewrites tests/fixtures/agent.jsonl
    python regenerate.py OUT_DIR    # writes it into OUT_DIR instead
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
from agent import MODEL, run_agent

from sakura_http.llm import async_anthropic_client, http_library_of

# The synthetic cassettes name reserved hosts, never a provider's: the SDKs send there. To
# record from the real APIs, drop these two lines (and list the real hosts in
# sakura_record_hosts in pyproject.toml).
os.environ["ANTHROPIC_BASE_URL"] = "https://api.anthropic.example"
os.environ["OPENAI_BASE_URL"] = "https://api.openai.example/v1"

HTTP = http_library_of(anthropic)

# (text pieces, tool call or None, stop reason) for each turn of the model.
TURNS: list[tuple[list[str], dict[str, Any] | None, str]] = [
    (["Let me check ", "Kyoto first."], {"city": "Kyoto"}, "tool_use"),
    ([], {"city": "Tokyo"}, "tool_use"),
    (
        ["Kyoto has cherry blossoms at 18 C; ", "Tokyo has light rain at 15 C."],
        None,
        "end_turn",
    ),
]


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def events(turn: int) -> Iterator[bytes]:
    """The invented event stream of one turn, as the Messages API streams it."""
    pieces, tool, stop = TURNS[turn]
    message = {
        "id": f"msg_01SyntheticAgent000{turn + 1}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 200 + 40 * turn, "output_tokens": 1},
    }
    yield sse("message_start", {"message": message})
    index = 0
    if pieces:
        block = {"type": "text", "text": ""}
        yield sse("content_block_start", {"index": index, "content_block": block})
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            yield sse("content_block_delta", {"index": index, "delta": delta})
        yield sse("content_block_stop", {"index": index})
        index += 1
    if tool is not None:
        block = {"type": "tool_use", "id": f"toolu_01Synthetic000{turn + 1}", "name": "get_weather"}
        yield sse("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(tool)}
        yield sse("content_block_delta", {"index": index, "delta": delta})
        yield sse("content_block_stop", {"index": index})
    yield sse(
        "message_delta",
        {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 30}},
    )
    yield sse("message_stop", {})


def scripted() -> Any:
    """An outer transport that streams turn 1, 2, 3 to successive requests."""
    turns = iter(range(len(TURNS)))

    def answer(request: Any) -> Any:
        turn = next(turns)

        async def body() -> AsyncIterator[bytes]:
            for event in events(turn):
                yield event

        headers = {"content-type": "text/event-stream", "request-id": f"req_synthetic{turn}"}
        return HTTP.Response(200, headers=headers, content=body())

    return HTTP.MockTransport(answer)


async def record(path: Path) -> None:
    async with async_anthropic_client(
        path, mode="all", outer=scripted(), api_key="synthetic-key"
    ) as client:
        await run_agent(client, "Compare the weather in Kyoto and Tokyo.")


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "tests" / "fixtures"
    folder.mkdir(parents=True, exist_ok=True)
    anyio.run(record, folder / "agent.jsonl")
