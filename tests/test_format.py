"""The on-disk format: header, exchange lines, base64 bodies, optional fields, errors."""

from __future__ import annotations

import datetime
import importlib
import itertools
import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http import CassetteFormatError
from sakura_http._cassette import load_cassette
from sakura_http._format import (
    CassetteContent,
    CassetteParser,
    Exchange,
    FaultInfo,
    decode_exchange,
    encode_exchange,
    encode_header,
    header_bytes,
    header_text,
    parse_cassette,
)
from sakura_http._libraries import library_of
from tests.conftest import LIBRARIES

P = Path("tests/fixtures/x.jsonl")
HEADER = encode_header()


def test_header_line_is_exact() -> None:
    assert HEADER == b'{"schema_version":"1.0","kind":"cassette"}\n'
    assert encode_header({"kind": "other", "note": "n"}) == (
        b'{"schema_version":"1.0","kind":"cassette","note":"n"}\n'
    )


def test_exchange_line_has_fixed_key_order_and_compact_separators() -> None:
    line = encode_exchange(
        Exchange(
            "POST",
            "https://api.example.test/",
            headers=(("content-type", "application/json"), ("x-a", "1"), ("x-a", "2")),
            body=b'{"a": 1}',
            status=201,
            response_headers=(("content-type", "text/plain"),),
            response_body=b"ok",
        )
    )
    assert line == (
        b'{"method":"POST","url":"https://api.example.test/",'
        b'"headers":[["content-type","application/json"],["x-a","1"],["x-a","2"]],'
        b'"body":"{\\"a\\": 1}","status":201,"response_headers":[["content-type","text/plain"]],'
        b'"response_body":"ok"}\n'
    )


def test_round_trip_keeps_everything_including_unknown_fields() -> None:
    exchange = Exchange(
        "GET",
        "https://api.example.test/bin",
        body=b"\xff\xfe binary",
        response_body=b"\x00\x81\xff",
        id="ex-1",
        chunks=(1, 2),
        truncated=True,
        timings_ms=(0.5, 10.0),
        extra={"future_field": {"nested": [1, 2]}},
    )
    line = encode_exchange(exchange)
    assert b'"body_b64":"//4gYmluYXJ5"' in line
    assert b'"response_body_b64":"AIH/"' in line
    assert decode_exchange(line, P, 2) == exchange
    assert encode_exchange(decode_exchange(line, P, 2)) == line


def test_recorded_at_is_the_utc_day_written_after_the_known_fields() -> None:
    exchange = Exchange(
        "GET", "https://api.example.test/", recorded_at=datetime.date(2026, 12, 1),
        extra={"notes": ["n"]},
    )  # fmt: skip
    line = encode_exchange(exchange)
    assert line.endswith(b',"response_body":"","recorded_at":"2026-12-01","notes":["n"]}\n')
    for loaded in (decode_exchange(line, P, 2), parse_cassette(HEADER + line, P).exchanges[0]):
        assert loaded.recorded_at == datetime.date(2026, 12, 1)
        assert loaded.extra == {"notes": ["n"]}
        assert encode_exchange(loaded) == line


def test_an_exchange_without_recorded_at_loads_undated_and_is_written_back_without_it() -> None:
    line = encode_exchange(Exchange("GET", "https://api.example.test/"))
    assert b"recorded_at" not in line
    (loaded,) = parse_cassette(HEADER + line, P).exchanges
    assert loaded.recorded_at is None
    assert encode_exchange(loaded) == line


def test_recorded_at_takes_no_part_in_equality() -> None:
    old = Exchange("GET", "https://api.example.test/", recorded_at=datetime.date(2026, 1, 2))
    new = Exchange("GET", "https://api.example.test/", recorded_at=datetime.date(2026, 12, 1))
    assert old == new
    assert old != Exchange("GET", "https://api.example.test/", status=201)


def test_secret_headers_load_on_the_fast_path_and_are_written_back() -> None:
    # Every line of an LLM cassette names its dropped credential: not a slow line each.
    from sakura_http._format_fast import decode_line

    exchange = Exchange(
        "POST", "https://api.example.test/v1", recorded_at=datetime.date(2026, 12, 1),
        extra={"secret_headers": ["authorization", "x-api-key"]},
    )  # fmt: skip
    line = encode_exchange(exchange)
    assert line.endswith(b',"secret_headers":["authorization","x-api-key"]}\n')
    decode_line(line)  # the fast decoder takes it (it refuses what it does not know)
    for loaded in (decode_exchange(line, P, 2), parse_cassette(HEADER + line, P).exchanges[0]):
        assert loaded.extra == {"secret_headers": ["authorization", "x-api-key"]}
        assert encode_exchange(loaded) == line


