"""`sakura_http.requests.RecordingAdapter`: requests sessions on the cassette engine, against a
real server on 127.0.0.1."""

from __future__ import annotations

import base64
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests

from sakura_http import (
    BodyTooLargeError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingTransport,
    load_cassette,
)
from sakura_http.requests import RecordingAdapter
from tests.cli_support import run
from tests.client_support import (
    COOKIES,
    GZIPPED,
    ClientServer,
    closed_port_url,
    sse_events,
    start_client_server,
)


@pytest.fixture
def server() -> Iterator[ClientServer]:
    with start_client_server() as running:
        yield running


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    return tmp_path / "requests.jsonl"


def session_on(adapter: RecordingAdapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def record(cassette: Path, **options: object) -> requests.Session:
    return session_on(RecordingAdapter(cassette, mode="new_episodes", **options))  # type: ignore[arg-type]


def replay(cassette: Path, **options: object) -> requests.Session:
    return session_on(RecordingAdapter(cassette, **options))  # type: ignore[arg-type]


def test_records_then_replays_without_the_network(cassette: Path, server: ClientServer) -> None:
    with record(cassette) as session:
        live = session.get(f"{server.url}/items", params={"page": "2", "q": "café"})
        posted = session.post(f"{server.url}/items", json={"name": "x", "n": 1})
    assert live.json()["path"] == "/items?page=2&q=caf%C3%A9"
    answered = len(server.requests)
    with replay(cassette) as session:
        again = session.get(f"{server.url}/items", params={"page": "2", "q": "café"})
        posted_again = session.post(f"{server.url}/items", json={"n": 1, "name": "x"})
    assert len(server.requests) == answered  # nothing reached the server
    assert again.status_code == 200 and again.reason == "OK"
    assert again.json() == live.json()
    assert again.headers["content-type"] == "application/json"
    assert again.elapsed.total_seconds() >= 0 and again.url == live.url
    assert posted_again.json() == posted.json()
    assert [e.method for e in load_cassette(cassette).exchanges] == ["GET", "POST"]


def test_default_headers_of_requests_are_volatile(cassette: Path, server: ClientServer) -> None:
    with record(cassette) as session:
        session.get(f"{server.url}/a")
    with replay(cassette) as session:
        session.headers["User-Agent"] = "another-agent/9"
        session.headers["Accept-Encoding"] = "identity"
        session.headers["Connection"] = "close"
        assert session.get(f"{server.url}/a").status_code == 200


def test_sse_replays_the_recorded_chunks(cassette: Path, server: ClientServer) -> None:
    with record(cassette) as session, session.get(f"{server.url}/sse?n=3", stream=True) as live:
        assert list(live.iter_content(None)) == sse_events(3)
    with replay(cassette) as session:
        with session.get(f"{server.url}/sse?n=3", stream=True) as replayed:
            assert list(replayed.iter_content(None)) == sse_events(3)
        with session.get(f"{server.url}/sse?n=3", stream=True) as replayed:
            lines = [line for line in replayed.iter_lines() if line]
        assert lines[:2] == [b"event: tick", b'data: {"n": 1}']
        with session.get(f"{server.url}/sse?n=3", stream=True) as replayed:
            assert replayed.raw.read() == b"".join(sse_events(3))
        with session.get(f"{server.url}/sse?n=3", stream=True) as replayed:
            assert list(replayed.iter_content(7)) == [
                piece[i : i + 7]
                for piece in [b"".join(sse_events(3))]
                for i in range(0, len(piece), 7)
            ]


def test_stream_through_hands_chunks_on_and_records_an_early_close_truncated(
    cassette: Path, server: ClientServer
) -> None:
    session = record(cassette, stream_through=True)
    with session, session.get(f"{server.url}/sse?n=3", stream=True) as live:
        chunks = live.iter_content(None)
        assert next(chunks) == sse_events(1)[0]
    (exchange,) = load_cassette(cassette).exchanges
    assert exchange.truncated and exchange.response_body == sse_events(1)[0]


def test_stream_through_writes_no_secret_the_live_body_echoes(
    cassette: Path, server: ClientServer
) -> None:
    # The tee hands the caller each chunk as it arrives; only what is written is redacted.
    session = record(cassette, stream_through=True, secret_headers=["authorization"])
    with (
        session,
        session.get(
            f"{server.url}/me", headers={"Authorization": "Bearer sk-tee-0123456789"}, stream=True
        ) as live,
    ):
        assert b"sk-tee-0123456789" in b"".join(live.iter_content(None))
    text = cassette.read_text()
    assert "sk-tee-0123456789" not in text and "<redacted>" in text


def test_a_miss_names_the_nearest_exchange_and_the_fix(
    cassette: Path, server: ClientServer
) -> None:
    with record(cassette) as session:
        session.get(f"{server.url}/a", params={"v": "1"})
    adapter = RecordingAdapter(cassette)
    with session_on(adapter) as session, pytest.raises(CassetteMiss) as miss:
        session.get(f"{server.url}/a", params={"v": "2"})
    text = str(miss.value)
    assert f"GET {server.url}/a?v=2 is not in the cassette" in text
    assert f"#1 GET {server.url}/a?v=1" in text
    assert 'pass mode="new_episodes" to RecordingAdapter' in text
    assert adapter.raised == [miss.value]


def test_identical_requests_replay_in_recorded_order(cassette: Path, server: ClientServer) -> None:
    with record(cassette) as session:
        first = session.get(f"{server.url}/same").json()
        second = session.post(f"{server.url}/same").json()
        third = session.get(f"{server.url}/same").json()
    assert (first["count"], second["count"], third["count"]) == (1, 2, 3)
    with replay(cassette, allow_repeats=False) as session:
        assert session.get(f"{server.url}/same").json() == first
        assert session.post(f"{server.url}/same").json() == second
        assert session.get(f"{server.url}/same").json() == third
        with pytest.raises(CassetteMiss, match="already played"):
            session.get(f"{server.url}/same")


def test_undeclared_credentials_are_refused_before_sending(
    cassette: Path, server: ClientServer
) -> None:
    with record(cassette) as session, pytest.raises(CredentialHeaderError) as refused:
        session.get(f"{server.url}/me", headers={"Authorization": "Bearer sk-test-0000000001"})
    assert server.requests == []
    assert 'RecordingAdapter(..., secret_headers=["authorization"])' in str(refused.value)
    with record(cassette, secret_headers=["authorization"]) as session:
        echoed = session.get(f"{server.url}/me", headers={"Authorization": "Bearer sk-test-01"})
    assert echoed.json()["headers"]["authorization"] == "Bearer sk-test-01"  # live: as sent
    text = cassette.read_text()
    assert "sk-test-01" not in text and "<redacted>" in text
    with replay(cassette, secret_headers=["authorization"]) as session:
        other_key = session.get(f"{server.url}/me", headers={"Authorization": "Bearer other"})
    assert other_key.json()["headers"]["authorization"] == "<redacted>"


def test_gzip_is_stored_decoded_and_replayed_plain(cassette: Path, server: ClientServer) -> None:
    with record(cassette) as session:
        live = session.get(f"{server.url}/gzip")
    assert live.content == GZIPPED
    (exchange,) = load_cassette(cassette).exchanges
    assert exchange.response_body == GZIPPED
    assert "content-encoding" not in dict(exchange.response_headers)
    with replay(cassette) as session:
        replayed = session.get(f"{server.url}/gzip")
    assert replayed.text == GZIPPED.decode() and "content-encoding" not in replayed.headers


def test_an_undecodable_body_replays_as_requests_reads_it_live(
    cassette: Path, server: ClientServer
) -> None:
    # A body kept encoded (here: gzip written by hand) is decoded by urllib3, as live.
    exchange_line = {
        "method": "GET",
        "url": f"{server.url}/kept",
        "headers": [["accept", "*/*"]],
        "body": "",
        "status": 200,
        "response_headers": [["content-encoding", "gzip"]],
        "response_body_b64": base64.b64encode(gzip.compress(b"zipped")).decode(),
    }
    header = {"schema_version": "1.0", "kind": "cassette"}
    cassette.write_text(json.dumps(header) + "\n" + json.dumps(exchange_line) + "\n")
    with replay(cassette) as session:
        assert session.get(f"{server.url}/kept").content == b"zipped"


def test_redirects_are_followed_by_requests_exchange_by_exchange(
    cassette: Path, server: ClientServer
) -> None:
    with record(cassette) as session:
        live = session.get(f"{server.url}/redirect")
    assert live.json()["path"] == "/echo?from=redirect"
    assert [e.status for e in load_cassette(cassette).exchanges] == [302, 200]
    with replay(cassette) as session:
        replayed = session.get(f"{server.url}/redirect")
        assert [r.status_code for r in replayed.history] == [302]
        assert replayed.url == f"{server.url}/echo?from=redirect"
        not_followed = session.get(f"{server.url}/redirect", allow_redirects=False)
        assert not_followed.is_redirect


def test_cookies_are_live_while_recording_and_parsed_from_a_replay(
    cassette: Path, server: ClientServer
) -> None:
    with record(cassette) as session:
        session.get(f"{server.url}/cookie")
        assert session.cookies.get_dict() == COOKIES  # live: the real values
    text = cassette.read_text()
    assert all(value not in text for value in COOKIES.values())
    # A cassette holding a set-cookie (one written by hand, or converted) sets it on replay,
    # and requests sends it on the next request.
    exchanges = [
        {
            "method": "GET",
            "url": f"{server.url}/login",
            "headers": [["accept", "*/*"]],
            "body": "",
            "status": 200,
            "response_headers": [["set-cookie", "sid=abc; Path=/"], ["set-cookie", "b=2"]],
            "response_body": "",
        },
        {
            "method": "GET",
            "url": f"{server.url}/me",
            "headers": [["accept", "*/*"]],
            "body": "",
            "status": 200,
            "response_headers": [],
            "response_body": "me",
        },
    ]
    lines = [{"schema_version": "1.0", "kind": "cassette"}, *exchanges]
    cassette.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with replay(cassette, secret_headers=["cookie"]) as session:
        login = session.get(f"{server.url}/login")
        assert login.cookies.get_dict() == {"sid": "abc", "b": "2"}
        assert session.get(f"{server.url}/me").request.headers["Cookie"] == "sid=abc; b=2"


def test_faults_are_recorded_with_record_errors_and_replayed(cassette: Path) -> None:
    url = closed_port_url()
    with (
        record(cassette, record_errors=True) as session,
        pytest.raises(requests.exceptions.ConnectionError),
    ):
        session.get(url)
    (exchange,) = load_cassette(cassette).exchanges
    assert exchange.error is not None and exchange.error.type == "ConnectionError"
    with replay(cassette) as session, pytest.raises(requests.exceptions.ConnectionError) as fault:
        session.get(url)
    assert fault.value.request is not None and fault.value.request.url == url
    with record(cassette) as session, pytest.raises(requests.exceptions.ConnectionError):
        session.get(f"{url}/unrecorded")  # record_errors off: nothing is written
    assert len(load_cassette(cassette).exchanges) == 1


def test_streamed_request_bodies_are_read_recorded_and_sent(
    cassette: Path, server: ClientServer
) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"one,"
        yield b"two"

    with record(cassette) as session:
        from_generator = session.post(f"{server.url}/upload", data=pieces())
        from_file = session.put(f"{server.url}/upload", data=io.BytesIO(b"file body"))
    assert from_generator.json()["body"] == "one,two"
    assert from_file.json()["body"] == "file body"
    assert [e.body for e in load_cassette(cassette).exchanges] == [b"one,two", b"file body"]
    with replay(cassette) as session:
        assert session.post(f"{server.url}/upload", data=pieces()).json()["body"] == "one,two"
        assert session.put(f"{server.url}/upload", data=io.BytesIO(b"file body")).ok


def test_body_limits_hold_for_requests_and_responses(cassette: Path, server: ClientServer) -> None:
    def endless() -> Iterator[bytes]:
        while True:
            yield b"x" * 1000

    with record(cassette, max_body_bytes=4096) as session:
        with pytest.raises(BodyTooLargeError) as request_side:
            session.post(f"{server.url}/upload", data=endless())
        with pytest.raises(BodyTooLargeError) as response_side:
            session.get(f"{server.url}/bytes?size=10000")
    assert request_side.value.side == "request" and response_side.value.side == "response"
    assert "RecordingAdapter(..., max_body_bytes=8192)" in str(request_side.value)
    assert load_cassette(cassette).exchanges == []


def test_mode_all_replaces_the_cassette_on_a_clean_close_only(
    cassette: Path, server: ClientServer
) -> None:
    with record(cassette) as session:
        session.get(f"{server.url}/old")
    with pytest.raises(RuntimeError), RecordingAdapter(cassette, mode="all") as adapter:
        session_on(adapter).get(f"{server.url}/new")
        raise RuntimeError("the test failed")
    assert [e.url for e in load_cassette(cassette).exchanges] == [f"{server.url}/old"]
    with RecordingAdapter(cassette, mode="all") as adapter:
        session_on(adapter).get(f"{server.url}/new")
    assert [e.url for e in load_cassette(cassette).exchanges] == [f"{server.url}/new"]


def test_a_cassette_is_shared_with_an_httpx_client(cassette: Path, server: ClientServer) -> None:
    # Recorded by requests, replayed by httpx, and the other way round; one play order.
    with record(cassette) as session:
        session.get(f"{server.url}/shared")
        session.post(f"{server.url}/shared", json={"n": 1})
    recording = RecordingTransport(cassette, outer=httpx.HTTPTransport(), mode="new_episodes")
    with httpx.Client(transport=recording) as client:
        client.get(f"{server.url}/from-httpx")
    answered = len(server.requests)
    adapter = RecordingAdapter(cassette, allow_repeats=False)
    with (
        session_on(adapter) as session,
        httpx.Client(transport=RecordingTransport(cassette, allow_repeats=False)) as client,
    ):
        assert client.get(f"{server.url}/shared").json()["path"] == "/shared"
        assert session.post(f"{server.url}/shared", json={"n": 1}).json()["body"] == '{"n": 1}'
        assert session.get(f"{server.url}/from-httpx").json()["path"] == "/from-httpx"
        with pytest.raises(CassetteMiss, match="already played"):
            session.get(f"{server.url}/shared")  # httpx played it, in the shared session
        assert adapter.play_count == 3 and adapter.unplayed() == []
    assert len(server.requests) == answered


def test_passthrough_hosts_go_to_outer_and_are_never_written(
    cassette: Path, server: ClientServer
) -> None:
    adapter = RecordingAdapter(cassette, passthrough_hosts=["127.0.0.1"])
    with session_on(adapter) as session:
        assert session.get(f"{server.url}/through").json()["path"] == "/through"
    assert adapter.passed_through == 1 and not cassette.exists()


def test_options_are_validated_and_a_closed_adapter_refuses(cassette: Path) -> None:
    with pytest.raises(TypeError, match="RecordingAdapter"):
        RecordingAdapter(cassette, made_up=True)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="max_body_bytes"):
        RecordingAdapter(cassette, max_body_bytes=-1)
    adapter = RecordingAdapter(cassette)
    session = session_on(adapter)
    session.close()
    adapter.close()  # closing again does nothing
    with pytest.raises(RuntimeError, match="is closed"):
        session.get("http://api.example.test/")
    assert repr(adapter) == f"<RecordingAdapter {str(cassette)!r} mode='none'>"


