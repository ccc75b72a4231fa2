"""The sakura-http pytest plugin, registered through the ``pytest11`` entry point.

Tests run offline against committed cassettes; ``pytest --record`` records what is missing
(mode "new_episodes") and ``pytest --record-all`` re-records whole cassettes (mode "all").
``SAKURA_HTTP_RECORD`` overrides both, as it does for every `RecordingTransport`.

* ini keys: ``sakura_record_hosts``, ``sakura_fixtures``, ``sakura_block_network``,
  ``sakura_secret_headers``, ``sakura_allow_headers``, ``sakura_ignore_headers``,
  ``sakura_max_age``.
* fixtures: ``sakura_fixtures`` (the fixtures folder), ``sakura_recording`` (a
  `CassetteFactory`), ``sakura_transport`` (the transport for the ``cassette`` marker),
  ``sakura_rules`` (the project's `Rules`, for a conftest.py to override).
* marker: ``@pytest.mark.cassette(name=None, *, assert_all_played=False, expect_errors=False,
  **transport_options)``.
* error messages name the plugin's fixes (`PytestAdvice`): ``pytest --record``, the ini options.
* the network guard (`sakura_http._guard`) in every test that uses sakura-http.

`docs/pytest.md` documents all of it.  The option is ``--record``, never ``--record-mode``:
pytest-recording and cassetter own that name, and sakura-http must load beside them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .._age import parse_max_age
from .._core import ENV_RECORD, RecordMode, is_strict, resolve_mode
from .._exceptions import CassetteError, ConfigurationError, NetworkBlocked
from .._libraries import DefaultOuter
from .._rules import Rules
from .._transport import RecordingTransport
from ._advice import PytestAdvice
from ._caught import caught_message, exception_chain, expects_errors
from ._factory import PROXY_OPTIONS, CassetteFactory, fail_if_unused, marker_cassette
from ._factory import Tracked as Tracked
from ._guard import NetworkGuard
from ._paths import default_cassette_name as default_cassette_name
from ._paths import fixtures_folder, resolve_cassette_path
from ._proxy_fixture import sakura_proxy as sakura_proxy  # the sakura_proxy fixture
from ._state import CALL_EXCINFO, GUARD, STATE, State, plugin_state
from ._summary import (
    find_dead_exchanges,
    find_old_cassettes,
    gather_from_worker,
    send_to_controller,
    summarize,
)

__all__ = [
    "PROXY_OPTIONS",
    "CassetteFactory",
    "DefaultOuter",
    "NetworkBlocked",
    "PytestAdvice",
    "resolve_cassette_path",
]

pytest_plugins = [
    "sakura_http.pytest_plugin._llm_fixtures",  # SDK fixtures, patch_clients
    "sakura_http.pytest_plugin._client_fixtures",  # sakura_requests, sakura_aiohttp
]

#: Exit status of ``pytest --record`` when no host may be recorded from (EX_TEMPFAIL).
EXIT_NO_RECORD_HOSTS = 75

_SAKURA_FIXTURES = frozenset(
    {
        "sakura_cassette",
        "sakura_fixtures",
        "sakura_recording",
        "sakura_rules",
        "sakura_transport",
    }
)
_MARKER = (
    "cassette(name=None, *, assert_all_played=False, expect_errors=False, "
    "patch_clients=False, anthropic=None, openai=None, **transport_options): the sakura-http "
    "cassette of the sakura_transport, sakura_requests and sakura_aiohttp fixtures and the SDK "
    "fixtures. name is resolved inside the "
    "fixtures folder (default: <test module stem>/<test name>.jsonl); transport_options are "
    "passed to RecordingTransport; assert_all_played=True fails the test if a recorded "
    "exchange was not played; expect_errors=True lets the test provoke and catch sakura-http "
    "errors and network refusals on purpose; patch_clients=True sends every httpx/httpx2 "
    "client and requests/aiohttp session that would reach the network through the cassette; "
    "anthropic={...} and "
    "openai={...} are keyword arguments of the SDK clients of sakura_anthropic / "
    "sakura_openai (and their async twins); for sakura_proxy, also upstream, ca_dir, verify, "
    "listen and shutdown_timeout (see sakura_http.proxy.serve)."
)


# --- configuration -------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sakura-http", "sakura-http cassettes")
    group.addoption(
        "--record",
        action="store_true",
        dest="sakura_record",
        help="sakura-http: record the exchanges missing from cassettes (mode new_episodes); "
        "only hosts listed in sakura_record_hosts may be reached.",
    )
    group.addoption(
        "--record-all",
        action="store_true",
        dest="sakura_record_all",
        help="sakura-http: re-record whole cassettes (mode all); each is replaced when its "
        "test ends.",
    )
    group.addoption(
        "--prune",
        action="store_true",
        dest="sakura_prune",
        help="sakura-http: at the end of a run in which every test ran and passed, drop the "
        "recorded exchanges no test played from the cassettes the run used (with --record: "
        "record what is missing, then prune).",
    )
    group.addoption(
        "--verify",
        action="store_true",
        dest="sakura_verify",
        help="sakura-http: run the suite against the live APIs (only hosts listed in "
        "sakura_record_hosts) into temporary cassettes, and list in the summary the cassettes "
        "whose live answers drifted in shape; the cassettes are not changed.",
    )
    group.addoption(
        "--verify-strict",
        action="store_true",
        dest="sakura_verify_strict",
        help="sakura-http: --verify, and fail each test whose live answers drifted.",
    )
    parser.addini(
        "sakura_record_hosts",
        'sakura-http: "host" or "host:port" entries a recording may reach (one per line).',
        type="linelist",
        default=[],
    )
    parser.addini(
        "sakura_fixtures",
        "sakura-http: the cassette folder, relative to the ini file (default: fixtures/ in the "
        "nearest ancestor folder of the test file named tests).",
        default="",
    )
    parser.addini(
        "sakura_block_network",
        "sakura-http: apply the network guard to every test, not only those using sakura-http.",
        type="bool",
        default=False,
    )
    parser.addini(
        "sakura_secret_headers",
        "sakura-http: secret headers of every cassette (merged with each cassette's own).",
        type="linelist",
        default=[],
    )
    parser.addini(
        "sakura_allow_headers",
        "sakura-http: header names that look like credentials but are not (recorded and "
        "matched as usual).",
        type="linelist",
        default=[],
    )
    parser.addini(
        "sakura_ignore_headers",
        "sakura-http: request headers left out of matching in every cassette, on top of the "
        'volatile set (names or patterns such as x-debug-*; "*" alone: every header).',
        type="linelist",
        default=[],
    )
    parser.addini(
        "sakura_max_age",
        "sakura-http: list in the summary the cassettes the run used with exchanges recorded "
        "longer ago than this (90d; units h, d, w); with SAKURA_HTTP_STRICT=1 they fail the run.",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    record, record_all = config.getoption("sakura_record"), config.getoption("sakura_record_all")
    if record and record_all:
        raise pytest.UsageError("use either --record or --record-all, not both")
    prune = bool(config.getoption("sakura_prune"))
    strict = bool(config.getoption("sakura_verify_strict"))
    verify = strict or bool(config.getoption("sakura_verify"))
    if verify and (record or record_all or prune):
        given = "--record" if record else "--record-all" if record_all else "--prune"
        raise pytest.UsageError(
            f"--verify compares the live APIs with the cassettes and writes none of them; "
            f"{given} writes them: use one or the other (re-record the drifted ones afterwards)"
        )
    if prune and record_all:
        raise pytest.UsageError(
            "--prune drops exchanges no test played; --record-all already rewrites each "
            "cassette with only what its tests play: use one of them"
        )
    requested = (
        RecordMode.ALL if record_all else RecordMode.NEW_EPISODES if record else RecordMode.NONE
    )
    try:
        effective = resolve_mode(requested, os.environ)
    except CassetteError as exc:  # SAKURA_HTTP_STRICT=1, or a bad SAKURA_HTTP_RECORD
        raise pytest.UsageError(f"sakura-http: {exc}") from None
    live_run = None
    if verify:
        if effective is not RecordMode.NONE:
            raise pytest.UsageError(
                f"sakura-http: --verify writes no cassette, and {ENV_RECORD}="
                f"{effective.value} asks to record into them: unset {ENV_RECORD}"
            )
        # Every request goes live, into the run's temporary cassettes (see _verify).
        requested = effective = RecordMode.NEW_EPISODES
        # Imported for --verify alone: it and the drift checks took 3.5 of the 26 ms that
        # importing the package and plugin took, which every pytest run pays (benchmark row
        # "6. Import", <= 30 ms).
        from ._verify import LiveRun

        live_run = LiveRun(strict=strict)

    hosts = tuple(h.strip() for h in config.getini("sakura_record_hosts") if h.strip())
    if effective is not RecordMode.NONE and not hosts:
        why = "pytest --verify-strict" if strict else "pytest --verify" if verify else None
        pytest.exit(_no_hosts_message(requested, effective, why), returncode=EXIT_NO_RECORD_HOSTS)
    if effective is RecordMode.ALL and _distributed(config):
        raise pytest.UsageError(
            "sakura-http: re-recording whole cassettes (mode 'all') from several pytest-xdist "
            "workers would let tests that share a cassette replace each other's recordings. "
            "Run it in one process (`pytest --record-all -n 0`), or use `pytest --record`, "
            "which appends safely from many workers"
        )

    ini_value = str(config.getini("sakura_fixtures") or "").strip()
    if "\0" in ini_value:
        raise pytest.UsageError(
            f"sakura-http: the ini option sakura_fixtures ({ini_value!r}) holds a NUL "
            "character; give the fixtures folder as a plain path"
        )
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    config.stash[STATE] = State(
        requested=requested,
        effective=effective,
        record_hosts=hosts,
        secret_headers=tuple(h.strip() for h in config.getini("sakura_secret_headers")),
        allow_headers=tuple(h.strip() for h in config.getini("sakura_allow_headers")),
        block_network=bool(config.getini("sakura_block_network")),
        patch_clients=bool(config.getini("sakura_patch_clients")),
        fixtures_option=(base / ini_value) if ini_value else None,
        rootpath=config.rootpath,
        prune=prune,
        header_rules=_header_rules(config),
        max_age=_max_age(config),
        age_strict=is_strict(os.environ),
        live_run=live_run,
    )
    if not hasattr(config, "workerinput"):
        partial = _partial_run(config)
        if partial:
            config.stash[STATE].ledger.block(partial)


def _max_age(config: pytest.Config) -> datetime.timedelta | None:
    text = str(config.getini("sakura_max_age") or "").strip()
    if not text:
        return None
    try:
        return parse_max_age(text)
    except ValueError as exc:
        raise pytest.UsageError(f"sakura-http: the ini option sakura_max_age: {exc}") from None


def _header_rules(config: pytest.Config) -> Rules:
    names = [h.strip() for h in config.getini("sakura_ignore_headers") if h.strip()]
    try:
        return Rules(ignore_headers=names)
    except ConfigurationError as exc:
        raise pytest.UsageError(f"sakura-http: the ini option sakura_{exc}") from None


def _no_hosts_message(requested: RecordMode, effective: RecordMode, why: str | None) -> str:
    """`why` names what asked for the network (None: the recording mode did)."""
    if why is None and requested is effective:
        why = "pytest --record-all" if effective is RecordMode.ALL else "pytest --record"
    elif why is None:
        why = f"{ENV_RECORD}={effective.value}"
    return (
        f"sakura-http: {why} records from the network, so it needs the hosts a recording may "
        "reach, and sakura_record_hosts is empty. Declare them (host or host:port) in "
        'pyproject.toml: [tool.pytest.ini_options] sakura_record_hosts = ["api.example.com", '
        '"127.0.0.1:8000"] - or one per line under sakura_record_hosts = in pytest.ini'
    )


def _partial_run(config: pytest.Config) -> str | None:
    """Why this run may leave out tests that use cassettes (None: it runs the whole suite):
    test files or folders were named that are not the whole of `testpaths` or the rootdir."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return None
    whole = {config.rootpath.resolve()} | {
        (config.rootpath / p).resolve() for p in config.getini("testpaths")
    }
    named = {Path(config.invocation_params.dir, a.split("::")[0]).resolve() for a in config.args}
    if all("::" not in a for a in config.args) and named <= whole:
        return None
    return f"only some tests were named ({' '.join(config.args)})"


