"""What to do next (`sakura_http._advice`): the last sentence of an error, worded by each front
end.  The engine raises errors with facts and asks the front end's `Advice` for the fix, so a
message never tells a proxy user to pass a Python keyword, nor a pytest user to build a
transport."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sakura_http import (
    Advice,
    BodyTooLargeError,
    CassetteError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingForbidden,
    RecordingTransport,
)
from sakura_http._format import Exchange, encode_exchange, encode_header
from sakura_http.aiohttp._advice import AiohttpAdvice
from sakura_http.proxy._advice import CommandAdvice, ServeAdvice
from sakura_http.pytest_plugin import PytestAdvice
from sakura_http.requests._advice import RequestsAdvice

URL = "https://api.example.test/v1/items"

#: Each front end's Advice and the words only it uses for its fixes.
FRONT_ENDS = {
    Advice: "RecordingTransport(",
    PytestAdvice: "sakura_",
    CommandAdvice: "--",
    ServeAdvice: "serve(",
    RequestsAdvice: "RecordingAdapter(",
    AiohttpAdvice: "RecordingMiddleware(",
}
CONSTRUCTORS = ("RecordingTransport(", "serve(", "RecordingAdapter(", "RecordingMiddleware(")


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda cls: cls.__name__)
def test_each_front_end_words_the_fixes_in_its_own_terms(cls: type[Advice]) -> None:
    advice = cls()
    own = FRONT_ENDS[cls]
    for fix in (advice.declare_secret("x-api-key"), advice.raise_body_limit("response", 1024)):
        assert own in fix, fix
        others = [name for name in CONSTRUCTORS if name in fix and name != own]
        assert others == [], fix
    assert "x-api-key" in advice.declare_secret("x-api-key")
    assert "api.example.test" in advice.add_record_host("api.example.test")


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda cls: cls.__name__)
def test_record_missing_re_records_as_rerecord_says(cls: type[Advice]) -> None:
    advice = cls()
    assert advice.record_missing().startswith("to record it, ")
    assert advice.record_missing().endswith(f"re-record with {advice.rerecord()}")


@pytest.mark.parametrize("cls", FRONT_ENDS, ids=lambda cls: cls.__name__)
def test_the_body_limit_advice_names_the_limit_the_error_suggests(cls: type[Advice]) -> None:
    # The number is worked out once (`BodyTooLargeError.suggested_limit`), not by each front end.
    fix = cls().raise_body_limit("response", 8192)
    assert "8192" in fix and "16384" not in fix


def test_the_repr_names_the_front_end() -> None:
    assert repr(Advice()) == "<Advice for RecordingTransport>"
    assert repr(CommandAdvice()) == "<CommandAdvice for sakura-http proxy>"


# --- the engine asks the front end -------------------------------------------------------------


class Custom(Advice):
    """A front end whose every fix is recognisable."""

    front_end = "a test"

    def record_missing(self) -> str:
        return "CUSTOM record_missing"

    def allow_repeats(self) -> str:
        return "CUSTOM allow_repeats"

    def declare_secret(self, header: str) -> str:
        return f"CUSTOM declare_secret {header}"

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return f"CUSTOM raise_body_limit {side} {suggested}"

    def add_record_host(self, host: str) -> str:
        return f"CUSTOM add_record_host {host}"

    def give_outer(self) -> str:
        return "CUSTOM give_outer"


def raised(transport: RecordingTransport, **request: object) -> CassetteError:
    with pytest.raises(CassetteError) as caught:
        httpx.Client(transport=transport).get(URL, **request)  # type: ignore[arg-type]
    return caught.value


def live(path: Path, **options: object) -> RecordingTransport:
    outer = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 64))
    return RecordingTransport(path, outer=outer, advice=Custom(), **options)  # type: ignore[arg-type]


def test_a_miss_ends_with_the_front_end_s_words(tmp_path: Path) -> None:
    error = raised(RecordingTransport(tmp_path / "c.jsonl", advice=Custom()))
    assert isinstance(error, CassetteMiss)
    assert str(error).rstrip().endswith("CUSTOM record_missing")
    assert 'mode="new_episodes"' not in str(error)


def test_an_exhausted_exchange_uses_the_front_end_s_words(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(encode_header() + encode_exchange(Exchange("GET", URL, (("accept", "*/*"),))))
    transport = RecordingTransport(path, advice=Custom(), allow_repeats=False)
    httpx.Client(transport=transport).get(URL)
    assert "CUSTOM allow_repeats" in str(raised(transport))


def test_a_refusal_uses_the_front_end_s_words(tmp_path: Path) -> None:
    error = raised(live(tmp_path / "a.jsonl", mode="new_episodes"), headers={"x-api-key": "k"})
    assert isinstance(error, CredentialHeaderError)
    assert "CUSTOM declare_secret x-api-key" in str(error)
    assert "RecordingTransport(" not in str(error)

    error = raised(live(tmp_path / "b.jsonl", mode="new_episodes", max_body_bytes=16))
    assert isinstance(error, BodyTooLargeError)
    assert "CUSTOM raise_body_limit response 64" in str(error)  # holds the 64 bytes seen

    hosts = ["other.example.test"]
    error = raised(live(tmp_path / "c.jsonl", mode="new_episodes", record_hosts=hosts))
    assert isinstance(error, RecordingForbidden)
    assert "CUSTOM add_record_host api.example.test" in str(error)

    error = raised(RecordingTransport(tmp_path / "d.jsonl", mode="new_episodes", advice=Custom()))
    assert isinstance(error, RecordingForbidden)
    assert "CUSTOM give_outer" in str(error)


def test_advice_must_be_an_advice(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"advice must be a sakura_http\.Advice"):
        RecordingTransport(tmp_path / "c.jsonl", advice="pytest --record")  # type: ignore[arg-type]


#: How each front end spells the allow list, for a header that only looks like a credential.
ALLOW = {
    Advice: 'allow_headers=["x-token-count"]',
    PytestAdvice: "sakura_allow_headers",
    CommandAdvice: "--allow-header x-token-count",
    ServeAdvice: 'allow_headers=["x-token-count"]',
    RequestsAdvice: 'allow_headers=["x-token-count"]',
    AiohttpAdvice: 'allow_headers=["x-token-count"]',
}


@pytest.mark.parametrize("advice", list(ALLOW), ids=lambda a: a.__name__)
def test_each_front_end_words_the_allow_list(advice: type[Advice]) -> None:
    assert ALLOW[advice] in advice().allow_header("x-token-count")


@pytest.mark.parametrize(
    ("header", "allow_named"),
    [("x-token-count", True), ("authorization", False), ("x-api-key", False)],
)
def test_the_allow_list_is_offered_only_for_a_name_of_credential_shape(
    tmp_path: Path, header: str, allow_named: bool
) -> None:
    # x-token-count only looks like a credential: declaring it secret would drop it from the
    # cassette and matching, so the fix names the allow list too.  authorization is a
    # credential by name: allowing it would write the token to disk, so it is never offered.
    outer = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        RecordingTransport(tmp_path / "c.jsonl", outer=outer, mode="new_episodes") as t,
        pytest.raises(CredentialHeaderError) as refused,
    ):
        httpx.Client(transport=t).get(URL, headers={header: "v"})
    message = str(refused.value)
    assert f'secret_headers=["{header}"]' in message
    assert ("allow_headers" in message) is allow_named, message