@pytest.mark.parametrize("value", ['"authorization"', "[1]", "null", '{"a":1}', '[""]'])
def test_a_bad_secret_headers_names_file_and_line(value: str) -> None:
    good = encode_exchange(Exchange("GET", "https://api.example.test/"))
    bad = good[:-2] + b',"secret_headers":' + value.encode() + b"}\n"
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(HEADER + good + bad, P)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{P}:3: field 'secret_headers' must be a list of")


@pytest.mark.parametrize(
    "value", ['"2026-12-01T10:00:00Z"', '"20261201"', '"2026-13-01"', "null", "20261201"]
)
def test_a_bad_recorded_at_names_file_line_and_the_spelling_it_needs(value: str) -> None:
    good = encode_exchange(Exchange("GET", "https://api.example.test/"))
    bad = good[:-2] + b',"recorded_at":' + value.encode() + b"}\n"
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(HEADER + good + bad, P)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{P}:3: field 'recorded_at' must be the UTC day")
    assert '"YYYY-MM-DD"' in str(caught.value)


def test_the_writer_refuses_a_timestamp_for_recorded_at() -> None:
    # A datetime is a date, but its isoformat() would write a line the loader refuses.
    moment = datetime.datetime(2026, 12, 1, 10, tzinfo=datetime.timezone.utc)
    with pytest.raises(ValueError, match=r"recorded_at must be a datetime\.date"):
        encode_exchange(Exchange("GET", "https://api.example.test/", recorded_at=moment))


def test_fault_exchange_needs_no_response() -> None:
    line = (
        b'{"method":"GET","url":"https://api.example.test/","headers":[],"body":"",'
        b'"error":{"type":"ReadTimeout","message":"slow"}}'
    )
    exchange = decode_exchange(line, P, 2)
    assert exchange.error == FaultInfo("ReadTimeout", "slow")
    assert exchange.status is None
    assert encode_exchange(exchange) == line + b"\n"


def test_empty_data_is_an_empty_cassette() -> None:
    content = parse_cassette(b"", P)
    assert content.exchanges == []
    assert parse_cassette(b"\n\n", P).exchanges == []


def test_blank_lines_are_skipped_and_line_numbers_kept() -> None:
    line = encode_exchange(Exchange("GET", "https://api.example.test/"))
    content = parse_cassette(HEADER + b"\n" + line + b"\n" + line, P)
    assert content.line_numbers == [3, 5]


@pytest.mark.parametrize(
    ("data", "line", "problem"),
    [
        (b'{"kind":"cassette"}\n', 1, "no schema_version"),
        (b'{"schema_version":"2.0","kind":"cassette"}\n', 1, "'2.0' is not supported"),
        (b"[1,2]\n", 1, "no schema_version"),
        (b"not json\n", 1, "the header line is not valid JSON"),
        (HEADER + b"{bad\n", 2, "not valid JSON"),
        (HEADER + b"[]\n", 2, "must be a JSON object"),
        (HEADER + b'{"url":"u","headers":[],"body":"","status":200,'
         b'"response_headers":[],"response_body":""}\n', 2, "missing field 'method'"),
        (HEADER + b'{"method":"GET","url":"u","headers":[["a"]],"body":"","status":200,'
         b'"response_headers":[],"response_body":""}\n', 2, "[name, value] string pairs"),
        (HEADER + b'{"method":"GET","url":"u","headers":[],"body":"","status":"200",'
         b'"response_headers":[],"response_body":""}\n', 2, "must be an HTTP status code"),
        (HEADER + b'{"method":"GET","url":"u","headers":[],"body_b64":"%%%","status":200,'
         b'"response_headers":[],"response_body":""}\n', 2, "not valid base64"),
        (HEADER + b'{"method":"GET","url":"u","headers":[],"body":"","status":200,'
         b'"response_headers":[],"response_body":"abc","chunks":[1,1]}\n', 2, "adds up to 2"),
        (HEADER + b'{"method":"GET","url":"u"}', 2, "the last line is incomplete"),
    ],
)  # fmt: skip
def test_malformed_input_names_file_and_line(data: bytes, line: int, problem: str) -> None:
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(data, P)
    assert caught.value.line == line
    assert caught.value.path == str(P)
    assert str(caught.value).startswith(f"{P}:{line}: ")
    assert problem in str(caught.value)


