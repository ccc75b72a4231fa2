"""`sakura-http convert`: importing vcrpy cassettes (YAML and JSON) safely."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sakura_http._cassette import load_cassette
from sakura_http._format import Exchange
from sakura_http.cli._convert import VcrImportError, convert_file
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


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)  # vcrpy keeps the order it recorded


def _converted(tmp_path: Path, data: Any, name: str = "vcr.yaml") -> list[Exchange]:
    """Convert `data` (a dict, dumped as YAML, or text) and return the written exchanges."""
    source, target = tmp_path / name, tmp_path / "out.jsonl"
    source.write_text(data if isinstance(data, str) else _yaml(data))
    convert_file(source, target, overwrite=True)
    return load_cassette(target).exchanges


def test_convert_a_yaml_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(VCR_YAML)
    result = run(capsys, "convert", source, target)
    assert result.code == 0
    assert result.out == (f"wrote {target}: 2 exchanges from {source} (set-cookie redacted in 1)\n")
    assert result.err.splitlines() == [
        f"sakura-http convert: warning: {source}: dropped request header authorization "
        "(interaction 1): "
        "credentials never go into a cassette; replay with "
        'RecordingTransport(..., secret_headers=["authorization"])',
        f"sakura-http convert: warning: {source}: dropped request header x-api-key "
        "(interaction 2): "
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
    text = _yaml(data)
    assert "!!binary" in text  # how vcrpy stores bytes it cannot keep as text
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(text)
    result = convert_file(source, target)
    (exchange,) = result.exchanges
    assert exchange.response_body == payload
    assert exchange.response_headers == (("content-type", "application/json"),)
    assert result.decoded_bodies == 1


def test_binary_bodies_that_are_not_encoded_stay_bytes(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\xff"
    (exchange,) = _converted(tmp_path, _vcr_dict(png, {"Content-Type": ["image/png"]}))
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


def test_the_old_vcrpy_httpx_layout_is_read(tmp_path: Path) -> None:
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
    (exchange,) = _converted(tmp_path, data)
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
        ("just a string\n", "not a vcrpy or cassetter cassette"),
        ("interactions: []\nversion: 2\n", "vcrpy cassette version 2 is not supported"),
        ("interactions:\n- 3\nversion: 1\n", "interaction 1: an interaction must be a mapping"),
        (
            "interactions:\n- request: {method: GET, uri: 'https://api.example.test/', body: ''}\n"
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


def test_a_body_over_16_mib_is_refused(tmp_path: Path) -> None:
    data = _vcr_dict("x" * (16 * 1024 * 1024 + 1), {})
    with pytest.raises(VcrImportError, match=r"interaction 1: response body over 16 MiB"):
        _converted(tmp_path, json.dumps(data), "big.json")
    assert not (tmp_path / "out.jsonl").exists()


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


# --- migration that never converts wrongly ---------------------------------------------------


def _interaction(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    base_request = {"method": "GET", "uri": "https://api.example.test/v1/x", "headers": {}}
    base_response = {"status": {"code": 200, "message": "OK"}, "headers": {}}
    return {"request": {**base_request, **request}, "response": {**base_response, **response}}


def _refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Any) -> str:
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(data if isinstance(data, str) else _yaml(data))
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vcr.yaml"]  # no temporary left
    return result.err


def test_a_body_in_a_form_convert_does_not_know_is_refused_never_emptied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = _interaction({"body": None}, {"body": {"yaml": {"id": 7}}})
    err = _refusal(tmp_path, capsys, {"interactions": [unknown], "version": 1})
    assert f"{tmp_path / 'vcr.yaml'}: interaction 1: the response body has no 'string' key" in err
    assert "(its keys: yaml)" in err
    bodiless = _interaction({"body": None}, {})
    err = _refusal(tmp_path, capsys, {"interactions": [bodiless], "version": 1})
    assert "interaction 1: the response has no body" in err
    no_request_body = _interaction({}, {"body": {"string": ""}})
    err = _refusal(tmp_path, capsys, {"interactions": [no_request_body], "version": 1})
    assert "interaction 1: the request has no 'body' key (its keys: headers, method, uri)" in err


def test_pydantic_ai_parsed_bodies_are_read_as_its_deserializer_gives_them(tmp_path: Path) -> None:
    interaction = _interaction(
        {"method": "POST", "parsed_body": {"model": "m", "messages": [{"role": "user"}]}},
        {"parsed_body": {"id": "msg_1", "content": []}},
    )
    interaction["request"].pop("body", None)
    (exchange,) = _converted(tmp_path, {"interactions": [interaction], "version": 1})
    assert exchange.body == json.dumps({"model": "m", "messages": [{"role": "user"}]}).encode()
    assert exchange.response_body == b'{"id": "msg_1", "content": []}'


def test_a_decoded_body_still_tagged_gzip_is_stored_plain_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vcrpy 9 with urllib3 2 / aiohttp (and vcrpy's own old_httpx_format_gzip.yaml): the body
    # is already decoded but content-encoding: gzip stayed; httpx would fail to decode it.
    tagged = _interaction(
        {"body": None},
        {
            "headers": {"Content-Encoding": ["gzip"], "Content-Type": ["application/json"]},
            "body": {"string": '{"ok": true}'},
        },
    )
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(_yaml({"interactions": [tagged], "version": 1}))
    result = run(capsys, "convert", source, target)
    assert result.code == 0, result
    assert result.err == (
        f"sakura-http convert: note: {source}: interaction 1: the body was stored already "
        "decoded but still tagged with content-encoding (as vcrpy 9 does with urllib3 2 and "
        "aiohttp); stored it decoded and dropped the header\n"
    )
    (exchange,) = load_cassette(target).exchanges
    assert exchange.response_headers == (("content-type", "application/json"),)
    assert exchange.response_body == b'{"ok": true}'


def test_a_gzip_tagged_body_that_is_neither_gzip_nor_text_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tagged = _interaction(
        {"body": None},
        {"headers": {"Content-Encoding": ["gzip"]}, "body": {"string": b"\xff\xfe\x00junk"}},
    )
    err = _refusal(tmp_path, capsys, {"interactions": [tagged], "version": 1})
    assert "interaction 1: the response says content-encoding: gzip, but its body is" in err
    assert "no client could read" in err


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", b'{"q": "tea", "n": 2}'),
        ("application/x-www-form-urlencoded", b"q=tea&n=2"),
    ],
)
def test_aiohttp_mapping_request_bodies_are_encoded_as_aiohttp_sent_them(
    tmp_path: Path, content_type: str, expected: bytes
) -> None:
    interaction = _interaction(
        {
            "method": "POST",
            "headers": {"Content-Type": [content_type]},
            "body": {"q": "tea", "n": 2},
        },
        {"body": {"string": "ok"}},
    )
    (exchange,) = _converted(tmp_path, {"interactions": [interaction], "version": 1})
    assert exchange.body == expected


def test_an_aiohttp_mapping_body_without_a_content_type_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    interaction = _interaction({"method": "POST", "body": {"q": "tea"}}, {"body": {"string": ""}})
    err = _refusal(tmp_path, capsys, {"interactions": [interaction], "version": 1})
    assert "interaction 1: the request body is a mapping (keys: q)" in err
    assert "Add a content-type request header" in err
    assert "'string'" not in err


def test_a_bare_integer_status_is_accepted(tmp_path: Path) -> None:
    interaction = _interaction({"body": None}, {"status": 204, "body": {"string": ""}})
    (exchange,) = _converted(tmp_path, {"interactions": [interaction], "version": 1})
    assert exchange.status == 204


@pytest.mark.parametrize("value", [True, 3, {"nested": "x"}, None])
def test_header_values_that_are_not_text_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any
) -> None:
    interaction = _interaction(
        {"body": None}, {"headers": {"X-Flag": [value]}, "body": {"string": ""}}
    )
    err = _refusal(tmp_path, capsys, {"interactions": [interaction], "version": 1})
    assert "interaction 1: response header 'X-Flag' has a" in err
    assert "not text" in err


def test_echoes_of_dropped_credentials_are_redacted_as_recording_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same code, not a copy: the engine's redactor is the one that sees the echo.
    from sakura_http._policy import Redactor

    seen: list[bytes] = []
    engine_body = Redactor.body

    def spy(self: Redactor, body: bytes, *args: Any, **kwargs: Any) -> bytes:
        seen.append(body)
        return engine_body(self, body, *args, **kwargs)

    monkeypatch.setattr(Redactor, "body", spy)
    token = "tok_live_5f2b9c1d7e3a"
    interaction = _interaction(
        {"body": None, "headers": {"Authorization": [f"Bearer {token}"]}},
        {
            "headers": {"X-Echo": [token], "Set-Cookie": ["s=1"]},
            "body": {"string": f'{{"you_sent": "{token}"}}'},
        },
    )
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(_yaml({"interactions": [interaction], "version": 1}))
    result = run(capsys, "convert", source, target)
    assert result.code == 0, result
    assert "(set-cookie redacted in 1; echoed credentials redacted in 1)" in result.out
    assert token.encode() not in target.read_bytes()
    (exchange,) = load_cassette(target).exchanges
    assert exchange.response_body == b'{"you_sent": "<redacted>"}'
    assert exchange.response_headers == (("x-echo", "<redacted>"), ("set-cookie", "<redacted>"))
    assert f'{{"you_sent": "{token}"}}'.encode() in seen


def test_a_conversion_that_does_not_replay_as_the_source_says_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Break the recording engine on purpose: the check by replay must catch it.
    from sakura_http import _age  # (the session writes the line `Dating.stamp` encodes)

    real = _age.encode_exchange

    def corrupting(exchange: Exchange) -> bytes:
        return real(replace(exchange, response_body=exchange.response_body + b"!"))

    monkeypatch.setattr(_age, "encode_exchange", corrupting)
    err = _refusal(tmp_path, capsys, VCR_YAML)
    assert "interaction 1: verification failed: the converted exchange replays a 23-byte body" in (
        err
    )


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with libyaml's loader (when PyYAML has it) and with the pure-Python one."""
    from sakura_http.cli import _foreign

    if request.param == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not yaml.__with_libyaml__:
        pytest.skip("PyYAML is built without libyaml here")
    _foreign._yaml_loader.cache_clear()
    yield request.param
    _foreign._yaml_loader.cache_clear()


