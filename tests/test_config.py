"""`CassetteConfig`: every option validated once, naming the option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from sakura_http import (
    DEFAULT_SECRET_QUERY_PARAMS,
    Advice,
    CassetteConfig,
    ConfigurationError,
    RecordingTransport,
    RecordMode,
)


def test_defaults() -> None:
    config = CassetteConfig()
    assert config.mode is RecordMode.NONE
    assert config.secret_query_params == DEFAULT_SECRET_QUERY_PARAMS
    assert config.max_body_bytes == 16 * 1024 * 1024
    assert config == CassetteConfig()
    assert isinstance(config.advice, Advice)


def test_collections_are_normalized() -> None:
    config = CassetteConfig(mode="new_episodes", secret_headers=["Authorization", "X-Key"])
    assert config.mode is RecordMode.NEW_EPISODES
    assert config.secret_headers == frozenset({"authorization", "x-key"})
    assert config.replace(record_hosts=["api.example.test:443"]).record_hosts == (
        "api.example.test:443",
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"mode": "sometimes"}, "mode"),
        ({"secret_headers": "authorization"}, "secret_headers"),
        ({"secret_headers": [""]}, "secret_headers"),
        ({"allow_headers": 7}, "allow_headers"),
        ({"record_hosts": "api.example.test"}, "record_hosts"),
        ({"passthrough_hosts": ["http://api.example.test/x"]}, "passthrough_hosts"),
        ({"max_body_bytes": -1}, "max_body_bytes"),
        ({"max_body_bytes": 1.5}, "max_body_bytes"),
        ({"replay_chunk_size": 0}, "replay_chunk_size"),
        ({"replay_latency": -0.5}, "replay_latency"),
        ({"replay_latency": float("nan")}, "replay_latency"),
        ({"stream_through": "yes"}, "stream_through"),
        ({"secret_headers": ["x-a"], "allow_headers": ["X-A"]}, "allow_headers"),
        ({"advice": "pytest"}, "advice"),
    ],
)
def test_invalid_values_name_the_option(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named) as caught:
        CassetteConfig(**options)
    assert isinstance(caught.value, ValueError)


def test_the_transport_takes_keywords_or_a_config(tmp_path: Any) -> None:
    config = CassetteConfig(secret_headers=["authorization"], replay_chunk_size=3)
    with RecordingTransport(tmp_path / "a.jsonl", config=config) as transport:
        assert transport.config == config
    with RecordingTransport(tmp_path / "b.jsonl", replay_chunk_size=3) as transport:
        assert transport.config.replay_chunk_size == 3
    with pytest.raises(TypeError, match="config= or option keywords, not both"):
        RecordingTransport(tmp_path / "c.jsonl", config=config, mode="all")
    with pytest.raises(TypeError, match="unexpected keyword argument 'secret_header'"):
        RecordingTransport(tmp_path / "d.jsonl", secret_header=["authorization"])
    with pytest.raises(ConfigurationError, match="replay_chunk_size"):
        RecordingTransport(tmp_path / "e.jsonl", replay_chunk_size=0)


def test_the_environment_sets_the_effective_mode(tmp_path: Any) -> None:
    with RecordingTransport(tmp_path / "a.jsonl", environ={"SAKURA_HTTP_RECORD": "all"}) as t:
        assert t.mode is RecordMode.ALL
        assert t.config.mode is RecordMode.ALL


def test_a_nul_in_the_cassette_name_is_a_configuration_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="NUL"):
        RecordingTransport(str(tmp_path / "a\0b.jsonl"))


@pytest.mark.parametrize(
    "front_end",
    [
        "RecordingTransport(Path)",
        "anthropic_client",
        "async_openai_client",
        "proxy.start",
    ],
)
def test_every_front_end_taking_a_cassette_path_refuses_a_nul(
    tmp_path: Any, front_end: str
) -> None:
    # os.path.realpath raises a bare ValueError ("embedded null byte") for these.
    from pathlib import Path

    path = Path(tmp_path / "a\0b.jsonl")
    with pytest.raises(ConfigurationError, match=r"cassette path '.*a\\x00b\.jsonl' holds a NUL"):
        if front_end == "RecordingTransport(Path)":
            RecordingTransport(path)
        elif front_end == "proxy.start":
            from sakura_http.proxy import start

            start(path)
        else:
            from sakura_http import llm

            getattr(llm, front_end)(str(path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "passwd",
        "pwd",
        "secret",
        "refresh_token",
        "id_token",
        "X-Goog-Credential",
        "X-Goog-Signature",
        "X-Amz-Credential",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
    ],
)
def test_passwords_and_signed_url_parameters_are_secret_by_default(
    tmp_path: Path, name: str
) -> None:
    """A password or a signed URL's signature in a query string never reaches the cassette,
    with no option set: `sakura-http lint` flags them, so recording must not write them."""
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    url = f"https://storage.example.test/b/o?{name}=s3cr3t-VALUE-0123456789&alt=media"
    with httpx.Client(
        transport=RecordingTransport(path, outer=outer, mode="new_episodes")
    ) as client:
        client.get(url)
    written = path.read_text()
    assert "s3cr3t-VALUE" not in written
    assert f"{name}=%3Credacted%3E" in written or f"{name}=<redacted>" in written
