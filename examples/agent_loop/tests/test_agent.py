"""The agent loop, offline: the model calls the weather tool twice, then answers."""

from __future__ import annotations

import anthropic
import pytest
from agent import run_agent


@pytest.mark.anyio
@pytest.mark.cassette("agent.jsonl", assert_all_played=True)
async def test_two_tool_calls_then_an_answer(
    sakura_async_anthropic: anthropic.AsyncAnthropic,
) -> None:
    run = await run_agent(sakura_async_anthropic, "Compare the weather in Kyoto and Tokyo.")
    assert run.calls == [("get_weather", {"city": "Kyoto"}), ("get_weather", {"city": "Tokyo"})]
    assert run.answer == "Kyoto has cherry blossoms at 18 C; Tokyo has light rain at 15 C."
    # The text arrived streamed, in the pieces the provider sent.
    assert run.pieces[:2] == ["Let me check ", "Kyoto first."]
