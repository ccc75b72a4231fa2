"""One cassette in use in this process: its index, what has been played, what to append.

`CassetteSession` is everything a front end needs apart from moving bytes: the safety checks,
the index lookup, the decision (from `_core`), capturing an exchange from a live response,
handing it to the write pipeline (`_pipeline`) and persisting what that gives.  There is one
session per cassette file per process: every transport, fixture, SDK helper and proxy handler
that opens the same real path shares it, through its own `CassetteUser`
(`CassetteSession.open`), so they share one index, one play counter per match key, one memory
of the secrets their requests carried and, in mode "all", one re-recording.  The cassette is
finished when its last user closes.

Each user brings its own `CassetteConfig`; the options that shape the shared index and file
(`CassetteConfig.session_options`) must agree, and secret headers are merged.  Only
`CassetteUser.commit()` (the session's `append()`) and `close()` touch the disk, so async
callers run them in a worker thread when they would wait.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from ._advice import Advice
from ._age import Dating, today
from ._cassette import AtomicRecording, append_lines, load_cassette, open_for_writing
from ._config import CassetteConfig
from ._core import Action, Actions, RecordMode, Refusal, actions
from ._decoding import BodyDecoder, check_redactable
from ._exceptions import (
    BodyTooLargeError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingForbidden,
    hidden_in_tracebacks,
)
from ._exchange import RequestData, new_exchange
from ._format import Exchange, FaultInfo, Headers
from ._hosts import HostList
from ._matching import Matcher, MatchKey, explain_miss
from ._pipeline import prepare
from ._policy import (
    Redactor,
    SecretMemory,
    check_body_size,
    is_known_credential_header,
    query_secrets,
    refuse_credentials,
    secrets_of,
    shown_url,
)

__all__ = ["CassetteSession", "CassetteUser", "Plan", "ResponseRecorder"]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks


class _Slot:
    """The recorded exchanges sharing one match key, in order, and where the first one not yet
    played may be (every exchange before `cursor` has been played)."""

    __slots__ = ("cursor", "exchanges")

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.cursor = 0


class Plan(NamedTuple):
    """What to do with one request: replay `exchange`, or record under `key` (None: it was not
    looked up, the action being the same whatever the cassette holds)."""

    action: Action
    key: MatchKey | None
    exchange: Exchange | None = None


class AdvisedErrors:
    """Word the fix of an engine error raised inside for the front end `advice` speaks for."""

    __slots__ = ("_advice",)

    def __init__(self, advice: Advice) -> None:
        self._advice = advice

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, CredentialHeaderError) and exc.fix is None:
            exc.fix = self._advice.declare_secret(exc.header)
            # Offered only for a name of credential shape: allowing a credential by name
            # (authorization) would write its value to the cassette.
            if not is_known_credential_header(exc.header):
                exc.fix += f"; if it is not a credential, {self._advice.allow_header(exc.header)}"
        elif isinstance(exc, BodyTooLargeError) and exc.fix is None:
            exc.fix = self._advice.raise_body_limit(exc.side, exc.suggested_limit)


_CHECKED_HEADERS_MEMO = 4096

# Weak values: a session whose users were all dropped without closing goes away with them.
_REGISTRY: weakref.WeakValueDictionary[str, CassetteSession] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


class CassetteSession:
    """The state of one cassette shared by its users in this process.  Thread-safe.

    Open it with `CassetteSession.open(path, config, can_record=...)`, which returns a
    `CassetteUser`; never build it directly.  Users may match with different rules (ignored
    headers, secrets): the session keeps one index per set of rules, all over the same
    exchanges and the same record of what was played.
    """

    def __init__(self, path: Path, key: str, config: CassetteConfig) -> None:
        self.path = path
        self._key = key
        # Where it is written: the file a symlink points to, so a re-recording through the link
        # replaces that file (as appends through it reach it), not the link.
        self._file = Path(key)
        #: "all" when the cassette is being re-recorded, else the first user's mode.
        self.mode = config.mode
        self._lock = threading.RLock()
        self._users = 0
        self._failed = False
        self.appended = 0
        #: How many answers were replayed from the cassette (a repeat counts again).
        self.replays = 0

        try:
            content = load_cassette(self.path)
            header, recorded = content.header, content.exchanges
        except CassetteFormatError:
            if self.mode is not RecordMode.ALL:
                raise
            header, recorded = {}, []  # re-recording replaces the unreadable file
        self._header: dict[str, Any] = header  # encode_header() keeps only its extra keys
        self.exchanges: list[Exchange] = [] if self.mode is RecordMode.ALL else recorded
        #: The day written on each exchange: a re-recording keeps the day of one unchanged.
        self._dating = Dating(recorded if self.mode is RecordMode.ALL else ())
        self._played: set[int] = set()  # ids of the exchanges played (or recorded) in this run
        self._indexes: dict[Matcher, dict[MatchKey, _Slot]] = {}
        # Re-recording claims the cassette at once (other processes' appends are refused from
        # now on); otherwise a `.recording` file a killed re-recording left is removed.
        self._rerecording: AtomicRecording | None = open_for_writing(
            self._file, self._header, rerecord=self.mode is RecordMode.ALL
        )
        #: Every secret any user's requests carried, searched for in everything written.
        self.secrets = SecretMemory()

    def _index(self, matcher: Matcher) -> dict[MatchKey, _Slot]:
        """The index of the exchanges by their key under `matcher`, built on first use."""
        index = self._indexes.get(matcher)
        if index is None:
            index = {}
            for exchange in self.exchanges:
                index.setdefault(matcher.key_of_exchange(exchange), _Slot()).exchanges.append(
                    exchange
                )
            self._indexes[matcher] = index
        return index

    # --- users -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], config: CassetteConfig, *, can_record: bool
    ) -> CassetteUser:
        """Join the session of `path` in this process, opening it (and reading the cassette)
        if no one has it open.  `config.mode` is the effective mode (after the environment).

        Raises `CassetteFormatError` for an unreadable cassette (except in mode "all"), and
        `ConfigurationError` for a path holding a NUL character, or when one user would
        re-record the cassette (mode "all") while another replays or appends to it.
        """
        text = os.fspath(path)
        if "\0" in text:
            raise ConfigurationError(
                f"the cassette path {text!r} holds a NUL character; give a plain file name"
            )
        resolved = Path(text)
        key = os.path.realpath(resolved)
        with _REGISTRY_LOCK:
            session = _REGISTRY.get(key)
            if session is None:
                session = cls(resolved, key, config)
                _REGISTRY[key] = session
            elif (config.mode is RecordMode.ALL) != (session.mode is RecordMode.ALL):
                raise ConfigurationError(
                    f"the cassette {session.path} is already open in this process with mode "
                    f"{session.mode.value!r}, and is opened again with mode "
                    f"{config.mode.value!r}. Re-recording a cassette (mode 'all') while another "
                    "transport replays or appends to it would lose that transport's exchanges: "
                    "close the other transport first (or use a `with` block), or open both in "
                    "the same mode"
                )
            session._users += 1
        return CassetteUser(session, config, can_record)

    @property
    def rerecording_kept_old(self) -> bool:
        """Whether the old cassette will be kept when this session ends, however its users
        close: an exchange that was sent could not be written (`fail_rerecording`), or a user
        already closed with ``failed=True``."""
        return self._failed

    def fail_rerecording(self) -> None:
        """Mark a re-recording (mode "all") incomplete: when the last user leaves, the old
        cassette is kept.  Nothing happens in the other modes (appends already written stay)."""
        if self.mode is RecordMode.ALL:
            with _REGISTRY_LOCK:
                self._failed = True

    def _leave(self, failed: bool) -> None:
        with _REGISTRY_LOCK:
            self._failed = self._failed or failed
            self._users -= 1
            if self._users > 0:
                return
            if _REGISTRY.get(self._key) is self:
                del _REGISTRY[self._key]
        with self._lock:
            recording, self._rerecording = self._rerecording, None
        if recording is not None:
            if self._failed:
                recording.discard()
            else:
                recording.replace_cassette()

    # --- per request -------------------------------------------------------------------------

    def plan(
        self, request: RequestData, actions: Actions, matcher: Matcher, advice: Advice
    ) -> Plan:
        """The decision for `request` by a user whose row of the tables is `actions`.

        A row with one action whatever the cassette holds (a re-recording's: record) looks
        nothing up: no match key, no index (a re-recording never builds one)."""
        if actions.hit is actions.exhausted is actions.absent:
            return Plan(actions.absent, None)
        key = matcher.key_of_request(request)
        with self._lock:
            index = self._indexes.get(matcher)
            slot = (index if index is not None else self._index(matcher)).get(key)
            if slot is None:
                action = actions.absent
            else:
                played = self._played
                exchanges = slot.exchanges
                while slot.cursor < len(exchanges) and id(exchanges[slot.cursor]) in played:
                    slot.cursor += 1
                action = actions.hit if slot.cursor < len(exchanges) else actions.exhausted
            if action is Action.REPLAY:
                assert slot is not None
                exchange = slot.exchanges[slot.cursor]
                self._played.add(id(exchange))
                slot.cursor += 1
                self.replays += 1
                return Plan(action, key, exchange)
            if action is Action.REPEAT:
                assert slot is not None
                self.replays += 1
                return Plan(action, key, slot.exchanges[-1])
        if action is Action.MISS:
            raise self._miss(request, slot, matcher, advice)
        return Plan(action, key, None)

    def _miss(
        self, request: RequestData, slot: _Slot | None, matcher: Matcher, advice: Advice
    ) -> CassetteMiss:
        # No message prints a secret query value (`shown_url`): a miss goes to CI logs.
        url = shown_url(request.url, matcher.secret_query)
        head = f"{request.method} {url} is not in the cassette {self.path}"
        lines = [head]
        nearest: list[str] = []
        if slot is not None:
            lines.append(
                f"  all {len(slot.exchanges)} recorded exchange(s) matching it were already "
                f"played in this run, and allow_repeats=False; {advice.allow_repeats()}"
            )
        else:
            for index, exchange, diffs in explain_miss(
                request, self.exchanges, matcher, advice=advice
            ):
                shown = shown_url(exchange.url, matcher.secret_query)
                text = f"#{index + 1} {exchange.method} {shown}"
                nearest.append("\n      ".join([text, *diffs]))
            if nearest:
                lines.append("  nearest recorded exchanges (what differs):")
                lines.extend(f"    {n}" for n in nearest)
            else:
                lines.append("  the cassette holds no exchanges")
        lines.append(f"  {advice.record_missing()}")
        return CassetteMiss(
            "\n".join(lines),
            method=request.method,
            url=request.url,
            path=str(self.path),
            nearest=nearest,
        )

    def append(
        self,
        exchange: Exchange,
        known: tuple[Matcher, MatchKey] | None = None,
        *,
        wait: bool = True,
    ) -> bool:
        """Append `exchange` to the cassette (one locked write) and index it as played; `known`
        is its key under one set of rules, when the caller has it.  With `wait` False, a lock
        another thread or process holds is not waited for: nothing is done and the answer is
        False (else True)."""
        exchange, line = self._dating.stamp(exchange)
        if not self._lock.acquire(blocking=wait):
            self._dating.give_back(exchange)  # (it is dated again when it is appended)
            return False
        try:
            if self.mode is RecordMode.ALL:
                if self._rerecording is None:
                    self._rerecording = AtomicRecording(self._file, self._header)
                try:
                    self._rerecording.append(line)  # (a file only this process writes: no lock)
                except BaseException:
                    # Not written (a full disk): the re-recording lacks an exchange that was
                    # sent, so it is incomplete and the old cassette is kept when it ends.
                    self.fail_rerecording()
                    raise
            elif not append_lines(self._file, line, self._header, wait=wait):
                self._dating.give_back(exchange)
                return False
            self.exchanges.append(exchange)
            self._played.add(id(exchange))
            for matcher, index in self._indexes.items():
                key = None
                if known is not None and (known[0] is matcher or known[0] == matcher):
                    key = known[1]
                if key is None:
                    key = matcher.key_of_exchange(exchange)
                index.setdefault(key, _Slot()).exchanges.append(exchange)
            self.appended += 1
        finally:
            self._lock.release()
        return True

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges not played in this run, in cassette order."""
        with self._lock:
            return [e for e in self.exchanges if id(e) not in self._played]

    def played(self) -> list[Exchange]:
        """The exchanges played or recorded in this run, in the order they are held."""
        with self._lock:
            return [e for e in self.exchanges if id(e) in self._played]


class CassetteUser:
    """One front end's use of a shared `CassetteSession`: a transport, a fixture, a proxy.

    It holds what is the caller's own: its configuration (record hosts, limits, the words of
    its advice), whether it can record (it has an outer transport), and how many exchanges it
    appended.  Every step a front end drives goes through it:

    ``plan`` (the safety checks, then the decision) -> replay ``plan.exchange``, or record it
    (`_steps.record_steps`: ``recorder`` ``start`` / ``feed`` / ``decode_tail`` /
    ``exchange_to_write``, then ``commit``); and ``close`` once, at the end.
    """

    def __init__(self, session: CassetteSession, config: CassetteConfig, can_record: bool):
        self.session = session
        self.config = config
        self.matcher = Matcher(
            ignore=config.ignore_headers,
            secret=config.secret_headers,
            secret_query=config.secret_query_params,
            rules=config.rules,
        )
        self.can_record = can_record
        #: Words the fix of an engine error raised while this user records (stateless: one for
        #: every use).
        self.advised = AdvisedErrors(config.advice)
        self._has_rules = bool(config.rules)  # (a `Rules` is frozen: asked once, not per exchange)
        self._secrets = session.secrets
        self._record_hosts: HostList | None = config.record_host_list
        self._passthrough = config.passthrough_host_list
        # Whether a request may be recorded depends on its host only under `record_hosts`.
        self._refusal_varies = can_record and self._record_hosts is not None
        self._fixed_refusal = Refusal.MAY_RECORD if can_record else Refusal.NO_OUTER
        # This user's row of the decision tables, for each refusal its requests can meet.
        self._actions = {
            refusal: actions(config.mode, config.allow_repeats, refusal)
            for refusal in (
                (Refusal.MAY_RECORD, Refusal.HOST) if can_record else (Refusal.NO_OUTER,)
            )
        }
        #: Whether any host is passed through (when none is, a front end need not ask).
        self.has_passthrough = bool(self._passthrough)
        self.appended = 0
        self.closed = False
        # Request header lists already found free of undeclared credentials: a client sends the
        # same list over and over, and a list of new values is simply checked (bounded).  For
        # benchmark row "1. The same, sakura-http and the floor alternating in one process"
        # (replay, <= 1.10x): checking every request cost 15,800 instructions more, 2.6% of
        # the floor's 624,000 (docs/performance.md, "Plain code").
        self._checked_headers: set[Headers] = set()

    @property
    def path(self) -> Path:
        return self.session.path

    @property
    def mode(self) -> RecordMode:
        return self.config.mode

    def is_passthrough(self, host: str, port: int | None) -> bool:
        return (host, port) in self._passthrough

    def _check_request(self, request: RequestData) -> None:
        """The safety rules that hold before anything is replayed or forwarded."""
        config = self.config
        headers = request.headers
        if headers in self._checked_headers and len(request.body) <= config.max_body_bytes:
            return  # the same headers passed before, and the body is within its limit
        with self.advised:
            refuse_credentials(headers, config.secret_headers, config.allow_headers)
            if len(self._checked_headers) < _CHECKED_HEADERS_MEMO:
                self._checked_headers.add(headers)
            check_body_size(len(request.body), config.max_body_bytes, "request")

    def _refusal(self, request: RequestData) -> Refusal:
        """Why this user may not record `request`, if it may not (`Refusal.MAY_RECORD` if it
        may)."""
        hosts = self._record_hosts
        if hosts is not None and (request.host, request.port) not in hosts:
            return Refusal.HOST
        return Refusal.MAY_RECORD

    def plan(self, request: RequestData, sent_url: str = "") -> Plan:
        """Check `request` and decide what to do with it: the safety checks first (an
        undeclared credential header raises `CredentialHeaderError`, an over-size body
        `BodyTooLargeError`, before anything is replayed or forwarded), then the decision
        (`CassetteMiss` or `RecordingForbidden` when it is neither replayed nor recorded).
        `sent_url` is its URL as sent: the values of its secret query parameters are searched
        for in it as they are when it is written (a body echoing one matches what was written).

        A replayed exchange counts as played at once, so concurrent identical requests take
        successive recorded exchanges.
        """
        self._check_request(request)
        refusal = self._refusal(request) if self._refusal_varies else self._fixed_refusal
        redactor = self.redactor(request, sent_url)
        if redactor.secrets:
            # Matched (and shown in a miss) as it would be written: echoes of secrets redacted.
            request = redactor.request(request)
        plan = self.session.plan(request, self._actions[refusal], self.matcher, self.config.advice)
        if plan.action is Action.REFUSE:
            raise self._forbidden(request, refusal)
        return plan

    def _forbidden(self, request: RequestData, refusal: Refusal) -> RecordingForbidden:
        advice = self.config.advice
        if refusal is Refusal.NO_OUTER:
            return RecordingForbidden(
                f"{request.method} {shown_url(request.url, self.config.secret_query_params)} "
                f"must be recorded (mode {self.mode.value!r}), "
                f"but the transport for {self.path} has outer=None, so it has no "
                f"network. {advice.give_outer()[:1].upper()}{advice.give_outer()[1:]}",
                host=request.host,
            )
        allowed = ", ".join(self._record_hosts.entries if self._record_hosts else ()) or "none"
        return RecordingForbidden(
            f"{request.method} {shown_url(request.url, self.config.secret_query_params)} "
            "would record from host "
            f"{request.host}:{request.port}, which is not in record_hosts ({allowed}). "
            f"Add it if recording from it is intended: {advice.add_record_host(request.host)}",
            host=request.host,
        )

    def redactor(self, request: RequestData, sent_url: str = "") -> Redactor:
        """The redactor for what is written of `request`: the secrets it carries (its declared
        secret headers' values, and the values of the secret query parameters of `sent_url`,
        its URL as sent) join the session's, and it searches for every secret the session
        knows."""
        config = self.config
        if not config.secret_headers and "?" not in sent_url:
            return self._secrets.redactor  # (it carries no secret of its own)
        own = secrets_of(request.headers, config.secret_headers)
        if "?" in sent_url:
            own |= query_secrets(sent_url, config.secret_query_params)
        return self._secrets.learn(own) if own else self._secrets.redactor

    def recorder(self, request: RequestData, sent_url: str = "") -> ResponseRecorder:
        """Start recording the response to `request` (before it is sent, or once the outer
        transport answered).  `sent_url` is its URL as sent, before its secret query
        parameters were redacted: their values are searched for in everything written."""
        self.redactor(request, sent_url)  # (its secrets join the session's)
        return ResponseRecorder(self, request)

    def fault_exchange(self, request: RequestData, error: BaseException) -> Exchange | None:
        """The exchange recording a transport error, or None when `record_errors` is off (or
        the `before_record` hook declined it)."""
        if not self.config.record_errors:
            return None
        fault = FaultInfo(type(error).__name__, str(error))
        return self.prepare(
            Exchange(request.method, request.url, request.headers, request.body, None, error=fault)
        )

    def prepare(self, captured: Exchange, decoder: BodyDecoder | None = None) -> Exchange | None:
        """The exchange to write for `captured`, as the live traffic gave it (None: the
        `before_record` hook declined it): the write pipeline (`_pipeline.prepare`), searching
        for every secret the session knows.  `decoder` decoded the response body: one it had to
        keep encoded is refused while a secret may be in it (`check_redactable`)."""
        redactor = self._secrets.redactor
        try:
            with self.advised:
                if decoder is not None:
                    check_redactable(decoder, redactor)
                return prepare(captured, self.config, redactor)
        except BaseException:
            # An exchange that was sent but cannot be written leaves a re-recording without
            # it: the re-recording is incomplete, so the old cassette is kept when it ends,
            # even if the caller caught this error and closes cleanly.
            self.session.fail_rerecording()
            raise

    def commit(self, plan: Plan, exchange: Exchange | None, *, wait: bool = True) -> bool:
        """Append `exchange` to the cassette and index it as played (blocking file I/O).
        None (a `before_record` hook declined it) appends nothing.  With `wait` False, a lock
        another writer holds is not waited for: nothing is done and the answer is False."""
        if exchange is None:
            return True
        # Without rules (no scrub, no hook) and secrets, the exchange is written as the request
        # was planned: its key under this user's rules is the plan's, not computed again.  (The
        # session's secrets only grow: none now means none when it was planned or written.)
        changed = self._has_rules or self.config.secret_headers or self._secrets.redactor.secrets
        known = None if changed or plan.key is None else (self.matcher, plan.key)
        if not self.session.append(exchange, known, wait=wait):
            return False
        self.appended += 1
        return True

    async def acommit(self, plan: Plan, exchange: Exchange | None) -> None:
        """`commit` from async code.  An append is one write to a local file, done at once;
        only when another thread or process holds the cassette's lock is it done in a worker
        thread, so the event loop never waits for another writer.  (Benchmark row "4. The
        same, sakura-http and the bare client alternating in one process, async (asyncio)",
        <= 1.15x: with every append in a worker thread it measured 1.30x.)"""
        if not self.commit(plan, exchange, wait=False):
            import anyio.to_thread  # imported by the async paths only (see _streams)

            # Shielded: an exchange read in full is recorded even when the task is cancelled.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.commit, plan, exchange)

    def close(self, *, failed: bool = False) -> None:
        """Leave the session; the last user to leave finishes it: in mode "all" the fresh
        cassette replaces the old one, unless any user closed with `failed=True`, in which case
        the old cassette is kept as it was."""
        if self.closed:
            return
        self.closed = True
        self.session._leave(failed)

    def unplayed(self) -> list[Exchange]:
        return self.session.unplayed()


class ResponseRecorder:
    """Builds the exchange for one live response as its body arrives.

    `start()` takes the status and headers, `feed()` each raw chunk (returning the decoded bytes
    to deliver, bounded by `max_body_bytes`), `decode_tail()` the end of the body (the last
    decoded bytes), `exchange_to_write()` the exchange to commit: the capture (content decoded,
    chunk sizes and timings kept) through the write pipeline (secrets redacted, cookies
    blanked, scrubs, the hook).  `live()` is the capture, unredacted, for the
    caller only: while recording, the code under test gets the live response (so a login
    flow's cookie jar holds the real session); only what is written is redacted.
    """

    def __init__(self, user: CassetteUser, request: RequestData) -> None:
        self._user = user
        self._request = request
        self._timed = user.config.record_timings
        self._started = time.monotonic()
        self._status = 0
        self._charset = "utf-8"
        self._headers: Headers = ()
        self._decoder: BodyDecoder | None = None
        self._chunks: list[bytes] = []
        self._timings: list[float] = []
        self._decoding_done = False
        self._live: Exchange | None = None

    def start(
        self, status: int, headers: Sequence[tuple[str, str]], charset: str = "utf-8"
    ) -> None:
        """`headers` as `_format.header_text` gives them (names lower-case), and `charset`,
        which spells the values' bytes."""
        self._status = status
        self._charset = charset
        self._headers = tuple(headers)
        self._decoder = BodyDecoder(self._headers, self._user.config.max_body_bytes)

    @property
    def charset(self) -> str:
        """How the response's header values spell their bytes (given to `start()`)."""
        return self._charset

    @property
    def headers_as_received(self) -> bool:
        """Whether the headers to deliver are the ones received: true unless the body is
        decoded from its content-encoding (which then is dropped)."""
        assert self._decoder is not None, "start() first"
        return not self._decoder.decoded

    def live_headers(self) -> Headers:
        """Headers for a response delivered while its body still streams (`stream_through`):
        as the server sent them, less the content-encoding the body is decoded from."""
        assert self._decoder is not None, "start() first"
        return self._decoder.headers(None)

    def feed(self, raw: bytes) -> bytes:
        assert self._decoder is not None, "start() first"
        with self._user.advised:
            data = self._decoder.feed(raw)
        self._keep(data)
        return data

    def _keep(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            if self._timed:
                self._timings.append(round((time.monotonic() - self._started) * 1000, 1))

    def decode_tail(self) -> bytes:
        """Call at the end of the body: the last decoded bytes (they are kept, too)."""
        assert self._decoder is not None, "start() first"
        if self._decoding_done:
            return b""
        self._decoding_done = True
        with self._user.advised:
            tail = self._decoder.tail()
        self._keep(tail)
        return tail

    def _stored_headers(self, body_size: int, truncated: bool) -> Headers:
        assert self._decoder is not None
        headers = self._decoder.headers(body_size)
        if truncated:  # the stored body ends early: a content-length would no longer be true
            headers = tuple((n, v) for n, v in headers if n != "content-length")
        return headers

    def exchange_to_write(self, truncated: bool = False) -> Exchange | None:
        """The exchange to commit (None: a `before_record` hook declined it); `truncated` when
        the caller stopped before the end.  The exchange as captured goes through the write
        pipeline (`CassetteUser.prepare`); `live()` is the exchange as captured."""
        assert self._decoder is not None, "start() first"
        request = self._request
        if not truncated:
            self.decode_tail()
        if self._decoder.raw_fallback:
            # Undecodable content: store what arrived as it arrived, encoding header kept (the
            # raw chunks' arrival times were not kept).
            self._chunks = [c for c in self._decoder.raw_chunks if c]
            self._timings = []
        body = b"".join(self._chunks)
        chunks = tuple(map(len, self._chunks))
        timed = self._timed and len(chunks) > 1 and len(self._timings) == len(chunks)
        # Built as the loader builds one (`new_exchange`), for benchmark row "4. The same,
        # sakura-http and the bare client alternating in one process" (recording, <= 1.15x):
        # `Exchange(...)` cost 14,600 instructions more per recorded exchange.
        captured = new_exchange(
            request.method,
            request.url,
            request.headers,
            request.body,
            self._status,
            self._stored_headers(len(body), truncated),
            body,
            chunks if len(chunks) > 1 else None,
            truncated,
            tuple(self._timings) if timed else None,
            self._charset,
            None,
            # Dated today from the start, so that `Dating.stamp` has nothing to copy for an
            # exchange recorded today (benchmark row 4: a copy was 49,000 instructions).
            today(),
        )
        # The caller's response is not paced by the arrival times (a replay of it would be).
        self._live = dataclasses.replace(captured, timings_ms=None) if timed else captured
        return self._user.prepare(captured, self._decoder)

    def live(self) -> Exchange:
        """The response as the server sent it (decoded, unredacted): for the caller, never for
        the disk.  Call after `exchange_to_write()`."""
        assert self._live is not None, "exchange_to_write() first"
        return self._live
