"""`Rules` and `Scrub`: each rule alone and combined, sync and async, httpx and httpx2."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakura_http import (
    EMAIL_PATTERN,
    BodyTooLargeError,
    CassetteMiss,
    ConfigurationError,
    Exchange,
    JsonPath,
    RecordingTransport,
    Rules,
    Scrub,
    load_cassette,
)
from sakura_http._matching import Matcher
from sakura_http._rules import header_wildcards, scrub_written
from tests.drive import Driver
from tests.test_streaming import IGNORE_HTTPX_ASYNCGEN

URL = "https://crm.example.test/v1/customers"
_RUNS = itertools.count()
LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"  # the long attack runs (opt-in)
EMAIL = r"[\w.+-]+@[\w-]+\.[\w.]+"


def written(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()[1:]]


# --- construction ------------------------------------------------------------------------------


def test_json_paths() -> None:
    assert JsonPath.parse("metadata.user_id").parts == ("metadata", "user_id")
    assert JsonPath.parse("messages[*].id").parts == ("messages", None, "id")
    assert JsonPath.parse("a[0][1].b").parts == ("a", 0, 1, "b")
    for bad in ["", ".a", "a..b", "a[", "a[x]", "[0]", "a.[0]", "a]b"]:
        with pytest.raises(ConfigurationError, match="JSON path"):
            JsonPath.parse(bad)


def test_a_json_path_may_start_at_the_root_as_jsonpath_and_vcrpy_users_write_it(
    tmp_path: Path,
) -> None:
    # "$.password" once parsed as a key named "$": the scrub silently scrubbed nothing.
    assert JsonPath.parse("$.metadata.user_id").parts == ("metadata", "user_id")
    assert JsonPath.parse("$.messages[*].id").parts == ("messages", None, "id")
    assert JsonPath.parse("$ref.a").parts == ("$ref", "a")  # a key that begins with $
    for bad in ["$", "$.", "$[0]", "$..a"]:
        with pytest.raises(ConfigurationError, match="JSON path"):
            JsonPath.parse(bad)
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(
        lambda request: httpx.Response(200, json={"user": {"token": "t-9"}})
    )
    rules = Rules(scrub=[Scrub.json("$.password", "$.user.token")])
    with RecordingTransport(path, outer=outer, mode="all", rules=rules) as transport:
        httpx.Client(transport=transport).post(
            "https://api.example.test/login", json={"password": "hunter2"}
        )
    text = path.read_text()
    assert "hunter2" not in text and "t-9" not in text


def test_malformed_rules_are_value_errors_naming_them() -> None:
    with pytest.raises(ValueError, match=r"regular expression '\(' is invalid"):
        Scrub.regex("(")
    with pytest.raises(ValueError, match="messages\\[\\*\\]\\.\\.id"):
        Rules(ignore_json=["messages[*]..id"])
    with pytest.raises(ValueError, match="Scrub steps"):
        Rules(scrub=["date"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"rules must be a sakura_http\.Rules"):
        RecordingTransport("c.jsonl", rules={"ignore_query": ["ts"]})


def test_a_path_that_matches_nothing_is_not_an_error() -> None:
    value = {"a": [{"b": 1}, {"c": 2}]}
    assert JsonPath.parse("a[*].b").set(value, "x") == {"a": [{"b": "x"}, {"c": 2}]}
    assert JsonPath.parse("z.y[3]").set(value, "x") == value


def test_rules_combine() -> None:
    seen: list[str] = []

    def first(exchange: Exchange) -> Exchange:
        seen.append("first")
        return exchange

    def second(exchange: Exchange) -> Exchange | None:
        seen.append("second")
        return None

    both = Rules(ignore_query=["ts"], before_record=first) | Rules(
        ignore_query=["sig"], scrub=[Scrub.query("key")], before_record=second
    )
    assert both.ignore_query == {"ts", "sig"}
    assert both.scrub == (Scrub.query("key"),)
    assert both.before_record is not None
    assert both.before_record(Exchange("GET", URL)) is None
    assert seen == ["first", "second"]
    assert Rules.llm().scrub[0].kind == "response_header"


# --- matching ----------------------------------------------------------------------------------


def _record_then_replay(
    drive: Driver,
    tmp_path: Path,
    rules: Rules,
    first: dict[str, Any],
    second: dict[str, Any],
    response: Any = None,
) -> tuple[Path, Any, Any]:
    path = tmp_path / "c.jsonl"
    answer = response or (lambda request: drive.lib.Response(200, json={"ok": True}))
    with drive.transport(path, outer=drive.mock(answer), mode="new_episodes", rules=rules) as t:
        live = drive.send(t, **first)
    replayed = drive.send(drive.transport(path, rules=rules), **second)
    return path, live, replayed


def test_ignore_query(drive: Driver, tmp_path: Path) -> None:
    path, _, replayed = _record_then_replay(
        drive,
        tmp_path,
        Rules(ignore_query=["ts", "nonce"]),
        {"method": "GET", "url": URL + "?q=ada&ts=1&nonce=aa"},
        {"method": "GET", "url": URL + "?q=ada&ts=2&nonce=bb"},
    )
    assert replayed.json() == {"ok": True}
    assert written(path)[0]["url"] == URL + "?q=ada&ts=1&nonce=aa"  # still recorded as sent
    with pytest.raises(CassetteMiss):
        drive.send(
            drive.transport(path, rules=Rules(ignore_query=["ts", "nonce"])),
            "GET",
            URL + "?q=bob&ts=3",
        )


def test_ignore_json(drive: Driver, tmp_path: Path) -> None:
    rules = Rules(ignore_json=["metadata.user_id", "messages[*].id"])
    body = {"messages": [{"id": "m1", "text": "hi"}], "metadata": {"user_id": "u1"}}
    other = {"messages": [{"id": "m9", "text": "hi"}], "metadata": {"user_id": "u2"}}
    path, _, replayed = _record_then_replay(
        drive, tmp_path, rules, {"method": "POST", "url": URL, "json": body},
        {"method": "POST", "url": URL, "json": other},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}
    assert json.loads(written(path)[0]["body"])["metadata"]["user_id"] == "u1"
    changed = {**other, "messages": [{"id": "m9", "text": "bye"}]}
    with pytest.raises(CassetteMiss, match="body differs"):
        drive.send(drive.transport(path, rules=rules), "POST", URL, json=changed)


ONE_SIDED = [
    ("g", {"a": 1}, {"a": 1, "g": 2}),
    ("g", {"a": 1, "g": 2}, {"a": 1}),
    ("g.y", {"a": 1, "g": {"x": 1}}, {"a": 1, "g": {"x": 1, "y": [2]}}),
    ("g.y", {"g": {"x": 1, "y": {"z": 1}}}, {"g": {"x": 1}}),
    ("m[*].id", {"m": [{"t": "a"}, {"t": "b", "id": 1}]}, {"m": [{"t": "a", "id": 7}, {"t": "b"}]}),
    ("m[1]", {"m": [1]}, {"m": [1, 2]}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "recorded", "sent"), ONE_SIDED)
def test_ignore_json_ignores_a_path_present_on_one_side_only(
    path: str, recorded: Any, sent: Any
) -> None:
    matcher = Matcher(frozenset(), frozenset(), rules=Rules(ignore_json=[path]))
    headers = (("content-type", "application/json"),)
    exchange = Exchange("POST", URL, headers, json.dumps(recorded).encode())
    request = dataclasses.replace(exchange, body=json.dumps(sent).encode())
    assert matcher.key_of_exchange(request) == matcher.key_of_exchange(exchange)
    plain = Matcher(frozenset(), frozenset())
    assert plain.key_of_exchange(request) != plain.key_of_exchange(exchange)


def test_ignore_json_one_sided_replays(drive: Driver, tmp_path: Path) -> None:
    path, recorded, sent = ONE_SIDED[0]
    rules = Rules(ignore_json=[path])
    _, _, replayed = _record_then_replay(
        drive, tmp_path, rules, {"method": "POST", "url": URL, "json": recorded},
        {"method": "POST", "url": URL, "json": sent},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}


def test_ignore_json_leaves_out_only_what_it_names() -> None:
    headers = (("content-type", "application/json"),)

    def compared(rules: Rules, value: Any) -> Any:
        return json.loads(rules.match_body(headers, json.dumps(value).encode()))

    # Several indexes of one list are the items they named, whatever the order of the paths.
    for paths in (["m[0]", "m[2]"], ["m[2]", "m[0]"]):
        assert compared(Rules(ignore_json=paths), {"m": [0, 1, 2, 3]}) == {"m": [1, 3]}
    # `g.y` ignores `y`, not whether `g` is there: `ignore_json=["g"]` does that.
    assert compared(Rules(ignore_json=["g.y"]), {"g": {"y": 1}}) == {"g": {}}
    assert compared(Rules(ignore_json=["g.y"]), {"a": 1}) == {"a": 1}
    assert compared(Rules(ignore_json=["m[*].id", "m"]), {"m": [{"id": 1}], "a": 1}) == {"a": 1}


def test_ignore_body(drive: Driver, tmp_path: Path) -> None:
    _, _, replayed = _record_then_replay(
        drive, tmp_path, Rules(ignore_body=True),
        {"method": "POST", "url": URL, "content": b"\x00random-1"},
        {"method": "POST", "url": URL, "content": b"\x00random-2, longer"},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}


# --- scrubbing ---------------------------------------------------------------------------------


def echo_customer(drive: Driver) -> Any:
    def answer(request: Any) -> Any:
        sent = json.loads(request.content)
        return drive.lib.Response(
            200,
            headers={"date": "Mon, 30 Nov 2026 12:00:00 GMT", "request-id": "req_1"},
            json={"customer": sent["customer"], "note": f"mail {sent['customer']['email']}"},
        )

    return answer


def test_scrub_json_and_regex_everywhere_but_the_caller_gets_the_live_response(
    drive: Driver, tmp_path: Path
) -> None:
    rules = Rules(
        scrub=[
            Scrub.json("customer.email"),
            Scrub.regex(EMAIL, "<email>"),
            Scrub.query("api_key"),
            Scrub.response_header("date", "request-id"),
        ]
    )
    email = "ada.lovelace@mail.example"
    path, live, replayed = _record_then_replay(
        drive,
        tmp_path,
        rules,
        {
            "method": "POST",
            "url": f"{URL}?api_key=k-123&cc={email}",
            "json": {"customer": {"email": email, "name": "Ada"}},
            "headers": {"x-contact": email},
        },
        {
            "method": "POST",
            "url": f"{URL}?api_key=k-456&cc=grace@mail.example",
            "json": {"customer": {"email": "grace@mail.example", "name": "Ada"}},
            "headers": {"x-contact": "grace@mail.example"},
        },
        response=echo_customer(drive),
    )
    assert live.json()["customer"]["email"] == email  # live, unscrubbed
    assert live.headers["request-id"] == "req_1"
    data = path.read_bytes()
    assert b"ada.lovelace" not in data and b"k-123" not in data and b"req_1" not in data
    exchange = written(path)[0]
    assert exchange["url"] == f"{URL}?api_key=<scrubbed>&cc=<email>"
    assert ["x-contact", "<email>"] in exchange["headers"]
    assert json.loads(exchange["body"])["customer"] == {"email": "<scrubbed>", "name": "Ada"}
    assert ["date", "<scrubbed>"] in exchange["response_headers"]
    assert replayed.json()["customer"]["email"] == "<scrubbed>"
    assert replayed.json()["note"] == "mail <email>"


def test_a_regex_split_across_chunks_is_scrubbed_and_the_chunks_kept(
    drive: Driver, tmp_path: Path
) -> None:
    pieces = [b"data: hello ada.love", b"lace@mail.", b"example bye\n\n", b"data: done\n\n"]

    def answer(request: Any) -> Any:
        return drive.lib.Response(200, headers={"content-type": "text/event-stream"},
                                  content=_stream(drive, pieces))  # fmt: skip

    path = tmp_path / "sse.jsonl"
    rules = Rules(scrub=[Scrub.regex(EMAIL, "<email>")])
    with drive.transport(path, outer=drive.mock(answer), mode="new_episodes", rules=rules) as t:
        live = drive.send(t, "GET", URL + "/events")
    assert live.content == b"".join(pieces)
    exchange = written(path)[0]
    assert "ada" not in exchange["response_body"]
    assert exchange["response_body"] == "data: hello <email> bye\n\ndata: done\n\n"
    assert len(exchange["chunks"]) == 3  # the boundary inside the match moved to its end
    assert sum(exchange["chunks"]) == len(exchange["response_body"])


def _stream(drive: Driver, pieces: list[bytes]) -> Any:
    if drive.is_async:

        async def agen() -> Any:
            for piece in pieces:
                yield piece

        return agen()
    return iter(pieces)


def test_rerecording_unchanged_traffic_leaves_the_file_byte_identical(tmp_path: Path) -> None:
    ids = itertools.count()

    def answer(request: httpx.Request) -> httpx.Response:
        n = next(ids)
        return httpx.Response(
            200,
            headers={"date": f"Mon, 30 Nov 2026 12:00:0{n} GMT", "request-id": f"req_{n}",
                     "anthropic-ratelimit-tokens-remaining": str(1000 - n)},
            json={"content": [{"type": "text", "text": "Hello"}]},
        )  # fmt: skip

    path = tmp_path / "chat.jsonl"
    copies = []
    for _ in range(2):
        with RecordingTransport(
            path, outer=httpx.MockTransport(answer), mode="all", rules=Rules.llm()
        ) as transport:
            httpx.Client(transport=transport).post(URL, json={"prompt": "hi"})
        copies.append(path.read_bytes())
    assert copies[0] == copies[1]


def test_before_record_can_skip_or_change_but_not_unsafe(tmp_path: Path) -> None:
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="fine"))
    path = tmp_path / "c.jsonl"

    def skip_health(exchange: Exchange) -> Exchange | None:
        if exchange.url.endswith("/health"):
            return None
        return dataclasses.replace(exchange, response_body=b"fine, reviewed")

    with RecordingTransport(
        path, outer=outer, mode="new_episodes", rules=Rules(before_record=skip_health)
    ) as transport:
        client = httpx.Client(transport=transport)
        assert client.get(URL + "/health").text == "fine"
        assert client.get(URL + "/data").text == "fine"  # the caller gets the live response
    assert [e["url"] for e in written(path)] == [URL + "/data"]
    assert written(path)[0]["response_body"] == "fine, reviewed"

    token = "tok-live-SECRET-123456"

    def put_back(exchange: Exchange) -> Exchange:
        return dataclasses.replace(
            exchange,
            headers=(*exchange.headers, ("authorization", f"Bearer {token}")),
            response_body=f"echo {token}".encode(),
        )

    put = tmp_path / "put.jsonl"
    with RecordingTransport(
        put, outer=outer, mode="new_episodes", secret_headers=["authorization"],
        rules=Rules(before_record=put_back),
    ) as transport:  # fmt: skip
        httpx.Client(transport=transport, headers={"authorization": f"Bearer {token}"}).get(URL)
    assert token.encode() not in put.read_bytes()

    def grow(exchange: Exchange) -> Exchange:
        return dataclasses.replace(exchange, response_body=b"x" * 100)

    with RecordingTransport(
        tmp_path / "big.jsonl", outer=outer, mode="new_episodes", max_body_bytes=10,
        rules=Rules(before_record=grow),
    ) as transport, pytest.raises(BodyTooLargeError):  # fmt: skip
        httpx.Client(transport=transport).get(URL)
    assert not (tmp_path / "big.jsonl").exists()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=6,
                  max_size=40).filter(lambda v: "\\" not in v and '"' not in v),
    chunk=st.integers(min_value=1, max_value=7),
)  # fmt: skip
def test_a_scrubbed_value_never_reaches_the_file(tmp_path: Path, value: str, chunk: int) -> None:
    marker = f"SECRET[{value}]"
    body = f'{{"profile": {{"ssn": "{marker}"}}, "echo": "{marker}"}}'.encode()
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"x-echo": marker.encode().hex()}, content=iter(pieces))

    path = tmp_path / f"p{next(_RUNS)}.jsonl"  # hypothesis may run one example twice
    rules = Rules(scrub=[Scrub.regex(r"SECRET\[[^\]]*\]"), Scrub.response_header("x-echo")])
    with RecordingTransport(path, outer=httpx.MockTransport(answer), mode="new_episodes",
                            rules=rules) as transport:  # fmt: skip
        client = httpx.Client(transport=transport)
        live = client.post(URL, json={"ssn": marker}, headers={"x-ssn": marker.encode().hex()})
    assert live.json()["echo"] == marker
    data = path.read_bytes()
    assert marker.encode() not in data
    assert json.dumps(marker).encode()[1:-1] not in data


# --- Scrub.json fails closed (issue 23) --------------------------------------------------------

TOKEN = "Q7RZK2VD9XW4TB6MJ3HC8PLY5SNF"  # 28 characters; no 4 of them in a row elsewhere below
JSON_TYPE = (("content-type", "application/json"),)


def leaked(data: bytes, token: str = TOKEN) -> str | None:
    """The longest prefix of `token`, 4 characters or more, found in `data`."""
    for size in range(len(token), 3, -1):
        if token[:size].encode() in data:
            return token[:size]
    return None


def with_token(template: bytes) -> bytes:
    return template.replace(b"TOKEN", TOKEN.encode())


@pytest.mark.parametrize(
    ("content_type", "template"),
    [
        ("application/json", b'{"n": NaN, "user": {"session": "TOKEN"}}'),
        ("application/json", b'{"n": -Infinity, "user": {"session": "TOKEN"}}'),
        ("application/json", b'\xef\xbb\xbf{"user": {"session": "TOKEN"}}'),
        ("application/json", b'{"n": 12345678901234567890123, "user": {"session": "TOKEN"}}'),
        ("application/json", b'{"odd": "\\ud800", "user": {"session": "TOKEN"}}'),
        ("text/json", b'{"user": {"session": "TOKEN"}}'),
        ("text/plain; charset=utf-8", b'{"user": {"session": "TOKEN"}}'),
        ("application/octet-stream", b'  {"user": {"session": "TOKEN"}}\n'),
        (None, b'{"user": {"session": "TOKEN"}}'),
        (None, b'{"user": {"session": "TOKEN"}, "user": {"name": "ada"}}'),  # the last one counts
    ],
)  # fmt: skip
def test_scrub_json_covers_what_python_json_parses_whatever_the_content_type(
    content_type: str | None, template: bytes
) -> None:
    headers = () if content_type is None else (("content-type", content_type),)
    raw = with_token(template)
    scrubbed = Rules(scrub=[Scrub.json("user.session")]).scrub_body(headers, raw)
    assert leaked(scrubbed) is None
    value = json.loads(scrubbed)  # still JSON, NaN, BOM and all
    assert value["user"] in ({"session": "<scrubbed>"}, {"name": "ada"})
    assert value.get("n") != value.get("n") or value.get("n") == json.loads(raw).get("n")
    assert scrubbed.startswith(b"\xef\xbb\xbf") == raw.startswith(b"\xef\xbb\xbf")


def test_scrub_json_of_a_utf16_body() -> None:
    raw = json.dumps({"user": {"session": TOKEN}}).encode("utf-16")
    scrubbed = Rules(scrub=[Scrub.json("user.session")]).scrub_body(JSON_TYPE, raw)
    assert json.loads(scrubbed) == {"user": {"session": "<scrubbed>"}}
    assert TOKEN[:4] not in scrubbed.decode("utf-16")


@pytest.mark.parametrize(
    ("template", "kept"),
    [
        (b'{"user": {"session": "TOKEN",}}', b'{"user": {'),  # a trailing comma
        (b"{'user': {'session': 'TOKEN'}}", b"{'user': {"),  # a Python repr
        (b'{"user": {"sess\\u0069on": "TOKEN" /* js */}}', b'{"user": {'),
        (b'{"a": 1}\n{"b": 2} {"session": "TOKEN"}', b'{"a": 1}\n{"b": 2} {'),
        (b'{"user": {"name": "no key here"},}', b'{"user": {"name": "no key here"},}'),
    ],
)
def test_a_body_that_does_not_parse_is_cut_where_the_scrubbed_key_could_begin(
    template: bytes, kept: bytes
) -> None:
    rules = Rules(scrub=[Scrub.json("user.session")])
    raw = with_token(template)
    assert rules.scrub_body(JSON_TYPE, raw) == kept
    body, chunks, notes = scrub_written(rules, JSON_TYPE, raw, (5, len(raw) - 5))
    assert body == kept
    assert chunks == ((5, len(kept) - 5) if len(kept) > 5 else (len(kept),))
    if kept != raw:
        assert notes == (
            f"response body: cut at byte {len(kept)} of {len(raw)}: it is not JSON that parses, "
            "and `session` of Scrub.json could begin there",
        )
    else:
        assert notes == ()


def test_a_truncated_json_body_keeps_no_part_of_the_scrubbed_value() -> None:
    rules = Rules(scrub=[Scrub.json("user.session")])
    full = with_token(b'{"id": 7, "user": {"name": "ada", "session": "TOKEN"}, "ok": true}')
    key = full.index(b'"session"')
    for size in range(len(full) + 1):
        body, chunks, notes = scrub_written(rules, JSON_TYPE, full[:size], (size,), truncated=True)
        assert leaked(body) is None, size
        assert sum(chunks) == len(body)
        if size <= key:  # all that arrived, less a last string that could begin the key
            assert body == full[:size] or (full[:size].startswith(body) and full[len(body)] == 34)
        elif size < len(full):
            assert body == full[:key]
        if body != full[:size] and size < len(full):
            assert notes == (
                f"response body: cut at byte {len(body)} of {size}: it is truncated and does not "
                "parse, and `session` of Scrub.json could begin there",
            )
    assert json.loads(body)["user"]["session"] == "<scrubbed>"  # the whole body parses


def test_scrub_json_reaches_each_line_of_a_stream_and_keeps_its_chunks() -> None:
    events = [
        b"event: a\ndata: " + with_token(b'{"user": {"session": "TOKEN"}}') + b"\n\n",
        b'event: b\ndata: {"user": {"name": "ada"}}\n\n',
        b"data: " + with_token(b'{"user": {"session": "TOKEN"}}')[:30],  # cut short
    ]
    rules = Rules(scrub=[Scrub.json("user.session")])
    sse = (("content-type", "text/event-stream"),)
    body, chunks, notes = scrub_written(
        rules, sse, b"".join(events), tuple(map(len, events)), truncated=True
    )
    assert leaked(body) is None
    assert body == (
        b'event: a\ndata: {"user":{"session":"<scrubbed>"}}\n\n'
        + events[1] + b'data: {"user": {'
    )  # fmt: skip
    assert chunks == (len(b'event: a\ndata: {"user":{"session":"<scrubbed>"}}\n\n'),
                      len(events[1]), len(b'data: {"user": {'))  # fmt: skip
    assert len(notes) == 1


@pytest.mark.parametrize(
    "pattern",
    [
        r"Q7RZ[A-Z0-9]{24}",
        r"Q7RZ[A-Z0-9]+",
        r"(?i)q7rz\w{24}",
        r"(?:Q7|X9)RZ(?=K)[A-Z0-9]{24}\b",
        r"Q7RZK2V(D9|E1)[A-Z0-9]{19,}",
    ],
)
def test_a_regex_match_cut_short_leaves_no_prefix(pattern: str) -> None:
    rules = Rules(scrub=[Scrub.regex(pattern)])
    full = with_token(b"data: hello TOKEN bye\n")
    start = full.index(TOKEN.encode())
    for size in range(len(full) + 1):
        body, chunks, notes = scrub_written(rules, (), full[:size], (size,), truncated=True)
        assert leaked(body) is None, size
        assert sum(chunks) == len(body)
        if start < size < start + len(TOKEN) and body != full[:start] + b"<scrubbed>":
            assert body == full[:start]  # (not matched yet: cut; `[A-Z0-9]+` matches already)
            assert notes == (
                f"response body: cut at byte {start} of {size}: it is truncated where a match "
                f"of Scrub.regex({pattern!r}) could begin",
            )
        else:
            assert notes == ()
            assert body == full[:size] or size > start


class _AsyncChunks:
    """An async iterable of chunks that needs no closing (an async generator would)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> _AsyncChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