# --- cassettes vcrpy recorded through requests ------------------------------------------------

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "convert"


def test_a_vcrpy_cassette_recorded_through_requests_converts_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # tweepy's Client: a GET with query parameters, its gzipped body as urllib3 1 stored it, the
    # bearer token filtered out by vcrpy and declared secret here as a migrated suite would.
    cassette = tmp_path / "search.jsonl"
    converted = run(capsys, "convert", SAMPLES / "vcr-tweepy-requests-search.yaml", cassette)
    assert converted.code == 0, converted.err
    adapter = RecordingAdapter(cassette, secret_headers=["authorization"])
    with session_on(adapter) as session:
        response = session.get(
            "https://api.twitter.example.test/2/tweets/search/recent",
            params={"query": "Tweepy", "max_results": 10, "tweet.fields": "author_id,created_at"},
            headers={
                "User-Agent": "Python/3.11.7 Requests/2.34.2 Tweepy/4.14.0",
                "Authorization": "Bearer fake-bearer-token-0001",
            },
        )
    adapter.close()
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.json()["data"][0]["text"] == "Tweepy v4.14 is out"
    assert response.json()["meta"]["result_count"] == 1
    assert adapter.unplayed() == []
    assert b"fake-bearer-token" not in cassette.read_bytes()


# --- the sakura_requests fixture ------------------------------------------------------------

