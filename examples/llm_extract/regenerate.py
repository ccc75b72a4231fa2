"""Regenerate the synthetic cassettes in tests/fixtures/ (no network, no key needed).

Each exchange is recorded by the real SDK client, over a `RecordingTransport` whose outer
transport is scripted: it answers with the invented response below instead of reaching the
provider.  So the request side is exactly what the SDK sends, and the response side is ours.

    python regenerate.py            # rewrites tests/fixtures/*.jsonl
    python regenerate.py OUT_DIR    # writes them into OUT_DIR instead
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import anthropic
from extract import MODEL, extraction_request

from sakura_http.llm import anthropic_client, http_library_of

# The synthetic cassettes name reserved hosts, never a provider's: the SDKs send there. To
# record from the real APIs, drop these two lines (and list the real hosts in
# sakura_record_hosts in pyproject.toml).
os.environ["ANTHROPIC_BASE_URL"] = "https://api.anthropic.example"
os.environ["OPENAI_BASE_URL"] = "https://api.openai.example/v1"

SENTENCE = "The Somei Yoshino cherry has five pale petals and blooms in early April."
HTTP = http_library_of(anthropic)  # httpx2 for anthropic >= 1.0, httpx before

EXTRACTED = {
    "id": "msg_01SyntheticExtract0001",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {
            "type": "text",
            "text": '{"name": "Somei Yoshino", "petals": 5, "blooms": "early April"}',
        }
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 123, "output_tokens": 21},
}
RATE_LIMITED = {
    "type": "error",
    "error": {"type": "rate_limit_error", "message": "Synthetic rate limit."},
}


def scripted(status: int, body: dict[str, Any]) -> Any:
    """An outer transport that answers every request with `status` and the JSON `body`."""

    def answer(request: Any) -> Any:
        return HTTP.Response(status, json=body, headers={"request-id": "req_synthetic"})

    return HTTP.MockTransport(answer)


def record(path: Path, status: int, body: dict[str, Any]) -> None:
    outer = scripted(status, body)
    client = anthropic_client(path, mode="all", outer=outer, api_key="synthetic-key")
    # An error status is recorded as a response, as it would be live.
    with client, contextlib.suppress(anthropic.APIStatusError):
        client.messages.parse(**extraction_request(SENTENCE))  # type: ignore[call-overload]


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record(folder / "extract.jsonl", 200, EXTRACTED)
    record(folder / "rate_limited.jsonl", 429, RATE_LIMITED)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else here / "tests" / "fixtures")