def _read_first_chunk_and_close(drive: Driver, transport: Any) -> bytes:
    if not drive.is_async:
        with (
            drive.lib.Client(transport=transport) as client,
            client.stream("GET", URL) as response,
        ):
            return bytes(next(response.iter_raw()))

    async def go() -> bytes:
        async with (
            drive.lib.AsyncClient(transport=transport) as client,
            client.stream("GET", URL) as response,
        ):
            chunks = response.aiter_raw()
            try:
                return bytes(await chunks.__anext__())
            finally:
                await chunks.aclose()

    first: bytes = anyio.run(go, backend=drive.flavor)
    return first


@IGNORE_HTTPX_ASYNCGEN  # httpx's own stream of the mocked response, left to the collector
@pytest.mark.parametrize(
    ("scrub", "pieces", "kept"),
    [
        (Scrub.json("user.session"), [b'{"user": {"session": "TOKEN"', b"}}"], b'{"user": {'),
        (Scrub.json("user.session"), [b'{"user": {"session": "Q7RZK2V', b'D9"}}'], b'{"user": {'),
        (Scrub.regex(r"Q7[R]Z\w{24}"), [b"data: Q7RZK2V", b"D9XW4TB6MJ3HC8PLY5SNF"], b"data: "),
    ],
)  # fmt: skip
def test_stream_through_closed_early_writes_nothing_of_a_scrubbed_value(
    drive: Driver, tmp_path: Path, scrub: Scrub, pieces: list[bytes], kept: bytes
) -> None:
    pieces = [with_token(p) for p in pieces]
    path = tmp_path / "early.jsonl"
    transport = drive.transport(
        path,
        outer=drive.mock(lambda request: drive.lib.Response(
            200, headers={"content-type": "application/json"},
            content=_AsyncChunks(pieces) if drive.is_async else iter(pieces))),
        mode="new_episodes",
        stream_through=True,
        rules=Rules(scrub=[scrub]),
    )  # fmt: skip
    assert _read_first_chunk_and_close(drive, transport) == pieces[0]  # the caller: live
    drive.close(transport)
    assert leaked(path.read_bytes()) is None
    [exchange] = written(path)
    assert exchange["truncated"] is True
    assert exchange["response_body"] == kept.decode()
    assert len(exchange["notes"]) == 1 and "cut at byte" in exchange["notes"][0]
    assert "content-length" not in dict(exchange["response_headers"])


