"""The on-disk format: header, exchange lines, base64 bodies, optional fields, errors."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http import CassetteFormatError
from sakura_http._format import (
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
        response = library_of(module.Request("GET", "https://api.example.test/")).response(
            back, None, module.ByteStream(b"")
        )
        assert response.headers.raw == raw