def test_version_errors_say_how_to_rerecord() -> None:
    with pytest.raises(CassetteFormatError, match=r"pytest --record"):
        parse_cassette(b'{"schema_version":"0.9"}\n', P)


# --- response header bytes ------------------------------------------------------------------

CAFE = 'attachment; filename="café.txt"'.encode()


def test_header_text_spells_utf8_values_readably() -> None:
    headers, charset = header_text([(b"Content-Disposition", CAFE), (b"x-a", b"1")])
    assert charset == "utf-8"
    assert headers == (("content-disposition", 'attachment; filename="café.txt"'), ("x-a", "1"))
    assert header_bytes(headers, charset) == [(b"content-disposition", CAFE), (b"x-a", b"1")]


def test_one_value_not_utf8_spells_all_values_as_latin1() -> None:
    raw = [(b"content-disposition", CAFE), (b"x-title", "Grüße".encode("latin-1"))]
    headers, charset = header_text(raw)
    assert charset == "latin-1"
    exchange = Exchange("GET", "u", response_headers=headers, response_header_charset=charset)
    line = encode_exchange(exchange)
    assert b'"response_header_charset":"latin-1"' in line
    back = decode_exchange(line, P, 2)
    assert back == exchange
    assert header_bytes(back.response_headers, back.response_header_charset) == raw


def test_a_one_zero_file_with_utf8_header_text_loads_unchanged() -> None:
    # What sakura-http 1.0 wrote for a UTF-8 value (httpx decoded it as UTF-8).
    line = (
        b'{"method":"GET","url":"u","headers":[],"body":"","status":200,'
        b'"response_headers":[["content-disposition",'
        b'"attachment; filename=\\"caf\xc3\xa9.txt\\""]],'
        b'"response_body":""}\n'
    )
    exchange = decode_exchange(line, P, 2)
    assert exchange.response_header_charset == "utf-8"
    assert header_bytes(exchange.response_headers, "utf-8") == [(b"content-disposition", CAFE)]
    assert encode_exchange(exchange) == line  # written back byte for byte


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        (b'"response_header_charset":"koi8-r"', 'must be "latin-1"'),
        (b'"response_header_charset":1', 'must be "latin-1"'),
    ],
)
def test_unknown_header_charset_names_the_line(field: bytes, problem: str) -> None:
    line = (
        b'{"method":"GET","url":"u","headers":[],"body":"","status":200,'
        b'"response_headers":[["x","a"]],"response_body":"",' + field + b"}\n"
    )
    with pytest.raises(CassetteFormatError, match=problem) as caught:
        parse_cassette(HEADER + line, P)
    assert caught.value.line == 2


def test_latin1_charset_with_a_wider_character_names_the_header_and_line() -> None:
    line = (
        b'{"method":"GET","url":"u","headers":[],"body":"","status":200,'
        b'"response_headers":[["x-euro","\xe2\x82\xac"]],"response_body":"",'
        b'"response_header_charset":"latin-1"}\n'
    )
    with pytest.raises(CassetteFormatError, match="'x-euro' has a character outside Latin-1"):
        parse_cassette(HEADER + line, P)


@pytest.mark.parametrize("charset", ["", ',"response_header_charset":"latin-1"'])
def test_a_response_header_name_outside_latin1_names_the_line(charset: str) -> None:
    # A replay sends header names as bytes: one no byte spells is a bad cassette, named at
    # load, never a UnicodeEncodeError when the exchange is replayed.
    line = (
        '{"method":"GET","url":"u","headers":[],"body":"","status":200,'
        f'"response_headers":[["x-\u03a3","1"]],"response_body":""{charset}}}\n'
    ).encode()
    with pytest.raises(CassetteFormatError, match=r":2: .*'x-\u03c3'.*outside Latin-1"):
        parse_cassette(HEADER + line, P)


def test_the_writer_refuses_a_header_name_it_could_not_replay() -> None:
    with pytest.raises(ValueError, match="x-\u03c3"):
        encode_exchange(Exchange("GET", "u", response_headers=(("x-\u03c3", "1"),)))


def test_the_writer_refuses_a_latin1_exchange_it_could_not_read_back() -> None:
    exchange = Exchange(
        "GET", "u", response_headers=(("x-euro", "€"),), response_header_charset="latin-1"
    )
    with pytest.raises(ValueError, match="latin-1"):
        encode_exchange(exchange)


# Header values as HTTP allows them on the wire: any bytes but CR, LF and NUL, no edge spaces.
_VALUE = st.binary(max_size=40).map(
    lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\0", b"").strip(b" \t")
)
_NAME = st.from_regex(r"\A[a-z][a-z0-9-]{0,15}\Z")