@pytest.mark.usefixtures("yaml_loader")
def test_yaml_alias_bombs_are_refused_without_expanding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The 633-byte file that ran past 60 s and 2.4 GB: nine levels of nine aliases.
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    text = "\n".join(lines) + "\ninteractions:\n- *a9\nversion: 1\n"
    assert len(text) < 1000
    err = _refusal(tmp_path, capsys, text)
    assert "refused YAML aliases that expand the" in err
    assert "alias bomb" in err


@pytest.mark.usefixtures("yaml_loader")
def test_ordinary_yaml_aliases_still_convert(tmp_path: Path) -> None:
    # yaml.dump writes an anchor for an object it meets twice, e.g. a shared header list.
    shared = ["application/json"]
    interaction = _interaction(
        {"body": None, "headers": {"Accept": shared}},
        {"headers": {"Content-Type": shared}, "body": {"string": "{}"}},
    )
    text = _yaml({"interactions": [interaction], "version": 1})
    assert "&id001" in text
    (exchange,) = _converted(tmp_path, text)
    assert exchange.headers == (("accept", "application/json"),)


def test_libyaml_is_used_when_present_and_the_pure_loader_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sakura_http.cli import _foreign

    _foreign._yaml_loader.cache_clear()
    if yaml.__with_libyaml__:
        assert issubclass(_foreign._yaml_loader()[1], yaml.CSafeLoader)
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    _foreign._yaml_loader.cache_clear()
    try:
        assert issubclass(_foreign._yaml_loader()[1], yaml.SafeLoader)
        assert len(_converted(tmp_path, VCR_YAML)) == 2
    finally:
        _foreign._yaml_loader.cache_clear()