# Random JSON documents holding a token at a scrubbed path, written in random ways, cut short at
# random places: nothing of the token reaches the file.
_KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=5)
_LEAVES = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet='abcxyz é☕"\\\n/', max_size=8)
)  # fmt: skip
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_CONTENT_TYPES = [
    "application/json", "text/json", "text/plain", None, "application/octet-stream",
    "application/x-ndjson", "text/event-stream", "application/problem+json; charset=utf-8",
]  # fmt: skip


def _place(data: st.DataObject, path: str, token: str) -> dict[str, Any]:
    def holder(value: Any) -> dict[str, Any]:
        items = list(data.draw(st.dictionaries(_KEYS, _VALUES, max_size=3)).items())
        items.insert(data.draw(st.integers(0, len(items))), ("session", value))
        return dict(items)

    if path == "session":
        return holder(token)
    outer = holder(None)
    if path == "user.session":
        outer["user"] = holder(token)
    else:  # items[*].session
        outer["items"] = [data.draw(_VALUES), holder(token)]
    del outer["session"]
    return outer


def _written_bodies(path: Path) -> list[bytes]:
    out = []
    for exchange in written(path):
        for field in ("body", "response_body"):
            if field in exchange:
                out.append(exchange[field].encode())
            elif f"{field}_b64" in exchange:
                out.append(base64.b64decode(exchange[f"{field}_b64"]))
    return out


