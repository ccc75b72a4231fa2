"""`CassetteFactory`, the ``sakura_recording`` fixture's value: opens the test's cassettes with
the run's mode and ini options, and closes and checks them at teardown; and the ``cassette``
marker, read once for every fixture built on the factory (`marker_cassette`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from .._config import CassetteConfig, CassetteOptions
from .._core import ENV_RECORD, RecordMode
from .._exceptions import CassetteError, ConfigurationError
from .._format import Exchange
from .._libraries import DefaultOuter
from .._rules import Rules
from .._session import CassetteSession, CassetteUser
from .._transport import RecordingTransport
from ._caught import caught_message, exception_chain, expects_errors, raised_in
from ._paths import default_cassette_name, display, resolve_cassette_path
from ._state import CALL_EXCINFO, EXPECT_ERRORS, GUARD, plugin_state

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = [
    "PROXY_OPTIONS",
    "CassetteFactory",
    "Tracked",
    "fail_if_unused",
    "marker_cassette",
    "outcome",
]

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
        self._state = plugin_state(request.config)
        self.folder = folder
        #: The project's rules (the ``sakura_rules`` fixture, under the header rules of the ini
        #: option ``sakura_ignore_headers``), combined with each cassette's.
        self.rules = self._state.header_rules | (Rules() if rules is None else rules)
        self._opened: list[_Opened] = []
        # One hold on each cassette's session until teardown: the test's transports share it
        # even when the code under test closes one (a `with httpx.Client(...)` block) before
        # opening the next, and a failed test can still drop its re-recording.
        self._holds: dict[str, CassetteUser] = {}
        # --verify: this test's temporary cassettes are its own (see _verify).
        live_run = self._state.live_run
        self._live_test = live_run.begin_test() if live_run is not None else 0

    def expect_errors(self) -> None:
        """The test provokes sakura-http errors or network refusals on purpose and checks
        them itself: do not fail it because the code under test caught them."""
        self._request.node.stash[EXPECT_ERRORS] = True

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
        if state.live_run is not None:  # --verify: a temporary cassette, never the real one
            path = state.live_run.live_path(path, self._live_test)
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
            guard = self._request.node.stash.get(GUARD, None)
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
        excinfo = node.stash.get(CALL_EXCINFO, None)
        call_passed = node.stash.get(CALL_EXCINFO, "unset") is None
        for opened in self._opened:
            transport = opened.transport
            try:
                transport.close(failed=not call_passed)
            except Exception as exc:
                problems.append(f"closing {transport.path} failed: {type(exc).__name__}: {exc}")
            rerecorded = transport.mode is RecordMode.ALL
            if rerecorded and call_passed:
                self._state.rerecorded_paths.add(os.path.realpath(transport.path))
        # A passing test's re-recording that lacks an exchange it sent keeps the old cassette.
        incomplete = {
            key
            for key, hold in self._holds.items()
            if call_passed and hold.session.rerecording_kept_old
        }
        live_run = self._state.live_run
        drifted: dict[str, list[str]] = {}
        for key, hold in self._holds.items():
            if live_run is None:
                self._state.ledger.observe(key, hold.session.played())
            else:  # --verify: compare what the test played live with the real cassette
                report = live_run.check(key, hold.session.played(), hold.matcher)
                real = live_run.real_path(key)
                if report and real is not None:
                    drifted[real] = report
            try:
                hold.close(failed=not call_passed)
            except Exception as exc:
                problems.append(f"closing {hold.path} failed: {type(exc).__name__}: {exc}")
        for opened in self._opened:
            transport = opened.transport
            rerecorded = transport.mode is RecordMode.ALL
            kept = rerecorded and os.path.realpath(transport.path) in incomplete
            if transport.appended and live_run is None:  # (--verify writes no cassette)
                self._state.note(
                    display(transport.path, self._state.rootpath),
                    display(self.folder, self._state.rootpath),
                    transport.appended,
                    rerecorded and call_passed and not kept,
                    discarded=rerecorded and (not call_passed or kept),
                    incomplete=kept,
                )
        seen = exception_chain(excinfo.value) if excinfo is not None else set()
        # The same miss raised again (a client that retried it) is the test's failure, once.
        failed_with = {str(e) for e in raised_in(excinfo.value)} if excinfo is not None else set()
        caught = [
            exc
            for opened in self._opened
            for exc in opened.transport.raised
            if id(exc) not in seen and str(exc) not in failed_with
        ]
        if caught and not expects_errors(node):
            problems.append(caught_message(caught, "sakura-http error"))
        if drifted and live_run is not None and live_run.strict:
            root = self._state.rootpath
            problems.append(live_run.strict_failure(drifted, lambda real: display(real, root)))
        for opened in self._opened:
            if not (opened.assert_all_played and call_passed):
                continue
            unplayed = opened.transport.unplayed()
            if unplayed:
                lines = [
                    f"{len(unplayed)} recorded exchange(s) of {opened.transport.path} were not "
                    "played (assert_all_played=True):"
                ]
                lines += [f"  {e.method} {e.url} -> {outcome(e)}" for e in unplayed]
                lines.append(
                    "  remove them from the cassette (or re-record it with `pytest "
                    "--record-all`), or drop assert_all_played=True"
                )
                problems.append("\n".join(lines))
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)


def outcome(exchange: Exchange) -> str:
    return f"error {exchange.error.type}" if exchange.error is not None else str(exchange.status)


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
    options.pop("expect_errors", None)  # read at teardown by expects_errors
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
