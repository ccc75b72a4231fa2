"""An app that builds its own SDK clients, as most apps do: nothing here knows about tests.

The clients read their keys from ANTHROPIC_API_KEY and OPENAI_API_KEY.
"""

from __future__ import annotations

import anthropic
import openai

# The cassette is synthetic: the model names are made up.
CLAUDE = "claude-synthetic-model"
GPT = "gpt-synthetic-model"


def summary_request(text: str) -> dict[str, object]:
    return {
        "model": CLAUDE,
        "max_tokens": 200,
        "system": "Summarize the text in one sentence.",
        "messages": [{"role": "user", "content": text}],
    }


def title_request(text: str) -> dict[str, object]:
    return {
        "model": GPT,
        "messages": [
            {"role": "system", "content": "Give the text a title of at most five words."},
            {"role": "user", "content": text},
        ],
    }


def summarize(text: str) -> str:
    with anthropic.Anthropic() as client:
        message = client.messages.create(**summary_request(text))  # type: ignore[call-overload]
    return str(message.content[0].text)


async def title(text: str) -> str:
    async with openai.AsyncOpenAI() as client:
        completion = await client.chat.completions.create(**title_request(text))  # type: ignore[call-overload]
    return str(completion.choices[0].message.content)