@settings(max_examples=200, deadline=None)
@given(raw=st.lists(st.tuples(_NAME.map(str.encode), _VALUE), max_size=6))
def test_any_header_bytes_written_read_back_and_replay_equal(
    raw: list[tuple[bytes, bytes]],
) -> None:
    headers, charset = header_text(raw)
    exchange = Exchange("GET", "u", response_headers=headers, response_header_charset=charset)
    content = parse_cassette(HEADER + encode_exchange(exchange), P)
    back = content.exchanges[0]
    assert back == exchange
    assert header_bytes(back.response_headers, back.response_header_charset) == raw
    for lib in LIBRARIES:
        module = importlib.import_module(lib)
        request = module.Request("GET", "https://api.example.test/")
        response = library_of(request).replay(back, request, 65536, 0)
        assert response.headers.raw == raw


# --- the fast path of loading agrees with the strict one --------------------------------------
#
# parse_cassette decodes a line of the common shape with msgspec and sends anything else (and
# anything wrong) to the strict decoder (`decode_exchange`), which names the problem: loading
# must never accept a line the strict decoder refuses, nor decode a line differently, nor word
# an error differently.

_VALID = {
    "method": "GET",
    "url": "https://api.example.test/x",
    "headers": [["accept", "*/*"], ["X-Case", "v"]],
    "body": "",
    "status": 200,
    "response_headers": [["content-type", "text/plain"]],
    "response_body": "abc",
    "id": "ex-1",
    "chunks": [1, 2],
    "truncated": False,
    "timings_ms": [0.5, 1],
    "recorded_at": "2026-12-01",
}
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 1000) | st.floats(-1, 10) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=6,
)


def _strict(line: bytes) -> Exchange | str:
    try:
        return decode_exchange(line, P, 2)
    except CassetteFormatError as exc:
        return str(exc)


def _loaded(line: bytes) -> Exchange | str:
    try:
        (exchange,) = parse_cassette(HEADER + line + b"\n", P).exchanges
    except CassetteFormatError as exc:
        return str(exc)
    return exchange


def _agree(line: bytes) -> None:
    loaded, strict = _loaded(line), _strict(line)
    assert loaded == strict
    if isinstance(loaded, Exchange):  # written back alike too (an int stays an int, ...)
        assert encode_exchange(loaded) == encode_exchange(strict)  # type: ignore[arg-type]


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, object]:
    obj = {k: v for k, v in _VALID.items() if draw(st.booleans()) or k in ("method", "url")}
    for key in draw(st.lists(st.sampled_from([*_VALID, "extra", "error", "body_b64"]))):
        obj[key] = draw(_JSON | st.sampled_from([[["a", "b"]], [["a", 1]], ["ab"], [{"a": 1}]]))
    return obj


@settings(max_examples=400, deadline=None)
@given(obj=_mutated())
def test_loading_agrees_with_the_strict_decoder_on_any_values(obj: dict[str, object]) -> None:
    _agree(orjson.dumps(obj))


