"""Dead exchanges and `--prune` (sakura_http/pytest_plugin/_prune.py), through real pytest runs.

The workflow they serve: a request changed on purpose, `pytest --record` appended the new
exchange, and the old one is never played again.  The summary names it; `pytest --record
--prune` drops it, but only after a run in which every test ran and passed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from sakura_http import Exchange
from sakura_http._cassette import load_cassette
from sakura_http._format import encode_exchange
from sakura_http.pytest_plugin._prune import PlayLedger, _dead_positions, _digest
from tests.servers import start_echo_server
from tests.test_plugin import HEADER, INI, write_test


def _line(query: str, body: str = "") -> str:
    return (
        json.dumps(
            {
                "method": "GET",
                "url": f"http://api.example.invalid/q?v={query}",
                "headers": [["accept", "*/*"]],
                "body": "",
                "status": 200,
                "response_headers": [["content-type", "text/plain"]],
                "response_body": body or query,
            },
            separators=(",", ":"),
        )
        + "\n"
    )


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose cassette holds an old exchange (v=old) and the current one (v=new)."""
    pytester.makeini(INI)
    fixtures = pytester.path / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (fixtures / "shared.jsonl").write_text(HEADER + _line("old") + _line("new"))
    return pytester


def _urls(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()[1:]]


PLAYS_NEW = """
import httpx
import pytest

@pytest.mark.cassette("shared.jsonl")
def test_new(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("http://api.example.invalid/q?v=new").text == "new"
"""


def test_the_summary_names_exchanges_no_test_played(project: pytest.Pytester) -> None:
    write_test(project, PLAYS_NEW)
    cassette = project.path / "tests" / "fixtures" / "shared.jsonl"
    before = cassette.read_bytes()
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: recorded exchanges no test played =*",
            "tests/fixtures/shared.jsonl: 1 exchange no test played",
            "  GET http://api.example.invalid/q?v=old -> 200",
            "*drop them with `pytest --record --prune`*",
        ]
    )
    assert cassette.read_bytes() == before  # only --prune changes a cassette


def test_prune_drops_them_and_keeps_what_was_played(project: pytest.Pytester) -> None:
    write_test(project, PLAYS_NEW)
    cassette = project.path / "tests" / "fixtures" / "shared.jsonl"
    result = project.runpytest("--prune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["tests/fixtures/shared.jsonl: pruned 1 exchange no test played"])
    assert _urls(cassette) == ["http://api.example.invalid/q?v=new"]
    assert cassette.read_text().startswith(HEADER)
    again = project.runpytest()
    again.assert_outcomes(passed=1)
    again.stdout.no_fnmatch_line("*no test played*")
    assert not list(cassette.parent.glob("*.recording"))


def test_record_then_prune_after_a_request_changed(pytester: pytest.Pytester) -> None:
    """The whole workflow against a real server: record, change the request, record with
    --prune: the cassette holds exactly what the test plays now."""
    pytester.makeini(INI)
    test = """
import httpx

def test_echo(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.post("{url}/items", json={{"q": "{question}"}}).status_code == 200
"""
    cassette = pytester.path / "tests" / "fixtures" / "test_app" / "test_echo.jsonl"
    with start_echo_server() as server:
        write_test(pytester, test.format(url=server.url, question="first"))
        pytester.runpytest("--record").assert_outcomes(passed=1)
        write_test(pytester, test.format(url=server.url, question="second"))
        recorded = pytester.runpytest("--record", "--prune")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(
        [
            "*test_echo.jsonl: 1 exchange appended",
            "*test_echo.jsonl: pruned 1 exchange no test played",
        ]
    )
    bodies = [json.loads(line)["body"] for line in cassette.read_text().splitlines()[1:]]
    assert bodies == ['{"q":"second"}']
    pytester.runpytest().assert_outcomes(passed=1)  # offline: the server is gone


@pytest.mark.parametrize(
    ("extra_test", "args", "why"),
    [
        ("def test_broken():\n    assert False\n", [], "*test_broken failed*"),
        (
            '@pytest.mark.cassette("shared.jsonl")\n'
            "def test_skipped(sakura_transport):\n    pytest.skip('later')\n",
            [],
            "*test_skipped was skipped*",
        ),
        (
            '@pytest.mark.cassette("shared.jsonl")\ndef test_old(sakura_transport):\n    pass\n',
            ["-k", "test_new"],
            "*1 test(s) using cassettes were deselected*",
        ),
        ("", ["tests/test_app.py::test_new"], "*only some tests were named*"),
    ],
    ids=["failed", "skipped", "deselected", "named"],
)
def test_nothing_is_pruned_unless_every_test_ran_and_passed(
    project: pytest.Pytester, extra_test: str, args: list[str], why: str
) -> None:
    """A test that failed, was skipped or did not run may play the exchange that looks dead,
    having never opened its cassette: pruning waits for a whole, passing run."""
    write_test(project, PLAYS_NEW + "\n\n" + extra_test)
    cassette = project.path / "tests" / "fixtures" / "shared.jsonl"
    before = cassette.read_bytes()
    result = project.runpytest("--prune", *args)
    result.stdout.fnmatch_lines(["tests/fixtures/shared.jsonl: 1 exchange no test played", why])
    result.stdout.fnmatch_lines(["Not pruned: pruning needs a run in which every test ran*"])
    assert cassette.read_bytes() == before


def test_prune_says_why_it_keeps_a_cassette_no_test_played_at_all(
    project: pytest.Pytester,
) -> None:
    """A cassette of which nothing was played is kept whole; the summary says so, instead of
    blaming a blocker that does not exist."""
    write_test(
        project,
        """
import pytest

@pytest.mark.cassette("shared.jsonl")
def test_reads_only(sakura_cassette):
    pass
""",
    )
    cassette = project.path / "tests" / "fixtures" / "shared.jsonl"
    before = cassette.read_bytes()
    result = project.runpytest("--prune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/shared.jsonl: 2 exchanges no test played",
            "*no test played any exchange of it: --prune keeps it whole*delete the file*",
        ]
    )
    result.stdout.no_fnmatch_line("Not pruned*")
    assert cassette.read_bytes() == before


