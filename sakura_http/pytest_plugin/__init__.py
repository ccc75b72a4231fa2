"""The sakura-http pytest plugin, registered through the ``pytest11`` entry point.

Tests run offline against committed cassettes; ``pytest --record`` records what is missing
(mode "new_episodes") and ``pytest --record-all`` re-records whole cassettes (mode "all").
``SAKURA_HTTP_RECORD`` overrides both, as it does for every `RecordingTransport`.

* ini keys: ``sakura_record_hosts``, ``sakura_fixtures``, ``sakura_block_network``,
  ``sakura_secret_headers``, ``sakura_allow_headers``, ``sakura_ignore_headers``.
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

import hashlib
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from .._advice import Advice
from .._config import CassetteConfig, CassetteOptions
from .._core import ENV_RECORD, RecordMode, resolve_mode
from .._exceptions import CassetteError, ConfigurationError, NetworkBlocked
from .._format import Exchange
from .._libraries import DefaultOuter
from .._rules import Rules
from .._session import CassetteSession, CassetteUser
from .._transport import RecordingTransport
from ._guard import NetworkGuard
from ._prune import PlayLedger, dead_exchanges, prune_cassette

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

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
_WORKER_OUTPUT_KEY = "sakura_http_recorded"
_LEDGER_KEY = "sakura_http_played"
_MARKER = (
    "cassette(name=None, *, assert_all_played=False, expect_errors=False, "
    "patch_clients=False, anthropic=None, openai=None, **transport_options): the sakura-http "
    "cassette of the sakura_transport fixture and the SDK fixtures. name is resolved inside the "
    "fixtures folder (default: <test module stem>/<test name>.jsonl); transport_options are "
    "passed to RecordingTransport; assert_all_played=True fails the test if a recorded "
    "exchange was not played; expect_errors=True lets the test provoke and catch sakura-http "
    "errors and network refusals on purpose; patch_clients=True sends every httpx/httpx2 "
    "client that would reach the network through the cassette; anthropic={...} and "
    "openai={...} are keyword arguments of the SDK clients of sakura_anthropic / "
    "sakura_openai (and their async twins); for sakura_proxy, also upstream, ca_dir, verify, "
    "listen and shutdown_timeout (see sakura_http.proxy.serve)."
)
#: Marker keywords that configure the proxy of ``sakura_proxy`` rather than the cassette.
PROXY_OPTIONS = (
    "upstream",
    "listen",
    "ca_dir",
    "verify",
    "shutdown_timeout",
    "header_timeout",
    "idle_timeout",
)
#: Marker keywords for the SDK fixtures, patch_clients and the proxy, not for the transport.
_FRONT_END_OPTIONS = ("patch_clients", "anthropic", "openai", *PROXY_OPTIONS)


class PytestAdvice(Advice):
    """Error messages under pytest name the plugin's command-line flags and ini options."""

    front_end = "the sakura-http pytest plugin"

    def record_missing(self) -> str:
        return (
            "to record it, run `pytest --record` (mode new_episodes); if the request changed "
            f"on purpose, re-record with {self.rerecord()}"
        )

    def rerecord(self) -> str:
        return "`pytest --record --prune` (or `pytest --record-all`)"

    def declare_secret(self, header: str) -> str:
        return (
            f"add {header} to the ini option sakura_secret_headers (for every cassette), or pass "
            f'sakura_recording(..., secret_headers=["{header}"]) for one cassette; if it is not '
            "a credential, add it to sakura_allow_headers"
        )

    def raise_body_limit(self, side: str, limit: int) -> str:
        return (
            f"raise the limit for this cassette with @pytest.mark.cassette(max_body_bytes="
            f"{limit * 2}) or sakura_recording(..., max_body_bytes={limit * 2})"
        )

    def add_record_host(self, host: str) -> str:
        return f'add "{host}" to sakura_record_hosts in the pytest ini options'

    def give_outer(self) -> str:
        return (
            "leave outer= unset to let the plugin forward to the network, or pass the real "
            "transport as outer="
        )


# --- configuration -------------------------------------------------------------------------


# The plugin's records are plain slotted classes, and `_State` a dataclass without the
# comparison nobody makes: defining a dataclass costs about a millisecond, which every pytest run
# of every project with the plugin installed would pay.


