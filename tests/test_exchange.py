"""The exchange as data (`sakura_http/_exchange.py`): `Exchange`, `FaultInfo` and `RequestData`
compare, hash and show themselves by their fields, as users and the session's index rely on."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from sakura_http import Exchange, FaultInfo
from sakura_http._exchange import (
    RequestData,
    is_json_type,
    media_type,
    new_exchange,
    reason_phrase,
)

URL = "https://api.example.test/v1/items"
EXCHANGE = Exchange("GET", URL, (("accept", "*/*"),), b"", 200, response_body=b"ok")


def test_exchanges_with_equal_fields_are_equal() -> None:
    twin = Exchange("GET", URL, (("accept", "*/*"),), b"", 200, response_body=b"ok")
    assert twin == EXCHANGE and twin is not EXCHANGE


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("method", "POST"),
        ("url", URL + "/2"),
        ("headers", ()),
        ("body", b"{}"),
        ("status", 404),
        ("response_headers", (("content-type", "text/plain"),)),
        ("response_body", b"other"),
        ("error", FaultInfo("ConnectError", "refused")),
        ("id", "one"),
        ("chunks", (2,)),
        ("truncated", True),
        ("timings_ms", (1.5,)),
        ("response_header_charset", "latin-1"),
    ],
)
def test_every_recorded_field_takes_part_in_equality(name: str, value: object) -> None:
    changed = dataclasses.replace(EXCHANGE, **{name: value})
    assert changed != EXCHANGE
    assert f"{name}={value!r}" in repr(changed)


def test_the_day_recorded_takes_no_part_in_equality() -> None:
    # An exchange recorded again unchanged on another day is the same exchange.
    later = dataclasses.replace(EXCHANGE, recorded_at=datetime.date(2026, 12, 1))
    assert later == EXCHANGE
    assert "recorded_at=datetime.date(2026, 12, 1)" in repr(later)


def test_an_exchange_is_frozen_and_never_equal_to_another_type() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EXCHANGE.status = 500  # type: ignore[misc]
    fields = tuple(getattr(EXCHANGE, f.name) for f in dataclasses.fields(Exchange))
    assert fields != EXCHANGE
    assert EXCHANGE.__eq__(object()) is NotImplemented


def test_extra_fields_take_part_in_equality_and_no_exchange_is_hashable() -> None:
    # `extra` (fields of a later format version, written back unchanged) is a dict, so an
    # exchange, frozen as it is, cannot be a dict key or a set member.
    extra = dataclasses.replace(EXCHANGE, extra={"note": [1]})
    assert extra != EXCHANGE and extra == dataclasses.replace(EXCHANGE, extra={"note": [1]})
    for exchange in (EXCHANGE, extra):
        with pytest.raises(TypeError, match="unhashable"):
            hash(exchange)


def test_new_exchange_sets_every_field_as_the_constructor_does() -> None:
    # Loading builds exchanges through `new_exchange`, which sets the slots one by one: a
    # field added to Exchange and forgotten there would be left unset (AttributeError).
    values = {
        "method": "POST",
        "url": "https://api.example.test/y",
        "headers": (("accept", "*/*"),),
        "body": b"q",
        "status": 201,
        "response_headers": (("x-a", "\u00e9"),),
        "response_body": b"\xff",
        "chunks": (0, 1),
        "truncated": True,
        "timings_ms": (1.0, 2.0),
        "response_header_charset": "latin-1",
        "id": "ex-1",
        "recorded_at": datetime.date(2026, 3, 4),
    }
    built = new_exchange(**values)  # type: ignore[arg-type]
    expected = Exchange(**values)  # type: ignore[arg-type]
    for field in dataclasses.fields(Exchange):
        assert getattr(built, field.name) == getattr(expected, field.name), field.name
    assert built == expected
    assert {f.name for f in dataclasses.fields(Exchange)} - set(values) == {"error", "extra"}


def test_fault_info_is_a_value() -> None:
    fault = FaultInfo("ConnectError", "refused")
    assert fault == FaultInfo("ConnectError", "refused") != FaultInfo("ReadTimeout", "refused")
    assert hash(fault) == hash(FaultInfo("ConnectError", "refused"))
    assert repr(fault) == "FaultInfo(type='ConnectError', message='refused')"


def test_request_data_is_a_value_with_named_parts() -> None:
    request = RequestData("GET", URL, (("accept", "*/*"),), b"", "api.example.test", 443)
    assert request == RequestData("GET", URL, (("accept", "*/*"),), b"", "api.example.test", 443)
    assert request._replace(body=b"x").body == b"x" and request.body == b""
    assert repr(request).startswith("RequestData(method='GET', url=")


@pytest.mark.parametrize(
    ("status", "phrase"),
    [(200, "OK"), (404, "Not Found"), (418, "I'm a Teapot"), (299, ""), (599, ""), (1000, "")],
)
def test_reason_phrase_is_the_standard_librarys_or_empty(status: int, phrase: str) -> None:
    assert reason_phrase(status) == phrase


def test_media_type_is_the_first_content_type_without_parameters() -> None:
    headers = (("accept", "text/html"), ("content-type", "Application/JSON; charset=utf-8"))
    assert media_type((*headers, ("content-type", "text/plain"))) == "application/json"
    assert media_type((("accept", "text/html"),)) == ""


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("application/problem+json; charset=utf-8", True),
        (" APPLICATION/JSON ", True),
        ("application/jsonl", False),
        ("text/json-ish", False),
        ("", False),
    ],
)
def test_is_json_type_takes_json_and_plus_json(content_type: str, json: bool) -> None:
    assert is_json_type(content_type) is json