def test_without_pyyaml_yaml_needs_the_vcr_extra_and_json_still_converts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sakura_http.cli import _foreign

    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    _foreign._yaml_loader.cache_clear()
    try:
        err = _refusal(tmp_path, capsys, VCR_YAML)
        assert "reading YAML cassettes needs PyYAML" in err
        assert 'pip install "sakura-http[vcr]"' in err
        data = _vcr_dict('{"ok": true}', {})
        (exchange,) = _converted(tmp_path, json.dumps(data), "vcr.json")
        assert exchange.response_body == b'{"ok": true}'
    finally:
        _foreign._yaml_loader.cache_clear()


CASSETTER_YAML = """\
version: 1
interactions:
- request:
    method: POST
    uri: https://api.example.test/v1/echo
    headers:
      content-type:
      - application/json
    body:
      type: json
      content:
        text: café
  response:
    status: 201
    headers:
      content-type:
      - application/json
    body:
      type: json
      content:
        id: 1
        ok: true
  recorded_at: '2026-01-01T00:00:00Z'
- request:
    method: PUT
    uri: https://api.example.test/v1/blob
    headers: {}
    body:
      type: binary
      content: deadbeef00ff
  response:
    status: 204
    headers: {}
    body:
      type: none
  recorded_at: '2026-01-02T00:00:00Z'
"""

