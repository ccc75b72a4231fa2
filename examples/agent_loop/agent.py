"""A streamed, tool-using agent loop with the async anthropic SDK.

The model streams its turn; when it stops to use a tool, the program runs the tool, sends the
result back and lets the model continue, until it answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic

# The cassettes are synthetic: a made-up model name keeps the SDK's deprecation warnings away.
MODEL = "claude-synthetic-model"
TOOLS = [
    {
        "name": "get_weather",
        "description": "Today's weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
WEATHER = {"Kyoto": "cherry blossoms, 18 C", "Tokyo": "light rain, 15 C"}


def get_weather(city: str) -> str:
    return WEATHER.get(city, "unknown")


@dataclass
class Run:
    """What one run of the loop did: the streamed text pieces, the tool calls, the answer."""

    pieces: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answer: str = ""


async def run_agent(
    client: anthropic.AsyncAnthropic,
    question: str,
    tools: dict[str, Callable[..., str]] | None = None,
) -> Run:
    tools = tools or {"get_weather": get_weather}
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    run = Run()
    while True:
        async with client.messages.stream(
            model=MODEL,
            max_tokens=512,
            tools=TOOLS,
            messages=messages,  # type: ignore[arg-type]
        ) as stream:
            turn = [text async for text in stream.text_stream]
            message = await stream.get_final_message()
        run.pieces += turn
        # Written out field by field, so the request stays the same across SDK versions.
        content: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for block in message.content:
            if block.type == "text":
                content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                arguments = dict(block.input)  # type: ignore[call-overload]
                content.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}
                )
                run.calls.append((block.name, arguments))
                output = tools[block.name](**arguments)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "assistant", "content": content})
        if message.stop_reason != "tool_use":
            run.answer = "".join(turn)
            return run
        messages.append({"role": "user", "content": results})
