"""One cassette in use: its configuration, its index, what has been played, what to append.

`CassetteSession` is everything a transport needs apart from moving bytes: the safety checks,
the index lookup, the decision (from `_core`), building an exchange from a live response, and
persisting it.  The sync and async transports, httpx and httpx2, and the proxy all drive the
same session; only `commit()` touches the disk, so async callers run it in a worker thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cassette import AtomicRecording, append_lines, load_cassette
from ._core import Action, Lookup, RecordMode, decide, resolve_mode
from ._exceptions import CassetteFormatError, CassetteMiss, RecordingForbidden
from ._format import Exchange, FaultInfo, Headers, encode_exchange
from ._hosts import HostList
from ._matching import MatchKey, MatchRules, RequestData, explain_miss
from ._policy import (
    BodyDecoder,
    Redactor,
    check_body_size,
    drop_secret_headers,
    refuse_credentials,
)

__all__ = ["CassetteSession", "Plan", "ResponseRecorder"]

RECORD_HINT = "pytest --record"


@dataclass(slots=True)
class _Slot:
    """The recorded exchanges sharing one match key, in order, and how many were played."""

    exchanges: list[Exchange] = field(default_factory=list)
    played: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with one request: replay `exchange`, or record under `key`."""

    action: Action
    key: MatchKey
    exchange: Exchange | None = None