CASSETTER_TOML = """\
version = 1

[[interactions]]
recorded_at = "2026-02-01T00:00:00Z"

[interactions.request]
method = "GET"
uri = "https://api.example.test/v1/text"
body_type = "none"

[interactions.request.headers]
accept = ["text/plain"]

[interactions.response]
status = 200
body_type = "text"
body_content = "café"

[interactions.response.headers]
content-type = ["text/plain; charset=utf-8"]
"""


def test_cassetter_yaml_and_toml_cassettes_are_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _converted(tmp_path, CASSETTER_YAML, "cassetter.yaml")
    assert (first.method, first.status) == ("POST", 201)
    assert first.body == b'{"text": "caf\\u00e9"}'  # json.dumps, as cassetter replays it
    assert first.response_body == b'{"id": 1, "ok": true}'
    assert (second.body, second.status, second.response_body) == (
        bytes.fromhex("deadbeef00ff"),
        204,
        b"",
    )
    (text,) = _converted(tmp_path, CASSETTER_TOML, "cassetter.toml")
    assert text.headers == (("accept", "text/plain"),)
    assert text.response_body == "café".encode()


def test_cassetter_grpc_and_websocket_interactions_are_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CASSETTER_YAML + "ws_interactions:\n- uri: wss://ws.example.test/\n  frames: []\n"
    err = _refusal(tmp_path, capsys, text)
    assert "this cassetter cassette also holds 1 WebSocket interaction(s)" in err
    assert "converting would silently drop them" in err


def test_many_files_and_directories_give_a_per_file_outcome_and_a_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = tmp_path / "cassettes"
    (sources / "nested").mkdir(parents=True)
    (sources / "invoices.yaml").write_text(VCR_YAML)
    (sources / "nested" / "text.toml").write_text(CASSETTER_TOML)
    (sources / "broken.yaml").write_text("interactions: [\n")
    (sources / "notes.txt").write_text("not a cassette, not looked at")
    out = tmp_path / "converted"
    result = run(capsys, "convert", sources, out)
    assert result.code == 2
    assert result.out.splitlines()[-1] == "converted 2 of 3 files (3 exchanges); 1 refused"
    assert f"wrote {out / 'invoices.jsonl'}: 2 exchanges from {sources / 'invoices.yaml'}" in (
        result.out
    )
    assert f"wrote {out / 'nested' / 'text.jsonl'}: 1 exchange from" in result.out
    assert f"sakura-http convert: error: {sources / 'broken.yaml'}:" in result.err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "invoices.jsonl",
        "nested",
        "nested/text.jsonl",
    ]
    (sources / "broken.yaml").unlink()
    again = run(capsys, "convert", "--force", sources / "invoices.yaml", sources / "nested", out)
    assert again.code == 0
    assert again.out.splitlines()[-1] == "converted 2 of 2 files (3 exchanges); 0 refused"


