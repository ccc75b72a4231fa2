"""`lint`, `show`, `diff`, `repair` (and `convert`) never print a traceback, whatever bytes
they are given: they exit 0, 1 or 2 with a message (a property test over random and half-valid
files); and neither they nor the loader ever print a credential (a property test over cassettes
with random secrets in every place a credential sits, well-formed and broken)."""

from __future__ import annotations

import contextlib
import io
import os
import string
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sakura_http import CassetteFormatError
from sakura_http._config import DEFAULT_SECRET_QUERY_PARAMS
from sakura_http._format import encode_exchange, encode_header, parse_cassette
from sakura_http._policy import SHOWN_CHARS, SHOWN_HEAD
from sakura_http.cli import main
from tests.cli_support import items, message, outage, run, write_cassette

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"

_VALID_LINES = [
    encode_header(),
    encode_exchange(items()),
    encode_exchange(message()),
    encode_exchange(outage()),
]

# Pieces a cassette is made of, and pieces that break it in interesting ways.
_PIECES = st.sampled_from(
    [
        *_VALID_LINES,
        b"\n",
        b"\r",
        b"\r\n",
        b" \t\n",
        b"\x00",
        b"\xff\xfe",
        b'{"schema_version":"2.0"}\n',
        b'{"schema_version":1}\n',
        b"interactions:\n- request: {}\n",
        b'{"method":"GET","url":"https://api.example.test/","headers":[],"body":"",',
        b'"status":200,"response_headers":[["content-type","multipart/form-data; '
        b'boundary=\xe2\x98\x83"]],"response_body":""}\n',
        b'{"method":"POST","url":"u","headers":[["content-type","multipart/form-data; '
        b'boundary=\xe2\x98\x83"]],"body":"--\xe2\x98\x83","status":200,'
        b'"response_headers":[],"response_body":""}\n',
        b'"chunks":[1,2],"timings_ms":[1e308,-0.0]}\n',
        b'{"method":"GET","url":"\\ud800","headers":[["a","\\u0000"]],"body_b64":"!!"}\n',
    ]
)
_FILES = st.one_of(
    st.binary(max_size=400),
    st.lists(st.one_of(_PIECES, st.binary(max_size=12)), max_size=8).map(b"".join),
)

