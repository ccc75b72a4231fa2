"""The anthropic and openai SDKs over a cassette: their own clients, ready-wired.

```python
from sakura_http.llm import anthropic_client

client = anthropic_client("tests/fixtures/chat.jsonl")  # replay only: no key, no retries
```

Each helper returns the SDK's own client (``anthropic.Anthropic``, ``openai.AsyncOpenAI``, ...)
whose HTTP client sends through a `RecordingTransport`.  Neither SDK is imported until a helper
is called; install them with ``pip install "sakura-http[anthropic]"`` or ``"sakura-http[openai]"``.
`docs/llm.md` documents all of it, and the pytest fixtures built on these helpers.
"""

from ._clients import (
    LLM_SECRET_HEADERS,
    PLACEHOLDER_API_KEY,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    http_library_of,
    llm_transport_options,
    openai_client,
)

__all__ = [
    "LLM_SECRET_HEADERS",
    "PLACEHOLDER_API_KEY",
    "anthropic_client",
    "async_anthropic_client",
    "async_openai_client",
    "http_library_of",
    "llm_transport_options",
    "openai_client",
]