def test_pyyaml_is_imported_only_by_convert_of_a_yaml_file() -> None:
    import subprocess

    code = (
        "import sys; from sakura_http.cli import main; "
        "main(['show', '--help']); assert 'yaml' not in sys.modules, 'yaml imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_many_files_show_progress_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = tmp_path / "cassettes"
    sources.mkdir()
    for number in range(10):
        (sources / f"c{number}.yaml").write_text(VCR_YAML)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    result = run(capsys, "convert", sources, tmp_path / "out")
    assert result.code == 0
    assert "\r\x1b[K[10/10] " in result.err
    assert result.out.splitlines()[-1] == "converted 10 of 10 files (20 exchanges); 0 refused"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a pipe or a CI log: no progress
    assert "\x1b" not in run(capsys, "convert", "--force", sources, tmp_path / "out").err


def test_a_cassette_vcrpy_recorded_converts_and_replays_as_vcrpy_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Real parts end to end: vcrpy records httpx traffic to a server on 127.0.0.1, convert
    # imports it, and RecordingTransport replays what vcrpy replays, credentials aside.
    vcr = pytest.importorskip("vcr")
    import httpx

    from sakura_http import RecordingTransport
    from tests.servers import start_echo_server

    token = "tok_live_0a1b2c3d4e5f"
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"

    def calls(client: httpx.Client, base: str) -> list[httpx.Response]:
        auth = {"authorization": f"Bearer {token}"}
        return [
            client.get(f"{base}/v1/items?page=2", headers=auth),
            client.post(f"{base}/v1/items", json={"name": "tea"}, headers=auth),
            client.get(f"{base}/v1/items?page=2", headers=auth),
        ]

    recorder = vcr.VCR(record_mode="once")
    with start_echo_server() as server, recorder.use_cassette(str(source)), httpx.Client() as c:
        recorded = calls(c, server.url)
    with recorder.use_cassette(str(source)), httpx.Client() as client:
        by_vcrpy = calls(client, server.url)  # the server is gone: vcrpy replays
    assert [r.json()["count"] for r in by_vcrpy] == [r.json()["count"] for r in recorded]

    result = run(capsys, "convert", source, target)
    assert result.code == 0, result
    assert token.encode() not in target.read_bytes()
    transport = RecordingTransport(target, secret_headers=["authorization"])
    with httpx.Client(transport=transport) as client:
        by_sakura = calls(client, server.url)
    for ours, theirs in zip(by_sakura, by_vcrpy, strict=True):
        assert ours.status_code == theirs.status_code
        expected = theirs.json()
        expected["headers"]["authorization"] = "<redacted>"  # the echoed credential
        assert ours.json() == expected
        assert ours.headers["x-echo-auth"] == "<redacted>"


@pytest.mark.usefixtures("yaml_loader")
def test_a_yaml_alias_that_refers_to_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refusal(tmp_path, capsys, "loop: &loop [*loop]\ninteractions: []\nversion: 1\n")
    assert ":1: refused a YAML alias that refers to itself" in err


# --- right on every real file (issue 25): each defect has a sample in tests/fixtures/convert ---

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "convert"


def _cassetter_reads(path: Path) -> list[dict[str, Any]]:
    """What cassetter itself reads from `path`: each interaction's request and the bytes it
    replays (`cassetter.compare.body_to_bytes`), from cassetter run in a subprocess (it cannot
    share this environment with pytest-recording; see tests/test_plugin_compat.py)."""
    import importlib.util
    import os
    import subprocess

    site = os.environ.get("SAKURA_HTTP_CASSETTER_SITE", "")
    if not site and importlib.util.find_spec("cassetter") is None:
        pytest.skip("cassetter is not installed; set SAKURA_HTTP_CASSETTER_SITE (see dev.py)")
    code = (
        "import json, sys\n"
        "from cassetter._core import Cassette\n"
        "from cassetter.compare import body_to_bytes\n"
        "print(json.dumps([{'uri': i.request.uri, 'headers': i.request.headers,\n"
        "  'body': body_to_bytes(i.request.body).hex(), 'status': i.response.status,\n"
        "  'response_headers': i.response.headers,\n"
        "  'response_body': body_to_bytes(i.response.body).hex()}\n"
        "  for i in Cassette.load(sys.argv[1]).interactions]))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


@pytest.mark.usefixtures("yaml_loader")
def test_cassetter_yaml_is_read_as_yaml_1_2(tmp_path: Path) -> None:
    # YAML 1.1 (PyYAML's resolver) made `yes` true, `12:30:45` 45045 and crashed on dates.
    (exchange,) = _converted(tmp_path, (SAMPLES / "cassetter-yaml12.yaml").read_text())
    assert json.loads(exchange.body) == {
        "stable": "yes",
        "enabled": "on",
        "time": "12:30:45",
        "day": "2024-01-02",
        "at": "2024-01-02T03:04:05Z",
        "quoted": "yes",
        "flag": True,
        "none": None,
        "tilde": None,
        "count": 17.0,  # as cassetter reads it: a leading zero makes a float, not octal
        "hex": 31,
        "big": 12345678901234567890,
        "ratio": 1500.0,
        "name": "café",
    }
    assert ("x-retry", "3") in exchange.headers  # cassetter reads header values as text
    assert exchange.response_body == b"12:30:45"


@pytest.mark.parametrize(
    ("plain", "value"),
    [
        ("yes", "yes"),
        ("No", "No"),
        ("off", "off"),
        ("y", "y"),
        ("True", True),
        ("FALSE", False),
        ("Null", None),
        ("~", None),
        ("", None),
        ("12:30:45", "12:30:45"),
        ("-1:30", "-1:30"),
        ("2024-01-02 03:04:05", "2024-01-02 03:04:05"),
        ("0", 0),
        ("-0", 0),
        ("+12", 12),
        ("1_000", 1000),
        ("1__0", "1__0"),
        ("1_", "1_"),
        ("0_1", "0_1"),
        ("00", 0.0),
        ("-017", -17.0),
        ("0o17", 15),
        ("0O17", 15),
        ("0o8", "0o8"),
        ("0x1F", 31),
        ("-0x1_F", -31),
        ("0x_1F", "0x_1F"),
        ("0b101", 5),
        ("0b2", "0b2"),
        ("18446744073709551615", 18446744073709551615),
        ("18446744073709551616", 1.8446744073709552e19),
        ("-9223372036854775809", -9.223372036854776e18),
        ("0xFFFFFFFFFFFFFFFFF", "0xFFFFFFFFFFFFFFFFF"),
        ("1.", 1.0),
        ("-.5", -0.5),
        ("1e3", 1000.0),
        ("1.5E-3", 0.0015),
        ("1_0.5", "1_0.5"),
        ("1e", "1e"),
        (".e3", ".e3"),
        ("+", "+"),
        (".", "."),
        ("1..2", "1..2"),
    ],
)
def test_cassetter_plain_scalars_are_what_cassetter_reads(
    tmp_path: Path, plain: str, value: Any
) -> None:
    # The table is what cassetter 0.16 (saphyr) reads; test_..._replays_what_cassetter_replays
    # checks the samples against cassetter itself.
    text = CASSETTER_YAML.replace("text: café", f"v: {plain}", 1)
    first, _ = _converted(tmp_path, text, "cassetter.yaml")
    (read,) = json.loads(first.body).values()
    assert (read, type(read)) == (value, type(value))


@pytest.mark.parametrize("plain", [".inf", "-.Inf", ".nan", ".NaN", "1e400"])
def test_cassetter_refuses_non_finite_numbers_and_so_does_convert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plain: str
) -> None:
    text = CASSETTER_YAML.replace("text: café", f"v: {plain}", 1)
    err = _refusal(tmp_path, capsys, text)
    assert f"interaction 1: the request body holds the number {plain}" in err
    assert "cassetter refuses" in err


def test_explicit_yaml_tags_cassetter_does_not_read_as_json_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CASSETTER_YAML.replace("text: café", "day: !!timestamp 2024-01-02", 1)
    err = _refusal(tmp_path, capsys, text)
    assert "interaction 1: the request body holds a date (a YAML tag such as !!timestamp" in err


@pytest.mark.usefixtures("yaml_loader")
def test_vcrpy_yaml_is_still_read_as_vcrpy_reads_it_yaml_1_1(tmp_path: Path) -> None:
    # vcrpy loads with PyYAML's safe loader: yes is true, 12:30:45 is 45045 (sexagesimal).
    interaction = _interaction(
        {"method": "POST", "headers": {"Content-Type": ["application/json"]}, "body": None},
        {"body": {"string": "ok"}},
    )
    text = _yaml({"interactions": [interaction], "version": 1}).replace(
        "body: null", "body:\n      on: yes\n      time: 12:30:45", 1
    )
    (exchange,) = _converted(tmp_path, text)
    assert exchange.body == b'{"true": true, "time": 45045}'


@pytest.mark.parametrize("name", ["cassetter-json-bodies.yaml", "cassetter-json-bodies.toml"])
def test_cassetter_json_bodies_replay_the_bytes_cassetter_replays(
    tmp_path: Path, name: str
) -> None:
    # cassetter keeps a JSON body parsed and replays json.dumps of it, not the file's text.
    first, second = _converted(tmp_path, (SAMPLES / name).read_text(), name)
    assert first.body == (
        b'{"model": "m", "messages": [{"role": "user", "content": "Gr\\u00fc\\u00dfe"}], '
        b'"max_tokens": 5}'
    )
    assert first.response_body.startswith(b'{"id": "msg_01", "content": [{"type": "text", "text": ')
    assert b"Gr\\u00fc\\u00dfe, \\u201cworld\\u201d" in first.response_body
    # The recorded content-length is the length of the body written.
    assert ("content-length", str(len(first.response_body))) in first.response_headers
    if name.endswith(".yaml"):
        assert second.response_body == b'"{\\"hello\\": \\"world\\"}"'  # a JSON string
    else:
        assert second.response_headers == (("content-type", "text/plain"), ("content-length", "2"))


def test_a_json_body_cassetter_refuses_to_load_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = SAMPLES / "cassetter-broken-json.toml", tmp_path / "out.jsonl"
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert f"{source}: interaction 1: the request body_content of type json is not JSON" in (
        result.err
    )
    assert "cassetter refuses to load it" in result.err
    assert not target.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"a": NaN}', "NaN"),
        ('{"a": 1e400}', "1e400"),
        ('["\\ud800"]', "lone surrogate"),
        ('{"a": 1} x', "Extra data"),
    ],
)
def test_json_text_serde_json_refuses_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, problem: str
) -> None:
    text = (SAMPLES / "cassetter-broken-json.toml").read_text()
    text = text.replace('body_content = "{"', f"body_content = '{content}'")
    source = tmp_path / "c.toml"
    source.write_text(text)
    result = run(capsys, "convert", source, tmp_path / "out.jsonl")
    assert_one_line_error(result)
    assert "interaction 1: the request body_content of type json is not JSON" in result.err
    assert problem in result.err