# JSON texts for each field, as a file may spell them: valid, odd and wrong, including what
# two decoders could read differently (number spellings, escapes, integers past 64 bits,
# invalid UTF-8, names that lower-casing changes).
_HEADER_TEXTS = [
    b'[["accept","*/*"],["x-a","1"]]', b"[]", b'[["Accept","*/*"]]', b'[["\\u0041ccept","x"]]',
    b'[["\xc3\x89t\xc3\xa9","x"]]', b'[["\xce\xa3","x"],["a\xce\xa3","y"]]', b'[["a","\xff"]]',
    b'[["\xff","b"]]', b'[["a","\\ud800"]]', b'[["a"]]', b'[["a","b","c"]]', b'[["a",1]]',
    b'[[1,"a"]]', b'{"a":"b"}', b'["ab"]', b"null", b'[ [ "a" , "b" ] ]', b'[["a","b"],]',
    b'[["a","\x01"]]', b'[["a","\\u00e9"]]',
]  # fmt: skip
_TEXTS: dict[str, list[bytes]] = {
    "method": [b'"GET"', b'"G\\u0045T"', b"1", b"null", b'"\xff"', b'"a\tb"'],
    "url": [b'"https://api.example.test/x"', b'"\\/x"', b"[]", b'"x'],
    "headers": _HEADER_TEXTS,
    "body": [b'""', b'"x"', b'"\\u00e9"', b"3", b'"\x01"', b'"\\ud83d\\ude00"'],
    "status": [b"200", b"200.0", b"2e2", b"true", b"99", b"1000", b'"200"', b"-200", b"0200"],
    "response_headers": _HEADER_TEXTS,
    "response_body": [b'"abc"', b'""', b'"\\u00e9"', b"null", b'"\xe2\x82\xac"'],
    "id": [b'"ex"', b"null", b"7", b'""'],
    "chunks": [
        b"[1,2]", b"[3]", b"[]", b"null", b"[1,-1,3]", b"[1,true]", b"[1.0,2]", b"[3.0]",
        b"[18446744073709551615]", b"[9223372036854775808]", b"[0,3]", b"[-0]", b'["3"]',
    ],
    "truncated": [b"true", b"false", b"null", b"0"],
    "timings_ms": [
        b"[0.5,1]", b"[1]", b"[-0.0,1e2]", b"null", b'[1,"2"]', b"[18446744073709551616,1]",
        b"[9223372036854775808,1]", b"[1e400,1]", b"[0.5]", b"[1.5e-400,2]", b"[-1,1]",
    ],
    "error": [b'{"type":"ReadTimeout","message":"slow"}', b"null", b'{"type":1}'],
    "body_b64": [b'"AA=="', b'"%%"'],
    "response_body_b64": [b'"AA=="'],
    "response_header_charset": [b'"latin-1"', b'"utf-8"'],
    "recorded_at": [
        b'"2026-12-01"', b'"2024-02-29"', b'"2026-02-29"', b'"20261201"', b'"2026-W48-2"',
        b'"2026-12-01T10:00:00Z"', b'"0000-01-01"', b'"2026-1-1"', b'"\\u0032026-12-01"',
        b'"\xd9\xa2026-12-01"', b"null", b"20261201", b'""',
    ],
    "other": [b"1", b'{"a":[1]}'],
}  # fmt: skip
_COMMON = ["method", "url", "headers", "body", "status", "response_headers", "response_body"]
_STRING_FIELDS = {"method", "url", "body", "response_body", "id", "body_b64", "response_body_b64"}


@st.composite
def _spelled(draw: st.DrawFn, long_texts: tuple[bytes, ...] = ()) -> bytes:
    # Mostly the common fields spelled well (else the fast path is seldom tried), now and then
    # one missing or odd, then a few more fields (or the same again).  With `long_texts`, a
    # string field is often one of them.
    keys = [key for key in _COMMON if draw(st.integers(0, 19))]
    keys += draw(st.lists(st.sampled_from(sorted(_TEXTS)), max_size=3))
    members = []
    for key in keys:
        texts = _TEXTS[key]
        good = key in _COMMON and draw(st.integers(0, 5))
        text = texts[0] if good else draw(st.sampled_from(texts))
        if long_texts and key in _STRING_FIELDS and draw(st.booleans()):
            text = draw(st.sampled_from(long_texts))
        members.append(b'"%s":%s' % (key.encode(), text))
    space = draw(st.sampled_from([b"", b" ", b"\t", b"\r"]))
    return b"{" + (b"," + space).join(members) + b"}" + draw(st.sampled_from([b"", b" ", b"x"]))


@settings(max_examples=1500, deadline=None)
@given(line=_spelled())
def test_loading_agrees_with_the_strict_decoder_on_any_spelling(line: bytes) -> None:
    _agree(line)


@pytest.mark.parametrize(
    "line",
    [
        orjson.dumps(_VALID),
        orjson.dumps({**_VALID, "response_headers": [["Content-Type", "a"], ["X-\u03a3", "b"]]}),
        orjson.dumps({k: v for k, v in _VALID.items() if k in _COMMON}),
    ],
)
def test_common_lines_take_the_fast_path(line: bytes) -> None:
    parser = CassetteParser(P)
    assert parser._decode(HEADER, 1) is None
    assert not isinstance(parser._decode(line, 2), Exchange)  # not the strict decoder's
    _agree(line)


