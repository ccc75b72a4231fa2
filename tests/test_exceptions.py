"""The exception tree (`sakura_http._exceptions`): one tree rooted at `CassetteError`, drawn in
the module's docstring, split by who is at fault; facts on attributes; every message says what
to do next; every error survives pickling (a process pool re-raises its workers' errors so)."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

import sakura_http
from sakura_http import RecordingTransport, Rules, _exceptions
from sakura_http._exceptions import (
    BodyTooLargeError,
    CassetteError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    NetworkBlocked,
    RecordingForbidden,
    RecordingIncomplete,
    RerecordingInProgress,
    UndecodableBodyError,
    UnsafeExchangeError,
    UnwritableExchangeError,
    hidden_in_tracebacks,
    human_size,
)
from sakura_http._format import Exchange, encode_exchange, encode_header

URL = "https://api.example.test/v1/items"
ERRORS = [
    value
    for value in vars(_exceptions).values()
    if isinstance(value, type) and issubclass(value, CassetteError)
]


# --- the tree ------------------------------------------------------------------------------


def _drawn_tree() -> dict[str, str]:
    """Each class the docstring draws, and the class it is drawn under."""
    doc = _exceptions.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        found = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z][A-Za-z]+(?:Error|Miss|Blocked|Forbidden|"
                         r"InProgress|Incomplete))\b", line)  # fmt: skip
        if found is None:
            continue
        depth = len(line) - len(line.lstrip(" │├└─"))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[found[2]] = stack[-1][1]
        stack.append((depth, found[2]))
    return parents


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    drawn = _drawn_tree()
    actual = {
        cls.__name__: next(base.__name__ for base in cls.__mro__[1:] if base in ERRORS)
        for cls in ERRORS
        if cls is not CassetteError
    }
    assert drawn == actual


def test_every_error_is_exported_and_documented() -> None:
    for cls in ERRORS:
        assert getattr(sakura_http, cls.__name__) is cls
        assert cls.__name__ in sakura_http.__all__
        assert cls.__doc__ and len(cls.__doc__) > 30, cls


@pytest.mark.parametrize("lib_name", ["httpx", "httpx2"])
def test_cassette_errors_are_not_httpx_errors(lib_name: str) -> None:
    # Code under test that catches httpx errors to retry must not swallow a miss.
    lib: ModuleType = pytest.importorskip(lib_name)
    for cls in ERRORS:
        assert not issubclass(cls, lib.HTTPError), cls


def test_errors_are_also_what_their_callers_catch() -> None:
    assert issubclass(NetworkBlocked, OSError)  # a connection failure to networking code
    assert issubclass(ConfigurationError, ValueError)  # a bad argument
    assert issubclass(RerecordingInProgress, RecordingForbidden)
    for cls in (CredentialHeaderError, BodyTooLargeError, UndecodableBodyError):
        assert issubclass(cls, UnsafeExchangeError)


# --- pickling ------------------------------------------------------------------------------

SAMPLES = [
    CassetteFormatError("c.jsonl", 3, "line 3 is not JSON"),
    CassetteFormatError("c.jsonl", None, "the header line is missing"),
    CassetteMiss(
        "no recorded exchange matches GET https://api.example.test/",
        method="GET",
        url="https://api.example.test/",
        path="c.jsonl",
        nearest=["#1 differs in the body"],
    ),
    NetworkBlocked("sakura-http blocked connecting to a.example:443", host="a.example", port=443),
    ConfigurationError("mode must be one of none, new_episodes, all"),
    RecordingForbidden("api.example.test is not in record_hosts", host="api.example.test"),
    RerecordingInProgress("process 12 is re-recording c.jsonl", path="c.jsonl", pid=12, since=1.5),
    RecordingIncomplete("c.jsonl", 2, "2 requests were cancelled", "stop it with one Ctrl-C"),
    CredentialHeaderError("authorization", "Bearer x", fix="declare it"),
    CredentialHeaderError("cookie", "a=<redacted>", hook="scrub_hook"),
    BodyTooLargeError("response", 1024, fix="raise it"),
    UndecodableBodyError("content-encoding x-custom cannot be decoded here"),
    UnwritableExchangeError("status", "not an HTTP status", hook="my_hook"),
]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickling(error: CassetteError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)
    assert copy.args == error.args


def test_the_samples_cover_every_error() -> None:
    concrete = {type(error) for error in SAMPLES}
    assert concrete | {CassetteError, UnsafeExchangeError} == set(ERRORS)


# --- messages that say what to do next -----------------------------------------------------


def _transport(path: Path, *responses: Any, **options: Any) -> RecordingTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        return responses[0](request) if callable(responses[0]) else responses[0]

    outer = httpx.MockTransport(answer) if responses else None
    return RecordingTransport(path, outer=outer, **options)


def _raised(transport: RecordingTransport, **request: Any) -> CassetteError:
    with pytest.raises(CassetteError) as caught:
        httpx.Client(transport=transport).request(request.pop("method", "GET"), URL, **request)
    return caught.value


def test_a_miss_names_the_request_and_how_to_record_it(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(encode_header() + encode_exchange(Exchange("GET", f"{URL}?page=1")))
    error = _raised(RecordingTransport(path))
    assert isinstance(error, CassetteMiss)
    assert (error.method, error.url, error.path) == ("GET", URL, str(path))
    assert error.nearest
    assert 'mode="new_episodes"' in str(error)
    assert "pytest --record" in str(error)


def test_a_bad_cassette_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(encode_header() + b'{"method": "GET"}\n')
    with pytest.raises(CassetteFormatError) as caught:
        httpx.Client(transport=RecordingTransport(path)).get(URL)
    error = caught.value
    assert (error.path, error.line) == (str(path), 2)
    assert str(error).startswith(f"{path}:2: ")
    assert "fix the line or re-record it" in str(error)


def test_recording_without_a_network_says_to_pass_outer(tmp_path: Path) -> None:
    error = _raised(RecordingTransport(tmp_path / "c.jsonl", mode="new_episodes"))
    assert isinstance(error, RecordingForbidden)
    assert "outer=" in str(error)


def test_a_host_outside_record_hosts_says_how_to_allow_it(tmp_path: Path) -> None:
    transport = _transport(
        tmp_path / "c.jsonl",
        httpx.Response(200),
        mode="new_episodes",
        record_hosts=["other.example.test"],
    )
    error = _raised(transport)
    assert isinstance(error, RecordingForbidden)
    assert error.host == "api.example.test"
    assert 'record_hosts=["api.example.test"]' in str(error)


def test_an_undeclared_credential_says_how_to_declare_it(tmp_path: Path) -> None:
    transport = _transport(tmp_path / "c.jsonl", httpx.Response(200), mode="new_episodes")
    error = _raised(transport, headers={"Authorization": "Bearer sk-test-0001"})
    assert isinstance(error, CredentialHeaderError)
    assert error.header == "authorization"
    assert 'secret_headers=["authorization"]' in str(error)
    assert "sk-test-0001" not in str(error)


def test_a_body_over_the_limit_says_how_to_raise_it(tmp_path: Path) -> None:
    transport = _transport(
        tmp_path / "c.jsonl",
        httpx.Response(200, content=b"x" * 2048),
        mode="new_episodes",
        max_body_bytes=1024,
    )
    error = _raised(transport)
    assert isinstance(error, BodyTooLargeError)
    assert (error.side, error.limit, error.size) == ("response", 1024, 2048)
    assert "max_body_bytes=2048" in str(error)


@pytest.mark.parametrize("side", ["request", "response"])
def test_the_limit_suggested_holds_a_body_over_twice_the_limit(tmp_path: Path, side: str) -> None:
    # Doubling the limit would not hold a body of 5,000 bytes over a limit of 1,024: the
    # suggestion doubles until it does.
    body = b"x" * 5000
    transport = _transport(
        tmp_path / "c.jsonl",
        httpx.Response(200, content=body if side == "response" else b"ok"),
        mode="new_episodes",
        max_body_bytes=1024,
    )
    error = _raised(transport, method="POST", content=body if side == "request" else b"")
    assert isinstance(error, BodyTooLargeError)
    assert (error.side, error.limit, error.size) == (side, 1024, 5000)
    assert error.suggested_limit == 8192
    assert "max_body_bytes=8192" in str(error)


def test_an_undecodable_body_with_a_secret_says_how_to_record_it(tmp_path: Path) -> None:
    transport = _transport(
        tmp_path / "c.jsonl",
        httpx.Response(200, headers={"content-encoding": "x-custom"}, content=b"\x89raw"),
        mode="new_episodes",
        secret_headers=["authorization"],
    )
    error = _raised(transport, headers={"authorization": "Bearer sk-test-0002"})
    assert isinstance(error, UndecodableBodyError)
    assert "x-custom" in error.reason
    assert "accept-encoding: identity" in str(error)


def test_a_hook_s_unwritable_exchange_says_how_to_fix_the_hook(tmp_path: Path) -> None:
    def break_status(exchange: Exchange) -> Exchange:
        return Exchange(exchange.method, exchange.url, status=1000)

    transport = _transport(
        tmp_path / "c.jsonl",
        httpx.Response(200, content=b"ok"),
        mode="new_episodes",
        rules=Rules(before_record=break_status),
    )
    error = _raised(transport)
    assert isinstance(error, UnwritableExchangeError)
    assert error.field == "status"
    assert error.hook is not None and "break_status" in error.hook
    assert "Make the hook keep that field" in str(error)
    assert not (tmp_path / "c.jsonl").exists()


def test_a_second_rerecording_names_the_process_and_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    first = _transport(path, httpx.Response(200), mode="all")
    httpx.Client(transport=first).get(URL)
    script = (
        "import sys, httpx\n"
        "from sakura_http import RecordingTransport, CassetteError\n"
        "try:\n"
        "    t = RecordingTransport(sys.argv[1], mode='all', "
        "outer=httpx.MockTransport(lambda r: httpx.Response(200)))\n"
        "    httpx.Client(transport=t).get('https://api.example.test/v1/items')\n"
        "except CassetteError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300
    )
    first.close()
    assert done.stdout.startswith("RerecordingInProgress "), done.stderr
    assert f"process {os.getpid()}" in done.stdout
    assert "Re-record it from a single process" in done.stdout


def test_an_incomplete_rerecording_keeps_the_old_cassette_and_says_how_to_stop() -> None:
    error = RecordingIncomplete("c.jsonl", 2, "2 requests were cancelled", "stop it with SIGTERM")
    assert str(error) == (
        "c.jsonl: the re-recording (mode all) is incomplete: 2 requests were cancelled; the old "
        "cassette is kept as it was. Record it again, and stop it with SIGTERM"
    )
    assert (error.path, error.cancelled) == ("c.jsonl", 2)


def test_a_bad_option_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="mode") as caught:
        RecordingTransport(tmp_path / "c.jsonl", mode="sometimes")  # type: ignore[arg-type]
    assert "new_episodes" in str(caught.value)


def test_a_credential_header_from_a_redacted_cookie_says_where_it_came_from() -> None:
    error = CredentialHeaderError("cookie", "session=<redacted>")
    assert "cookie jar sent back" in str(error)
    assert "<redacted>" not in error.header


# --- helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "rounded", "shown"),
    [
        (16 << 20, False, "16 MiB"),
        (1024, False, "1 KiB"),
        (1234, False, "1,234 bytes"),
        (46, True, "46 B"),
        (1536, True, "1.5 KiB"),
        (16 << 20, True, "16.0 MiB"),
        (3 << 30, False, "3 GiB"),
    ],
)
def test_human_size(n: int, rounded: bool, shown: str) -> None:
    assert human_size(n, rounded=rounded) == shown


def test_only_sakura_http_errors_hide_the_engine_s_frames() -> None:
    class Info:
        def __init__(self, value: BaseException) -> None:
            self.value = value

    assert hidden_in_tracebacks(Info(CassetteMiss("m", method="GET", url=URL, path="c")))
    assert not hidden_in_tracebacks(Info(KeyError("a bug")))
    assert not hidden_in_tracebacks(None)
