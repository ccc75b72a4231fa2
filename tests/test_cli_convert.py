"""`sakura-http convert`: importing vcrpy cassettes (YAML and JSON) safely."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sakura_http._cassette import load_cassette
from sakura_http.cli._convert import VcrImportError, load_vcr, vcr_to_exchanges
from tests.cli_support import assert_one_line_error, run

# What vcrpy writes for an httpx POST and GET (vcrpy keeps header case and lists of values).
VCR_YAML = """\
interactions:
- request:
    body: '{"amount": 3}'
    headers:
      Accept:
      - application/json
      Authorization:
      - Bearer fake-test-token-000000
      Content-Type:
      - application/json
    method: POST
    uri: https://api.example.test/v1/invoices
  response:
    body:
      string: '{"id": 7, "amount": 3}'
    headers:
      Content-Type:
      - application/json
      Set-Cookie:
      - session=fake-test-cookie
      - theme=dark
    status:
      code: 201
      message: Created
- request:
    body: null
    headers:
      X-Api-Key:
      - fake-test-key
    method: GET
    uri: https://api.example.test/v1/invoices/7
  response:
    body:
      string: ''
    headers: {}
    status:
      code: 404
      message: Not Found
version: 1
"""


def _vcr_dict(response_body: Any, response_headers: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "interactions": [
            {
                "request": {
                    "body": None,
                    "headers": {"Accept": ["application/json"]},
                    "method": "GET",
                    "uri": "https://api.example.test/v1/report",
                },
                "response": {
                    "body": {"string": response_body},
                    "headers": response_headers,
                    "status": {"code": 200, "message": "OK"},
                },
            }
        ],
        "version": 1,
    }


def test_convert_a_yaml_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(VCR_YAML)
    result = run(capsys, "convert", source, target)
    assert result.code == 0
    assert result.out == (f"wrote {target}: 2 exchanges from {source} (set-cookie redacted in 1)\n")
    assert result.err.splitlines() == [
        "sakura-http convert: warning: dropped request header authorization (interaction 1): "
        "credentials never go into a cassette; replay with "
        'RecordingTransport(..., secret_headers=["authorization"])',
        "sakura-http convert: warning: dropped request header x-api-key (interaction 2): "
        "credentials never go into a cassette; replay with "
        'RecordingTransport(..., secret_headers=["x-api-key"])',
    ]
    first, second = load_cassette(target).exchanges
    assert first.method == "POST"
    assert first.url == "https://api.example.test/v1/invoices"
    assert first.headers == (("accept", "application/json"), ("content-type", "application/json"))
    assert first.body == b'{"amount": 3}'
    assert first.status == 201
    assert first.response_headers == (
        ("content-type", "application/json"),
        ("set-cookie", "<redacted>"),
        ("set-cookie", "<redacted>"),
    )
    assert first.response_body == b'{"id": 7, "amount": 3}'
    assert (second.headers, second.body, second.status) == ((), b"", 404)
    assert b"fake-test" not in target.read_bytes()
    assert run(capsys, "lint", "--strict", target).code == 0


def test_binary_and_gzip_bodies_are_decoded(tmp_path: Path) -> None:
    payload = b'{"rows": [1, 2, 3]}'
    data = _vcr_dict(
        gzip.compress(payload),
        {"Content-Encoding": ["gzip"], "Content-Type": ["application/json"]},
    )
    text = yaml.safe_dump(data)
    assert "!!binary" in text  # how vcrpy stores bytes it cannot keep as text
    result = vcr_to_exchanges(load_vcr(text, "vcr.yaml"), "vcr.yaml")
    (exchange,) = result.exchanges
    assert exchange.response_body == payload
    assert exchange.response_headers == (("content-type", "application/json"),)
    assert result.decoded_bodies == 1


def test_binary_bodies_that_are_not_encoded_stay_bytes(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\xff"
    text = yaml.safe_dump(_vcr_dict(png, {"Content-Type": ["image/png"]}))
    (exchange,) = vcr_to_exchanges(load_vcr(text, "vcr.yaml"), "vcr.yaml").exchanges
    assert exchange.response_body == png


def test_convert_a_json_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "vcr.json", tmp_path / "out.jsonl"
    source.write_text(json.dumps(_vcr_dict('{"ok": true}', {"X-Request-Id": ["r-1"]}), indent=4))
    result = run(capsys, "convert", source, target)
    assert (result.code, result.err) == (0, "")
    (exchange,) = load_cassette(target).exchanges
    assert exchange.response_body == b'{"ok": true}'
    assert exchange.response_headers == (("x-request-id", "r-1"),)
    assert exchange.headers == (("accept", "application/json"),)


def test_the_old_vcrpy_httpx_layout_is_read() -> None:
    data = {
        "interactions": [
            {
                "request": {
                    "body": "",
                    "headers": {"accept": "*/*"},
                    "method": "get",
                    "uri": "https://api.example.test/v1/ping",
                },
                "response": {
                    "status_code": 200,
                    "http_version": "HTTP/1.1",
                    "headers": {"content-type": "text/plain"},
                    "content": "pong",
                },
            }
        ],
        "version": 1,
    }
    (exchange,) = vcr_to_exchanges(data, "old.yaml").exchanges
    assert (exchange.method, exchange.status, exchange.response_body) == ("GET", 200, b"pong")
    assert exchange.headers == (("accept", "*/*"),)


def test_an_empty_vcr_cassette_gives_a_header_only_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text("interactions: []\nversion: 1\n")
    assert run(capsys, "convert", source, target).code == 0
    assert target.read_bytes() == b'{"schema_version":"1.0","kind":"cassette"}\n'


@pytest.mark.parametrize(
    "tagged",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
        "!!python/name:os.system",
        "!!python/unicode 'text'",
    ],
)
def test_python_tags_are_refused_never_constructed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tagged: str
) -> None:
    marker = tmp_path / "constructed"
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(
        "interactions:\n- request:\n    body: " + tagged.format(marker=marker) + "\nversion: 1\n"
    )
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert f"{source}:3: the YAML tag !!python/" in result.err
    assert "safe loader only" in result.err
    assert not marker.exists()
    assert not target.exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("interactions: [\n", "not a readable YAML or JSON vcrpy cassette"),
        ("- request: {}\n  response: {}\n", "pre-1.0 vcrpy cassette"),
        ("just a string\n", "not a vcrpy cassette"),
        ("interactions: []\nversion: 2\n", "vcrpy cassette version 2 is not supported"),
        ("interactions:\n- 3\nversion: 1\n", "interaction 1: an interaction must be a mapping"),
        (
            "interactions:\n- request: {method: GET, uri: 'https://api.example.test/'}\n"
            "  response: {status: {code: 99}}\nversion: 1\n",
            "interaction 1: the response status code must be an HTTP status, got 99",
        ),
        (
            "interactions:\n- request: {method: GET, uri: 'https://api.example.test/', body: 3}\n"
            "  response: {status: {code: 200}}\nversion: 1\n",
            "the request body must be text, !!binary bytes or null, not int",
        ),
    ],
)
def test_unreadable_vcr_cassettes_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(text)
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert problem in result.err
    assert not target.exists()
    assert list(tmp_path.iterdir()) == [source]  # no temporary file left behind either


def test_a_body_over_16_mib_is_refused() -> None:
    data = _vcr_dict("x" * (16 * 1024 * 1024 + 1), {})
    with pytest.raises(VcrImportError, match=r"interaction 1: response body over 16 MiB"):
        vcr_to_exchanges(data, "big.yaml")


def test_an_existing_output_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(VCR_YAML)
    target.write_bytes(b"precious\n")
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert f"{target} already exists; pass --force to replace it" in result.err
    assert target.read_bytes() == b"precious\n"

    assert run(capsys, "convert", "--force", source, target).code == 0
    assert len(load_cassette(target).exchanges) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "vcr.yaml"]


def test_missing_and_non_text_sources_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "convert", tmp_path / "missing.yaml", tmp_path / "out.jsonl")
    assert_one_line_error(result)
    assert "missing.yaml: no such file" in result.err
    binary = tmp_path / "vcr.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    result = run(capsys, "convert", binary, tmp_path / "out.jsonl")
    assert_one_line_error(result)
    assert "not UTF-8 text" in result.err