def test_the_fast_path_builds_exchanges_as_their_constructor_does() -> None:
    # `_format_fast.from_line` sets the slots of the frozen Exchange directly, skipping its
    # dataclass __init__: every field must be set, to what Exchange(...) would hold.
    import dataclasses
    import datetime

    from sakura_http._format_fast import decode_line, from_line

    assert not hasattr(Exchange, "__post_init__")  # nothing the direct path would skip
    line = orjson.dumps({**_VALID, "id": "ex-9", "truncated": True})
    built = from_line(decode_line(line), {})
    expected = Exchange(
        method="GET",
        url="https://api.example.test/x",
        headers=(("accept", "*/*"), ("x-case", "v")),
        body=b"",
        status=200,
        response_headers=(("content-type", "text/plain"),),
        response_body=b"abc",
        error=None,
        id="ex-9",
        chunks=(1, 2),
        truncated=True,
        timings_ms=(0.5, 1),
        response_header_charset="utf-8",
        recorded_at=datetime.date(2026, 12, 1),
        extra={},
    )
    for field in dataclasses.fields(Exchange):
        assert getattr(built, field.name) == getattr(expected, field.name), field.name
    assert built == expected
    assert hash(built.headers) == hash(expected.headers)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("headers", [["a", "b", "c"]], "[name, value] string pairs"),
        ("headers", ["ab"], "[name, value] string pairs"),
        ("headers", [{"a": "b", "c": "d"}], "[name, value] string pairs"),
        ("response_headers", [["a", None]], "[name, value] string pairs"),
        ("status", True, "must be an HTTP status code"),
        ("status", 1000, "must be an HTTP status code"),
        ("id", 7, "'id' must be a string"),
        ("truncated", None, "'truncated' must be true or false"),
        ("chunks", None, "list of non-negative numbers"),
        ("chunks", [1, -1, 3], "list of non-negative numbers"),
        ("chunks", [1, True], "list of non-negative numbers"),
        ("chunks", [1, 1], "adds up to 2"),
        ("timings_ms", [1.0], "one entry per entry of 'chunks'"),
        ("timings_ms", [1.0, "2"], "list of non-negative numbers"),
        ("body", 3, "must be a string"),
        ("recorded_at", "2026-12-01T10:00:00Z", "'recorded_at' must be the UTC day"),
        ("recorded_at", "2026-02-30", 'as "YYYY-MM-DD"'),
        ("recorded_at", None, "not None"),
    ],
)
def test_every_malformed_field_of_a_common_line_names_its_line(
    field: str, value: object, problem: str
) -> None:
    good = orjson.dumps(_VALID) + b"\n"
    bad = orjson.dumps({**_VALID, field: value}) + b"\n"
    with pytest.raises(CassetteFormatError, match=re.escape(problem)) as caught:
        parse_cassette(HEADER + good + b"\n" + bad, P)
    assert caught.value.line == 4


#: A credential that a hand-edited or old cassette may hold where a format error points.
NEVER_PRINTED = "sk-ant-api03-FAKE-never-printed-0123456789"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("headers", [["authorization", f"Bearer {NEVER_PRINTED}", "extra"]]),
        ("headers", [["x-api-key", NEVER_PRINTED, None]]),
        ("headers", [["X-Session-Id", [NEVER_PRINTED]]]),
        ("headers", [{"authorization": NEVER_PRINTED}]),
        ("response_headers", [["set-cookie", f"session={NEVER_PRINTED}", 1]]),
        ("status", {"x-api-key": NEVER_PRINTED}),
        ("status", f"a status padded out to hide a key {NEVER_PRINTED}"),
        ("headers", [["x-custom", f"a value long enough to be elided: {NEVER_PRINTED}", 3]]),
    ],
)
def test_a_format_error_never_prints_a_credential_value(field: str, value: object) -> None:
    # Format errors go to CI logs: a credential header's value is never quoted, and a long
    # value is shown by its first characters and its length.
    bad = orjson.dumps({**_VALID, field: value}) + b"\n"
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(HEADER + bad, P)
    text = str(caught.value)
    assert caught.value.line == 2
    assert "NEVER" not in text and "never-printed" not in text, text
    assert f"field {field!r}" in text


def test_a_format_error_quotes_a_short_value_and_elides_a_long_one() -> None:
    short = orjson.dumps({**_VALID, "headers": [["a", "b", "c"]]}) + b"\n"
    with pytest.raises(CassetteFormatError, match=re.escape("got ['a', 'b', 'c']")):
        parse_cassette(HEADER + short, P)
    long = orjson.dumps({**_VALID, "status": "x" * 5000}) + b"\n"
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(HEADER + long, P)
    assert "x" * 41 not in str(caught.value)
    assert "(5,000 chars)" in str(caught.value)


def test_request_headers_shared_between_lines_are_still_checked_on_every_line() -> None:
    good = orjson.dumps(_VALID) + b"\n"
    bad = good.replace(b'["X-Case","v"]', b'["X-Case",1]')
    with pytest.raises(CassetteFormatError, match=re.escape("string pairs")) as caught:
        parse_cassette(HEADER + good + good + bad, P)
    assert caught.value.line == 4
    content = parse_cassette(HEADER + good + good, P)
    first, second = content.exchanges
    assert first.headers is second.headers  # one tuple kept for the cassette
    assert first.headers == (("accept", "*/*"), ("x-case", "v"))