@settings(
    max_examples=3000 if LONG else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_property_a_scrubbed_token_never_reaches_the_file(tmp_path: Path, data: Any) -> None:
    token = "Q" + data.draw(st.text(alphabet="ABCDEFGHJKLMPRSTUVWXYZ0123456789", min_size=27,
                                    max_size=27))  # fmt: skip
    path_text = data.draw(st.sampled_from(["session", "user.session", "items[*].session"]))
    document = _place(data, path_text, token)
    framing = data.draw(st.sampled_from(["whole", "pretty", "sse", "ndjson"]))
    ascii_only = data.draw(st.booleans())
    line = json.dumps(document, ensure_ascii=ascii_only)
    if framing == "whole":
        body = line.encode()
    elif framing == "pretty":
        body = json.dumps(document, ensure_ascii=ascii_only, indent=2).encode()
    elif framing == "sse":
        body = f'event: a\ndata: {{"n": 1}}\n\ndata: {line}\n\nevent: b\ndata: {line}\n\n'.encode()
    else:
        body = f'{{"n": 1}}\n{line}\n{line}\n'.encode()
    if data.draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body
    assert body.count(token[:4].encode()) >= 1
    cut = data.draw(st.integers(1, len(body)))
    content_type = data.draw(st.sampled_from(_CONTENT_TYPES))
    headers = {} if content_type is None else {"content-type": content_type}
    pieces = [body[:cut], body[cut:]] if cut < len(body) else [body]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, content=iter(pieces))

    path = tmp_path / f"p{next(_RUNS)}.jsonl"
    with RecordingTransport(
        path, outer=httpx.MockTransport(answer), mode="new_episodes", stream_through=True,
        rules=Rules(scrub=[Scrub.json(path_text)]),
    ) as transport, httpx.Client(transport=transport) as client:  # fmt: skip
        with client.stream("POST", URL, content=body, headers=headers) as response:
            received = b"".join(itertools.islice(response.iter_raw(), 1))
        assert received == pieces[0]
    assert token[:4].encode() not in path.read_bytes()
    for written_body in _written_bodies(path):
        assert token[:4].encode() not in written_body