def test_prune_and_record_all_are_exclusive(project: pytest.Pytester) -> None:
    write_test(project, PLAYS_NEW)
    result = project.runpytest("--prune", "--record-all")
    result.stderr.fnmatch_lines(["*--record-all already rewrites each cassette*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_exchanges_played_by_other_workers_stay(project: pytest.Pytester) -> None:
    """Under pytest-xdist an exchange is alive when a test in any worker played it."""
    fixtures = project.path / "tests" / "fixtures"
    (fixtures / "shared.jsonl").write_text(
        HEADER + "".join(_line(q) for q in ("a", "b", "c", "d", "dead"))
    )
    write_test(
        project,
        """
import httpx
import pytest

@pytest.mark.parametrize("q", ["a", "b", "c", "d"])
@pytest.mark.cassette("shared.jsonl")
def test_one(sakura_transport, q):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get(f"http://api.example.invalid/q?v={q}").text == q
""",
    )
    result = project.runpytest_subprocess("-n", "2", "--prune", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["tests/fixtures/shared.jsonl: pruned 1 exchange no test played"])
    assert [url[-1] for url in _urls(fixtures / "shared.jsonl")] == ["a", "b", "c", "d"]


# --- the ledger itself ------------------------------------------------------------------------


def _exchange(query: str) -> Exchange:
    return Exchange(
        method="GET",
        url=f"http://api.example.invalid/q?v={query}",
        headers=(),
        body=b"",
        status=200,
        response_headers=(),
        response_body=query.encode(),
    )


def test_identical_lines_are_kept_as_often_as_one_session_played_them() -> None:
    a, b = _exchange("a"), _exchange("b")
    ledger = PlayLedger()
    ledger.observe("c.jsonl", [a])  # one test played one of the two identical lines
    ledger.observe("c.jsonl", [a, b])  # another played one of them, and b
    assert _dead_positions([a, a, b, _exchange("z")], ledger.plays["c.jsonl"]) == [1, 3]
    ledger.observe("c.jsonl", [a, a])
    assert _dead_positions([a, a, b], ledger.plays["c.jsonl"]) == []


def test_a_worker_ledger_merges_by_the_most_played() -> None:
    worker = PlayLedger()
    worker.observe("c.jsonl", [_exchange("a"), _exchange("a")])
    worker.block("tests/t.py::x failed")
    controller = PlayLedger()
    controller.observe("c.jsonl", [_exchange("a"), _exchange("b")])
    controller.merge(json.loads(json.dumps(worker.to_wire())))  # plain data over the wire
    assert controller.plays["c.jsonl"] == Counter(
        {_digest(_exchange("a")): 2, _digest(_exchange("b")): 1}
    )
    assert controller.blockers == ["tests/t.py::x failed"]


def test_the_digest_is_the_line_written(tmp_path: Path) -> None:
    """An exchange recorded in the run and the same exchange read back have one digest."""
    exchange = _exchange("a")
    (tmp_path / "c.jsonl").write_bytes(HEADER.encode() + encode_exchange(exchange))
    (read,) = load_cassette(tmp_path / "c.jsonl").exchanges
    assert _digest(read) == _digest(exchange)