class CassetteSession:
    """A cassette opened for one transport.  Thread-safe; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: RecordMode | str,
        can_record: bool,
        secret_headers: Iterable[str],
        ignore_headers: Iterable[str],
        record_hosts: Iterable[str] | None,
        passthrough_hosts: Iterable[str],
        max_body_bytes: int,
        allow_repeats: bool,
        record_errors: bool,
        record_timings: bool,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.mode = resolve_mode(mode, os.environ if environ is None else environ)
        self.can_record = can_record
        self.secret_headers = frozenset(h.lower() for h in secret_headers)
        self.rules = MatchRules(
            ignore=frozenset(h.lower() for h in ignore_headers), secret=self.secret_headers
        )
        self.record_hosts = None if record_hosts is None else HostList(record_hosts)
        self.passthrough_hosts = HostList(passthrough_hosts)
        self.max_body_bytes = max_body_bytes
        self.allow_repeats = allow_repeats
        self.record_errors = record_errors
        self.record_timings = record_timings
        self._lock = threading.Lock()
        self.appended = 0

        try:
            content = load_cassette(self.path)
            header, recorded = content.header, content.exchanges
        except CassetteFormatError:
            if self.mode is not RecordMode.ALL:
                raise
            header, recorded = {}, []  # re-recording replaces the unreadable file
        self._header: dict[str, Any] = header  # encode_header() keeps only its extra keys
        self.exchanges: list[Exchange] = [] if self.mode is RecordMode.ALL else recorded
        self._index: dict[MatchKey, _Slot] = {}
        for exchange in self.exchanges:
            self._index.setdefault(self.rules.key_of_exchange(exchange), _Slot()).exchanges.append(
                exchange
            )
        self._rerecording: AtomicRecording | None = None

    # --- per request -------------------------------------------------------------------------

    def is_passthrough(self, host: str, port: int | None) -> bool:
        return (host, port) in self.passthrough_hosts

    def check_request(self, request: RequestData) -> None:
        """The safety rules that hold before anything is replayed or forwarded."""
        refuse_credentials(request.headers, self.secret_headers)
        check_body_size(len(request.body), self.max_body_bytes, "request")

    def plan(self, request: RequestData) -> Plan:
        """Decide what to do with `request`; raises `CassetteMiss` or `RecordingForbidden`.

        A replayed exchange counts as played at once, so concurrent identical requests take
        successive recorded exchanges.
        """
        key = self.rules.key_of_request(request)
        with self._lock:
            slot = self._index.get(key)
            if slot is None:
                lookup = Lookup.ABSENT
            elif slot.played < len(slot.exchanges):
                lookup = Lookup.HIT
            else:
                lookup = Lookup.EXHAUSTED
            action = decide(self.mode, lookup, self.allow_repeats)
            if action is Action.REPLAY:
                assert slot is not None
                slot.played += 1
                return Plan(action, key, slot.exchanges[slot.played - 1])
            if action is Action.REPEAT:
                assert slot is not None
                return Plan(action, key, slot.exchanges[-1])
        if action is Action.MISS:
            raise self._miss(request, slot)
        self._check_may_record(request)
        return Plan(action, key)

    def _check_may_record(self, request: RequestData) -> None:
        if not self.can_record:
            raise RecordingForbidden(
                f"{request.method} {request.url} must be recorded (mode {self.mode.value!r}), "
                f"but the transport for {self.path} has outer=None, so it has no network. "
                "Pass the real transport as outer=, e.g. RecordingTransport(..., "
                "outer=httpx.HTTPTransport())",
                host=request.host,
            )
        if self.record_hosts is not None and (request.host, request.port) not in self.record_hosts:
            allowed = ", ".join(self.record_hosts.entries) or "none"
            raise RecordingForbidden(
                f"{request.method} {request.url} would record from host "
                f"{request.host}:{request.port}, which is not in record_hosts ({allowed}). "
                f'Add it if recording from it is intended: record_hosts=["{request.host}"] '
                "(or sakura_record_hosts in the pytest ini options)",
                host=request.host,
            )

    def _miss(self, request: RequestData, slot: _Slot | None) -> CassetteMiss:
        head = f"{request.method} {request.url} is not in the cassette {self.path}"
        lines = [head]
        nearest: list[str] = []
        if slot is not None:
            lines.append(
                f"  all {len(slot.exchanges)} recorded exchange(s) matching it were already "
                "played in this run, and allow_repeats=False"
            )
        else:
            for index, exchange, diffs in explain_miss(request, self.exchanges, self.rules):
                text = f"#{index + 1} {exchange.method} {exchange.url}"
                nearest.append("\n      ".join([text, *diffs]))
            if nearest:
                lines.append("  nearest recorded exchanges (what differs):")
                lines.extend(f"    {n}" for n in nearest)
            else:
                lines.append("  the cassette holds no exchanges")
        lines.append(
            f"  to record it, run `{RECORD_HINT}` (mode new_episodes); "
            "if the request changed on purpose, re-record with `pytest --record-all`"
        )
        return CassetteMiss(
            "\n".join(lines),
            method=request.method,
            url=request.url,
            path=str(self.path),
            nearest=nearest,
        )

    # --- recording ---------------------------------------------------------------------------

    def recorder(self, request: RequestData) -> ResponseRecorder:
        """Start recording the response to `request` (call once the outer transport answered)."""
        return ResponseRecorder(self, request)

    def fault_exchange(self, request: RequestData, error: BaseException) -> Exchange | None:
        """The exchange recording a transport error, or None when `record_errors` is off."""
        if not self.record_errors:
            return None
        redactor = Redactor(request.headers, self.secret_headers)
        return Exchange(
            method=request.method,
            url=request.url,
            headers=drop_secret_headers(request.headers, self.secret_headers),
            body=request.body,
            status=None,
            error=FaultInfo(type(error).__name__, redactor.text(str(error))),
        )

    def commit(self, plan: Plan, exchange: Exchange) -> None:
        """Append `exchange` to the cassette (one locked write) and index it as played.

        Does blocking file I/O: async callers run it in a worker thread.
        """
        line = encode_exchange(exchange)
        with self._lock:
            if self.mode is RecordMode.ALL:
                if self._rerecording is None:
                    self._rerecording = AtomicRecording(self.path, self._header)
                self._rerecording.append(line)
            else:
                append_lines(self.path, line, self._header)
            slot = self._index.setdefault(plan.key, _Slot())
            slot.exchanges.append(exchange)
            slot.played += 1
            self.exchanges.append(exchange)
            self.appended += 1

    def close(self) -> None:
        """Finish: in mode "all", move the fresh cassette over the old one."""
        with self._lock:
            if self._rerecording is not None:
                self._rerecording.commit()
                self._rerecording = None

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges not played in this run, in cassette order."""
        with self._lock:
            left = {
                id(exchange)
                for slot in self._index.values()
                for exchange in slot.exchanges[slot.played :]
            }
        return [e for e in self.exchanges if id(e) in left]


