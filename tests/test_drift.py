"""The shape comparison `sakura-http verify` decides drift with (sakura_http/_drift.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http._drift import (
    VOLATILE_RESPONSE_HEADERS,
    Difference,
    check_exchange,
    compare_json,
    compare_responses,
    replay_pairs,
    sse_events,
)
from sakura_http._format import Exchange
from sakura_http._matching import DEFAULT_IGNORE_HEADERS, Matcher
from sakura_http._rules import LLM_VOLATILE_RESPONSE_HEADERS, Rules

JSON = (("content-type", "application/json"),)
SSE = (("content-type", "text/event-stream"),)


def answer(body: Any, headers: tuple[tuple[str, str], ...] = JSON, **changes: Any) -> Exchange:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    base = Exchange("POST", "https://api.example.test/v1/messages", status=200)
    return replace(base, response_headers=headers, response_body=raw, **changes)


def texts(found: list[Difference]) -> list[str]:
    return [str(difference) for difference in found]


MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 3},
}


# --- JSON shapes ---------------------------------------------------------------------------------


def test_values_are_not_compared() -> None:
    live = {**MESSAGE, "id": "msg_02", "content": [{"type": "text", "text": "Hi there, you"}]}
    live["usage"] = {"input_tokens": 99, "output_tokens": 12}
    assert compare_json(MESSAGE, live, "response.body") == []


def test_a_key_added_or_removed_is_drift() -> None:
    live = {**MESSAGE, "usage": {"input_tokens": 10, "cache_creation": {"ephemeral": 0}}}
    assert texts(compare_json(MESSAGE, live, "response.body")) == [
        "key removed: response.body.usage.output_tokens",
        "key added: response.body.usage.cache_creation",
    ]


def test_a_type_changed_is_drift_with_both_type_names() -> None:
    live = {**MESSAGE, "usage": {"input_tokens": "10", "output_tokens": None}}
    found = compare_json(MESSAGE, live, "response.body")
    assert texts(found) == [
        "response.body.usage.input_tokens: number -> string",
        "response.body.usage.output_tokens: number -> null",
    ]
    assert found[0] == Difference("type", "response.body.usage.input_tokens", "number", "string")


def test_bool_is_not_a_number() -> None:
    assert texts(compare_json({"stream": True}, {"stream": 1})) == ["stream: bool -> number"]


def test_an_enum_value_changed_is_drift_and_names_both_values() -> None:
    live = {
        **MESSAGE,
        "content": [{"type": "thinking", "thinking": "...", "signature": "sig"}],
        "stop_reason": "max_tokens",
    }
    assert texts(compare_json(MESSAGE, live, "response.body")) == [
        "key removed: response.body.content[0].text",
        "key added: response.body.content[0].thinking",
        "key added: response.body.content[0].signature",
        'response.body.content[0].type: "text" -> "thinking"',
        'response.body.stop_reason: "end_turn" -> "max_tokens"',
    ]


def test_a_long_or_spaced_string_under_an_enum_key_is_a_value() -> None:
    assert compare_json({"type": "a long sentence"}, {"type": "another sentence"}) == []


def test_a_code_is_not_an_enum_it_may_be_an_oauth_secret() -> None:
    assert compare_json({"code": "4-0AX4XfWh"}, {"code": "4-0AY7b2Kq"}) == []


def test_arrays_compare_by_the_shapes_of_their_elements_not_their_length() -> None:
    old = {"content": [{"type": "text", "text": "a"}]}
    longer = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert compare_json(old, longer) == []
    assert compare_json(longer, old) == []
    assert compare_json({"data": [0.1, 0.2, 0.3]}, {"data": [0.5] * 1536}) == []


def test_an_empty_array_has_no_shape_to_compare() -> None:
    assert compare_json({"tool_calls": []}, {"tool_calls": [{"id": "x"}]}) == []


def test_a_new_element_shape_is_compared_with_the_nearest_recorded_one() -> None:
    old = {"content": [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t", "input": {}}]}
    new = {"content": [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t", "input": []}]}
    assert texts(compare_json(old, new)) == ["content[1].input: object -> array"]


def test_a_difference_repeated_along_an_array_is_reported_once() -> None:
    old = {"data": [{"embedding": [0.1], "index": 0}, {"embedding": [0.2], "index": 1}]}
    new = {"data": [{"embedding": "AAAA", "index": 0}, {"embedding": "AAAB", "index": 1}]}
    assert texts(compare_json(old, new)) == ["data[0].embedding: array -> string"]


def test_odd_keys_are_quoted_in_paths() -> None:
    assert texts(compare_json({}, {"a.b": 1})) == ['key added: ["a.b"]']


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "type", "role"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_a_value_has_the_shape_of_itself(value: Any) -> None:
    assert compare_json(value, value) == []


def _same_shape_other_values(value: Any) -> Any:
    """`value` with every non-enum leaf given another value of its type."""
    if isinstance(value, dict):
        return {
            k: v if k in ("type", "role") and isinstance(v, str) else _same_shape_other_values(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_same_shape_other_values(item) for item in value]
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return value


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_other_values_of_the_same_shape_are_not_drift(value: Any) -> None:
    assert compare_json(value, _same_shape_other_values(value)) == []


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=4), st.text(max_size=4))
def test_a_key_added_at_the_top_is_always_found(value: dict[str, Any], key: str) -> None:
    if key in value:
        return
    found = compare_json(value, {**value, key: 1})
    assert [d.kind for d in found] == ["key added"]
    assert compare_json({**value, key: 1}, value)[0].kind == "key removed"


# --- responses -----------------------------------------------------------------------------------


def test_the_same_answer_again_is_the_same_shape() -> None:
    assert compare_responses(answer(MESSAGE), answer(MESSAGE)) == []


def test_a_status_class_change_is_drift_and_nothing_else_is_compared() -> None:
    error = answer({"type": "error"}, (("x-other", "1"),), status=400)
    assert texts(compare_responses(answer(MESSAGE), error)) == ["status: 200 -> 400"]
    assert compare_responses(answer(MESSAGE), answer(MESSAGE, status=201)) == []


def test_a_recorded_transport_failure_compares_by_status_only() -> None:
    fault = Exchange("GET", "https://api.example.test/", status=None)
    assert compare_responses(fault, fault) == []
    assert texts(compare_responses(fault, answer(MESSAGE))) == [
        "status: a transport failure -> 200"
    ]


def test_header_names_added_or_removed_are_drift_the_volatile_ones_are_not() -> None:
    recorded = answer(MESSAGE, (*JSON, ("date", "x"), ("x-old", "1"), ("request-id", "a")))
    live_headers = (
        *JSON,
        ("X-New", "1"),
        ("x-ratelimit-limit-something-new", "5"),
        ("content-length", "9"),
        ("transfer-encoding", "chunked"),
        ("anthropic-ratelimit-tokens-limit", "1"),
    )
    assert texts(compare_responses(recorded, answer(MESSAGE, live_headers))) == [
        "header removed: x-old",
        "header added: x-new",
    ]
    assert set(LLM_VOLATILE_RESPONSE_HEADERS) <= VOLATILE_RESPONSE_HEADERS


def test_ignored_headers_are_left_out_names_or_prefixes() -> None:
    live = answer(MESSAGE, (*JSON, ("x-trace-id", "1"), ("x-debug", "1")))
    assert compare_responses(answer(MESSAGE), live, ignore_headers=["X-Trace-*", "x-debug"]) == []


@pytest.mark.parametrize("pattern", ["x-debug-*", "*", "x-*-id", "*-id", "x-debug"])
@pytest.mark.parametrize("name", ["x-debug-level", "x-run-id", "x-debug", "accept-language"])
def test_an_ignored_header_pattern_means_what_it_means_in_matching(pattern: str, name: str) -> None:
    # verify (`--ignore-header`, `ignore_headers=`) and matching (`Rules(ignore_headers=...)`)
    # read a pattern the same way: "*" matches any run of characters, wherever it stands.
    matcher = Matcher(ignore=frozenset(), secret=frozenset(), rules=Rules(ignore_headers=[pattern]))
    ignored_by_matching = matcher.ordinary_headers(((name, "1"),)) == ()
    live = answer(MESSAGE, (*JSON, (name, "1")))
    ignored_by_verify = compare_responses(answer(MESSAGE), live, ignore_headers=[pattern]) == []
    assert ignored_by_verify == ignored_by_matching


def test_a_content_type_change_is_drift_its_parameters_are_not() -> None:
    charset = answer(MESSAGE, (("content-type", "application/json; charset=utf-8"),))
    assert compare_responses(answer(MESSAGE), charset) == []
    html = answer(b"<html></html>", (("content-type", "text/html"),))
    assert texts(compare_responses(answer(MESSAGE), html)) == [
        "content-type: application/json -> text/html"
    ]


def test_a_json_body_that_is_no_longer_json() -> None:
    assert texts(compare_responses(answer(MESSAGE), answer(b"{oops"))) == [
        "response.body: JSON -> not JSON"
    ]


def test_a_truncated_or_unparsable_recording_has_no_body_shape() -> None:
    changed = answer({"other": 1})
    assert compare_responses(answer(b'{"id": "msg', truncated=True), changed) == []
    assert compare_responses(answer(b"not json"), changed) == []


# --- event streams -------------------------------------------------------------------------------


def sse(*events: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, data in events:
        if name is not None:
            out += f"event: {name}\n".encode()
        out += b"data: " + (data.encode() if isinstance(data, str) else orjson.dumps(data))
        out += b"\n\n"
    return out


STREAM = sse(
    ("message_start", {"type": "message_start", "message": {"id": "m1"}}),
    ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "He"}}),
    ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "llo"}}),
    ("message_stop", {"type": "message_stop"}),
)


def test_sse_events_are_parsed_with_their_names_and_data() -> None:
    body = b": comment\r\nevent: a\r\ndata: 1\r\ndata:2\r\n\r\nretry: 5\n\ndata: [DONE]\n\n"
    assert sse_events(body) == [("a", "1\n2"), ("message", "[DONE]")]
    assert sse_events(b"\xff") is None


def test_a_longer_or_shorter_stream_of_the_same_events_is_the_same_shape() -> None:
    longer = sse(
        ("message_start", {"type": "message_start", "message": {"id": "m2"}}),
        *[("content_block_delta", {"type": "content_block_delta", "delta": {"text": "x"}})] * 5,
        ("message_stop", {"type": "message_stop"}),
    )
    assert compare_responses(answer(STREAM, SSE), answer(longer, SSE)) == []


def test_an_event_renamed_is_drift() -> None:
    renamed = STREAM.replace(b"event: message_stop", b"event: message_end")
    assert texts(compare_responses(answer(STREAM, SSE), answer(renamed, SSE))) == [
        "event removed: message_stop",
        "event added: message_end",
    ]


def test_events_in_another_order_are_drift() -> None:
    reordered = sse(
        ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "He"}}),
        ("message_start", {"type": "message_start", "message": {"id": "m1"}}),
        ("message_stop", {"type": "message_stop"}),
    )
    assert texts(compare_responses(answer(STREAM, SSE), answer(reordered, SSE))) == [
        "events: message_start, content_block_delta, message_stop -> "
        "content_block_delta, message_start, message_stop"
    ]


def test_the_shape_of_an_event_data_is_compared() -> None:
    changed = STREAM.replace(b'{"text":"He"}', b'{"text":"He","citations":[]}')
    assert texts(compare_responses(answer(STREAM, SSE), answer(changed, SSE))) == [
        "key added: response.event[content_block_delta][0].delta.citations"
    ]


def test_plain_data_is_a_string_whose_value_is_not_compared() -> None:
    old = sse((None, {"choices": []}), (None, "[DONE]"))
    new = sse((None, {"choices": []}), (None, "[END]"))
    assert compare_responses(answer(old, SSE), answer(new, SSE)) == []


# --- the report of one exchange, and pairing live exchanges with recorded ones --------------------


def test_a_checked_exchange_reports_its_label_statuses_and_each_difference() -> None:
    recorded = answer(MESSAGE, url="https://api.example.test/v1/messages?api_key=sk-12345")
    live = answer({**MESSAGE, "model": "m"}, status=201)
    checked = check_exchange(2, recorded, live)
    assert checked.outcome == "drifted" and checked.live_status == 201
    assert checked.lines() == [
        "#3 POST https://api.example.test/v1/messages?api_key=<hidden, 8 chars> (200 -> 201): "
        "drifted",
        "    key added: response.body.model",
    ]
    same = check_exchange(0, recorded, recorded, reason="see the note")
    assert same.lines() == [
        "#1 POST https://api.example.test/v1/messages?api_key=<hidden, 8 chars> (200 -> 200): "
        "same shape: see the note"
    ]


def _request(url: str, body: str = "") -> Exchange:
    return Exchange("GET", url, body=body.encode(), status=200)


def test_live_exchanges_pair_with_what_a_replay_would_have_played() -> None:
    """The next unplayed recorded exchange of the same request, the last one again once all
    were played, and None for a request no recorded exchange matches."""
    a1, b1, a2 = (_request(f"https://api.example.test/{n}") for n in ("a", "b", "a"))
    a2 = replace(a2, response_body=b"second")
    matcher = Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset())
    live = [_request("https://API.example.test:443/a"), _request("https://api.example.test/b")]
    live += [_request("https://api.example.test/a"), _request("https://api.example.test/a")]
    live.append(_request("https://api.example.test/new"))
    pairs = [(index, exchange.url) for index, exchange in replay_pairs([a1, b1, a2], live, matcher)]
    assert pairs == [
        (0, "https://API.example.test:443/a"),  # the canonical URL matches, as in a replay
        (1, "https://api.example.test/b"),
        (2, "https://api.example.test/a"),
        (2, "https://api.example.test/a"),  # all played: the last one repeats
        (None, "https://api.example.test/new"),
    ]