class _Written:
    """What a run wrote into one cassette."""

    __slots__ = ("appended", "discarded", "folder", "rerecorded")

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.appended = 0
        self.rerecorded = False
        #: A re-recording was dropped because its test failed (the old file was kept).
        self.discarded = False


@dataclass(eq=False, repr=False)  # compared by identity; no repr compiled at import
class _State:
    """The plugin's per-session state, kept in `config.stash`."""

    requested: RecordMode  # from --record / --record-all
    effective: RecordMode  # after SAKURA_HTTP_RECORD
    record_hosts: tuple[str, ...]
    secret_headers: tuple[str, ...]
    allow_headers: tuple[str, ...]
    block_network: bool
    patch_clients: bool  # sakura_patch_clients: every test's clients use its cassette
    fixtures_option: Path | None
    rootpath: Path
    written: dict[str, _Written] = field(default_factory=dict)
    #: The header rules of sakura_ignore_headers, under every cassette's own rules.
    header_rules: Rules = field(default_factory=Rules)
    #: Cassettes re-recorded by an earlier test of this process: later tests append to them.
    rerecorded_paths: set[str] = field(default_factory=set)
    advice: PytestAdvice = field(default_factory=PytestAdvice)
    prune: bool = False  # --prune: drop the exchanges no test played (see _prune)
    ledger: PlayLedger = field(default_factory=PlayLedger)
    #: What the end of the run found: cassette -> (exchanges no test played, how many pruned).
    dead: dict[str, tuple[list[Exchange], int]] = field(default_factory=dict)

    @property
    def recording(self) -> bool:
        return self.effective is not RecordMode.NONE

    def note(
        self, path: str, folder: str, appended: int, rerecorded: bool, discarded: bool = False
    ) -> None:
        entry = self.written.setdefault(path, _Written(folder))
        entry.appended += appended
        entry.rerecorded = entry.rerecorded or rerecorded
        entry.discarded = entry.discarded or discarded


_STATE = pytest.StashKey[_State]()
_CALL_EXCINFO = pytest.StashKey["pytest.ExceptionInfo[BaseException] | None"]()
_GUARD = pytest.StashKey[NetworkGuard]()
_EXPECT_ERRORS = pytest.StashKey[bool]()


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    record, record_all = config.getoption("sakura_record"), config.getoption("sakura_record_all")
    if record and record_all:
        raise pytest.UsageError("use either --record or --record-all, not both")
    prune = bool(config.getoption("sakura_prune"))
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

    hosts = tuple(h.strip() for h in config.getini("sakura_record_hosts") if h.strip())
    if effective is not RecordMode.NONE and not hosts:
        pytest.exit(_no_hosts_message(requested, effective), returncode=EXIT_NO_RECORD_HOSTS)
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
    config.stash[_STATE] = _State(
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
    )
    if not hasattr(config, "workerinput"):
        partial = _partial_run(config)
        if partial:
            config.stash[_STATE].ledger.block(partial)


def _header_rules(config: pytest.Config) -> Rules:
    names = [h.strip() for h in config.getini("sakura_ignore_headers") if h.strip()]
    try:
        return Rules(ignore_headers=names)
    except ConfigurationError as exc:
        raise pytest.UsageError(f"sakura-http: the ini option sakura_{exc}") from None


def _no_hosts_message(requested: RecordMode, effective: RecordMode) -> str:
    if requested is effective:
        why = "pytest --record-all" if effective is RecordMode.ALL else "pytest --record"
    else:
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


def _state(config: pytest.Config) -> _State:
    return config.stash[_STATE]


# --- where cassettes live ------------------------------------------------------------------


def fixtures_folder(config: pytest.Config, test_path: Path) -> Path:
    """The fixtures folder for a test file: ``sakura_fixtures`` if set; else ``fixtures/`` in
    the nearest ancestor folder named ``tests`` (within the rootdir); else
    ``<rootdir>/tests/fixtures``.  The folder is not created."""
    state = _state(config)
    if state.fixtures_option is not None:
        return state.fixtures_option
    root = state.rootpath
    for parent in test_path.parents:
        if parent.name == "tests":
            return parent / "fixtures"
        if parent == root:
            break
    return root / "tests" / "fixtures"


