"""The on-disk format: header, exchange lines, base64 bodies, optional fields, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakura_http import CassetteFormatError
from sakura_http._format import (
    Exchange,
    FaultInfo,
    decode_exchange,
    encode_exchange,
    encode_header,
    parse_cassette,
)

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