_COMMANDS = [
    ["lint", "{a}"],
    ["lint", "--json", "--strict", "{a}", "{b}"],
    ["show", "{a}"],
    ["show", "--bodies", "{a}"],
    ["show", "--json", "{a}"],
    ["show", "--textconv", "{a}"],
    ["show", "--html", "{dir}/page.html", "{a}"],
    ["diff", "{a}", "{b}"],
    ["diff", "--json", "--verbose", "{a}", "{b}"],
    ["repair", "{a}"],
    ["convert", "--force", "{a}", "{dir}/converted.jsonl"],
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(first=_FILES, second=_FILES)
def test_no_input_makes_a_command_print_a_traceback(first: bytes, second: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for command in _COMMANDS:
            a, b = folder / "a.jsonl", folder / "b.jsonl"
            a.write_bytes(first)
            b.write_bytes(second)
            argv = [arg.format(a=a, b=b, dir=folder) for arg in command]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            assert code in (0, 1, 2), (argv, code)
            assert "Traceback" not in out.getvalue() + err.getvalue(), argv
            if code == 2:
                assert err.getvalue().strip(), argv  # a usage error always says why


# --- no command prints a credential ---------------------------------------------------------

#: A secret starts with a mark (no output holds it otherwise), then random characters: at least
#: 8 in all, the shortest secret the promise covers.
_TAILS = st.text(string.ascii_letters + string.digits + "-_", min_size=6, max_size=38)
_SECRETS = _TAILS.map(lambda tail: "Zq" + tail)
_OTHER_SECRETS = _TAILS.map(lambda tail: "Zx" + tail)  # the second cassette's
_SHAPE_WORDS = ["password", "passwd", "secret", "token", "jwt", "session", "csrf", "signature",
                "credential", "bearer", "cookie", "auth", "api-key", "apikey"]  # fmt: skip
_CREDENTIAL_NAMES = st.one_of(
    st.sampled_from(
        ["authorization", "proxy-authorization", "x-api-key", "cookie", "x-goog-api-key",
         "ocp-apim-subscription-key", "x-password", "x-session-id", "cookie2", "x-pat",
         "x-hub-signature-256", "private-token", "x-custom-key"]
    ),
    st.builds(
        lambda a, word, b: a + word + b,
        st.sampled_from(["", "x-", "my_", "X-Acme-"]),
        st.sampled_from(_SHAPE_WORDS),
        st.sampled_from(["", "-id", "_value", "-2", "s"]),
    ),
)  # fmt: skip
_QUERY_NAMES = st.one_of(
    st.sampled_from(sorted(DEFAULT_SECRET_QUERY_PARAMS)),
    st.sampled_from(["password", "x_token", "session_id", "client_secret", "jwt", "Api_Key"]),
)
_VALUE_FORMS = st.sampled_from(["{}", "Bearer {}", "session={}; theme=dark", "Basic {}"])


@st.composite
def _secret_line(draw: st.DrawFn, secret: str) -> dict[str, Any]:
    """An exchange line with `secret` in every place a credential sits: a credential request
    header, a cookie the server set, a secret query parameter, the URL's userinfo."""
    name = draw(_CREDENTIAL_NAMES)
    value = draw(_VALUE_FORMS).format(secret)
    query = draw(_QUERY_NAMES)
    userinfo = draw(st.sampled_from(["", f"user:{secret}@", f"{secret}@"]))
    return {
        "method": "GET",
        "url": f"https://{userinfo}api.example.test/v1/items?page=2&{query}={secret}&q=x",
        "headers": [["accept", "*/*"], [name, value]],
        "body": "",
        "status": 200,
        "response_headers": [
            ["content-type", "text/plain"],
            [draw(st.sampled_from(["set-cookie", "set-cookie2"])), f"sid={secret}; Path=/"],
        ],
        "response_body": "ok",
    }


def _pad(secret: str) -> str:
    """A value long enough to be elided, `secret` past the part a message shows."""
    return "v" * SHOWN_HEAD + secret + "w" * SHOWN_CHARS


def _breakages(secret: str) -> list[Any]:
    """Ways to break a line so that an error message points at a value holding `secret`: each
    a function of the line (a dict) returning the broken line (a dict, or bytes).  The last
    `_LONG_VALUES` put it in a long value of no credential's place, which messages elide but
    `show --textconv` of an unreadable file prints as git would (its lines, credentials hidden).
    """

    def header(item: Any) -> Any:
        return lambda line: {**line, "headers": [*line["headers"][:1], item]}

    def field(key: str, value: Any) -> Any:
        return lambda line: {**line, key: value}

    def credential(line: dict[str, Any]) -> tuple[str, str]:
        name, value = line["headers"][1]
        return name, value

    return [
        lambda line: line,  # well-formed
        lambda line: header([*credential(line), "extra"])(line),
        lambda line: header([credential(line)[0], 7, credential(line)[1]])(line),
        lambda line: header([credential(line)[0], [credential(line)[1]]])(line),
        lambda line: header({credential(line)[0]: credential(line)[1]})(line),
        lambda line: header([credential(line)[0].upper(), {"v": credential(line)[1]}])(line),
        lambda line: {
            **line,
            "response_headers": [["set-cookie", f"sid={secret}", "Path=/"]],
        },
        field("status", {"authorization": secret}),
        field("status", [["x-api-key", secret]]),
        field("id", ["authorization", secret]),
        # cut short just after the credential header's value (a torn last line)
        lambda line: _cut_after_header_value(orjson.dumps(line), secret),
        # the same, followed by a good line (a line that is not JSON)
        lambda line: (
            _cut_after_header_value(orjson.dumps(line), secret)
            + b"\n"
            + encode_exchange(items()).rstrip(b"\n")
        ),
        # _LONG_VALUES:
        field("status", _pad(secret)),
        field("response_header_charset", _pad(secret)),
        lambda line: {**line, "response_headers": [[_pad(secret), "v"]]},
    ]


_LONG_VALUES = 3


def _cut_after_header_value(line: bytes, secret: str) -> bytes:
    return line[: line.index(secret.encode(), line.index(b'"headers"')) + len(secret)]


def _broken(line: dict[str, Any], secret: str, how: int) -> bytes:
    """The line broken the `how`-th way, with its newline unless it is a torn last line."""
    broken = _breakages(secret)[how](line)
    if isinstance(broken, bytes):
        return broken + b"\n" if broken.endswith(b"}") else broken
    return orjson.dumps(broken) + b"\n"


_HOW = st.integers(min_value=0, max_value=len(_breakages("x")) - 1)


def _output_of(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


@settings(
    max_examples=300 if LONG else 25,
    deadline=None,
    derandomize=not LONG,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), secret=_SECRETS, other=_OTHER_SECRETS, how=_HOW, other_how=_HOW)
def test_no_command_and_no_load_prints_a_secret(
    data: st.DataObject, secret: str, other: str, how: int, other_how: int
) -> None:
    assume(other not in secret and secret not in other)
    first = _broken(data.draw(_secret_line(secret)), secret, how)
    second = _broken(data.draw(_secret_line(other)), other, other_how)
    long_value = len(_breakages("x")) - _LONG_VALUES
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        a, b = folder / "a.jsonl", folder / "b.jsonl"
        for blob_a, blob_b in ((first, second), (first, first)):
            a.write_bytes(encode_header() + blob_a)
            b.write_bytes(encode_header() + encode_exchange(items()) + blob_b)
            try:
                parse_cassette(a.read_bytes(), a)
            except CassetteFormatError as exc:
                text = f"{exc!s} {exc!r} {exc.problem}"
                assert secret not in text and other not in text, text
            for command in _COMMANDS:
                a.write_bytes(encode_header() + blob_a)  # repair may have cut it
                argv = [arg.format(a=a, b=b, dir=folder) for arg in command]
                code, printed = _output_of(argv)
                assert code in (0, 1, 2), (argv, code)
                page = folder / "page.html"
                if "--html" in command and page.exists():
                    printed += page.read_text(encoding="utf-8")
                    page.unlink()
                if "--textconv" in command and printed.startswith("# sakura-http: not a"):
                    # the lines of an unreadable file: long values as they are, as git shows
                    hidden = [s for s, h in ((secret, how), (other, other_how)) if h < long_value]
                else:
                    hidden = [secret, other]
                for value in hidden:
                    assert value not in printed, (argv, printed)


def test_show_and_diff_print_no_cookie_no_secret_query_value_and_no_token_in_a_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "https://tok-userinfo-0123456789@api.example.test/v1?password=pw-value-0123456&page=2"
    leaky = items(
        url=url,
        response_headers=(("set-cookie", "sid=cookie-value-0123456"), ("x-ok", "1")),
    )
    old = write_cassette(tmp_path / "old.jsonl", [items()])
    new = write_cassette(tmp_path / "new.jsonl", [leaky])
    secrets = ("tok-userinfo", "pw-value", "cookie-value")
    for argv in (
        ["show", new],
        ["show", "--textconv", new],
        ["show", "--json", new],
        ["show", "--html", tmp_path / "page.html", new],
        ["diff", old, new],
        ["diff", "--json", old, new],
    ):
        result = run(capsys, *argv)
        printed = result.out + result.err
        if "--html" in argv:
            printed += (tmp_path / "page.html").read_text()
        assert not any(s in printed for s in secrets), (argv, printed)
    textconv = run(capsys, "show", "--textconv", new).out.splitlines()
    assert (
        "request: GET https://<hidden, 23 chars>@api.example.test/v1"
        "?password=<hidden, 16 chars>&page=2"
    ) in textconv
    assert "response header set-cookie: <hidden, 24 chars>" in textconv
    assert "response header x-ok: 1" in textconv
    redacted = write_cassette(
        tmp_path / "redacted.jsonl", [items(response_headers=(("set-cookie", "<redacted>"),))]
    )
    shown = run(capsys, "show", "--textconv", redacted).out.splitlines()
    assert "response header set-cookie: <redacted>" in shown  # the marker itself is shown


def test_diff_elides_a_long_value_and_names_its_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_old, long_new = "a" * 300, "a" * 299 + "b"
    old = write_cassette(tmp_path / "old.jsonl", [items(response_headers=(("x-v", long_old),))])
    new = write_cassette(tmp_path / "new.jsonl", [items(response_headers=(("x-v", long_new),))])
    result = run(capsys, "diff", old, new)
    assert (
        "    response header x-v: 'aaaaaaaaaaaa'... (300 chars) -> 'aaaaaaaaaaaa'... (300 chars)"
        in (result.out.splitlines())
    )
    assert "a" * (SHOWN_CHARS + 1) not in result.out


def test_textconv_of_a_torn_cassette_hides_the_credential_it_was_cut_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = tmp_path / "torn.jsonl"
    line = encode_exchange(items(headers=(("authorization", "Bearer sk-torn-0123456789"),)))
    torn.write_bytes(encode_header() + line[: line.index(b"0123") + 4])
    result = run(capsys, "show", "--textconv", torn)
    assert result.code == 0
    assert "sk-torn" not in result.out
    assert result.out.splitlines()[-1].endswith('"headers":[["authorization","<hidden, 19 chars>')


@pytest.mark.parametrize("command", [["lint"], ["repair"], ["show"], ["diff", "{a}"]])
def test_a_format_error_of_every_command_hides_the_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    good = write_cassette(tmp_path / "good.jsonl", [items()])
    bad = tmp_path / "bad.jsonl"
    line = orjson.loads(encode_exchange(items()))
    line["headers"] = [["authorization", "Bearer sk-ant-api03-FAKE-0123456789", "extra"]]
    bad.write_bytes(encode_header() + orjson.dumps(line) + b"\n")
    result = run(capsys, *[arg.format(a=good) for arg in command], bad)
    printed = result.out + result.err
    assert "must be a list of [name, value] string pairs" in printed
    assert "got ['authorization', <hidden, 35 chars>, <hidden, 5 chars>]" in printed
    assert "sk-ant" not in printed