# --- parsing as the file is read ----------------------------------------------------------

_PIECES = [
    HEADER, HEADER, orjson.dumps(_VALID) + b"\n", orjson.dumps(_VALID) + b"\n", b"\n", b"  \n",
    b"\r\n", b'{"method":"GET"}\n', b"{bad\n", b"[]\n", b" ", b'{"url"', b"\x00",
]  # fmt: skip


def _outcome(parse: Callable[[], CassetteContent]) -> object:
    try:
        content = parse()
    except CassetteFormatError as exc:
        return str(exc)
    return (content.header, content.exchanges, content.line_numbers)


def _in_pieces(
    data: bytes,
    cuts: list[int],
    long_string: int | None = None,
    reads: list[tuple[int, int]] | None = None,
) -> Callable[[], CassetteContent]:
    """Parsing `data` fed in pieces cut at `cuts`; with `long_string`, long strings are read
    apart from `data` (each read noted in `reads`)."""

    def read_at(offset: int, size: int) -> bytes:
        if reads is not None:
            reads.append((offset, size))
        return data[offset : offset + size]

    def parse() -> CassetteContent:
        parser = (
            CassetteParser(P)
            if long_string is None
            else CassetteParser(P, read_at, long_string=long_string)
        )
        bounds = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
        for start, end in itertools.pairwise(bounds):
            parser.feed(data[start:end])
        return parser.close()

    return parse


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_PIECES), max_size=6),
    cuts=st.lists(st.integers(0, 2000), max_size=8),
)
def test_feeding_any_pieces_parses_as_the_whole(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    assert _outcome(_in_pieces(data, cuts)) == _outcome(lambda: parse_cassette(data, P))


# Long strings, as a line may hold them (the parser below cuts out the one it is inside of when
# the line passes 100 bytes, after the url): text with no escape (cut out, read apart), and
# every kind that must not be (escapes, a control character, invalid UTF-8, a surrogate, no
# end), each of which must parse as the whole line.
_LONG_TEXTS = (
    b'"' + b"x" * 200 + b'"',
    b'"' + "\u00e9\u20ac\U0001f600".encode() * 30 + b'"',
    b'"' + b'a\\"b' * 60 + b'"',
    b'"' + b"x" * 200 + b'\\u00e9"',
    b'"' + b"x" * 200 + b'\\\\"',
    b'"' + b"y" * 200 + b'\x01"',
    b'"' + b"z" * 200 + b'\xff"',
    b'"' + b"\xed\xa0\x80" * 70 + b'"',
    b'"' + b"w" * 200,
)


@st.composite
def _common_with_long(draw: st.DrawFn) -> bytes:
    # A common line (the fast path's) whose bodies are long strings of any kind, now and then
    # with a body given twice, before or after.
    texts = st.sampled_from((b'""', b'"ab"', *_LONG_TEXTS))
    twice = draw(st.sampled_from([b"", b'"body":"x",', b'"response_body":"y",']))
    line = b"{%s%s}" % (
        twice if draw(st.booleans()) else b"",
        b",".join(
            [
                b'"method":"GET","url":"https://api.example.test/x","headers":[["a","b"]]',
                b'"body":' + draw(texts),
                b'"status":200,"response_headers":[]',
                b'"response_body":' + draw(texts),
            ]
        ),
    )
    return line if not twice or draw(st.booleans()) else line[:-1] + b"," + twice[:-1] + b"}"


@settings(max_examples=1000, deadline=None)
@given(
    line=_common_with_long() | _spelled(_LONG_TEXTS),
    more=st.sampled_from([b"", orjson.dumps(_VALID) + b"\n", b"{bad\n"]),
    step=st.integers(1, 60),
    cuts=st.lists(st.integers(0, 2000), max_size=6),
    newline=st.booleans(),
)
def test_a_long_string_read_apart_parses_as_the_whole_line(
    line: bytes, more: bytes, step: int, cuts: list[int], newline: bool
) -> None:
    data = HEADER + line + (b"\n" + more if newline else b"")
    apart = _in_pieces(data, [*range(0, len(data), step), *cuts], long_string=100)
    assert _outcome(apart) == _outcome(lambda: parse_cassette(data, P))


def test_a_long_body_is_read_apart_once_and_the_line_never_whole() -> None:
    body, payload = b"q" * 5000, "\u00e9".encode() * 3000
    line = encode_exchange(
        Exchange("POST", "https://api.example.test/", body=body, response_body=payload)
    )
    data = HEADER + line + encode_exchange(Exchange("GET", "https://api.example.test/"))
    reads: list[tuple[int, int]] = []
    content = _in_pieces(data, list(range(0, len(data), 100)), 300, reads)()
    assert reads == [(data.index(body), len(body)), (data.index(payload), len(payload))]
    assert [e.body for e in content.exchanges] == [body, b""]
    assert [e.response_body for e in content.exchanges] == [payload, b""]
    assert content == parse_cassette(data, P)


def test_a_long_body_with_escapes_is_read_as_any_line() -> None:
    body = b'{"k": "v"}' * 500
    data = HEADER + encode_exchange(
        Exchange("GET", "https://api.example.test/", response_body=body)
    )
    reads: list[tuple[int, int]] = []
    content = _in_pieces(data, list(range(0, len(data), 100)), 300, reads)()
    assert reads == []  # not cut out: held whole, as without a reader
    assert content.exchanges[0].response_body == body


def test_a_string_of_the_marker_s_shape_is_not_taken_for_one() -> None:
    # The marker is random per parser: a body spelled like one is kept as written.
    parser = CassetteParser(P, read_at=lambda offset, size: b"", long_string=8)
    text = parser._marker + "0"
    line = encode_exchange(
        Exchange("GET", "https://api.example.test/", response_body=text.encode())
    )
    parser.feed(HEADER + line)
    assert parser.close().exchanges[0].response_body == text.encode()
    assert CassetteParser(P)._marker != parser._marker


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=40) | st.text(max_size=20).map(str.encode), piece=st.integers(1, 9))
def test_string_content_is_checked_in_pieces_as_a_whole_string(data: bytes, piece: int) -> None:
    import msgspec

    from sakura_http import _format_fast

    try:
        whole = b"\\" not in data and msgspec.json.decode(b'"' + data + b'"', type=str) is not None
    except msgspec.DecodeError:
        whole = False
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_format_fast, "_PIECE", piece)
        assert _format_fast.is_string_content(data) == whole


