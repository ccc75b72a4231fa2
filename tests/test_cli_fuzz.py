"""`lint`, `show`, `diff`, `repair` (and `convert`) never print a traceback, whatever bytes
they are given: they exit 0, 1 or 2 with a message (a property test over random and half-valid
files)."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakura_http._format import encode_exchange, encode_header
from sakura_http.cli import main
from tests.cli_support import items, message, outage

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