@pytest.mark.parametrize(
    ("content", "replayed"),
    [
        ("-0", b"-0.0"),
        ("18446744073709551615", b"18446744073709551615"),
        ("18446744073709551616", b"1.8446744073709552e+19"),
        ("-9223372036854775809", b"-9.223372036854776e+18"),
        ("1E2", b"100.0"),
        ("1e-400", b"0.0"),
        ('{"a":1,"b":2,"a":3}', b'{"a": 3, "b": 2}'),
        ('"\\ud83d\\ude00"', b'"\\ud83d\\ude00"'),
    ],
)
def test_json_text_numbers_are_read_as_cassetter_reads_them(
    tmp_path: Path, content: str, replayed: bytes
) -> None:
    text = (SAMPLES / "cassetter-broken-json.toml").read_text()
    text = text.replace('body_content = "{"', f"body_content = '{content}'")
    (exchange,) = _converted(tmp_path, text, "c.toml")
    assert exchange.body == replayed


@pytest.mark.parametrize(
    "name", sorted(p.name for p in SAMPLES.glob("cassetter-*") if "broken" not in p.name)
)
def test_cassetter_samples_convert_to_what_cassetter_itself_replays(
    tmp_path: Path, name: str
) -> None:
    theirs = _cassetter_reads(SAMPLES / name)
    ours = _converted(tmp_path, (SAMPLES / name).read_text(), name)
    assert len(ours) == len(theirs)
    for exchange, interaction in zip(ours, theirs, strict=True):
        assert exchange.url == interaction["uri"]
        assert exchange.body.hex() == interaction["body"]
        assert exchange.status == interaction["status"]
        assert exchange.response_body.hex() == interaction["response_body"]
        sent = {(n, v) for n, values in interaction["headers"].items() for v in values}
        assert set(exchange.headers) == sent


