"""RecordingTransport behaviour, run for sync, asyncio and trio clients of httpx and httpx2."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sakura_http import (
    BodyTooLargeError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingForbidden,
    RecordingTransport,
    RecordMode,
)
from sakura_http._cassette import AtomicRecording
from sakura_http._format import Exchange, encode_exchange, encode_header
from tests.drive import Driver
from tests.servers import start_echo_server
from tests.test_streaming import observed, usual_reads

HEADER = b'{"schema_version":"1.0","kind":"cassette"}\n'
URL = "https://api.example.test/v1/items"
ACCEPT = (("accept", "*/*"),)  # what every httpx request sends; hand-written exchanges need it


def ex(method: str, url: str, headers: tuple[tuple[str, str], ...] = (), **kw: Any) -> Exchange:
    """A hand-written exchange as httpx would have recorded it."""
    return Exchange(method, url, headers=ACCEPT + headers, **kw)


def write_cassette(path: Path, *exchanges: Exchange) -> Path:
    path.write_bytes(encode_header() + b"".join(encode_exchange(e) for e in exchanges))
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]


class Script:
    """A scripted outer handler: returns the queued responses and remembers the requests."""

    def __init__(self, drive: Driver, *responses: Any) -> None:
        self.drive = drive
        self.responses = list(responses)
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        item = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(item, Exception):
            raise item
        if callable(item):
            return item(request)
        status, kwargs = item
        return self.drive.lib.Response(status, **kwargs)

    @property
    def outer(self) -> Any:
        return self.drive.mock(self)


# --- record, then replay offline --------------------------------------------------------------


def test_record_from_a_real_server_then_replay_offline(drive: Driver, tmp_path: Path) -> None:
    cassette = tmp_path / "nested" / "echo.jsonl"
    with start_echo_server() as server:
        recording = drive.transport(cassette, outer=drive.real_outer(), mode="new_episodes")
        live = drive.send(recording, "POST", f"{server.url}/hello?a=1", json={"x": 1})
        drive.close(recording)
        assert server.requests == [("POST", "/hello?a=1")]
    assert live.json()["path"] == "/hello?a=1"
    assert cassette.read_bytes().startswith(HEADER)

    replay = drive.transport(cassette)  # outer=None: no network at all
    again = drive.send(replay, "POST", f"{server.url}/hello?a=1", json={"x": 1})
    assert again.status_code == 200
    assert again.json() == live.json()
    assert again.headers["content-type"] == "application/json"
    assert len(lines(cassette)) == 1


def test_replayed_response_carries_the_live_request(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL, status=201, response_body=b"ok"))
    response = drive.send(drive.transport(path), "GET", URL)
    assert response.status_code == 201
    assert response.text == "ok"
    assert response.request.url == URL
    assert isinstance(response.request, drive.lib.Request)
    assert isinstance(response, drive.lib.Response)


def test_missing_cassette_is_empty_and_creates_nothing(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "not" / "there.jsonl"
    transport = drive.transport(path)
    with pytest.raises(CassetteMiss):
        drive.send(transport, "GET", URL)
    drive.close(transport)
    assert not path.parent.exists()


def test_empty_file_gets_the_header_on_first_append(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    script = Script(drive, (200, {"text": "hi"}))
    drive.send(drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL)
    data = path.read_bytes()
    assert data.startswith(HEADER)
    assert data.count(b"\n") == 2


# --- matching ---------------------------------------------------------------------------------


def test_json_body_key_order_and_volatile_headers_are_ignored(
    drive: Driver, tmp_path: Path
) -> None:
    recorded = ex(
        "POST",
        URL,
        headers=(
            ("content-type", "application/json"),
            ("user-agent", "old-sdk/1.0"),
            ("x-stainless-retry-count", "3"),
            ("traceparent", "00-abc-01"),
        ),
        body=b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
        response_body=b'{"ok":true}',
    )
    path = write_cassette(tmp_path / "c.jsonl", recorded)
    response = drive.send(
        drive.transport(path),
        "post",
        URL,
        content=b'{"messages":[{"content":"hi","role":"user"}],"model":"m"}',
        headers={"content-type": "application/json", "x-stainless-os": "Plan9"},
    )
    assert response.json() == {"ok": True}


def test_multipart_boundary_is_ignored(drive: Driver, tmp_path: Path) -> None:
    script = Script(drive, (200, {"text": "uploaded"}))
    path = tmp_path / "upload.jsonl"
    recording = drive.transport(path, outer=script.outer, mode="new_episodes")
    files = {"file": ("a.txt", b"hello", "text/plain")}
    drive.send(recording, "POST", URL, files=files, data={"k": "v"})
    response = drive.send(drive.transport(path), "POST", URL, files=files, data={"k": "v"})
    assert response.text == "uploaded"
    with pytest.raises(CassetteMiss):
        drive.send(drive.transport(path), "POST", URL, files={"file": ("a.txt", b"other")})


def test_url_is_matched_verbatim_with_query_order(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL + "?a=1&b=2"))
    transport = drive.transport(path)
    assert drive.send(transport, "GET", URL + "?a=1&b=2").status_code == 200
    with pytest.raises(CassetteMiss):
        drive.send(transport, "GET", URL + "?b=2&a=1")


def test_ordinary_header_difference_is_a_miss_that_names_it(drive: Driver, tmp_path: Path) -> None:
    recorded = ex("GET", URL, headers=(("x-tenant", "blue"),))
    path = write_cassette(tmp_path / "c.jsonl", recorded)
    with pytest.raises(CassetteMiss) as caught:
        drive.send(drive.transport(path), "GET", URL, headers={"x-tenant": "green"})
    message = str(caught.value)
    assert f"GET {URL} is not in the cassette {path}" in message
    assert "header x-tenant: request 'green', recorded 'blue'" in message
    assert "pytest --record" in message
    assert caught.value.method == "GET"
    assert caught.value.url == URL
    assert caught.value.path == str(path)
    assert len(caught.value.nearest) == 1


def test_miss_message_shows_method_url_and_body_diff(drive: Driver, tmp_path: Path) -> None:
    # The recorded request differs from the live one in its body only (the headers httpx sends
    # are recorded), so the body alone explains the miss.
    path = write_cassette(
        tmp_path / "c.jsonl",
        Exchange(
            "POST",
            URL,
            headers=(("accept", "*/*"), ("content-type", "application/json")),
            body=b'{"model":"small","n":1}',
        ),
        ex("DELETE", URL + "/7"),
    )
    with pytest.raises(CassetteMiss) as caught:
        drive.send(drive.transport(path), "POST", URL, json={"model": "large", "n": 1})
    message = str(caught.value)
    assert "#1 POST " + URL in message
    assert "body differs:" in message
    assert '-  "model": "small",' in message
    assert '+  "model": "large",' in message
    assert "header" not in message and "url:" not in message
    # Another URL is not near while an exchange shares the request's path; it is listed
    # (with its number in the cassette) when nothing shares it.
    assert "#2" not in message and "DELETE" not in message
    with pytest.raises(CassetteMiss) as caught:
        drive.send(drive.transport(path), "PUT", URL + "/7")
    assert "#2 DELETE " + URL + "/7" in str(caught.value)
    assert "method: request PUT, recorded DELETE" in str(caught.value)


def test_ignore_headers_can_be_overridden(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL, headers=(("x-run", "1"),)))
    transport = drive.transport(
        path, ignore_headers=["x-run", "user-agent", "accept*", "host", "connection"]
    )
    assert drive.send(transport, "GET", URL, headers={"x-run": "2"}).status_code == 200
    with pytest.raises(CassetteMiss, match="header user-agent"):
        drive.send(drive.transport(path, ignore_headers=[]), "GET", URL, headers={"x-run": "1"})


# --- ordering ---------------------------------------------------------------------------------


def polling_cassette(tmp_path: Path) -> Path:
    return write_cassette(
        tmp_path / "poll.jsonl",
        ex("GET", URL, response_body=b"pending"),
        ex("GET", URL, response_body=b"pending"),
        ex("GET", URL, response_body=b"done"),
        ex("GET", URL + "/other", response_body=b"other"),
    )


def test_identical_requests_play_in_order_then_repeat_the_last(
    drive: Driver, tmp_path: Path
) -> None:
    transport = drive.transport(polling_cassette(tmp_path))
    bodies = [drive.send(transport, "GET", URL).text for _ in range(5)]
    assert bodies == ["pending", "pending", "done", "done", "done"]
    assert drive.send(transport, "GET", URL + "/other").text == "other"


def test_allow_repeats_false_makes_exhaustion_a_miss(drive: Driver, tmp_path: Path) -> None:
    transport = drive.transport(polling_cassette(tmp_path), allow_repeats=False)
    for _ in range(3):
        drive.send(transport, "GET", URL)
    with pytest.raises(CassetteMiss, match="already played in this run, and allow_repeats=False"):
        drive.send(transport, "GET", URL)


def test_new_episodes_records_a_polling_sequence_and_replays_it(
    drive: Driver, tmp_path: Path
) -> None:
    path = tmp_path / "poll.jsonl"
    script = Script(
        drive, (200, {"text": "pending"}), (200, {"text": "pending"}), (200, {"text": "done"})
    )

    def poll(transport: RecordingTransport) -> list[str]:
        seen = []
        while not seen or seen[-1] != "done":
            seen.append(drive.send(transport, "GET", URL).text)
        return seen

    recording = drive.transport(path, outer=script.outer, mode="new_episodes")
    assert poll(recording) == ["pending", "pending", "done"]
    assert len(lines(path)) == 3
    # Closing the last transport ends the cassette's session: a new one plays from the start.
    drive.close(recording)
    rerun = drive.transport(path, outer=script.outer, mode="new_episodes")
    assert poll(rerun) == ["pending", "pending", "done"]
    assert len(lines(path)) == 3  # replayed, not grown
    assert len(script.requests) == 3
    assert rerun.appended == 0


def test_threads_sharing_a_transport_take_distinct_exchanges(tmp_path: Path) -> None:
    exchanges = [ex("GET", URL, response_body=str(i).encode()) for i in range(40)]
    transport = RecordingTransport(write_cassette(tmp_path / "c.jsonl", *exchanges))
    client = httpx.Client(transport=transport)
    seen: list[str] = []

    def worker() -> None:
        for _ in range(10):
            seen.append(client.get(URL).text)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen, key=int) == [str(i) for i in range(40)]


@pytest.mark.anyio
async def test_concurrent_tasks_take_distinct_exchanges(tmp_path: Path) -> None:
    import anyio

    exchanges = [ex("GET", URL, response_body=str(i).encode()) for i in range(20)]
    transport = RecordingTransport(write_cassette(tmp_path / "c.jsonl", *exchanges))
    client = httpx.AsyncClient(transport=transport)
    seen: list[str] = []

    async def one() -> None:
        seen.append((await client.get(URL)).text)

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(one)
    assert sorted(seen, key=int) == [str(i) for i in range(20)]


def test_ten_thousand_exchanges_replay_by_index(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_bytes(
        encode_header()
        + b"".join(
            encode_exchange(ex("GET", f"{URL}/{i}", response_body=b'{"i":%d}' % i))
            for i in range(10_000)
        )
    )
    transport = RecordingTransport(path)
    client = httpx.Client(transport=transport)
    for i in (0, 4_321, 9_999):
        assert client.get(f"{URL}/{i}").json() == {"i": i}
    with pytest.raises(CassetteMiss) as caught:
        client.get(f"{URL}/10000")
    assert len(caught.value.nearest) == 3


# --- modes ------------------------------------------------------------------------------------


def test_mode_all_replaces_the_cassette_only_on_close(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL, response_body=b"old"))
    path.write_bytes(
        path.read_bytes().replace(b'"kind":"cassette"}', b'"kind":"cassette","note":"keep"}', 1)
    )
    before = path.read_bytes()
    script = Script(drive, (200, {"text": "new"}))
    transport = drive.transport(path, outer=script.outer, mode=RecordMode.ALL)
    assert drive.send(transport, "GET", URL).text == "new"
    assert drive.send(transport, "GET", URL + "/2").text == "new"
    assert path.read_bytes() == before  # untouched until close
    drive.close(transport)
    assert path.read_bytes().splitlines()[0] == (
        b'{"schema_version":"1.0","kind":"cassette","note":"keep"}'
    )
    assert [e["url"] for e in lines(path)] == [URL, URL + "/2"]
    assert not (tmp_path / "c.jsonl.recording").exists()


def test_mode_all_refuses_a_second_concurrent_rerecording(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200))
    # Another process re-recording the cassette holds the lock on its sibling file (flock
    # locks conflict between separate opens, in one process as across processes).
    other = AtomicRecording(path, {})
    with pytest.raises(RecordingForbidden, match="another process is re-recording"):
        RecordingTransport(path, outer=outer, mode="all")  # refused on open: it claims at once
    other.append(b'{"not": "read"}\n')
    other.discard()
    assert not path.exists()


def test_mode_all_with_nothing_recorded_keeps_the_old_cassette(tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL))
    before = path.read_bytes()
    RecordingTransport(
        path, outer=httpx.MockTransport(lambda r: httpx.Response(200)), mode="all"
    ).close()
    assert path.read_bytes() == before


def test_env_record_overrides_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAKURA_HTTP_RECORD", "new_episodes")
    transport = RecordingTransport(tmp_path / "c.jsonl", mode="none")
    assert transport.mode is RecordMode.NEW_EPISODES


def test_env_record_rejects_unknown_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAKURA_HTTP_RECORD", "once")
    with pytest.raises(ConfigurationError, match="SAKURA_HTTP_RECORD is 'once'"):
        RecordingTransport(tmp_path / "c.jsonl")
    with pytest.raises(ConfigurationError, match="mode is 'sometimes'"):
        RecordingTransport(tmp_path / "c.jsonl", mode="sometimes")


@pytest.mark.parametrize(
    ("env_mode", "arg_mode"), [("", "new_episodes"), ("", "all"), ("all", "none")]
)
def test_strict_forbids_recording_at_construction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env_mode: str, arg_mode: str
) -> None:
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    if env_mode:
        monkeypatch.setenv("SAKURA_HTTP_RECORD", env_mode)
    with pytest.raises(RecordingForbidden, match="SAKURA_HTTP_STRICT=1 forbids recording"):
        RecordingTransport(tmp_path / "c.jsonl", mode=arg_mode, outer=httpx.HTTPTransport())
    monkeypatch.delenv("SAKURA_HTTP_RECORD", raising=False)
    assert RecordingTransport(tmp_path / "c.jsonl").mode is RecordMode.NONE


def test_recording_without_outer_is_forbidden(drive: Driver, tmp_path: Path) -> None:
    transport = drive.transport(tmp_path / "c.jsonl", mode="new_episodes")
    with pytest.raises(RecordingForbidden, match="outer=None") as caught:
        drive.send(transport, "GET", URL)
    assert caught.value.host == "api.example.test"
    assert not (tmp_path / "c.jsonl").exists()


def test_record_hosts_limit_what_may_be_recorded(drive: Driver, tmp_path: Path) -> None:
    script = Script(drive, (200, {"text": "ok"}))
    transport = drive.transport(
        tmp_path / "c.jsonl",
        outer=script.outer,
        mode="new_episodes",
        record_hosts=["api.example.test:443", "other.example.test"],
    )
    assert drive.send(transport, "GET", URL).text == "ok"
    assert drive.send(transport, "GET", "http://other.example.test:8080/").text == "ok"
    with pytest.raises(RecordingForbidden, match="not in record_hosts") as caught:
        drive.send(transport, "GET", "https://evil.example.test/")
    assert caught.value.host == "evil.example.test"
    assert len(script.requests) == 2


# --- safety -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    ["Authorization", "proxy-authorization", "X-API-KEY", "api-key", "x-auth-token", "Cookie"],
)
def test_undeclared_credential_headers_are_refused_before_sending(
    drive: Driver, tmp_path: Path, header: str
) -> None:
    script = Script(drive, (200, {}))
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL))
    for mode in ("none", "new_episodes", "all"):
        transport = drive.transport(path, outer=script.outer, mode=mode)
        with pytest.raises(CredentialHeaderError) as caught:
            drive.send(transport, "GET", URL, headers={header: "secret-value"})
        assert str(caught.value).startswith(
            f"header {header.lower()} belongs in secret_headers; not recorded"
        )
        assert f'RecordingTransport(..., secret_headers=["{header.lower()}"])' in str(caught.value)
        assert caught.value.header == header.lower()
        assert transport.raised == [caught.value]
        drive.close(transport)
    assert script.requests == []


def test_a_header_list_that_passed_does_not_let_a_credential_through_later(
    drive: Driver, tmp_path: Path
) -> None:
    # The check is remembered per header list: a list with a credential added is a new list,
    # checked afresh, however many times the plain one passed; and a list refused once stays
    # refused.
    script = Script(drive, (200, {}))
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL))
    transport = drive.transport(path, outer=script.outer, mode="new_episodes")
    plain = {"accept": "*/*", "x-request-id": "1"}
    for _ in range(3):
        drive.send(transport, "GET", URL, headers=plain)
    for _ in range(2):
        with pytest.raises(CredentialHeaderError):
            drive.send(transport, "GET", URL, headers={**plain, "x-api-key": "secret-value"})
    drive.close(transport)
    assert all("x-api-key" not in request.headers for request in script.requests)
    assert b"secret-value" not in path.read_bytes()


def test_declared_secrets_never_reach_the_file(drive: Driver, tmp_path: Path) -> None:
    token = "tok-SAKURA-secret-0123456789"
    path = tmp_path / "echo.jsonl"
    with start_echo_server() as server:
        transport = drive.transport(
            path,
            outer=drive.real_outer(),
            mode="new_episodes",
            secret_headers=["Authorization", "x-api-key"],
        )
        live = drive.send(
            transport,
            "GET",
            server.url + "/me",
            headers={"authorization": f"Bearer {token}", "x-api-key": "key-SAKURA-987654"},
        )
        drive.close(transport)
    # The server echoed both secrets back in a header and in the body: the caller gets the live
    # response, the file the redacted one.
    assert live.headers["x-echo-auth"] == f"Bearer {token}"
    data = path.read_bytes()
    assert token.encode() not in data
    assert b"key-SAKURA-987654" not in data
    assert b"<redacted>" in data
    assert not any(name in ("authorization", "x-api-key") for name, _ in lines(path)[0]["headers"])
    # Replay matches whatever secret value is sent now.
    replay = drive.transport(path, secret_headers=["authorization", "x-api-key"])
    again = drive.send(
        replay,
        "GET",
        server.url + "/me",
        headers={"authorization": "Bearer another", "x-api-key": "another"},
    )
    assert again.json()["headers"]["authorization"] == "<redacted>"


def test_a_secret_echoed_in_the_url_path_is_redacted_and_replays(
    drive: Driver, tmp_path: Path
) -> None:
    # httpbin's /basic-auth/<user>/<password>: the Basic credential's password is in the path.
    path, url = tmp_path / "c.jsonl", "https://httpbin.example.test/basic-auth/user/passwd"
    auth = {"authorization": "Basic dXNlcjpwYXNzd2Q="}  # user:passwd
    script = Script(drive, (200, {"json": {"authenticated": True}}))
    recording = drive.transport(
        path, outer=script.outer, mode="new_episodes", secret_headers=["authorization"]
    )
    drive.send(recording, "GET", url, headers=auth)
    drive.close(recording)
    assert lines(path)[0]["url"] == "https://httpbin.example.test/basic-auth/user/%3Credacted%3E"
    replay = drive.transport(path, secret_headers=["authorization"])
    assert drive.send(replay, "GET", url, headers=auth).json() == {"authenticated": True}
    assert replay.unplayed() == []
    with pytest.raises(CassetteMiss) as missed:  # a real miss says what differs
        drive.send(replay, "GET", url + "?page=2", headers=auth)
    (nearest,) = missed.value.nearest
    assert nearest.splitlines()[1].strip() == (
        "url: request https://httpbin.example.test/basic-auth/user/<redacted>?page=2, "
        "recorded https://httpbin.example.test/basic-auth/user/<redacted>"
    )


def test_set_cookie_is_stored_and_replayed_redacted(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    script = Script(
        drive, (200, {"headers": [("set-cookie", "session=abc123"), ("x-ok", "1")], "text": "."})
    )
    recording = drive.transport(path, outer=script.outer, mode="new_episodes")
    live = drive.send(recording, "GET", URL)
    # The live caller's cookie jar gets the real session (a login flow works while recording).
    assert live.headers.get_list("set-cookie") == ["session=abc123"]
    drive.close(recording)
    assert lines(path)[0]["response_headers"][:2] == [["set-cookie", "<redacted>"], ["x-ok", "1"]]
    assert b"abc123" not in path.read_bytes()
    replayed = drive.send(drive.transport(path), "GET", URL)
    assert replayed.headers.get_list("set-cookie") == ["<redacted>"]


def test_a_cookie_jar_echoing_a_redacted_cookie_is_explained(lib: Any, tmp_path: Path) -> None:
    # The client's cookie jar (sync and async alike) sends the replayed `<redacted>` back.
    path = tmp_path / "c.jsonl"
    outer = lib.MockTransport(lambda r: lib.Response(200, headers={"set-cookie": "session=abc1"}))
    with RecordingTransport(path, outer=outer, mode="new_episodes") as recording:
        client = lib.Client(transport=recording)
        client.get(URL)
        # While recording the jar holds the live cookie: refused, never explained as an echo.
        with pytest.raises(CredentialHeaderError) as live:
            client.get(URL + "/next")
        assert "cookie jar sent back" not in str(live.value)
        assert "abc1" not in str(live.value)
    client = lib.Client(transport=RecordingTransport(path))
    client.get(URL)
    with pytest.raises(CredentialHeaderError, match="cookie jar sent back"):
        client.get(URL + "/next")
    declared = RecordingTransport(path, outer=outer, mode="new_episodes", secret_headers=["cookie"])
    client = lib.Client(transport=declared)
    client.get(URL)
    assert client.get(URL + "/next").status_code == 200


def test_response_body_over_the_limit_is_refused(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    script = Script(drive, (200, {"content": b"x" * (16 * 1024 * 1024 + 1)}))
    transport = drive.transport(path, outer=script.outer, mode="new_episodes")
    with pytest.raises(BodyTooLargeError) as caught:
        drive.send(transport, "GET", URL)
    assert str(caught.value) == (
        "response body over 16 MiB: sakura-http stores at most 16,777,216 bytes "
        "of a response body; raise the limit with RecordingTransport(..., "
        "max_body_bytes=33554432)"
    )
    assert not path.exists()


def test_request_body_over_the_limit_is_refused(drive: Driver, tmp_path: Path) -> None:
    script = Script(drive, (200, {}))
    transport = drive.transport(
        tmp_path / "c.jsonl", outer=script.outer, mode="new_episodes", max_body_bytes=1024
    )
    with pytest.raises(BodyTooLargeError, match=r"^request body over 1 KiB: .* 1,024 bytes"):
        drive.send(transport, "POST", URL, content=b"y" * 1025)
    assert script.requests == []


@pytest.mark.parametrize("stream_through", [False, True])
@pytest.mark.parametrize("encoded", [False, True])
def test_recording_hands_on_the_live_status_line_and_headers(
    drive: Driver, tmp_path: Path, encoded: bool, stream_through: bool
) -> None:
    # While recording, the caller gets the response as the server sent it: its reason phrase,
    # HTTP version and header spelling; a decoded body loses only the content-encoding.
    body = b'{"ok": true}'
    raw = gzip.compress(body) if encoded else body
    headers = [(b"X-Mixed-Case", b"Kept"), (b"Content-Type", b"application/json")]
    if encoded:
        headers.append((b"Content-Encoding", b"gzip"))
    extensions = {"reason_phrase": b"Fine Thanks", "http_version": b"HTTP/1.1"}
    script = Script(drive, (200, {"headers": headers, "content": raw, "extensions": extensions}))
    path = tmp_path / "c.jsonl"
    transport = drive.transport(
        path, outer=script.outer, mode="new_episodes", stream_through=stream_through
    )
    live = drive.send(transport, "GET", URL)
    drive.close(transport)
    assert live.reason_phrase == "Fine Thanks"
    assert live.http_version == "HTTP/1.1"
    assert live.content == body
    if encoded:  # headers rebuilt without the content-encoding, from their recorded text
        assert [(n.lower(), v) for n, v in live.headers.raw[:2]] == [
            (n.lower(), v) for n, v in headers[:2]
        ]
    else:  # the very header list received
        assert live.headers.raw[:2] == headers[:2]
    assert "content-encoding" not in live.headers
    if not stream_through:  # (a streamed decoded body's length is not known up front)
        assert live.headers["content-length"] == str(len(body))
    stored = lines(path)[0]
    assert stored["response_body"] == body.decode()
    assert not any(name == "content-encoding" for name, _ in stored["response_headers"])


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        pytest.param(b'{"ok": true}', {}, id="plain"),
        pytest.param(
            gzip.compress(b'{"ok": true}', mtime=0), {"content-encoding": "gzip"}, id="gzip"
        ),
        # Kept raw, with its content-encoding: the caller's read fails, as it does live.
        pytest.param(b"not gzip", {"content-encoding": "gzip"}, id="bad-gzip"),
        pytest.param(b"", {}, id="empty"),
    ],
)
def test_a_recorded_response_reads_as_the_usual_read_leaves_it(
    drive: Driver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: bytes,
    headers: dict[str, str],
) -> None:
    # The response handed on while recording replays the body it read, and its `read()` takes
    # that body whole (see tests/test_streaming.py, "reading a replayed body whole").
    def record(path: Path) -> Any:
        script = Script(drive, (200, {"headers": headers, "content": content}))
        transport = drive.transport(path, outer=script.outer, mode="new_episodes")
        try:
            return observed(drive.send(transport, "GET", URL))
        except Exception as exc:
            return type(exc), str(exc)

    taken = record(tmp_path / "a.jsonl")
    usual_reads(monkeypatch, drive.lib)
    assert taken == record(tmp_path / "b.jsonl")


def test_passthrough_hosts_are_not_matched_or_recorded(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    script = Script(drive, (200, {"text": "live"}))
    transport = drive.transport(path, outer=script.outer, passthrough_hosts=["auth.example.test"])
    response = drive.send(
        transport, "POST", "https://auth.example.test/token", headers={"authorization": "x"}
    )
    assert response.text == "live"
    assert not path.exists()
    with pytest.raises(CassetteMiss):
        drive.send(transport, "GET", URL)


# --- fault exchanges --------------------------------------------------------------------------


def test_transport_errors_are_recorded_only_with_record_errors(
    drive: Driver, tmp_path: Path
) -> None:
    path = tmp_path / "c.jsonl"
    error = drive.lib.ConnectError("connection refused")
    script = Script(drive, error)
    with pytest.raises(drive.lib.ConnectError):
        drive.send(drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL)
    assert not path.exists()
    transport = drive.transport(path, outer=script.outer, mode="new_episodes", record_errors=True)
    with pytest.raises(drive.lib.ConnectError):
        drive.send(transport, "GET", URL)
    assert lines(path)[0]["error"] == {"type": "ConnectError", "message": "connection refused"}
    with pytest.raises(drive.lib.ConnectError, match="connection refused"):
        drive.send(drive.transport(path), "GET", URL)


# --- errors and edges -------------------------------------------------------------------------


def test_a_torn_last_line_fails_to_load_and_is_never_written(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL))
    path.write_bytes(path.read_bytes() + b'{"method":"GET","url":"ht')
    before = path.read_bytes()
    with pytest.raises(CassetteFormatError) as caught:
        drive.transport(path, outer=drive.mock(lambda r: None), mode="new_episodes")
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{path}:3: the last line is incomplete")
    assert path.read_bytes() == before


def test_a_closed_transport_refuses_requests(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", ex("GET", URL))
    transport = drive.transport(path)
    drive.close(transport)
    drive.close(transport)  # closing twice is harmless
    with pytest.raises(RuntimeError, match="is closed"):
        drive.send(transport, "GET", URL)


def test_close_closes_the_outer_transport(drive: Driver, tmp_path: Path) -> None:
    closed: list[str] = []

    class Outer(drive.lib.MockTransport):  # type: ignore[name-defined,misc]
        def close(self) -> None:
            closed.append("close")

        async def aclose(self) -> None:
            closed.append("aclose")

    transport = drive.transport(tmp_path / "c.jsonl", outer=Outer(lambda r: None))
    drive.close(transport)
    assert closed == (["aclose"] if drive.is_async else ["close"])


def test_unplayed_lists_what_was_not_replayed(tmp_path: Path) -> None:
    transport = RecordingTransport(polling_cassette(tmp_path))
    httpx.Client(transport=transport).get(URL)
    assert [e.response_body for e in transport.unplayed()] == [b"pending", b"done", b"other"]


def test_bad_option_values_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replay_chunk_size"):
        RecordingTransport(tmp_path / "c.jsonl", replay_chunk_size=0)
    with pytest.raises(ValueError, match="replay_latency"):
        RecordingTransport(tmp_path / "c.jsonl", replay_latency=-1)
