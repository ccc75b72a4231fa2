"""A streamed chat completion with the openai SDK: the reply, piece by piece, as it arrives."""

from __future__ import annotations

from collections.abc import Iterator

import openai

# The cassette is synthetic: the model name is made up.
MODEL = "gpt-synthetic-model"
SYSTEM = "You answer in one short poetic sentence."


def stream_reply(client: openai.OpenAI, prompt: str) -> Iterator[str]:
    """Yield the text of the reply to `prompt` in the pieces the provider streams."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        stream=True,
    )
    with stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content
