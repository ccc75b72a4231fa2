"""The streamed reply, offline, from tests/fixtures/chat.jsonl."""

from __future__ import annotations

import openai
import pytest
from chat import stream_reply


@pytest.mark.cassette("chat.jsonl")
def test_the_reply_streams_in_the_recorded_pieces(sakura_openai: openai.OpenAI) -> None:
    pieces = list(stream_reply(sakura_openai, "What do cherry blossoms do in April?"))
    assert pieces == ["Sakura ", "petals ", "drift ", "down ", "the ", "Kamo ", "river."]
