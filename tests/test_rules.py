"""`Rules` and `Scrub`: each rule alone and combined, sync and async, httpx and httpx2."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakura_http import (
    BodyTooLargeError,
    CassetteMiss,
    ConfigurationError,
    Exchange,
    JsonPath,
    RecordingTransport,
    Rules,
    Scrub,
)
from sakura_http._matching import MatchRules
from tests.drive import Driver

URL = "https://crm.example.test/v1/customers"
_RUNS = itertools.count()
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
    rules = MatchRules(frozenset(), frozenset(), rules=Rules(ignore_json=[path]))
    headers = (("content-type", "application/json"),)
    exchange = Exchange("POST", URL, headers, json.dumps(recorded).encode())
    request = dataclasses.replace(exchange, body=json.dumps(sent).encode())
    assert rules.key_of_exchange(request) == rules.key_of_exchange(exchange)
    plain = MatchRules(frozenset(), frozenset())
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