# --- what a miss says --------------------------------------------------------------------------


def _miss(tmp_path: Path, record: dict[str, Any], send: dict[str, Any], **options: Any) -> str:
    path = tmp_path / "miss.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    with RecordingTransport(path, outer=outer, mode="new_episodes", **options) as transport:
        httpx.Client(transport=transport).request(**record)
    with RecordingTransport(path, **options) as replay, pytest.raises(CassetteMiss) as caught:
        httpx.Client(transport=replay).request(**send)
    return str(caught.value)


def test_a_miss_names_the_query_rule_to_add(tmp_path: Path) -> None:
    message = _miss(
        tmp_path,
        {"method": "GET", "url": URL + "?q=ada&ts=1"},
        {"method": "GET", "url": URL + "?q=ada&ts=2"},
    )
    assert (
        "only query parameter `ts` differs, and it looks like a per-run value (by its name); if "
        'it changes on every run, ignore it with Rules(ignore_query=["ts"])'
    ) in message


def test_a_miss_names_the_json_rule_to_add(tmp_path: Path) -> None:
    message = _miss(
        tmp_path,
        {"method": "POST", "url": URL, "json": {"q": "ada", "metadata": {"run": "run_7Hq2x9Lm"}}},
        {"method": "POST", "url": URL, "json": {"q": "ada", "metadata": {"run": "run_3Zt8w1Nb"}}},
    )
    assert (
        "only `metadata.run` differs, and it looks like a per-run value (an id); if it changes "
        'on every run, ignore it with Rules(ignore_json=["metadata.run"])'
    ) in message


