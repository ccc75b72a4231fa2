"""The app, unchanged, offline: patch_clients=True sends the clients it builds itself through
the cassette tests/fixtures/app.jsonl, and no key is needed to replay it."""

from __future__ import annotations

import app
import pytest

pytestmark = pytest.mark.cassette("app.jsonl", patch_clients=True)
TEXT = (
    "Each spring the cherry trees along the Kamo river bloom for about a week, and half of "
    "Kyoto comes out to picnic under them."
)


def test_summarize() -> None:
    assert app.summarize(TEXT) == "Kyoto picnics under the Kamo river's cherry blossoms."


@pytest.mark.anyio
async def test_title() -> None:
    assert await app.title(TEXT) == "A Week of Blossoms"
