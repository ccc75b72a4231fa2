"""`sakura-http verify`: cassettes recorded from local servers whose answers then change shape."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import orjson
import pytest

from sakura_http import RecordingTransport
from sakura_http._cassette import load_cassette
from tests.cli_support import Run, assert_one_line_error, run, write_cassette
from tests.llm_server import FakeProvider, start_fake_provider
from tests.servers import _QuietServer, _serving, start_echo_server

MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 3},
}
STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m1"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"Hi"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


@dataclass
class Api:
    """A local API whose answers a test changes: `routes[path]` is (status, type, body)."""

    url: str
    host: str
    routes: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    seen: list[dict[str, str]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _ApiServer
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        api = self.server.api
        api.seen.append({k.lower(): v for k, v in self.headers.items()})
        status, content_type, body = api.routes.get(self.path, (404, "text/plain", b"no route"))
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", f"req_{len(api.seen)}")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ApiServer(_QuietServer):
    daemon_threads = True
    api: Api


@contextlib.contextmanager
def start_api() -> Iterator[Api]:
    server = _ApiServer(("127.0.0.1", 0), _Handler)
    port = server.server_address[1]
    server.api = Api(url=f"http://127.0.0.1:{port}", host=f"127.0.0.1:{port}")
    with _serving(server):
        yield server.api


@pytest.fixture
def api() -> Iterator[Api]:
    with start_api() as running:
        running.routes = {
            "/v1/messages": (200, "application/json", orjson.dumps(MESSAGE)),
            "/v1/stream": (200, "text/event-stream", STREAM),
        }
        yield running


@pytest.fixture(autouse=True)
def _no_hosts_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAKURA_HTTP_RECORD_HOSTS", raising=False)


def record(path: Path, base_url: str, *requests: tuple[str, str]) -> Path:
    """Record `requests` (method, path) from `base_url` into the cassette at `path`."""
    transport = RecordingTransport(path, outer=httpx.HTTPTransport(), mode="new_episodes")
    with httpx.Client(transport=transport, base_url=base_url) as client:
        for method, target in requests:
            client.request(method, target, json={"model": "m"} if method == "POST" else None)
    return path


def verify(capsys: pytest.CaptureFixture[str], api: Api, *args: str | Path) -> Run:
    return run(capsys, "verify", *args, "--record-host", api.host)


# --- same shape, and the four ways a shape drifts ------------------------------------------------


def test_unchanged_answers_are_the_same_shape_and_the_cassette_is_not_written(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(
        tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"), ("GET", "/v1/stream")
    )
    before = cassette.read_bytes()
    other = {**MESSAGE, "id": "msg_99", "content": [{"type": "text", "text": "Other words"}]}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(other))
    result = verify(capsys, api, cassette)
    assert result.code == 0, result
    assert result.out == (
        f"{cassette}\n"
        f"  #1 POST {api.url}/v1/messages (200 -> 200): same shape\n"
        f"  #2 GET {api.url}/v1/stream (200 -> 200): same shape\n"
        "1 cassette, 2 exchanges: 2 same shape, 0 drifted, 0 failed, 0 skipped\n"
    )
    assert cassette.read_bytes() == before
    assert len(api.seen) == 4  # two recorded, two verified


def test_a_json_key_added_is_drift(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    usage = {"input_tokens": 1, "output_tokens": 2, "cache_creation_input_tokens": 0}
    api.routes["/v1/messages"] = (
        200,
        "application/json",
        orjson.dumps({**MESSAGE, "usage": usage}),
    )
    result = verify(capsys, api, cassette)
    assert result.code == 1, result
    assert result.out.splitlines()[1:] == [
        f"  #1 POST {api.url}/v1/messages (200 -> 200): drifted",
        "      key added: response.body.usage.cache_creation_input_tokens",
        "1 cassette, 1 exchange: 0 same shape, 1 drifted, 0 failed, 0 skipped",
    ]


def test_a_type_changed_and_an_enum_value_changed_are_drift(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    changed = {
        **MESSAGE,
        "content": [{"type": "thinking", "text": "..."}],
        "usage": {"input_tokens": "10", "output_tokens": 3},
    }
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    result = verify(capsys, api, cassette)
    assert result.code == 1, result
    assert result.out.splitlines()[2:4] == [
        '      response.body.content[0].type: "text" -> "thinking"',
        "      response.body.usage.input_tokens: number -> string",
    ]


def test_an_sse_event_renamed_is_drift(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("GET", "/v1/stream"))
    renamed = STREAM.replace(b"event: message_stop", b"event: message_end")
    api.routes["/v1/stream"] = (200, "text/event-stream", renamed)
    result = verify(capsys, api, cassette)
    assert result.code == 1, result
    assert result.out.splitlines()[1:4] == [
        f"  #1 GET {api.url}/v1/stream (200 -> 200): drifted",
        "      event removed: message_stop",
        "      event added: message_end",
    ]


def test_a_200_turned_400_is_drift(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    api.routes["/v1/messages"] = (400, "application/json", b'{"error":{"type":"invalid"}}')
    result = verify(capsys, api, cassette)
    assert result.code == 1, result
    assert result.out.splitlines()[1:3] == [
        f"  #1 POST {api.url}/v1/messages (200 -> 400): drifted",
        "      status: 200 -> 400",
    ]


def test_json_gives_the_same_report_as_one_document(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(
        tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"), ("GET", "/v1/stream")
    )
    api.routes["/v1/messages"] = (400, "application/json", b"{}")
    result = verify(capsys, api, cassette, "--json")
    assert result.code == 1, result
    report = json.loads(result.out)
    assert report["summary"] == {
        "cassettes": 1,
        "exchanges": 2,
        "same": 1,
        "drifted": 1,
        "failed": 0,
        "skipped": 0,
    }
    first, second = report["cassettes"][0]["exchanges"]
    assert first["outcome"] == "drifted"
    assert first["recorded_status"] == 200 and first["live_status"] == 400
    assert first["differences"] == [
        {
            "kind": "status",
            "path": "response.status",
            "old": "200",
            "new": "400",
            "text": "status: 200 -> 400",
        }
    ]
    assert second["outcome"] == "same" and second["differences"] == []
    assert report["cassettes"][0]["path"] == str(cassette)


# --- hosts, credentials, failures, bad input -----------------------------------------------------


def test_without_record_hosts_nothing_is_sent_exit_75(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    seen = len(api.seen)
    result = run(capsys, "verify", cassette)
    assert result.code == 75, result
    assert "--record-host" in result.err and "SAKURA_HTTP_RECORD_HOSTS" in result.err
    assert len(api.seen) == seen


def test_record_hosts_from_the_environment(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    monkeypatch.setenv("SAKURA_HTTP_RECORD_HOSTS", f"other.example, {api.host}")
    result = run(capsys, "verify", cassette)
    assert result.code == 0, result


def test_requests_to_other_hosts_are_skipped_and_not_sent(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    recorded = load_cassette(cassette).exchanges[0]
    elsewhere = replace(recorded, url="https://api.example.test/v1/messages")
    write_cassette(cassette, [elsewhere, recorded])
    result = verify(capsys, api, cassette)
    assert result.code == 0, result
    assert result.out.splitlines()[1:] == [
        "  #1 POST https://api.example.test/v1/messages: skipped: api.example.test is not a "
        "--record-host",
        f"  #2 POST {api.url}/v1/messages (200 -> 200): same shape",
        "1 cassette, 2 exchanges: 1 same shape, 0 drifted, 0 failed, 1 skipped",
    ]


def test_an_unreachable_origin_fails_the_exchange_exit_1(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    recorded = load_cassette(cassette).exchanges[0]
    write_cassette(cassette, [replace(recorded, url=f"http://127.0.0.1:{port}/v1/messages")])
    result = run(capsys, "verify", cassette, "--record-host", f"127.0.0.1:{port}")
    assert result.code == 1, result
    line = result.out.splitlines()[1]
    assert line.startswith(f"  #1 POST http://127.0.0.1:{port}/v1/messages: failed: ConnectError")
    assert result.out.splitlines()[-1].endswith("0 drifted, 1 failed, 0 skipped")


def test_credentials_come_from_the_options_and_the_environment_never_the_cassette(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        cassette, outer=httpx.HTTPTransport(), mode="new_episodes", secret_headers=["x-api-key"]
    )
    with httpx.Client(transport=transport, base_url=api.url) as client:
        client.post("/v1/messages", json={}, headers={"x-api-key": "sk-recorded-secret"})
    assert b"sk-recorded" not in cassette.read_bytes()
    monkeypatch.setenv("VERIFY_TEST_KEY", "sk-live-key")
    result = verify(
        capsys,
        api,
        cassette,
        "--header",
        "x-trace: all",
        "--header-for",
        api.host,
        "x-api-key: $VERIFY_TEST_KEY",
        "--header-for",
        "other.example",
        "x-other: no",
    )
    assert result.code == 0, result
    sent = api.seen[-1]
    assert sent["x-api-key"] == "sk-live-key"
    assert sent["x-trace"] == "all"
    assert "x-other" not in sent
    assert "sk-live-key" not in result.out + result.err


def test_a_redacted_credential_is_listed_as_needed_not_given(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    recorded = load_cassette(cassette).exchanges[0]
    headers = (*recorded.headers, ("authorization", "Bearer REDACTED"))
    write_cassette(cassette, [replace(recorded, headers=headers)])
    result = verify(capsys, api, cassette)
    assert result.code == 0, result
    assert "authorization" not in api.seen[-1]
    assert result.out.splitlines()[2] == (
        "  needed, not given: authorization (recorded without its value: give it with --header "
        "or --header-for)"
    )
    given = verify(capsys, api, cassette, "--header", "authorization: Bearer live")
    assert "needed, not given" not in given.out
    assert api.seen[-1]["authorization"] == "Bearer live"


def test_a_declared_secret_header_is_listed_as_needed_not_given(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    # Left out of the file when it was recorded: only its name was kept (secret_headers).
    cassette = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        cassette, outer=httpx.HTTPTransport(), mode="all", secret_headers=["x-api-key"]
    )
    with httpx.Client(transport=transport, base_url=api.url) as client:
        client.post("/v1/messages", json={"model": "m"}, headers={"x-api-key": "sk-ant-1"})
    assert "sk-ant-1" not in cassette.read_text()
    result = verify(capsys, api, cassette)
    assert "x-api-key" not in api.seen[-1]
    assert result.out.splitlines()[2] == (
        "  needed, not given: x-api-key (recorded without its value: give it with --header "
        "or --header-for)"
    )
    given = verify(capsys, api, cassette, "--header", "x-api-key: sk-live")
    assert "needed, not given" not in given.out
    assert api.seen[-1]["x-api-key"] == "sk-live"


def test_a_401_without_credentials_says_to_give_them(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    api.routes["/v1/messages"] = (401, "application/json", b'{"error":"unauthorized"}')
    result = verify(capsys, api, cassette)
    assert result.code == 1, result
    assert result.out.splitlines()[1] == (
        f"  #1 POST {api.url}/v1/messages (200 -> 401): drifted: the origin answered 401 and no "
        "credentials were given for it: pass them with --header or --header-for"
    )


def test_a_folder_stands_for_its_cassettes(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    record(tmp_path / "a" / "one.jsonl", api.url, ("POST", "/v1/messages"))
    record(tmp_path / "a" / "b" / "two.jsonl", api.url, ("GET", "/v1/stream"))
    result = verify(capsys, api, tmp_path / "a")
    assert result.code == 0, result
    assert result.out.splitlines()[-1] == (
        "2 cassettes, 2 exchanges: 2 same shape, 0 drifted, 0 failed, 0 skipped"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["missing.jsonl"],
        ["GOOD", "--header", "no colon here"],
        ["GOOD", "--header", "authorization: Bearer $VERIFY_TEST_UNSET"],
        ["BAD"],
    ],
    ids=["missing file", "bad header", "unset variable", "not a cassette"],
)
def test_bad_input_is_one_line_exit_2_before_anything_is_sent(
    args: list[str],
    tmp_path: Path,
    api: Api,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VERIFY_TEST_UNSET", raising=False)
    good = record(tmp_path / "good.jsonl", api.url, ("POST", "/v1/messages"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not a cassette\n")
    seen = len(api.seen)
    paths = {"GOOD": str(good), "BAD": str(bad), "missing.jsonl": str(tmp_path / "missing.jsonl")}
    result = verify(capsys, api, *[paths.get(arg, arg) for arg in args])
    assert_one_line_error(result)
    assert result.err.startswith("sakura-http verify: error: ")
    assert "no colon here" not in result.err
    assert len(api.seen) == seen


# --- the fake LLM provider -----------------------------------------------------------------------


def record_provider(path: Path, provider: FakeProvider, stream: bool) -> Path:
    transport = RecordingTransport(
        path, outer=httpx.HTTPTransport(), mode="new_episodes", secret_headers=["x-api-key"]
    )
    body = {"model": "fake", "max_tokens": 5, "stream": stream}
    body["messages"] = [{"role": "user", "content": "Kyoto"}]
    with httpx.Client(transport=transport, base_url=provider.url) as client:
        client.post("/v1/messages", json=body, headers={"x-api-key": "sk-ant-test"}).read()
    return path


@pytest.mark.parametrize("stream", [False, True], ids=["message", "stream"])
def test_the_fake_provider_answers_again_in_the_same_shape(
    stream: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_fake_provider() as provider:
        cassette = record_provider(tmp_path / "c.jsonl", provider, stream)
        host = provider.url.removeprefix("http://")
        result = run(
            capsys, "verify", cassette, "--record-host", host, "--header", "x-api-key: sk-ant-2"
        )
        assert provider.requests[-1]["headers"]["x-api-key"] == "sk-ant-2"
    assert result.code == 0, result
    assert result.out.splitlines()[1].endswith(": same shape")


def test_the_fake_provider_gained_a_key_since_the_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_fake_provider() as provider:
        cassette = record_provider(tmp_path / "c.jsonl", provider, stream=False)
        recorded = load_cassette(cassette).exchanges[0]
        older = orjson.loads(recorded.response_body)
        del older["usage"]  # as an older API answered
        older["stop_reason"] = "stop"
        write_cassette(cassette, [replace(recorded, response_body=orjson.dumps(older))])
        host = provider.url.removeprefix("http://")
        result = run(capsys, "verify", cassette, "--record-host", host)
    assert result.code == 1, result
    assert result.out.splitlines()[2:4] == [
        "      key added: response.body.usage",
        '      response.body.stop_reason: "stop" -> "end_turn"',
    ]


# --- --update: re-recording the drifted cassettes ------------------------------------------------


def test_update_re_records_a_drifted_cassette_and_leaves_a_clean_one_untouched(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    drifting = record(tmp_path / "drifting.jsonl", api.url, ("POST", "/v1/messages"))
    clean = record(tmp_path / "clean.jsonl", api.url, ("GET", "/v1/stream"))
    clean_before = clean.read_bytes()
    changed = {**MESSAGE, "stop_reason": "refusal", "usage": {"input_tokens": 1}}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    result = verify(capsys, api, drifting, clean, "--update")
    assert result.code == 1, result  # it drifted: the change is for a person to review
    assert result.out.splitlines()[1:6] == [
        f"  #1 POST {api.url}/v1/messages (200 -> 200): drifted",
        '      response.body.stop_reason: "end_turn" -> "refusal"',
        "      key removed: response.body.usage.output_tokens",
        "  updated: re-recorded 1 exchange (replaced the old file)",
        f"{clean}",
    ]
    assert clean.read_bytes() == clean_before  # not drifted: not rewritten, byte for byte
    (exchange,) = load_cassette(drifting).exchanges
    assert orjson.loads(exchange.response_body)["stop_reason"] == "refusal"
    assert exchange.url == f"{api.url}/v1/messages"
    assert exchange.body == b'{"model":"m"}'
    assert not list(tmp_path.glob("*.recording"))
    again = verify(capsys, api, drifting, clean)
    assert again.code == 0, again


def test_update_never_writes_the_credentials_given_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The echo server answers with the request's headers: the token given with --header and
    --header-for reaches the server, and neither the cassette's request nor its echo in the
    response body or headers holds it."""
    with start_echo_server() as server:
        cassette = tmp_path / "echo.jsonl"
        transport = RecordingTransport(
            cassette,
            outer=httpx.HTTPTransport(),
            mode="new_episodes",
            secret_headers=["authorization"],
        )
        with httpx.Client(transport=transport) as client:
            client.get(f"{server.url}/me", headers={"authorization": "Bearer sk-recorded-0001"})
        (recorded,) = load_cassette(cassette).exchanges
        older = orjson.loads(recorded.response_body)
        del older["count"]  # as an older API answered: the live answer drifted
        write_cassette(cassette, [replace(recorded, response_body=orjson.dumps(older))])
        monkeypatch.setenv("VERIFY_TEST_TOKEN", "sk-live-token-0002")
        host = server.url.removeprefix("http://")
        result = run(
            capsys,
            "verify",
            cassette,
            "--record-host",
            host,
            "--update",
            "--header",
            "authorization: Bearer $VERIFY_TEST_TOKEN",
            "--header-for",
            host,
            "x-api-key: $VERIFY_TEST_TOKEN",
        )
    assert result.code == 1, result
    assert "  updated: re-recorded 1 exchange (replaced the old file)" in result.out
    echoed = orjson.loads(load_cassette(cassette).exchanges[0].response_body)
    assert echoed["headers"]["authorization"] == "<redacted>"  # it was sent
    assert echoed["headers"]["x-api-key"] == "<redacted>"
    written = cassette.read_bytes()
    assert b"sk-live-token" not in written and b"sk-recorded" not in written
    assert "sk-live-token" not in result.out + result.err


