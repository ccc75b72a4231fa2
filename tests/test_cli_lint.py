"""`sakura-http lint`: errors, warnings with masked excerpts, --strict, --json, exit codes.

Every secret in this file is a fake made for the test (they all say "fake" or "test")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sakura_http._format import Exchange, FaultInfo, encode_exchange, encode_header
from sakura_http._policy import DEFAULT_MAX_BODY_BYTES
from sakura_http.cli._lint import find_secrets, lint_bytes, mask
from tests.cli_support import (
    assert_one_line_error,
    cassette_bytes,
    items,
    message,
    outage,
    run,
    write_cassette,
)

FAKE_SECRETS = {
    "an Anthropic API key": "sk-ant-fake-test-000000000000000000000",
    "an API secret key (sk-...)": "sk-faketest0000000000000000",
    "an AWS access key id": "AKIAFAKETEST00000000",
    "a GitHub token": "ghp_faketest00000000000000000000000000",
    "a Slack token": "xoxb-fake-test-0000000000",
    # header {"alg":"none"}, payload {"sub":"fake-test"}, and a fake signature
    "a JSON Web Token": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmYWtlLXRlc3QifQ.fake-test-signature",
    "a private key block": "-----BEGIN FAKE TEST PRIVATE KEY-----",
}


def test_a_clean_cassette_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(), message(), outage()])
    result = run(capsys, "lint", "--strict", path)
    assert (result.code, result.out, result.err) == (
        0,
        "1 file checked: 0 errors, 0 warnings\n",
        "",
    )


def test_empty_and_header_only_cassettes_are_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "header.jsonl").write_bytes(encode_header())
    result = run(capsys, "lint", tmp_path / "empty.jsonl", tmp_path / "header.jsonl")
    assert (result.code, result.out) == (0, "2 files checked: 0 errors, 0 warnings\n")


def test_every_bad_line_is_reported_not_only_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        encode_header()
        + b"{not json\n"
        + encode_exchange(items())
        + b'{"method":"GET","url":"https://api.example.test/"}\n'
        + b'{"method":"GET","url":"https://api.example.test/","headers":[],"body":"",'
        + b'"status":"ok","response_headers":[],"response_body":""}\n'
        + b'{"method":"GET"'
    )
    result = run(capsys, "lint", path)
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[0].startswith(f"{path}:2: error: not valid JSON")
    assert lines[0].endswith("[format]")
    assert lines[1].startswith(f"{path}:4: error: missing field 'status'")
    assert lines[2].startswith(f"{path}:5: error: field 'status' must be an HTTP status code")
    assert lines[3].startswith(f"{path}:6: error: the last line is incomplete")
    assert lines[3].endswith("[torn-line]")
    assert lines[4] == "1 file checked: 4 errors, 0 warnings"


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (b'{"schema_version":"2.0","kind":"cassette"}', "schema_version '2.0' is not supported"),
        (
            b'{"kind":"cassette"}',
            "this is not a sakura-http cassette: its first line is not a cassette header "
            "(a JSON object with a schema_version)",
        ),
        (
            b"[1, 2",
            "this is not a sakura-http cassette: its first line is not JSON, so it is not a "
            "cassette header",
        ),
    ],
)
def test_a_bad_header_is_one_error_that_stops_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: bytes, problem: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(header + b"\n" + encode_exchange(items()) + b"{broken\n")
    result = run(capsys, "lint", path)
    assert result.code == 1
    assert result.out.splitlines()[0].startswith(f"{path}:1: error: {problem}")
    assert result.out.splitlines()[0].endswith("[header]")
    assert result.out.splitlines()[1] == "1 file checked: 1 error, 0 warnings"
    if "not a sakura-http cassette" in problem:
        # Re-recording would overwrite a file that holds something else: never advised.
        assert "record" not in result.out


def test_duplicate_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(), message(), items()])
    out = run(capsys, "lint", path).out
    assert out.splitlines()[0] == (
        f"{path}:4: error: id 'list-items' is already used by line 2; ids must be unique within "
        "a cassette: rename or delete one of them [duplicate-id]"
    )


@pytest.mark.parametrize(
    "name",
    ["authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token", "cookie"],
)
def test_credential_request_headers_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    secret = "fake-test-credential-0000000000"
    path = write_cassette(tmp_path / "c.jsonl", [items(headers=((name, secret),))])
    result = run(capsys, "lint", path)
    assert result.code == 1
    line = result.out.splitlines()[0]
    assert line.startswith(f"{path}:2: error: request header {name} is recorded (fake-te...")
    assert f'secret_headers=["{name}"]' in line
    assert secret not in result.out
    assert result.out.endswith("1 error, 0 warnings\n")  # the value is not reported twice


def test_an_unredacted_set_cookie_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(
        tmp_path / "c.jsonl",
        [
            items(response_headers=(("set-cookie", "<redacted>"),)),
            items(id="b", response_headers=(("set-cookie", "session=fake-test-cookie-value"),)),
        ],
    )
    result = run(capsys, "lint", path)
    assert result.code == 1
    assert result.out.splitlines() == [
        f"{path}:3: error: response header set-cookie is not redacted (session...(30 chars)): "
        'replace its value with "<redacted>", as recording does [set-cookie]',
        "1 file checked: 1 error, 0 warnings",
    ]


def test_a_body_over_16_mib_is_an_error(tmp_path: Path) -> None:
    big = b"x" * (DEFAULT_MAX_BODY_BYTES + 1)
    at_limit = b"x" * DEFAULT_MAX_BODY_BYTES
    data = cassette_bytes([items(response_body=at_limit), message(body=big, response_body=b"")])
    data = data.replace(b'"chunks":[9,9]', b'"chunks":[0]')
    findings = lint_bytes(data, "big.jsonl")
    assert [(f.line, f.check, f.field) for f in findings] == [(3, "body-size", "body")]
    assert "16,777,217 bytes, over the 16 MiB limit (16,777,216 bytes)" in findings[0].message


@pytest.mark.parametrize(("shape", "secret"), list(FAKE_SECRETS.items()))
def test_credential_shapes_are_warnings_with_a_masked_excerpt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str, secret: str
) -> None:
    path = write_cassette(
        tmp_path / "c.jsonl",
        [items(response_body=f'{{"key": "{secret}"}}'.encode())],
    )
    result = run(capsys, "lint", path)
    assert result.code == 0  # warnings alone pass...
    assert result.out.splitlines() == [
        f"{path}:2: warning: response_body contains what looks like {shape} ({mask(secret)}); "
        "if it is real, rotate it and re-record with the credential in secret_headers [secret]",
        "1 file checked: 0 errors, 1 warning",
    ]
    assert secret not in result.out
    assert run(capsys, "lint", "--strict", path).code == 1  # ...unless --strict


@pytest.mark.parametrize(
    ("exchange", "field"),
    [
        (items(url="https://api.example.test/v1/items?key=sk-ant-fake-test-00000000000000"), "url"),
        (items(headers=(("x-debug", "Bearer fake-test-token-000000"),)), "headers.x-debug"),
        (
            items(response_headers=(("x-echo", "xoxp-fake-test-0000000000"),)),
            "response_headers.x-echo",
        ),
        (message(body=b'{"token":"ghp_faketest00000000000000000000000000"}'), "body"),
        (outage(), None),
    ],
)
def test_warnings_name_the_field(exchange: Exchange, field: str | None) -> None:
    findings = lint_bytes(cassette_bytes([exchange]), "c.jsonl")
    assert [f.field for f in findings] == ([field] if field else [])


def test_an_error_message_is_scanned_too() -> None:
    exchange = Exchange(
        method="GET",
        url="https://api.example.test/",
        status=None,
        error=FaultInfo("ConnectError", "refused for AKIAFAKETEST00000000"),
    )
    findings = lint_bytes(cassette_bytes([exchange]), "c.jsonl")
    assert [(f.field, f.severity) for f in findings] == [("error.message", "warning")]


@pytest.mark.parametrize(
    "text",
    [
        "task-runner-000000000000000000",  # "sk-" inside a word
        'Bearer realm="api.example.test"',  # a challenge, not a token
        "Bearer <redacted>",
        "ghp_short",
        "AKIAFAKETEST0000000000000",  # too long for an access key id
        "the word bearer and the word basic in prose",
        "Basic Authentication required",
        "Bearer authenticationisrequired",
    ],
)
def test_ordinary_text_is_not_taken_for_a_secret(text: str) -> None:
    assert list(find_secrets(text)) == []


@pytest.mark.parametrize(
    ("text", "shape", "secret"),
    [
        (
            "Authorization: Bearer fake-test-token-000000",
            "a bearer token",
            "fake-test-token-000000",
        ),
        (
            '{"auth": "Basic ZmFrZTp0ZXN0LXBhc3M="}',
            "basic auth credentials",
            "ZmFrZTp0ZXN0LXBhc3M=",
        ),
    ],
)
def test_bearer_and_basic_credentials(text: str, shape: str, secret: str) -> None:
    assert [(s.name, v) for s, v in find_secrets(text)] == [(shape, secret)]


def test_a_value_is_reported_once_by_the_first_shape_that_covers_it() -> None:
    jwt = FAKE_SECRETS["a JSON Web Token"]
    found = [(shape.name, value) for shape, value in find_secrets(f"Authorization: Bearer {jwt}")]
    assert found == [("a JSON Web Token", jwt)]
    found = [(s.name, v) for s, v in find_secrets("sk-ant-fake-test-000000000000000000000")]
    assert found == [("an Anthropic API key", "sk-ant-fake-test-000000000000000000000")]


def test_mask_never_shows_more_than_a_quarter() -> None:
    assert mask("sk-ant-fake-test-000000000000000000000") == "sk-ant-f...(38 chars)"
    assert mask("short") == "s...(5 chars)"
    assert mask("abc") == "...(3 chars)"


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_cassette(
        tmp_path / "c.jsonl",
        [items(response_body=b'{"k":"sk-ant-fake-test-000000000000000000000"}'), items()],
    )
    result = run(capsys, "lint", "--json", path)
    assert result.code == 1
    assert json.loads(result.out) == {
        "files": [str(path)],
        "errors": 1,
        "warnings": 1,
        "findings": [
            {
                "path": str(path),
                "line": 2,
                "severity": "warning",
                "check": "secret",
                "field": "response_body",
                "message": "response_body contains what looks like an Anthropic API key "
                "(sk-ant-f...(38 chars)); if it is real, rotate it and re-record with the "
                "credential in secret_headers",
                "excerpt": "sk-ant-f...(38 chars)",
                "count": 1,
                "lines": [2],
            },
            {
                "path": str(path),
                "line": 3,
                "severity": "error",
                "check": "duplicate-id",
                "field": "id",
                "message": "id 'list-items' is already used by line 2; ids must be unique "
                "within a cassette: rename or delete one of them",
                "excerpt": None,
                "count": 1,
                "lines": [3],
            },
        ],
        "unreadable": [],
    }


def test_unreadable_files_exit_2_after_the_others_are_linted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_cassette(tmp_path / "good.jsonl", [items()])
    result = run(capsys, "lint", good, tmp_path / "missing.jsonl")
    assert_one_line_error(result)
    assert (
        result.err
        == f"sakura-http lint: error: {tmp_path / 'missing.jsonl'}: cannot read it (no such file)\n"
    )
    assert result.out == "1 file checked: 0 errors, 0 warnings\n"

    result = run(capsys, "lint", "--json", tmp_path)
    assert result.code == 2
    assert json.loads(result.out)["unreadable"] == [
        {"path": str(tmp_path), "reason": "cannot read it (Is a directory)"}
    ]


# --- foreign cassettes and credential shapes ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        (
            "vcr.yaml",
            "interactions:\n- request:\n    body: null\n    method: GET\n    uri: "
            "https://api.example.test/\n  response:\n    body:\n      string: ''\n    status:\n"
            "      code: 200\nversion: 1\n",
            "vcrpy",
        ),
        ("vcr.json", '{"interactions": [], "version": 1}', "vcrpy"),
        ("vcr-pretty.json", '{\n    "interactions": [],\n    "version": 1\n}\n', "vcrpy"),
        (
            "cassetter.yaml",
            "version: 1\ninteractions:\n- request:\n    method: GET\n    uri: "
            "https://api.example.test/\n    body:\n      type: none\n  response:\n"
            "    status: 200\n    body:\n      type: none\n",
            "cassetter",
        ),
        (
            "cassetter.toml",
            'version = 1\n\n[[interactions]]\n\n[interactions.request]\nmethod = "GET"\n',
            "cassetter",
        ),
    ],
)
def test_foreign_cassettes_get_the_advice_to_convert_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, kind: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = run(capsys, "lint", path)
    assert result.code == 1
    assert result.out.splitlines() == [
        f"{path}: error: this looks like a {kind} cassette, which sakura-http cannot replay as it "
        f"is; import it with `sakura-http convert {path} OUT.jsonl` [foreign]",
        "1 file checked: 1 error, 0 warnings",
    ]
    assert "pytest --record-all" not in result.out


CREDENTIAL_SHAPES = {
    "a Google API key": "AIzaFakeTest000000000000000000000000000",
    "a GitLab token": "glpat-faketest0000000000000",
    "a GitHub token": "github_pat_faketest000000000000000000",
    "a Stripe key": "sk_test_faketest00000000000000",
    "a Hugging Face token": "hf_faketest0000000000000000000000000",
    "a Slack token": "xoxe-fake-test-0000000000",
    "a Google OAuth access token": "ya29.FakeTest0000000000000000000000",
    "a Groq API key": "gsk_FakeTest00000000000000000000000000000000000000",
    "an xAI API key": "xai-FakeTest00000000000000000000000000000000000000",
    "a Perplexity API key": "pplx-FakeTest00000000000000000000000000000000000000",
    "a Replicate token": "r8_FakeTest0000000000000000000000000000",
}


@pytest.mark.parametrize(("shape", "secret"), sorted(CREDENTIAL_SHAPES.items()))
def test_more_provider_token_prefixes_are_found(shape: str, secret: str) -> None:
    assert [(found.name, value) for found, value in find_secrets(f"x {secret} y")] == [
        (shape, secret)
    ]


def _lint_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], exchange: Exchange
) -> tuple[int, str]:
    path = write_cassette(tmp_path / "c.jsonl", [exchange])
    result = run(capsys, "lint", "--json", path)
    return result.code, result.out


def test_url_userinfo_is_an_error_and_is_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exchange = items(url="https://alice:fake-test-hunter2@api.example.test/v1/items")
    code, out = _lint_one(tmp_path, capsys, exchange)
    assert code == 1
    assert "fake-test-hunter2" not in out
    (finding,) = json.loads(out)["findings"]
    assert (finding["check"], finding["field"], finding["severity"]) == (
        "url-credentials",
        "url",
        "error",
    )
    assert finding["excerpt"] == "alice...(23 chars)"


@pytest.mark.parametrize(
    "query", ["key", "api_key", "apikey", "access_token", "token", "client_secret", "sig"]
)
def test_credential_query_parameters_are_found_unless_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    leaked = items(url=f"https://api.example.test/v1/items?page=2&{query}=fake-test-value-9")
    code, out = _lint_one(tmp_path, capsys, leaked)
    assert code == 0  # a warning: fails only with --strict
    assert "fake-test-value-9" not in out
    (finding,) = json.loads(out)["findings"]
    assert finding["field"] == "url"
    assert "a credential query parameter" in finding["message"]
    for redacted in ("<redacted>", "%3Credacted%3E"):
        clean = items(url=f"https://api.example.test/v1/items?{query}={redacted}&page=2")
        assert json.loads(_lint_one(tmp_path, capsys, clean)[1])["findings"] == []


@pytest.mark.parametrize(
    "body",
    [
        b"grant_type=client_credentials&client_secret=fake-test-secret-1",
        b"api_key=fake-test-secret-1&q=tea",
        b'{"model": "m", "api_key": "fake-test-secret-1"}',
    ],
)
def test_credential_body_fields_are_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes
) -> None:
    code, out = _lint_one(tmp_path, capsys, message(body=body, chunks=None))
    assert code == 0
    assert "fake-test-secret-1" not in out
    (finding,) = json.loads(out)["findings"]
    assert (finding["field"], finding["check"]) == ("body", "secret")
    assert "looks like a credential" in finding["message"]
    assert finding["excerpt"] == "fake...(18 chars)"
    clean = message(body=b'{"api_key": "<redacted>"}', chunks=None)
    assert json.loads(_lint_one(tmp_path, capsys, clean)[1])["findings"] == []


def test_credential_headers_are_whatever_recording_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lint keeps no list of its own: widen the recording rules and lint follows.
    from sakura_http import _credentials

    exchange = items(headers=(("x-tenant-region", "fake-test-region-eu"),))
    assert json.loads(_lint_one(tmp_path, capsys, exchange)[1])["findings"] == []
    monkeypatch.setattr(
        _credentials,
        "CREDENTIAL_HEADERS",
        _credentials.CREDENTIAL_HEADERS | {"x-tenant-region"},
    )
    # The rule remembers its answer for each name it has seen: forget them, before and after.
    _credentials._credential_by_name.cache_clear()
    try:
        code, out = _lint_one(tmp_path, capsys, exchange)
    finally:
        _credentials._credential_by_name.cache_clear()
    assert code == 1
    (finding,) = json.loads(out)["findings"]
    assert (finding["check"], finding["field"]) == ("credential-header", "headers.x-tenant-region")
    assert "fake-test-region-eu" not in out


def test_personal_data_and_random_tokens_are_warnings_naming_the_scrub(tmp_path: Path) -> None:
    token = "sess_9aZ8bY7cX6dW5eV4fU3gT2hS1iR0jQpOnM"
    exchange = Exchange(
        "POST",
        "https://crm.example.test/v1/customers",
        headers=(("content-type", "application/json"),),
        body=b'{"customer": {"email": "ada.lovelace@mail.example"}}',
        response_headers=(("content-type", "text/plain"),),
        response_body=f"welcome back, your session is {token}".encode(),
    )
    findings = [f for f in lint_bytes(cassette_bytes([exchange]), "c.jsonl") if f.check == "scrub"]
    assert [(f.severity, f.field) for f in findings] == [
        ("warning", "body"),
        ("warning", "response_body"),
    ]
    assert 'Rules(scrub=[Scrub.json("customer.email")])' in findings[0].message
    assert "ada.lovelace@mail.example" not in str(findings[0])
    assert token not in str(findings[1])
    assert "Scrub.regex(" in findings[1].message
    # Scrubbed placeholders and ordinary words are not flagged.
    clean = Exchange(
        "GET",
        "https://crm.example.test/v1/customers?email=<email>",
        response_body=b"the quick brown fox jumps over the lazy dog <scrubbed>",
    )
    assert [f for f in lint_bytes(cassette_bytes([clean]), "c.jsonl") if f.check == "scrub"] == []


# --- precise enough to keep strict (issue 24 item 13) -----------------------------------------


PLACEHOLDER_CASES = {
    "query key": items(url="https://api.example.test/v1/items?key=REDACTED"),
    "query api_key": items(url="https://api.example.test/v1/items?api_key=FILTERED&page=2"),
    "query token": items(url="https://api.example.test/v1/items?token=YOUR_API_KEY"),
    "json field": message(body=b'{"api_key": "test_api_key"}', chunks=None),
    "json client_secret": message(body=b'{"client_secret": "scrubbed"}', chunks=None),
    "code in a prompt": message(
        body=b"import os\napi_key=os.environ['X_API_KEY']\n", headers=(), chunks=None
    ),
    "bearer header": items(headers=(("authorization", "Bearer REDACTED"),)),
    "api key header": items(headers=(("x-api-key", "YOUR_API_KEY"),)),
    "cookie header": items(headers=(("cookie", "__cf_bm=REDACTED; _cfuvid=FILTERED"),)),
    "set-cookie": items(response_headers=(("set-cookie", "session=REDACTED; Path=/; HttpOnly"),)),
    "echoed bearer": items(response_body=b'{"echo": "Authorization: Bearer <API_KEY>"}'),
}


@pytest.mark.parametrize("case", sorted(PLACEHOLDER_CASES))
def test_placeholders_other_tools_wrote_are_not_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [PLACEHOLDER_CASES[case]])
    result = run(capsys, "lint", "--strict", path)
    assert (result.code, result.out) == (0, "1 file checked: 0 errors, 0 warnings\n")


def test_a_real_value_beside_a_placeholder_is_still_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cookie = items(headers=(("cookie", "__cf_bm=REDACTED; session=fake-test-session-0000"),))
    query = items(
        id="q", url="https://api.example.test/v1/items?key=REDACTED&token=fake-test-value-9"
    )
    findings = lint_bytes(cassette_bytes([cookie, query]), "c.jsonl")
    assert [(f.line, f.check, f.field) for f in findings] == [
        (2, "credential-header", "headers.cookie"),
        (3, "secret", "url"),
    ]


@pytest.mark.parametrize(
    "url",
    [
        # A GCS V4 signed URL (made-up values): both parameters are credentials.
        "https://storage.example.test/bucket/object?X-Goog-Algorithm=GOOG4-RSA-SHA256"
        "&X-Goog-Credential=svc%40proj.iam.example.test%2F20260101%2Fauto%2Fstorage%2Fgoog4_request"
        "&X-Goog-Date=20260101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host"
        "&X-Goog-Signature=0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071",
        # And the AWS form of the same.
        "https://bucket.s3.example.test/object?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=FAKETESTCREDENTIAL%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071",
    ],
)
def test_signed_urls_are_found(url: str) -> None:
    findings = lint_bytes(cassette_bytes([items(url=url)]), "c.jsonl")
    messages = [f.message for f in findings if f.check == "secret"]
    assert len(messages) == 1, messages
    assert "a credential query parameter" in messages[0]
    assert "2 such values, on 1 line (2)" in messages[0]
    assert "0a1b2c3d4e5f" not in messages[0]
    # In a response body too: an API handing out an upload URL.
    body = f'{{"upload_url": "{url}"}}'.encode()
    findings = lint_bytes(cassette_bytes([items(response_body=body)]), "c.jsonl")
    assert [(f.check, f.field) for f in findings] == [("secret", "response_body")]


def _embedding_b64(count: int) -> str:
    import base64
    import struct

    floats = [((i * 7919) % 2000 - 1000) / 1000 for i in range(count)]
    return base64.b64encode(struct.pack(f"<{count}f", *floats)).decode()


def test_no_scrub_warning_for_base64_payloads_uuids_and_placeholders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    embedding = _embedding_b64(1536)
    image = _embedding_b64(3000)
    body = {
        "data": [{"embedding": embedding, "index": 0}],
        "image": f"data:image/png;base64,{image}",
        "id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "trace": "chatcmpl-7c9e6679742540de944be07fc1f90ae7",
        "request": "req_7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "user": "REDACTED_USER_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    }
    exchange = items(id=None, response_body=json.dumps(body).encode())
    path = write_cassette(tmp_path / "c.jsonl", [exchange, exchange])
    result = run(capsys, "lint", "--strict", path)
    assert (result.code, result.out) == (0, "1 file checked: 0 errors, 0 warnings\n")


def test_warnings_are_grouped_per_field_path_with_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def session(n: int) -> Exchange:
        token = f"sess_{n:02d}aZ8bY7cX6dW5eV4fU3gT2hS1iR0jQpOnM"
        body = {"session": {"token": token, "user": f"user{n}@mail.example"}, "n": n}
        return items(id=f"s{n}", response_body=json.dumps(body).encode())

    path = write_cassette(tmp_path / "c.jsonl", [session(n) for n in range(30)])
    result = run(capsys, "lint", path)
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines == [
        f"{path}:2: warning: response_body contains what looks like a long random token "
        "(sess_00a...(40 chars)); 30 such values at session.token, on 30 lines (2, 3, 4, 5, "
        "6, ...); to keep such values out of the cassette, re-record with "
        'Rules(scrub=[Scrub.json("session.token")]) [scrub]',
        f"{path}:2: warning: response_body contains what looks like an e-mail address "
        "(user...(18 chars)); 30 such values at session.user, on 30 lines (2, 3, 4, 5, 6, "
        "...); to keep such values out of the cassette, re-record with "
        'Rules(scrub=[Scrub.json("session.user")]) [scrub]',
        "1 file checked: 0 errors, 2 warnings",
    ]
    data = json.loads(run(capsys, "lint", "--json", path).out)
    first = data["findings"][0]
    assert (first["count"], first["lines"]) == (30, list(range(2, 32)))
    assert data["warnings"] == 2


def test_a_grouped_warning_names_a_scrub_that_covers_every_value(tmp_path: Path) -> None:
    """A warning standing for many values suggests what keeps them all out: the query
    parameter or response header they are in, a token's fixed prefix, never a pattern made
    from the first value's random characters, which would scrub that one value only."""

    def visit(n: int) -> Exchange:
        token = f"{n:02d}aZ8bY7cX6dW5eV4fU3gT2hS1iR0jQpOnMkL"
        return items(
            id=f"v{n}",
            url=f"https://api.example.test/v1/items?page=2&session={token}",
            response_headers=(("content-type", "text/plain"), ("x-upstream-trace", token)),
            response_body=f"your session is sess_{token}".encode(),
        )

    findings = lint_bytes(cassette_bytes([visit(n) for n in range(3)]), "c.jsonl")
    advice = {f.field: (f.count, f.message) for f in findings if f.check == "scrub"}
    assert advice["url"][0] == 3
    assert 'Rules(scrub=[Scrub.query("session")])' in advice["url"][1]
    assert advice["response_headers.x-upstream-trace"][0] == 3
    assert (
        'Scrub.response_header("x-upstream-trace")'
        in advice["response_headers.x-upstream-trace"][1]
    )
    assert advice["response_body"][0] == 3
    assert 'Scrub.regex(r"sess_[A-Za-z0-9_-]+")' in advice["response_body"][1]