def test_a_miss_after_rules_reports_what_still_differs(tmp_path: Path) -> None:
    message = _miss(
        tmp_path,
        {"method": "GET", "url": URL + "?q=ada&ts=1"},
        {"method": "GET", "url": URL + "?q=bob&ts=2"},
        rules=Rules(ignore_query=["ts"]),
    )
    assert f"url: request {URL}?q=bob, recorded {URL}?q=ada" in message
    assert "`q`" in message


def test_a_changed_sdk_api_version_is_explained(tmp_path: Path) -> None:
    message = _miss(
        tmp_path,
        {"method": "POST", "url": URL, "headers": {"anthropic-version": "2023-06-01"}},
        {"method": "POST", "url": URL, "headers": {"anthropic-version": "2026-10-21"}},
    )
    assert "only anthropic-version differs: it is the API version the Anthropic SDK asks for" in (
        message
    )
    assert 'default_headers={"anthropic-version": "2023-06-01"}' in message
    assert "Re-record the cassette" in message


# --- header rules ------------------------------------------------------------------------------


def test_ignore_headers_adds_to_the_volatile_set(drive: Driver, tmp_path: Path) -> None:
    rules = Rules(ignore_headers=["X-Run", "x-debug-*", "*-trace-ref"])
    sent = {"x-run": "1", "x-debug-level": "3", "x-trace-ref": "a", "x-tenant": "blue"}
    again = {"x-run": "2", "x-debug-level": "9", "x-trace-ref": "b", "x-tenant": "blue"}
    path, _, replayed = _record_then_replay(
        drive, tmp_path, rules, {"method": "GET", "url": URL, "headers": sent},
        {"method": "GET", "url": URL, "headers": {**again, "user-agent": "other/1.0"}},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}  # the default volatile set (user-agent) still holds
    assert ["x-run", "1"] in written(path)[0]["headers"]  # still recorded as sent
    with pytest.raises(CassetteMiss, match="header x-tenant"):
        drive.send(
            drive.transport(path, rules=rules), "GET", URL, headers={**again, "x-tenant": "red"}
        )