def resolve_cassette_path(folder: Path, name: str | os.PathLike[str]) -> Path:
    """`name` inside `folder`; raises `ConfigurationError` for a name that escapes it.

    Refused: an empty name, an absolute path, a ``..`` part, a path whose symlinks lead out
    of the folder, and a NUL character (which no file name can hold).
    """
    text = os.fspath(name)
    if "\0" in text:
        raise ConfigurationError(
            f"cassette name {text!r} holds a NUL character: give a plain file name inside the "
            f'fixtures folder {folder}, such as "billing.jsonl"'
        )
    pure = PurePath(text)
    escapes = (
        not text.strip()
        or pure.is_absolute()
        or bool(PureWindowsPath(text).anchor)
        or ".." in pure.parts
        or ".." in PureWindowsPath(text).parts
    )
    candidate = folder / pure
    if not escapes:
        real_folder = os.path.realpath(folder)
        real_target = os.path.realpath(candidate)
        escapes = os.path.commonpath([real_folder, real_target]) != real_folder
    if escapes:
        raise ConfigurationError(
            f"cassette name {text!r} escapes the fixtures folder {folder}: give a relative "
            'path inside it, such as "billing.jsonl" or "payments/refund.jsonl" (no "..", no '
            "absolute path, no symlink that leads out)"
        )
    return candidate


_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+\-\[\]]+")


def default_cassette_name(item: pytest.Item) -> str:
    """``<test module stem>/<test name>.jsonl``; a test in a class is ``<Class>.<test name>``,
    and characters that are not file-safe in parametrize ids become ``-``."""
    name = item.name
    cls = getattr(item, "cls", None)
    if cls is not None:
        name = f"{cls.__name__}.{name}"
    safe = _UNSAFE.sub("-", name)
    if len(safe) > 150:  # file names are limited to 255 bytes: keep it short and unique
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        safe = f"{safe[:130]}-{digest}"
    return f"{item.path.stem}/{safe}.jsonl"


# --- fixtures ------------------------------------------------------------------------------


class Tracked(Protocol):
    """What the factory closes and checks at teardown: a `RecordingTransport`, or what a front
    end built on the plugin opened on a cassette (the ``sakura_proxy`` fixture's proxy)."""

    @property
    def path(self) -> str: ...
    @property
    def config(self) -> CassetteConfig: ...
    @property
    def mode(self) -> RecordMode: ...
    @property
    def appended(self) -> int: ...
    @property
    def raised(self) -> list[CassetteError]: ...
    def unplayed(self) -> list[Exchange]: ...
    def close(self, *, failed: bool = False) -> None: ...


class _Opened:
    """A transport the factory opened, and whether its test must play every exchange."""

    __slots__ = ("assert_all_played", "transport")

    def __init__(self, transport: Tracked, assert_all_played: bool) -> None:
        self.transport = transport
        self.assert_all_played = assert_all_played


