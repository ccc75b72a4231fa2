"""Offline tests of extract.py: the cassettes in tests/fixtures/ replay the provider's answers."""

from __future__ import annotations

import anthropic
import pytest
from extract import Flower, extract_flower

SENTENCE = "The Somei Yoshino cherry has five pale petals and blooms in early April."


@pytest.mark.cassette("extract.jsonl")
def test_extracts_a_flower(sakura_anthropic: anthropic.Anthropic) -> None:
    flower = extract_flower(sakura_anthropic, SENTENCE)
    assert flower == Flower(name="Somei Yoshino", petals=5, blooms="early April")


@pytest.mark.cassette("rate_limited.jsonl")
def test_a_rate_limit_is_the_sdk_error(sakura_anthropic: anthropic.Anthropic) -> None:
    # The 429 was recorded as a response: it replays as the SDK's own exception class.
    with pytest.raises(anthropic.RateLimitError) as caught:
        extract_flower(sakura_anthropic, SENTENCE)
    assert caught.value.status_code == 429
