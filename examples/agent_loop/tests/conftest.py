import os

import pytest

# The synthetic cassettes name reserved hosts, never a provider's: the SDKs send there. To
# record from the real APIs, drop these two lines (and list the real hosts in
# sakura_record_hosts in pyproject.toml).
os.environ["ANTHROPIC_BASE_URL"] = "https://api.anthropic.example"
os.environ["OPENAI_BASE_URL"] = "https://api.openai.example/v1"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on asyncio and on trio."""
    return str(request.param)