class CassetteFactory:
    """The ``sakura_recording`` fixture: builds `RecordingTransport` objects for one test.

    ``sakura_recording("billing.jsonl", outer=..., secret_headers=[...], **transport_options)``
    resolves the name inside the fixtures folder (a name escaping it raises
    `ConfigurationError`), sets the mode from ``--record`` / ``--record-all`` (and
    ``SAKURA_HTTP_RECORD``), ``record_hosts`` from ``sakura_record_hosts`` and merges
    ``secret_headers`` with ``sakura_secret_headers`` (``allow_headers`` with
    ``sakura_allow_headers``).  ``outer`` defaults to a `DefaultOuter`.
    ``assert_all_played=True`` fails the test at teardown if a recorded exchange was not
    played.  Every transport of one cassette in a test shares one session (one play order, one
    re-recording).  At teardown every transport is closed (a re-recording of a failed test is
    dropped, keeping the old file), and the test fails if a transport raised a sakura-http
    error the code under test caught, unless `expect_errors()` was called (or the marker says
    ``expect_errors=True``).
    """

    def __init__(
        self, request: pytest.FixtureRequest, folder: Path, rules: Rules | None = None
    ) -> None:
        self._request = request
        self._state = _state(request.config)
        self.folder = folder
        #: The project's rules (the ``sakura_rules`` fixture, under the header rules of the ini
        #: option ``sakura_ignore_headers``), combined with each cassette's.
        self.rules = self._state.header_rules | (Rules() if rules is None else rules)
        self._opened: list[_Opened] = []
        # One hold on each cassette's session until teardown: the test's transports share it
        # even when the code under test closes one (a `with httpx.Client(...)` block) before
        # opening the next, and a failed test can still drop its re-recording.
        self._holds: dict[str, CassetteUser] = {}

    def expect_errors(self) -> None:
        """The test provokes sakura-http errors or network refusals on purpose and checks
        them itself: do not fail it because the code under test caught them."""
        self._request.node.stash[_EXPECT_ERRORS] = True

    def config(
        self,
        name: str | os.PathLike[str],
        **options: Unpack[CassetteOptions],
    ) -> tuple[Path, CassetteConfig]:
        """The cassette path and configuration `__call__` would use, for front ends built on
        the plugin (the proxy and SDK fixtures): the mode resolved for this run, the ini
        options merged in, error messages worded for pytest."""
        for forbidden in ("mode", "path"):
            if forbidden in options:
                raise TypeError(
                    f"sakura_recording() takes no {forbidden}=: the cassette is the name inside "
                    f"{self.folder}, and the mode comes from pytest --record / --record-all "
                    f"(or {ENV_RECORD})"
                )
        state = self._state
        path = resolve_cassette_path(self.folder, name)
        # The session resolved SAKURA_HTTP_RECORD (and SAKURA_HTTP_STRICT) once; the transport
        # gets that mode and an empty environment, so a cassette shared by several tests is
        # re-recorded once per run under SAKURA_HTTP_RECORD=all too, not once per test.
        mode = state.effective
        if mode is RecordMode.ALL and os.path.realpath(path) in state.rerecorded_paths:
            mode = RecordMode.NEW_EPISODES  # an earlier test re-recorded it in this run: add
        hosts = list(state.record_hosts)
        extra_hosts = options.pop("record_hosts", None)
        if extra_hosts is not None:
            hosts.extend(extra_hosts)
            guard = self._request.node.stash.get(_GUARD, None)
            if guard is not None and mode is not RecordMode.NONE:
                guard.allow(extra_hosts)
        secret_headers = options.pop("secret_headers", ())
        allow_headers = options.pop("allow_headers", ())
        rules = options.pop("rules", None)
        if rules is not None and not isinstance(rules, Rules):
            raise ConfigurationError(f"rules must be a sakura_http.Rules, not {rules!r}")
        config = CassetteConfig(**options).replace(
            rules=self.rules if rules is None else self.rules | rules,
            mode=mode,
            secret_headers=frozenset([*state.secret_headers, *secret_headers]),
            allow_headers=frozenset([*state.allow_headers, *allow_headers]),
            record_hosts=tuple(hosts),
            advice=state.advice,
        )
        return path, config

    def __call__(
        self,
        name: str | os.PathLike[str],
        *,
        outer: Any = None,
        assert_all_played: bool = False,
        **transport_options: Unpack[CassetteOptions],
    ) -> RecordingTransport:
        path, config = self.config(name, **transport_options)
        transport = RecordingTransport(
            path,
            outer=DefaultOuter() if outer is None else outer,
            config=config,
            environ={},
        )
        self.track(transport, assert_all_played=assert_all_played)
        return transport

    def track(self, opened: Tracked, *, assert_all_played: bool = False) -> None:
        """Close and check `opened` at teardown as the factory's own transports are: a front
        end built on the plugin (the ``sakura_proxy`` fixture) opens its cassette with the
        path and configuration from `config()`, then hands what it opened here."""
        key = os.path.realpath(opened.path)
        if key not in self._holds:
            self._holds[key] = CassetteSession.open(opened.path, opened.config, can_record=False)
        self._opened.append(_Opened(opened, assert_all_played))

    def _finish(self) -> None:
        """Close every transport, note what was written, fail on what went wrong."""
        problems: list[str] = []
        node = self._request.node
        excinfo = node.stash.get(_CALL_EXCINFO, None)
        call_passed = node.stash.get(_CALL_EXCINFO, "unset") is None
        for opened in self._opened:
            transport = opened.transport
            try:
                transport.close(failed=not call_passed)
            except Exception as exc:
                problems.append(f"closing {transport.path} failed: {type(exc).__name__}: {exc}")
            rerecorded = transport.mode is RecordMode.ALL
            if rerecorded and call_passed:
                self._state.rerecorded_paths.add(os.path.realpath(transport.path))
        for key, hold in self._holds.items():
            self._state.ledger.observe(key, hold.session.played())
            try:
                hold.close(failed=not call_passed)
            except Exception as exc:
                problems.append(f"closing {hold.path} failed: {type(exc).__name__}: {exc}")
        for opened in self._opened:
            transport = opened.transport
            rerecorded = transport.mode is RecordMode.ALL
            if transport.appended:
                self._state.note(
                    _display(transport.path, self._state.rootpath),
                    _display(self.folder, self._state.rootpath),
                    transport.appended,
                    rerecorded and call_passed,
                    discarded=rerecorded and not call_passed,
                )
        seen = _exception_chain(excinfo.value) if excinfo is not None else set()
        # The same miss raised again (a client that retried it) is the test's failure, once.
        failed_with = {str(e) for e in _raised_in(excinfo.value)} if excinfo is not None else set()
        caught = [
            exc
            for opened in self._opened
            for exc in opened.transport.raised
            if id(exc) not in seen and str(exc) not in failed_with
        ]
        if caught and not _expects_errors(node):
            problems.append(_caught_message(caught, "sakura-http error"))
        for opened in self._opened:
            if not (opened.assert_all_played and call_passed):
                continue
            unplayed = opened.transport.unplayed()
            if unplayed:
                lines = [
                    f"{len(unplayed)} recorded exchange(s) of {opened.transport.path} were not "
                    "played (assert_all_played=True):"
                ]
                lines += [f"  {e.method} {e.url} -> {_outcome(e)}" for e in unplayed]
                lines.append(
                    "  remove them from the cassette (or re-record it with `pytest "
                    "--record-all`), or drop assert_all_played=True"
                )
                problems.append("\n".join(lines))
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)