def _distributed(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):
        return False  # the controller decides
    processes = getattr(config.option, "numprocesses", None)
    return bool(processes) and getattr(config.option, "dist", "no") != "no"


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def sakura_fixtures(request: pytest.FixtureRequest) -> Path:
    """The fixtures folder of this test (see `fixtures_folder`); it may not exist yet."""
    return fixtures_folder(request.config, Path(str(request.path)))


@pytest.fixture
def sakura_rules() -> Rules:
    """The matching and scrubbing rules of every cassette (none by default).

    Override it in a ``conftest.py`` to set them for a whole project or folder; a test's own
    ``@pytest.mark.cassette(rules=...)`` (or ``sakura_recording(..., rules=...)``) adds to them.
    """
    return Rules()


@pytest.fixture
def sakura_recording(
    request: pytest.FixtureRequest, sakura_fixtures: Path, sakura_rules: Rules
) -> Iterator[CassetteFactory]:
    """A `CassetteFactory`: ``sakura_recording("billing.jsonl", ...) -> RecordingTransport``."""
    factory = CassetteFactory(request, sakura_fixtures, sakura_rules)
    yield factory
    factory._finish()


@pytest.fixture
def sakura_transport(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> Iterator[RecordingTransport]:
    """The transport of the test's ``cassette`` marker (default name without the marker)."""
    item = request.node
    assert isinstance(item, pytest.Item)
    name, options = marker_cassette(item)
    transport = sakura_recording(name, **options)
    yield transport
    fail_if_unused(transport, "sakura_transport")


@pytest.fixture
def sakura_cassette(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> RecordingTransport:
    """The test's cassette (its ``cassette`` marker's, as for ``sakura_transport``), to read
    what it replayed: ``exchanges`` (in file order), ``play_count`` and ``unplayed()``, shared
    by every transport, SDK client and proxy of the cassette in the test.  It is a
    `RecordingTransport` on that cassette; unlike ``sakura_transport`` it may go unused."""
    item = request.node
    assert isinstance(item, pytest.Item)
    name, options = marker_cassette(item)
    return sakura_recording(name, **options)


@pytest.fixture(autouse=True)
def _sakura_network_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """The network guard, for tests that use sakura-http (or all, with sakura_block_network)."""
    state = plugin_state(request.config)
    item = request.node
    if not (_uses_sakura(item, state) or state.block_network):
        yield
        return
    guard = NetworkGuard(
        _guard_reason(state), allowed=state.record_hosts if state.recording else ()
    )
    item.stash[GUARD] = guard
    with guard.installed():
        yield
    excinfo = item.stash.get(CALL_EXCINFO, None)
    seen = exception_chain(excinfo.value) if excinfo is not None else set()
    caught = [error for error in guard.blocked if id(error) not in seen]
    if caught and not expects_errors(item):
        pytest.fail(caught_message(caught, "network refusal"), pytrace=False)


def _uses_sakura(item: pytest.Item, state: State) -> bool:
    """Whether `item` uses sakura-http: its marker, a fixture of the plugin's, patch_clients."""
    return (
        item.get_closest_marker("cassette") is not None
        or state.patch_clients  # every test replays through its cassette
        or bool(_SAKURA_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    )


def _guard_reason(state: State) -> str:
    give_transport = (
        "this request did not go through a sakura transport. Give the client one: pass "
        "transport=sakura_transport, use an SDK fixture (sakura_anthropic, sakura_openai), or "
        "mark the test @pytest.mark.cassette(patch_clients=True) for clients the app builds. "
        "For requests and aiohttp, use the sakura_requests or sakura_aiohttp fixture. (A "
        "cassette's passthrough_hosts are not let through either: keep them for local servers.)"
    )
    if state.recording:
        # A transport refuses a host outside record_hosts itself (RecordingForbidden): what the
        # guard stops bypassed every transport, and adding its host would let it run unrecorded.
        hosts = ", ".join(state.record_hosts)
        return (
            f"While recording, only loopback addresses and sakura_record_hosts ({hosts}) are "
            f"reachable, and {give_transport}"
        )
    why = "uses sakura-http" if not state.block_network else "runs with sakura_block_network"
    return (
        f"The test {why}, so only loopback addresses (127.0.0.1, ::1, localhost) are reachable, "
        f"and {give_transport}"
    )


# --- outcome bookkeeping and the summary ---------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if call.when == "call":
        item.stash[CALL_EXCINFO] = call.excinfo
    report = yield
    if STATE in item.config.stash and (report.failed or report.skipped):
        # A test that did not pass may have stopped before opening the cassettes it plays.
        outcome = "failed" if report.failed else "was skipped"
        if report.failed or _uses_sakura(item, plugin_state(item.config)):
            plugin_state(item.config).ledger.block(f"{item.nodeid} {outcome}")
    return report


def pytest_deselected(items: list[pytest.Item]) -> None:
    config = items[0].config if items else None
    if config is None or STATE not in config.stash:
        return
    state = plugin_state(config)
    users = [item for item in items if _uses_sakura(item, state)]
    if users:
        state.ledger.block(f"{len(users)} test(s) using cassettes were deselected")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if STATE not in config.stash:
        return
    state = plugin_state(config)
    if state.live_run is not None:
        state.live_run.close()  # the temporary cassettes; what they showed is kept
    if hasattr(config, "workeroutput"):
        send_to_controller(config.workeroutput, state)
        return
    if exitstatus != 0:
        state.ledger.block("the run did not pass")
    find_dead_exchanges(state)
    if find_old_cassettes(state) and state.age_strict and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the summary says why


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: gather what a worker recorded into the controller's summary."""
    output = getattr(node, "workeroutput", None) or {}
    config = node.config
    if STATE not in config.stash:
        return
    gather_from_worker(plugin_state(config), output)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or STATE not in config.stash:
        return
    summarize(terminalreporter, plugin_state(config))