def test_a_star_alone_ignores_every_ordinary_header(drive: Driver, tmp_path: Path) -> None:
    rules = Rules(ignore_headers=["*"])
    path, _, replayed = _record_then_replay(
        drive, tmp_path, rules,
        {"method": "POST", "url": URL, "content": b"hi", "headers": {"x-tenant": "blue"}},
        {"method": "POST", "url": URL, "content": b"hi",
         "headers": {"x-tenant": "red", "content-type": "text/plain", "accept": "text/html"}},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}
    with pytest.raises(CassetteMiss, match="body differs"):  # the rest is still matched
        drive.send(drive.transport(path, rules=rules), "POST", URL, content=b"bye")


def test_header_rules_combine_and_reach_the_presets() -> None:
    both = Rules(ignore_headers=["x-a"]) | Rules(ignore_headers=["X-B", "x-a"])
    assert both.ignore_headers == {"x-a", "x-b"}
    assert Rules.llm(Rules(ignore_headers=["x-run"])).ignore_headers == {"x-run"}
    assert Rules(ignore_headers=["x-run"])  # a rule set with only header rules is not empty
    assert Rules(ignore_headers=["x-run"]) != Rules()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("x-run", "single string"),
        (["x run"], "not a header name"),
        ([""], "not a header name"),
        ([3], "not a header name"),
        (["x:run"], "not a header name"),
    ],
)
def test_malformed_header_rules_are_value_errors(value: Any, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        Rules(ignore_headers=value)


def test_header_rules_reach_the_proxy(tmp_path: Path) -> None:
    from sakura_http.proxy import serve

    path = tmp_path / "proxy.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    with RecordingTransport(path, outer=outer, mode="new_episodes") as transport:
        httpx.Client(transport=transport).get(URL, headers={"x-run": "1"})
    upstream = "https://crm.example.test"
    with serve(path, rules=Rules(ignore_headers=["x-run"]), upstream=upstream) as proxy:
        answer = httpx.get(proxy.url + "/v1/customers", headers={"x-run": "2"})
    assert answer.text == "ok"


def test_header_rules_reach_the_sdk_helpers(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    from sakura_http.llm import anthropic_client

    client = anthropic_client(tmp_path / "c.jsonl", rules=Rules(ignore_headers=["x-run"]))
    transport = client._client._transport
    assert "x-run" in transport.config.rules.ignore_headers


# --- the loose preset ----------------------------------------------------------------------------


def test_method_and_url_matches_as_vcrpy_does(drive: Driver, tmp_path: Path) -> None:
    loose = Rules.method_and_url()
    path, _, replayed = _record_then_replay(
        drive, tmp_path, loose,
        {"method": "POST", "url": URL + "?page=1", "json": {"max_tokens": 64},
         "headers": {"anthropic-version": "2023-06-01"}},
        {"method": "POST", "url": URL + "?page=1", "json": {"max_tokens": 1024, "new": True},
         "headers": {"anthropic-version": "2026-10-21", "x-tenant": "red"}},
    )  # fmt: skip
    assert replayed.json() == {"ok": True}
    assert written(path)[0]["body"] == '{"max_tokens":64}'  # still recorded in full
    replay = drive.transport(path, rules=loose)
    with pytest.raises(CassetteMiss, match="url: request"):
        drive.send(replay, "POST", URL + "?page=2", json={"max_tokens": 64})
    with pytest.raises(CassetteMiss, match="method: request GET"):
        drive.send(replay, "GET", URL + "?page=1")


def test_method_and_url_is_a_preset_of_ordinary_rules() -> None:
    assert Rules.method_and_url() == Rules(ignore_headers=["*"], ignore_body=True)
    both = Rules.method_and_url(Rules.llm())
    assert both.ignore_body and both.ignore_headers == {"*"} and both.scrub == Rules.llm().scrub


# A regex scrub reaches a UTF-16 or UTF-32 body (declared or told by its bytes): it was run on
# the body's bytes as UTF-8 only, where `bob.b@corp.example` in UTF-16 is `b\0o\0b\0...`, and
# the address was written as it came.
WIDE_TEXT = "mail bob.b@corp.example and ann@corp.example end"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"])
@pytest.mark.parametrize("declared", [True, False])
def test_scrub_regex_reaches_a_utf16_or_utf32_body(codec: str, declared: bool) -> None:
    rules = Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>")])
    raw = WIDE_TEXT.encode(codec)
    headers = (("content-type", f"text/plain; charset={codec}"),) if declared else ()
    body, chunks, notes = scrub_written(rules, headers, raw, (7, len(raw) - 7))
    assert body.decode(codec) == "mail <email> and <email> end"
    assert body[:4] == raw[:4]  # the same byte order, the byte order mark kept
    assert sum(chunks) == len(body) and notes == ()
    assert rules.scrub_body(headers, raw) == body


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le"])
@pytest.mark.parametrize("extra", [0, 1])  # cut at a code unit's end, or inside one
def test_a_truncated_utf16_body_is_cut_where_a_regex_match_could_begin(
    codec: str, extra: int
) -> None:
    rules = Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>")])
    raw = "mail bob.b@co".encode(codec) + b"\x00" * extra  # too short to match yet
    body, _, notes = scrub_written(rules, (), raw, (len(raw),), truncated=True)
    assert body.decode(codec) == "mail "
    assert notes == (
        f"response body: cut at byte {len(body)} of {len(raw)}: it is truncated where a match "
        f"of {Scrub.regex(EMAIL_PATTERN, '<email>')!r} could begin",
    )


@pytest.mark.parametrize("start", [b"\x00\x00\x00\x05", b"\x05\x00\x00\x00", b"\xff\xfe\x00\x00"])
def test_a_binary_body_that_looks_wide_is_scrubbed_as_bytes(start: bytes) -> None:
    # Its first bytes look like UTF-32 to the detector, but it is no text: it is scrubbed as
    # bytes, as any binary body is, instead of failing the recording.
    rules = Rules(scrub=[Scrub.regex(EMAIL_PATTERN, "<email>")])
    raw = start + bytes(range(256)) * 3 + b" bob.b@corp.example"
    body, chunks, _ = scrub_written(rules, (), raw, (len(raw),))
    assert body == raw.replace(b"bob.b@corp.example", b"<email>") and chunks == (len(body),)


def test_scrub_query_reaches_a_redirect_location_so_the_redirect_replays(tmp_path: Path) -> None:
    # Scrub.query scrubbed the next hop's URL but not the `location` that leads there, so the
    # value was written there; Scrub.response_header("location") (what lint advised) wrote a
    # placeholder the client followed to a URL never recorded, and the replay missed.
    token = "Zq8Kd0x7Pw3Lm9Vb2Nc5Rt6Yh1Gf4Js8Ua0Ie"

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            location = f"https://cb.example.test/cb?sid={token}&x=1"
            return httpx.Response(302, headers={"location": location})
        return httpx.Response(200, text="ok")

    path = tmp_path / "c.jsonl"
    rules = Rules(scrub=[Scrub.query("sid")])
    outer = httpx.MockTransport(handle)
    with RecordingTransport(path, outer=outer, mode="new_episodes", rules=rules) as transport:
        httpx.Client(transport=transport, follow_redirects=True).get(
            "https://api.example.test/start"
        )
    assert token not in path.read_text()
    first = load_cassette(path).exchanges[0]
    assert dict(first.response_headers)["location"] == (
        "https://cb.example.test/cb?sid=<scrubbed>&x=1"
    )
    with RecordingTransport(path, mode="none", rules=rules) as transport:
        client = httpx.Client(transport=transport, follow_redirects=True)
        assert client.get("https://api.example.test/start").text == "ok"


def test_rules_scrubs_and_paths_compare_and_hash_by_their_fields() -> None:
    # A session keeps one match index per distinct set of rules: equal ones must share it.
    def hook(exchange: Exchange) -> Exchange | None:
        return exchange

    path = JsonPath.parse("a.b[0]")
    built = [
        Rules(ignore_query=["t"], ignore_json=["a.b[0]"], scrub=[Scrub.query("key")]),
        Rules(ignore_query=("t",), ignore_json=[path], scrub=(Scrub.query("key"),)),
    ]
    assert built[0] == built[1] and hash(built[0]) == hash(built[1])
    assert Rules(before_record=hook) == Rules(before_record=hook) != Rules()
    assert Rules(ignore_body=True) != Rules() and Rules(ignore_headers=["x-a"]) != Rules()
    assert Scrub.regex("x+") == Scrub.regex("x+") != Scrub.regex("y+")
    assert hash(Scrub.json("a.b")) == hash(Scrub.json("a.b"))
    assert JsonPath.parse("a[*]") == JsonPath.parse("a[*]") != JsonPath.parse("a[0]")
    assert repr(Scrub.query("key")) == "Scrub.query('key')"
    assert repr(Rules(ignore_body=True)).startswith("Rules(ignore_query=frozenset(), ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Rules().ignore_body = True  # type: ignore[misc]


def test_a_star_in_a_header_name_matches_any_run_of_characters() -> None:
    wildcards = header_wildcards(["x-debug-*", "x-*-id", "accept"])
    assert wildcards is not None
    matched = [
        name
        for name in ("x-debug-", "x-debug-level", "x-run-id", "x--id", "x-debug", "accept", "x-idx")
        if wildcards.fullmatch(name)
    ]
    # "accept", a name without a "*", is not among the patterns: the caller compares names.
    assert matched == ["x-debug-", "x-debug-level", "x-run-id", "x--id"]
    everything = header_wildcards(["*"])
    assert everything is not None and everything.fullmatch("any-header-at-all")
    assert header_wildcards(["accept", "x-run"]) is None
    # Only "*" is special: a "." or "+" in a name stands for itself.
    dotted = header_wildcards(["x.a*"])
    assert dotted is not None and dotted.fullmatch("xya") is None