def _expects_errors(node: pytest.Item) -> bool:
    if node.stash.get(_EXPECT_ERRORS, False):
        return True
    marker = node.get_closest_marker("cassette")
    return bool(marker is not None and marker.kwargs.get("expect_errors", False))


def _outcome(exchange: Exchange) -> str:
    return f"error {exchange.error.type}" if exchange.error is not None else str(exchange.status)


def _display(path: str | os.PathLike[str], root: Path) -> str:
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


def _raised_in(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception it was raised from or during, groups included, outermost
    first (each once)."""
    seen: set[int] = set()
    found: list[BaseException] = []
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        todo += list(getattr(current, "exceptions", ()))
    return found


def _exception_chain(exc: BaseException) -> set[int]:
    """ids of `exc` and every exception it was raised from or during, groups included."""
    return {id(e) for e in _raised_in(exc)}


def _caught_message(errors: list[Any], what: str) -> str:
    lines = [
        f"the code under test caught {len(errors)} {what}(s); the test fails anyway, because "
        "a caught error would hide a missing or unsafe exchange:"
    ]
    for error in errors:
        text = str(error).replace("\n", "\n    ")
        # By its public name (sakura_http.CassetteMiss): the package re-exports every error.
        lines.append(f"  {type(error).__module__}.{type(error).__qualname__}: {text}")
    return "\n".join(lines)


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


def marker_cassette(item: pytest.Item) -> tuple[str | os.PathLike[str], dict[str, Any]]:
    """The cassette name and transport options of the test's ``cassette`` marker (the default
    name without the marker); ``expect_errors`` (read at teardown) and the keywords of the SDK
    fixtures, patch_clients and the proxy (`PROXY_OPTIONS`) are left out."""
    marker = item.get_closest_marker("cassette")
    args: tuple[Any, ...] = marker.args if marker is not None else ()
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if len(args) > 1:
        raise TypeError(
            f"@pytest.mark.cassette takes one cassette name, not {len(args)}: {args!r}; "
            "use sakura_recording() for more cassettes in one test"
        )
    name = args[0] if args else options.pop("name", None)
    options.pop("expect_errors", None)  # read at teardown by _expects_errors
    for key in _FRONT_END_OPTIONS:
        options.pop(key, None)
    return (name if name is not None else default_cassette_name(item)), options


def fail_if_unused(transport: RecordingTransport, fixture: str) -> None:
    """Fail the test if `transport` saw no request while its cassette does not exist: the
    client under test was most likely never given it, and ran live.  Requests sent on to
    `passthrough_hosts` count: they went through the transport, and are never written."""
    used = transport.raised or transport.appended or transport.passed_through
    if used or os.path.exists(transport.path):
        return
    pytest.fail(
        f"{fixture}: no request went through the transport of {transport.path}, and that "
        "cassette does not exist: the client under test was probably not given the transport, "
        f"so it ran without a cassette. Give it the transport (httpx.Client(transport="
        f"{fixture}), or http_client=httpx2.Client(transport={fixture}) for an SDK; "
        "sakura_anthropic and sakura_openai are ready-wired SDK clients), or, for an app that "
        "builds its own clients, use @pytest.mark.cassette(patch_clients=True).",
        pytrace=False,
    )


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
    state = _state(request.config)
    item = request.node
    if not (_uses_sakura(item, state) or state.block_network):
        yield
        return
    guard = NetworkGuard(
        _guard_reason(state), allowed=state.record_hosts if state.recording else ()
    )
    item.stash[_GUARD] = guard
    with guard.installed():
        yield
    excinfo = item.stash.get(_CALL_EXCINFO, None)
    seen = _exception_chain(excinfo.value) if excinfo is not None else set()
    caught = [error for error in guard.blocked if id(error) not in seen]
    if caught and not _expects_errors(item):
        pytest.fail(_caught_message(caught, "network refusal"), pytrace=False)


def _uses_sakura(item: pytest.Item, state: _State) -> bool:
    """Whether `item` uses sakura-http: its marker, a fixture of the plugin's, patch_clients."""
    return (
        item.get_closest_marker("cassette") is not None
        or state.patch_clients  # every test replays through its cassette
        or bool(_SAKURA_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    )


def _guard_reason(state: _State) -> str:
    if state.recording:
        hosts = ", ".join(state.record_hosts)
        return (
            f"While recording, only loopback addresses and sakura_record_hosts ({hosts}) are "
            "reachable; add the host to sakura_record_hosts if recording from it is intended."
        )
    why = "uses sakura-http" if not state.block_network else "runs with sakura_block_network"
    return (
        f"The test {why}, so only loopback addresses (127.0.0.1, ::1, localhost) are reachable, "
        "and this request did not go through a sakura transport. Give the client one: pass "
        "transport=sakura_transport, use an SDK fixture (sakura_anthropic, sakura_openai), or "
        "mark the test @pytest.mark.cassette(patch_clients=True) for clients the app builds. "
        "For requests and aiohttp, use the sakura_requests or sakura_aiohttp fixture."
    )


# --- outcome bookkeeping and the summary ---------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if call.when == "call":
        item.stash[_CALL_EXCINFO] = call.excinfo
    report = yield
    if _STATE in item.config.stash and (report.failed or report.skipped):
        # A test that did not pass may have stopped before opening the cassettes it plays.
        outcome = "failed" if report.failed else "was skipped"
        if report.failed or _uses_sakura(item, _state(item.config)):
            _state(item.config).ledger.block(f"{item.nodeid} {outcome}")
    return report


def pytest_deselected(items: list[pytest.Item]) -> None:
    config = items[0].config if items else None
    if config is None or _STATE not in config.stash:
        return
    state = _state(config)
    users = [item for item in items if _uses_sakura(item, state)]
    if users:
        state.ledger.block(f"{len(users)} test(s) using cassettes were deselected")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _STATE not in config.stash:
        return
    state = _state(config)
    if hasattr(config, "workeroutput"):
        config.workeroutput[_WORKER_OUTPUT_KEY] = [
            [path, entry.folder, entry.appended, entry.rerecorded, entry.discarded]
            for path, entry in state.written.items()
        ]
        config.workeroutput[_LEDGER_KEY] = state.ledger.to_wire()
        return
    if exitstatus != 0:
        state.ledger.block("the run did not pass")
    _find_dead_exchanges(state)


def _find_dead_exchanges(state: _State) -> None:
    """Fill `state.dead`, pruning under --prune when nothing blocks it (see _prune)."""
    for path, played in sorted(state.ledger.plays.items()):
        dead = dead_exchanges(path, played)
        if not dead:
            continue
        pruned = 0
        if state.prune and not state.ledger.blockers:
            pruned = prune_cassette(path, played)
        state.dead[_display(path, state.rootpath)] = (dead, pruned)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: gather what a worker recorded into the controller's summary."""
    output = getattr(node, "workeroutput", None) or {}
    config = node.config
    if _STATE not in config.stash:
        return
    for path, folder, appended, rerecorded, discarded in output.get(_WORKER_OUTPUT_KEY, ()):
        _state(config).note(
            str(path), str(folder), int(appended), bool(rerecorded), bool(discarded)
        )
    _state(config).ledger.merge(output.get(_LEDGER_KEY, {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or _STATE not in config.stash:
        return
    state = _state(config)
    _summarize_written(terminalreporter, state)
    _summarize_dead(terminalreporter, state)


def _summarize_written(terminalreporter: Any, state: _State) -> None:
    if not state.written:
        return
    terminalreporter.write_sep("=", "sakura-http: cassettes recorded")
    for path, entry in sorted(state.written.items()):
        count = f"{entry.appended} exchange{'s' if entry.appended != 1 else ''}"
        if entry.discarded and not entry.rerecorded:
            terminalreporter.write_line(
                f"{path}: re-recording of {count} dropped because its test failed (the old "
                "file was kept)"
            )
        elif entry.rerecorded:
            terminalreporter.write_line(f"{path}: re-recorded, {count} (replaced the old file)")
        else:
            terminalreporter.write_line(f"{path}: {count} appended")
    folders = sorted({entry.folder for entry in state.written.values()})
    where = " ".join(_common_folders(folders))
    terminalreporter.write_line(
        f"Review the changes before committing: git diff {where} "
        f"(new cassettes: git status {where})"
    )


def _summarize_dead(terminalreporter: Any, state: _State) -> None:
    if not state.dead:
        return
    terminalreporter.write_sep("=", "sakura-http: recorded exchanges no test played")
    for path, (dead, pruned) in sorted(state.dead.items()):
        count = f"{len(dead)} exchange{'s' if len(dead) != 1 else ''}"
        if pruned:
            terminalreporter.write_line(f"{path}: pruned {count} no test played")
        else:
            terminalreporter.write_line(f"{path}: {count} no test played")
        for exchange in dead[:5]:
            terminalreporter.write_line(
                f"  {exchange.method} {exchange.url} -> {_outcome(exchange)}"
            )
        if len(dead) > 5:
            terminalreporter.write_line(f"  ... and {len(dead) - 5} more")
    if any(pruned for _, pruned in state.dead.values()):
        return
    blockers = state.ledger.blockers
    if state.prune:
        shown = "; ".join(blockers[:3]) + (
            f"; and {len(blockers) - 3} more" if len(blockers) > 3 else ""
        )
        terminalreporter.write_line(
            f"Not pruned: pruning needs a run in which every test ran and passed, and {shown}"
        )
    elif blockers:
        terminalreporter.write_line(
            "Tests that did not run or pass in this run may play them; once the whole suite "
            "passes, drop the rest with `pytest --record --prune`"
        )
    else:
        terminalreporter.write_line(
            "They are left over from earlier recordings (a request that changed since): drop "
            "them with `pytest --record --prune`, or re-record with `pytest --record-all`"
        )


def _common_folders(folders: list[str]) -> list[str]:
    """The shortest folders covering `folders`, e.g. tests/fixtures for its subfolders."""
    kept: list[str] = []
    for folder in sorted(folders, key=len):
        if not any(folder == k or folder.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(folder)
    return sorted(kept)


from ._proxy_fixture import sakura_proxy  # noqa: E402,F401  (the sakura_proxy fixture)