FIXTURE_TEST = """
import pytest
import requests

@pytest.mark.cassette("api.jsonl")
def test_api(sakura_requests):
    assert sakura_requests.get("{url}/items", params={"page": 1}).json()["path"] == "/items?page=1"
    with sakura_requests.get("{url}/sse?n=2", stream=True) as events:
        assert len(list(events.iter_content(None))) == 2

@pytest.mark.cassette("api.jsonl", assert_all_played=True)
def test_unplayed(sakura_requests):
    sakura_requests.get("{url}/items", params={"page": 1})

@pytest.mark.cassette("api.jsonl")
def test_swallowed_miss(sakura_requests):
    try:
        sakura_requests.get("{url}/never")
    except Exception:
        pass

@pytest.mark.cassette("api.jsonl", expect_errors=True)
def test_expected_miss(sakura_requests):
    with pytest.raises(Exception):
        sakura_requests.get("{url}/never")
"""


def test_the_fixture_records_replays_and_checks_as_sakura_transport(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\nsakura_record_hosts = 127.0.0.1\n")
    with start_client_server() as running:
        pytester.makepyfile(test_app=FIXTURE_TEST.replace("{url}", running.url))
        recorded = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--record", "-k", "test_api"
        )
        recorded.assert_outcomes(passed=1)
        recorded.stdout.fnmatch_lines(
            [
                "*= sakura-http: cassettes recorded =*",
                "tests/fixtures/api.jsonl: 2 exchanges appended",
                "Review the changes before committing: git diff tests/fixtures*",
            ]
        )
        answered = len(running.requests)
    assert answered == 2
    replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=4, errors=2)  # two fail at teardown
    replayed.stdout.fnmatch_lines(
        [
            "*1 recorded exchange(s) of *api.jsonl were not played (assert_all_played=True):",
            "*the code under test caught 1 sakura-http error(s)*",
            "*sakura_http.CassetteMiss: GET http://127.0.0.1:*/never is not in the cassette*",
        ]
    )
    assert "sakura-http: cassettes recorded" not in replayed.stdout.str()


