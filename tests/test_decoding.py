"""Bounded content decoding (`sakura_http._decoding`): a response body is stored decoded exactly
when httpx can decode it, never past `max_body_bytes`, and kept raw, with its
`content-encoding`, when it cannot be decoded.  Brotli's two decoders and the refusal of an
undecodable body that may hold a secret are tested in tests/test_policy.py, beside redaction."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import brotli
import pytest

from sakura_http import BodyTooLargeError
from sakura_http._decoding import BodyDecoder
from tests.drive import Driver
from tests.test_transport import URL, Script, lines

# --- BodyDecoder -------------------------------------------------------------------------------


def test_stacked_encodings_are_undone_in_reverse_order() -> None:
    body = b'{"n": 1}' * 50
    raw = brotli.compress(gzip.compress(body))  # content-encoding: gzip, br
    decoder = BodyDecoder((("content-encoding", "gzip, br"),), 1 << 20)
    assert decoder.decoded
    half = len(raw) // 2
    assert decoder.feed(raw[:half]) + decoder.feed(raw[half:]) + decoder.tail() == body
    assert decoder.headers(len(body)) == ()


def test_the_stored_headers_lose_the_encoding_and_get_the_decoded_length() -> None:
    body = b"hello " * 100
    headers = (
        ("content-type", "text/plain"),
        ("content-encoding", "gzip"),
        ("content-length", "999"),
    )
    decoder = BodyDecoder(headers, 1 << 20)
    assert decoder.feed(gzip.compress(body)) + decoder.tail() == body
    assert decoder.headers(len(body)) == (
        ("content-type", "text/plain"),
        ("content-length", str(len(body))),
    )
    assert decoder.headers(None) == (("content-type", "text/plain"),)  # length not known yet


def test_identity_and_no_encoding_pass_the_bytes_through() -> None:
    for headers in ((), (("content-encoding", "identity"),)):
        decoder = BodyDecoder(headers, 1 << 20)
        assert not decoder.decoded
        assert decoder.feed(b"as is") + decoder.tail() == b"as is"
        assert decoder.headers(5) == headers
        assert decoder.undecoded is None


def test_corrupt_data_falls_back_to_the_raw_bytes() -> None:
    decoder = BodyDecoder((("content-encoding", "gzip"),), 1 << 20)
    assert decoder.feed(b"not gzip at all") == b""
    assert not decoder.decoded
    assert decoder.raw_fallback
    assert decoder.raw_chunks == [b"not gzip at all"]
    assert decoder.undecoded is not None and "gzip body is corrupt" in decoder.undecoded
    assert decoder.headers(15) == (("content-encoding", "gzip"),)


def test_an_unknown_encoding_is_kept_and_says_why() -> None:
    decoder = BodyDecoder((("content-encoding", "gzip, x-custom"),), 1 << 20)
    assert not decoder.decoded
    assert decoder.undecoded == "content-encoding x-custom cannot be decoded here"
    assert decoder.feed(b"raw") == b"raw"


def test_the_limit_counts_decoded_bytes() -> None:
    decoder = BodyDecoder((("content-encoding", "deflate"),), 1000)
    with pytest.raises(BodyTooLargeError, match="response body over 1,000 bytes"):
        decoder.feed(zlib.compress(b"a" * 1001))
    decoder = BodyDecoder((("content-encoding", "deflate"),), 1000)
    assert decoder.feed(zlib.compress(b"a" * 1000)) + decoder.tail() == b"a" * 1000


# --- through the transport ---------------------------------------------------------------------


def test_gzip_response_is_stored_decoded(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    body = json.dumps({"items": list(range(100))}).encode()
    raw = gzip.compress(body)
    script = Script(
        drive,
        (
            200,
            {
                "headers": {"content-encoding": "gzip", "content-length": str(len(raw))},
                "content": raw,
            },
        ),
    )
    live = drive.send(drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL)
    assert live.json()["items"][-1] == 99
    stored = lines(path)[0]
    assert stored["response_body"] == body.decode()
    assert ["content-length", str(len(body))] in stored["response_headers"]
    assert not any(name == "content-encoding" for name, _ in stored["response_headers"])
    assert drive.send(drive.transport(path), "GET", URL).json() == live.json()


@pytest.mark.parametrize("encoding", ["deflate", "br", "zstd"])
def test_other_encodings_are_stored_decoded(drive: Driver, tmp_path: Path, encoding: str) -> None:
    body = b"hello " * 100
    if encoding == "deflate":
        raw = zlib.compress(body)
    elif encoding == "br":
        brotli = pytest.importorskip("brotli")
        raw = brotli.compress(body)
    else:
        zstandard = pytest.importorskip("zstandard")
        raw = zstandard.ZstdCompressor().compress(body)
    path = tmp_path / "c.jsonl"
    script = Script(drive, (200, {"headers": {"content-encoding": encoding}, "content": raw}))
    assert (
        drive.send(
            drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL
        ).content
        == body
    )
    assert lines(path)[0]["response_body"] == body.decode()


def test_gzip_bomb_fails_cleanly(drive: Driver, tmp_path: Path) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    path = tmp_path / "c.jsonl"
    script = Script(drive, (200, {"headers": {"content-encoding": "gzip"}, "content": bomb}))
    with pytest.raises(BodyTooLargeError, match="response body over 16 MiB"):
        drive.send(drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL)
    assert not path.exists()


def test_undecodable_encoding_is_stored_raw_with_its_header(drive: Driver, tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    raw = b"\x89\xff\x00compressed-somehow"
    script = Script(drive, (200, {"headers": {"content-encoding": "x-custom"}, "content": raw}))
    drive.send(drive.transport(path, outer=script.outer, mode="new_episodes"), "GET", URL)
    stored = lines(path)[0]
    assert ["content-encoding", "x-custom"] in stored["response_headers"]
    assert "response_body" not in stored
    import base64

    assert base64.b64decode(stored["response_body_b64"]) == raw
