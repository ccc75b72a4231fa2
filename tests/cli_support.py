"""Helpers shared by the `sakura-http` command tests: cassettes written with the format
functions, and running the command in-process."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from sakura_http._format import Exchange, FaultInfo, encode_exchange, encode_header
from sakura_http.cli import main

JSON = (("content-type", "application/json"),)


def items(**changes: Any) -> Exchange:
    """A JSON GET exchange with an id."""
    base = Exchange(
        method="GET",
        url="https://api.example.test/v1/items",
        headers=(("accept", "application/json"),),
        status=200,
        response_headers=JSON,
        response_body=b'{"items":[1,2],"next":null}',
        id="list-items",
    )
    return replace(base, **changes)


def message(**changes: Any) -> Exchange:
    """A streamed POST exchange without an id, its body in two chunks."""
    base = Exchange(
        method="POST",
        url="https://api.example.test/v1/messages",
        headers=JSON,
        body=b'{"model":"test-model","max_tokens":5}',
        status=200,
        response_headers=(("content-type", "text/event-stream"),),
        response_body=b"data: a\n\ndata: b\n\n",
        chunks=(9, 9),
    )
    return replace(base, **changes)


def outage() -> Exchange:
    return Exchange(
        method="GET",
        url="https://api.example.test/health",
        status=None,
        error=FaultInfo("ConnectError", "connection refused"),
    )


def cassette_bytes(exchanges: Iterable[Exchange]) -> bytes:
    return encode_header() + b"".join(encode_exchange(ex) for ex in exchanges)


def write_cassette(path: Path, exchanges: Iterable[Exchange]) -> Path:
    path.write_bytes(cassette_bytes(exchanges))
    return path


@dataclass
class Run:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Run:
    """Run `sakura-http argv...` in-process and capture what it printed."""
    capsys.readouterr()
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def assert_one_line_error(result: Run) -> None:
    """Exit 2 with a single-line reason on stderr and no traceback."""
    assert result.code == 2, result
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert "Traceback" not in result.err