@pytest.mark.usefixtures("yaml_loader")
def test_the_format_is_decided_from_the_whole_file_not_one_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An aiohttp json= body {type: tweets} is not cassetter's typed body: the responses say vcrpy.
    source = SAMPLES / "vcr-aiohttp-typed-body.yaml"
    result = convert_file(source, tmp_path / "out.jsonl")
    assert result.kind == "vcrpy"
    (exchange,) = result.exchanges
    assert exchange.body == b'{"type": "tweets"}'
    assert exchange.response_body == b'{"data": []}'
    assert "looks like a vcrpy cassette" in run(capsys, "lint", source).out


@pytest.mark.parametrize(
    ("typed", "sent"),
    [
        ("type: text\n      content: hi", {"type": "text", "content": "hi"}),
        ("type: none", {"type": "none"}),
    ],
)
def test_a_vcrpy_request_body_shaped_like_cassetters_is_still_vcrpys(
    tmp_path: Path, typed: str, sent: dict[str, str]
) -> None:
    text = (SAMPLES / "vcr-aiohttp-typed-body.yaml").read_text()
    (exchange,) = _converted(tmp_path, text.replace("      type: tweets", f"      {typed}"))
    assert json.loads(exchange.body) == sent


def test_a_file_mixing_both_formats_is_refused_naming_an_interaction_of_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vcrpy = yaml.safe_load((SAMPLES / "vcr-aiohttp-typed-body.yaml").read_text())
    cassetter = yaml.safe_load(CASSETTER_YAML)
    mixed = {"version": 1, "interactions": [*cassetter["interactions"], *vcrpy["interactions"]]}
    err = _refusal(tmp_path, capsys, mixed)
    assert "interactions 1 and 3 are written in two formats" in err
    assert "interaction 1 as cassetter writes it (recorded_at" in err
    assert "interaction 3 as vcrpy writes it (a response body with 'string'" in err