def test_loading_a_file_with_long_bodies_reads_them_apart(tmp_path: Path) -> None:
    # At the real threshold, through the file: a line after a body read apart is read from
    # where the reading left off.
    plain, escaped = b"p" * (3 << 20), b'{"k": "\\u00e9"}' * (1 << 18)
    exchanges = [
        Exchange("GET", "https://api.example.test/1", response_body=b"one"),
        Exchange("GET", "https://api.example.test/2", response_body=plain, body=plain[:7]),
        Exchange("GET", "https://api.example.test/3", response_body=escaped),
        Exchange("POST", "https://api.example.test/4", body=plain),
        Exchange("GET", "https://api.example.test/5", response_body=b"five"),
    ]
    path = tmp_path / "long.jsonl"
    path.write_bytes(HEADER + b"".join(map(encode_exchange, exchanges)))
    content = load_cassette(path)
    assert content.exchanges == exchanges
    assert content.line_numbers == [2, 3, 4, 5, 6]
    assert content == parse_cassette(path.read_bytes(), path)


@pytest.mark.parametrize(
    ("line", "opens"),
    [
        (b'{"a":"xyz', 5),
        (b'{"a": \t"xyz', 7),
        (b'{"a":"b","c":"xyz', 13),
        (b'{"a":"x\\"yz', -1),  # an escape in the string: not cut out
        (b'{"a":["xyz', -1),  # not a member's value, so not a body
        (b'{"a":"b:"', -1),  # the last quote closes a string
        (b'{"a":"b\\\\":"xyz', 11),  # the string before ends in an escaped backslash
        (b'{"a":"b\\\\","c":"xyz', 15),
        (b'{"a":1}', -1),
    ],
)
def test_the_string_a_long_line_ends_inside_of(line: bytes, opens: int) -> None:
    from sakura_http._format_fast import open_string

    assert open_string(line) == opens


@pytest.mark.parametrize("version", ["2.0", "10.3"])
def test_a_cassette_from_a_newer_sakura_http_says_to_upgrade_never_to_re_record(
    version: str,
) -> None:
    """Re-recording or deleting a newer cassette would throw a good recording away."""
    data = b'{"schema_version":"%s","kind":"cassette"}\n' % version.encode()
    with pytest.raises(CassetteFormatError) as caught:
        parse_cassette(data, P)
    text = str(caught.value)
    assert f"schema_version '{version}' is not supported" in text
    assert "newer sakura-http" in text and "upgrade" in text
    assert "re-record" not in text and "delete" not in text
