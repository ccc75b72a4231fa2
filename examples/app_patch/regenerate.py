"""Regenerate the synthetic cassette tests/fixtures/app.jsonl (no network, no key needed).

The app's own requests (`app.summary_request`, `app.title_request`) are sent by the real SDK
clients over one cassette, whose outer transport is scripted: it answers with the invented
responses below instead of reaching the providers.  So each request is exactly what the SDK
sends, and the responses are ours.

    python regenerate.py            # rewrites tests/fixtures/app.jsonl
    python regenerate.py OUT_DIR    # writes it into OUT_DIR instead
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anthropic
import anyio
import app

from sakura_http.llm import anthropic_client, async_openai_client, http_library_of

# The synthetic cassettes name reserved hosts, never a provider's: the SDKs send there. To
# record from the real APIs, drop these two lines (and list the real hosts in
# sakura_record_hosts in pyproject.toml).
os.environ["ANTHROPIC_BASE_URL"] = "https://api.anthropic.example"
os.environ["OPENAI_BASE_URL"] = "https://api.openai.example/v1"

HTTP = http_library_of(anthropic)
TEXT = (
    "Each spring the cherry trees along the Kamo river bloom for about a week, and half of "
    "Kyoto comes out to picnic under them."
)
SUMMARY = {
    "id": "msg_01SyntheticSummary01",
    "type": "message",
    "role": "assistant",
    "model": app.CLAUDE,
    "content": [{"type": "text", "text": "Kyoto picnics under the Kamo river's cherry blossoms."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 48, "output_tokens": 14},
}
TITLE = {
    "id": "chatcmpl-SyntheticTitle01",
    "object": "chat.completion",
    "created": 1775000000,
    "model": app.GPT,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "A Week of Blossoms", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 52, "completion_tokens": 5, "total_tokens": 57},
}


def scripted() -> Any:
    """Answers anthropic's host with SUMMARY and openai's with TITLE."""

    def answer(request: Any) -> Any:
        body = SUMMARY if request.url.host == "api.anthropic.example" else TITLE
        return HTTP.Response(200, json=body, headers={"request-id": "req_synthetic"})

    return HTTP.MockTransport(answer)


async def record(path: Path) -> None:
    outer = scripted()
    # Both clients are open at once, so they share one re-recording of the cassette, which is
    # written when the last of them closes.
    summarizer = anthropic_client(path, mode="all", outer=outer, api_key="synthetic-key")
    async with async_openai_client(path, mode="all", outer=outer, api_key="synthetic-key") as gpt:
        with summarizer:
            summarizer.messages.create(**app.summary_request(TEXT))  # type: ignore[call-overload]
            await gpt.chat.completions.create(**app.title_request(TEXT))  # type: ignore[call-overload]


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "tests" / "fixtures"
    folder.mkdir(parents=True, exist_ok=True)
    anyio.run(record, folder / "app.jsonl")