def test_a_credential_query_parameter_is_not_advised_into_secret_headers() -> None:
    """Recording writes a secret query parameter's value as <redacted>: the advice says to
    re-record, not to declare a header (there is none)."""
    leaked = items(url="https://api.example.test/v1/items?page=2&api_key=fake-test-value-9")
    (finding,) = [f for f in lint_bytes(cassette_bytes([leaked]), "c.jsonl") if f.field == "url"]
    assert "secret_headers" not in finding.message
    assert "secret_query_params" in finding.message
    echoed = items(response_body=b'{"path": "/v1/items?api_key=fake-test-value-9"}')
    (finding,) = [f for f in lint_bytes(cassette_bytes([echoed]), "c.jsonl") if f.check == "secret"]
    assert "secret_headers" not in finding.message
    assert "where the server echoes the request's URL" in finding.message


def test_a_token_in_a_redirect_location_query_is_advised_scrub_query() -> None:
    """Scrub.response_header("location") writes a placeholder the client follows to a URL never
    recorded (the replay misses); Scrub.query(name) scrubs the location's parameter and the
    next hop's URL alike, so the redirect replays."""
    token = "Zq8Kd0x7Pw3Lm9Vb2Nc5Rt6Yh1Gf4Js8Ua0Ie"
    location = f"https://cb.example.test/cb?sid={token}&x=1"
    redirect = items(status=302, response_headers=(("location", location),), response_body=b"")
    findings = lint_bytes(cassette_bytes([redirect]), "c.jsonl")
    [advice] = [f.message for f in findings if f.check == "scrub"]
    assert 'Rules(scrub=[Scrub.query("sid")])' in advice
    assert 'Scrub.response_header("location")' not in advice


@pytest.mark.parametrize(
    "body",
    [
        b'{"user": {"": "ada.lovelace@mail.example"}}',  # an empty key: no path spells it
        b'{"user": {"e\\"mail": "ada.lovelace@mail.example"}}',  # a quote in the key
        b'{"user": {"e\\\\mail": "ada.lovelace@mail.example"}}',  # a backslash in the key
    ],
)
def test_the_suggested_scrub_is_python_the_engine_accepts(body: bytes) -> None:
    """The advice is meant to be pasted: whatever the JSON keys, it is a Python expression
    that builds the Rules it names (a key with a quote in it stays inside its string; a path
    the engine cannot spell is not suggested)."""
    import re

    import sakura_http

    exchange = items(response_headers=(("content-type", "application/json"),), response_body=body)
    [advice] = [
        f.message for f in lint_bytes(cassette_bytes([exchange]), "c.jsonl") if f.check == "scrub"
    ]
    suggested = re.search(r"Rules\(scrub=\[.*\]\)", advice)
    assert suggested is not None, advice
    namespace = {"sakura_http": sakura_http, **vars(sakura_http)}
    assert isinstance(eval(suggested.group(), namespace), sakura_http.Rules)