class ResponseRecorder:
    """Builds the exchange for one live response as its body arrives.

    `start()` takes the status and headers, `feed()` each raw chunk (returning the decoded bytes
    to deliver, bounded by `max_body_bytes`), `finish()` the exchange to commit: secrets
    redacted, `set-cookie` blanked, content decoded, chunk sizes (and timings) kept.
    """

    def __init__(self, session: CassetteSession, request: RequestData) -> None:
        self._session = session
        self._request = request
        self._redactor = Redactor(request.headers, session.secret_headers)
        self._started = time.monotonic()
        self._status = 0
        self._charset = "utf-8"
        self._headers: Headers = ()
        self._decoder: BodyDecoder | None = None
        self._chunks: list[bytes] = []
        self._timings: list[float] = []
        self._decoding_done = False

    def start(
        self, status: int, headers: Sequence[tuple[str, str]], charset: str = "utf-8"
    ) -> None:
        """`charset` spells the header values' bytes (see `_format.header_text`)."""
        self._status = status
        self._charset = charset
        self._headers = tuple((name.lower(), value) for name, value in headers)
        self._decoder = BodyDecoder(self._headers, self._session.max_body_bytes)

    def live_headers(self) -> Headers:
        """Headers for a response delivered while its body still streams (`stream_through`)."""
        assert self._decoder is not None, "start() first"
        return self._redactor.response_headers(self._decoder.headers(None))

    def feed(self, raw: bytes) -> bytes:
        assert self._decoder is not None, "start() first"
        data = self._decoder.feed(raw)
        self._keep(data)
        return data

    def _keep(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._timings.append(round((time.monotonic() - self._started) * 1000, 1))

    def finish_decoding(self) -> bytes:
        """Call at the end of the body: the last decoded bytes (they are kept, too)."""
        assert self._decoder is not None, "start() first"
        if self._decoding_done:
            return b""
        self._decoding_done = True
        tail = self._decoder.finish()
        self._keep(tail)
        return tail

    def _stored_headers(self, body_size: int, truncated: bool) -> Headers:
        assert self._decoder is not None
        headers = self._decoder.headers(body_size)
        if truncated:  # the stored body ends early: a content-length would no longer be true
            headers = tuple((n, v) for n, v in headers if n != "content-length")
        return headers

    def finish(self, truncated: bool = False) -> Exchange:
        """The exchange to commit; `truncated` when the caller stopped before the end."""
        assert self._decoder is not None, "start() first"
        session, request = self._session, self._request
        if not truncated:
            self.finish_decoding()
        if self._decoder.raw_fallback:
            # Undecodable content: store what arrived as it arrived, encoding header kept (the
            # raw chunks' arrival times were not kept).
            self._chunks = [c for c in self._decoder.raw_chunks if c]
            self._timings = []
        redactor = self._redactor
        body = b"".join(self._chunks)
        chunks = tuple(len(c) for c in self._chunks)
        if redactor:
            redacted = redactor.body(body)
            if redacted != body:  # sizes changed: chunk boundaries no longer apply exactly
                body, chunks = redacted, (len(redacted),) if redacted else ()
        timed = session.record_timings and len(chunks) > 1 and len(self._timings) == len(chunks)
        return Exchange(
            method=request.method,
            url=request.url,
            headers=drop_secret_headers(request.headers, session.secret_headers),
            body=request.body,
            status=self._status,
            response_headers=redactor.response_headers(self._stored_headers(len(body), truncated)),
            response_header_charset=self._charset,
            response_body=body,
            chunks=chunks if len(chunks) > 1 else None,
            truncated=truncated,
            timings_ms=tuple(self._timings) if timed else None,
        )