def test_update_writes_through_the_rules_and_the_secret_headers_given(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    (recorded,) = load_cassette(cassette).exchanges
    headers = (*recorded.headers, ("x-tenant", "t-0001"))
    write_cassette(cassette, [replace(recorded, headers=headers)])
    (tmp_path / "verify_rules.py").write_text(
        'from sakura_http import Rules, Scrub\nRULES = Rules(scrub=[Scrub.json("id")])\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps({**MESSAGE, "model": "m"}))
    result = verify(
        capsys,
        api,
        cassette,
        "--update",
        "--rules",
        "verify_rules:RULES",
        "--secret-header",
        "x-tenant",
    )
    assert result.code == 1, result
    assert api.seen[-1]["x-tenant"] == "t-0001", result  # sent as recorded
    (exchange,) = load_cassette(cassette).exchanges
    assert orjson.loads(exchange.response_body)["id"] == "<scrubbed>", result
    assert "x-tenant" not in dict(exchange.headers)
    bad = verify(capsys, api, cassette, "--update", "--rules", "no_such_module_here:RULES")
    assert_one_line_error(bad)
    assert bad.err.startswith("sakura-http verify: error: --rules no_such_module_here:RULES")


def test_update_keeps_the_old_file_when_an_exchange_could_not_be_re_recorded(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """Atomic: the first exchange drifted and was re-recorded, the second failed (its origin is
    gone); replacing the cassette would lose it, so the old file stays, byte for byte."""
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    (recorded,) = load_cassette(cassette).exchanges
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    gone = replace(recorded, url=f"http://127.0.0.1:{port}/v1/messages")
    elsewhere = replace(recorded, url="https://api.example.test/v1/messages")
    write_cassette(cassette, [recorded, gone, elsewhere])
    before = cassette.read_bytes()
    api.routes["/v1/messages"] = (400, "application/json", b'{"type":"error"}')
    result = verify(capsys, api, cassette, "--update", "--record-host", f"127.0.0.1:{port}")
    assert result.code == 1, result
    assert result.out.splitlines()[-2] == (
        "  not updated: #2, #3 could not be re-recorded (skipped or failed), and replacing the "
        "cassette would lose them; re-record it from its tests (pytest --record-all) (the old "
        "file was kept)"
    )
    assert cassette.read_bytes() == before
    assert not list(tmp_path.glob("*.recording"))
    report = json.loads(verify(capsys, api, cassette, "--update", "--json").out)
    assert report["cassettes"][0]["updated"] is False
    assert report["cassettes"][0]["not_updated_reason"].startswith("#2, #3 could not be")


def test_update_is_refused_under_sakura_http_strict(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    seen = len(api.seen)
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    result = verify(capsys, api, cassette, "--update")
    assert_one_line_error(result)
    assert "SAKURA_HTTP_STRICT=1 forbids recording" in result.err
    assert len(api.seen) == seen
    assert verify(capsys, api, cassette).code == 0  # verifying alone writes nothing: allowed


@pytest.mark.parametrize("kept", ["declared secret", "redacted value"])
def test_update_keeps_the_old_file_when_a_needed_credential_was_not_given(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str], kept: str
) -> None:
    """Re-sent without the credential it needs, the request is answered 401: that drift is the
    missing credential's, and re-recording it would replace the good answers with refusals and
    forget which credential the requests need.  The old file stays, byte for byte."""
    cassette = tmp_path / "c.jsonl"
    if kept == "declared secret":
        transport = RecordingTransport(
            cassette, outer=httpx.HTTPTransport(), mode="all", secret_headers=["x-api-key"]
        )
        with httpx.Client(transport=transport, base_url=api.url) as client:
            client.post("/v1/messages", json={"model": "m"}, headers={"x-api-key": "sk-ant-1"})
    else:
        record(cassette, api.url, ("POST", "/v1/messages"))
        (recorded,) = load_cassette(cassette).exchanges
        headers = (*recorded.headers, ("authorization", "Bearer REDACTED"))
        write_cassette(cassette, [replace(recorded, headers=headers)])
    before = cassette.read_bytes()
    api.routes["/v1/messages"] = (401, "application/json", b'{"type":"error"}')
    result = verify(capsys, api, cassette, "--update")
    assert result.code == 1, result
    assert "needed, not given" in result.out
    assert "updated: re-recorded" not in result.out, result
    assert "(the old file was kept)" in result.out.splitlines()[-2]
    assert cassette.read_bytes() == before


def test_a_recorded_request_httpx_cannot_send_fails_and_the_others_are_reported(
    tmp_path: Path, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded header value httpx cannot encode (not ASCII) fails that exchange, with the
    reason; it no longer stops the command with a traceback (after other cassettes were
    already replaced under --update, unreported).  The cassette keeps its old file."""
    cassette = record(tmp_path / "c.jsonl", api.url, ("POST", "/v1/messages"))
    (recorded,) = load_cassette(cassette).exchanges
    write_cassette(cassette, [replace(recorded, headers=(*recorded.headers, ("x-name", "café")))])
    before = cassette.read_bytes()
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps({**MESSAGE, "new": 1}))
    result = verify(capsys, api, cassette, "--update")
    assert result.code == 1, result
    assert result.out.splitlines()[1].startswith(
        f"  #1 POST {api.url}/v1/messages: failed: the recorded request cannot be sent"
    ), result
    assert result.out.splitlines()[-1].endswith("0 drifted, 1 failed, 0 skipped")
    assert cassette.read_bytes() == before
