"""Structured extraction: turn a sentence about a flower into a `Flower` with the anthropic SDK.

The app takes its client as an argument; its tests give it the ``sakura_anthropic`` fixture.
"""

from __future__ import annotations

import anthropic
import pydantic

# The cassettes are synthetic: a made-up model name keeps the SDK's deprecation warnings away.
MODEL = "claude-synthetic-model"


class Flower(pydantic.BaseModel):
    name: str
    petals: int
    blooms: str


def extraction_request(text: str) -> dict[str, object]:
    """The keyword arguments of the extraction call (regenerate.py sends the same)."""
    return {
        "model": MODEL,
        "max_tokens": 256,
        "system": "Extract the flower described by the user.",
        "messages": [{"role": "user", "content": text}],
        "output_format": Flower,
    }


def extract_flower(client: anthropic.Anthropic, text: str) -> Flower:
    """The flower `text` describes; the SDK validates the model's JSON against `Flower`."""
    message = client.messages.parse(**extraction_request(text))  # type: ignore[call-overload]
    flower = message.parsed_output
    if flower is None:
        raise ValueError(f"the model returned no flower for {text!r}")
    return flower