UNUSED_TEST = """
import requests

def test_own_session(sakura_requests):
    assert requests.get("{url}/live", timeout=30).status_code == 200  # not the fixture's

def test_cassette_exists(sakura_requests):
    pass
"""


def test_the_fixture_fails_a_test_that_never_used_it_without_a_cassette(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    with start_client_server() as running:
        pytester.makepyfile(test_app=UNUSED_TEST.replace("{url}", running.url))
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*sakura_requests: no request went through the sakura_requests session, and its "
            "cassette *test_own_session.jsonl does not exist: the code under test probably sent "
            "its requests with a session of its own*sakura_requests.get(...)*patch_clients=True*"
        ]
    )
    (pytester.path / "tests" / "fixtures" / "test_app").mkdir(parents=True)
    (pytester.path / "tests" / "fixtures" / "test_app" / "test_cassette_exists.jsonl").touch()
    rerun = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "cassette_exists")
    rerun.assert_outcomes(passed=1)  # the cassette exists: an unused fixture is no error


def test_a_body_echoing_its_own_secret_query_value_replays(
    cassette: Path, server: ClientServer
) -> None:
    # Written with the echo as <redacted>, it must match as written (it missed on replay).
    secret = "sk-query-echo-0123456789abcdef"
    url, body = f"{server.url}/items?api_key={secret}", {"key": secret}
    with record(cassette) as session:
        session.post(url, json=body)
    assert secret not in cassette.read_text()
    with replay(cassette) as session:
        assert session.post(url, json=body).status_code == 200
