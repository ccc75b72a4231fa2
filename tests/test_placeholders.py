"""`is_placeholder`: the one list of values written in place of a secret, shared by lint and
redaction.  Every value here is made up."""

from __future__ import annotations

import pytest

from sakura_http._placeholders import is_placeholder


@pytest.mark.parametrize(
    "value",
    [
        # what other tools wrote in real imported cassettes
        "REDACTED",
        "FILTERED",
        "scrubbed",
        "YOUR_API_KEY",
        "test_api_key",
        "os.environ['X_API_KEY']",
        "os.environ[",  # as a pattern that stops at a quote sees it
        'os.environ.get("OPENAI_API_KEY")',
        "os.getenv('TOKEN')",
        "process.env.API_KEY",
        # markers inside a value
        "sk-ant-REDACTED",
        "[FILTERED]",
        "**redacted**",
        "req_<redacted>",
        "<redacted>",
        # template and docs forms
        "<API_KEY>",
        "{{ api_key }}",
        "${TOKEN}",
        "$OPENAI_API_KEY",
        "%API_KEY%",
        "your-api-key-here",
        "my_secret",
        "fake-key",
        "dummy_token",
        "mock_openai_api_key",
        "example-secret",
        "xxxxxxxx",
        "********",
        "secret",
        "api-key",
        "none",
        # with an authorization scheme, quotes, or as cookies
        "Bearer REDACTED",
        "Basic <credentials>",
        "'YOUR_API_KEY'",
        "__cf_bm=REDACTED",
        "session=FILTERED; csrftoken=xxx",
    ],
)
def test_placeholders(value: str) -> None:
    assert is_placeholder(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        # the fakes of test suites have a credential's shape: lint must still find them
        "sk-ant-fake-test-000000000000000000000",
        "fake-test-token-000000",
        "ghp_faketest00000000000000000000000000",
        "AKIAFAKETEST00000000",
        "Bearer fake-test-token-000000",
        # real-looking values and ordinary words
        "sess_9aZ8bY7cX6dW5eV4fU3gT2hS1iR0jQpOnM",
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "session=9aZ8bY7cX6dW5eV4; csrftoken=xxx",
        "hunter2",
        "keyboard",
        "tested",
        "filters",
    ],
)
def test_not_placeholders(value: str) -> None:
    assert not is_placeholder(value)