def test_a_uri_without_a_scheme_is_refused_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = SAMPLES / "vcr-schemeless-uri.yaml", tmp_path / "out.jsonl"
    result = run(capsys, "convert", source, target)
    assert_one_line_error(result)
    assert f"{source}: interaction 1: the uri 'api.example.'... (66 chars) has no scheme " in (
        result.err
    )
    assert "has no scheme (http:// or https://), so where the request went cannot be told" in (
        result.err
    )
    assert "verification" not in result.err
    assert not target.exists()


@pytest.mark.parametrize("uri", ["ftp://files.example.test/a", "https:///no-host"])
def test_a_uri_that_is_not_http_is_refused_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], uri: str
) -> None:
    text = (SAMPLES / "vcr-schemeless-uri.yaml").read_text()
    text = text.replace("api.example.test/upload/storage/v1/b/bucket/o?uploadType=multipart", uri)
    err = _refusal(tmp_path, capsys, text)
    assert f"interaction 1: the uri '{uri}' " in err
    assert "not an http:// or https:// URL with a host" in err or "has no scheme" in err


def test_a_failed_verification_names_the_file_the_interaction_and_what_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Break the recording engine on purpose: the written URL is not the one sent.
    from sakura_http import _age  # (the session writes the line `Dating.stamp` encodes)

    real = _age.encode_exchange

    def moved(exchange: Exchange) -> bytes:
        return real(replace(exchange, url=exchange.url + "-moved"))

    monkeypatch.setattr(_age, "encode_exchange", moved)
    err = _refusal(tmp_path, capsys, VCR_YAML)
    source = tmp_path / "vcr.yaml"
    assert err.startswith(
        f"sakura-http convert: error: {source}: interaction 1: verification failed: the "
        "converted exchange does not answer the request it was converted from: url: request "
        "https://api.example.test/v1/invoices, recorded https://api.example.test/v1/invoices-moved"
    )
    assert "sakura-convert" not in err  # no temporary path
    assert "record" not in err.replace("recorded", "")  # no recording advice


def test_a_secret_echoed_in_the_url_path_converts_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vcrpy's httpbin basic-auth cassette: GET .../basic-auth/user/passwd with the Basic
    # credential of user:passwd. The echo is redacted in the URL, as recording redacts it.
    import httpx

    from sakura_http import RecordingTransport

    source, target = SAMPLES / "vcr-basic-auth.yaml", tmp_path / "out.jsonl"
    result = run(capsys, "convert", source, target)
    assert result.code == 0, result.err
    (exchange,) = load_cassette(target).exchanges
    assert exchange.url == "https://httpbin.example.test/basic-auth/user/%3Credacted%3E"
    assert b"passwd" not in target.read_bytes()
    transport = RecordingTransport(target, secret_headers=["authorization"])
    with httpx.Client(transport=transport) as client:
        response = client.get(
            "https://httpbin.example.test/basic-auth/user/passwd",
            headers={"authorization": "Basic dXNlcjpwYXNzd2Q="},
        )
    assert response.json() == {"authenticated": True, "user": "user"}


def test_placeholders_in_the_request_are_not_secrets_searched_for_in_responses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # cookie: __cf_bm=REDACTED made every REDACTED of the responses <redacted> (REDACTED-RAY).
    source, target = SAMPLES / "vcr-placeholder-cookie.yaml", tmp_path / "out.jsonl"
    result = run(capsys, "convert", source, target)
    assert result.code == 0, result.err
    assert "echoed credentials" not in result.out
    (exchange,) = load_cassette(target).exchanges
    assert exchange.response_body == (
        b'{"id": "chatcmpl-REDACTED", "system_fingerprint": "fp_FILTERED", "choices": []}'
    )
    assert exchange.response_headers == (
        ("cf-ray", "REDACTED-RAY"),
        ("content-type", "application/json"),
        ("x-request-id", "req_REDACTED"),
        ("set-cookie", "<redacted>"),
    )
    assert {name for name, _ in exchange.headers} == {"content-type"}  # credentials dropped
