"""The sakura-http exception tree.

Every error sakura-http raises derives from `CassetteError`, split by who is at fault::

    CassetteError                 (deliberately NOT an httpx.HTTPError)
    ├── CassetteFormatError       the cassette file is bad           (.path, .line)
    ├── CassetteMiss              the code under test sent a request the cassette lacks
    │                                                         (.method, .url, .path, .nearest)
    ├── NetworkBlocked            a test that runs offline tried to reach the network
    │                             (also an OSError)                  (.host, .port)
    ├── ConfigurationError        an argument or environment variable is invalid
    │   └── RecordingForbidden    the configuration forbids recording this request (.host)
    │       └── RerecordingInProgress  another process is re-recording the cassette
    │                                                         (.path, .pid, .since)
    ├── RecordingIncomplete       a re-recording was cut short; the old cassette is kept
    │                                                         (.path, .cancelled)
    └── UnsafeExchangeError       recording would put something unsafe on disk
        ├── CredentialHeaderError a credential header was not declared secret (.header)
        ├── BodyTooLargeError     a body is over `max_body_bytes` (.side, .limit, .size)
        ├── UndecodableBodyError  a body no redaction can search may hold a secret (.reason)
        └── UnwritableExchangeError  the loader would refuse the exchange (a hook's result)
                                                              (.field, .problem, .hook)

`CassetteError` is not an `httpx.HTTPError` on purpose: code under test that catches
httpx errors to retry must not swallow a cassette miss.  Every message says what to do next.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BodyTooLargeError",
    "CassetteError",
    "CassetteFormatError",
    "CassetteMiss",
    "ConfigurationError",
    "CredentialHeaderError",
    "NetworkBlocked",
    "RecordingForbidden",
    "RecordingIncomplete",
    "RerecordingInProgress",
    "UndecodableBodyError",
    "UnsafeExchangeError",
    "UnwritableExchangeError",
    "human_size",
]


class CassetteError(Exception):
    """Base class of every sakura-http error."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its message and attributes, and rebuilt without calling `__init__` again
        # with the message as its arguments (most errors take facts, not a message): a process
        # pool re-raises its workers' errors by pickling them.
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[CassetteError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """A pickled `CassetteError` back: its class, its `args` and its attributes."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class CassetteFormatError(CassetteError):
    """A cassette file cannot be read: bad JSON, a missing field, an unknown schema, a torn line.

    `path` is the file and `line` the 1-based line number (None when the problem is the file
    as a whole).  A cassette that failed to load is never written to.
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}")


class CassetteMiss(CassetteError):
    """The request is not in the cassette and the mode does not allow recording it.

    `nearest` holds human-readable descriptions of the closest recorded exchanges and how they
    differ from the request; the message ends with the command that records it.
    """

    def __init__(
        self,
        message: str,
        *,
        method: str,
        url: str,
        path: str,
        nearest: Sequence[str] = (),
    ) -> None:
        self.method = method
        self.url = url
        self.path = path
        self.nearest = tuple(nearest)
        super().__init__(message)


class NetworkBlocked(CassetteError, OSError):
    """A test that runs offline tried to resolve a name or connect to a non-loopback address.

    It is an `OSError`, so networking code sees an ordinary connection failure (httpx reports it
    as an `httpx.ConnectError` carrying this message), and a `CassetteError`, so
    ``except CassetteError`` catches every sakura-http refusal.  The pytest plugin fails the
    test at teardown even if the code under test swallowed it.  `host` and `port` say what was
    refused (`port` is None when unknown).
    """

    def __init__(self, message: str, *, host: str, port: int | None) -> None:
        self.host = host
        self.port = port
        super().__init__(message)


class ConfigurationError(CassetteError, ValueError):
    """An argument or environment variable has a value sakura-http does not accept."""


class RecordingForbidden(ConfigurationError):
    """A request would have to be recorded, but the configuration forbids it.

    Raised for `outer=None`, a host outside `record_hosts`, or `SAKURA_HTTP_STRICT=1`.
    `host` is the host that was refused, or None when the refusal is not about a host.
    """

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(message)


class RerecordingInProgress(RecordingForbidden):
    """Another process is re-recording the cassette (mode "all"), so nothing was written.

    Raised to a process that would append to the cassette (its exchange would vanish when the
    re-recording replaces the file) and to a second process that would re-record it too.  It
    lasts exactly as long as the re-recording process holds the cassette: once that process
    closes its transport, or dies, recording works again.  `path` is the cassette, `pid` the
    re-recording process and `since` when it began (seconds since the epoch); either is None
    when it could not be read.
    """

    def __init__(self, message: str, *, path: str, pid: int | None, since: float | None) -> None:
        self.path = path
        self.pid = pid
        self.since = since
        super().__init__(message)


class RecordingIncomplete(CassetteError):
    """A re-recording (mode "all") did not finish: stopping the proxy cancelled requests in
    flight (`cancelled` of them), or a second signal stopped it at once.  The fresh recording
    lacks them, so it is discarded and the old cassette at `path` is kept as it was; the
    message says how to stop the proxy so the re-recording completes."""

    def __init__(self, path: str, cancelled: int, why: str, fix: str) -> None:
        self.path = path
        self.cancelled = cancelled
        super().__init__(
            f"{path}: the re-recording (mode all) is incomplete: {why}; the old cassette is "
            f"kept as it was. Record it again, and {fix}"
        )


class UnsafeExchangeError(CassetteError):
    """Recording or replaying this exchange would break a safety rule; nothing was written."""


class CredentialHeaderError(UnsafeExchangeError):
    """A request carries a credential header that is not declared in `secret_headers`.

    Raised before anything is sent or replayed; `header` is the lower-cased header name.  `fix`
    says how to declare it, worded for the front end in use (see `sakura_http.Advice`).  `hook`
    names the `before_record` hook that added the header to an exchange being recorded (None:
    the request itself carried it).  The header's value is never kept.
    """

    def __init__(
        self, header: str, value: str = "", *, fix: str | None = None, hook: str | None = None
    ) -> None:
        self.header = header
        self.fix = fix
        self.hook = hook
        # Whether the value came from a redacted cookie is all that is kept of it.
        self._echoed_cookie = header == "cookie" and "<redacted>" in value
        super().__init__(header)

    def __str__(self) -> str:
        why = ""
        if self._echoed_cookie:
            why = (
                " (this cookie comes from a recorded `set-cookie: <redacted>` that the client's "
                "cookie jar sent back)"
            )
        fix = self.fix or f'RecordingTransport(..., secret_headers=["{self.header}"])'
        if self.hook is not None:
            return (
                f"the before_record hook {self.hook} added header {self.header}, a credential "
                "header not declared in secret_headers; nothing was recorded. Leave it out in "
                f"the hook, or declare it so it is never written: {fix}"
            )
        return (
            f"header {self.header} belongs in secret_headers; not recorded. "
            f"Declare it so its value is forwarded but never written or matched{why}: {fix}"
        )


class BodyTooLargeError(UnsafeExchangeError):
    """A request or response body is larger than `max_body_bytes`; nothing was appended.

    `side` is "request" or "response", `limit` the limit in bytes, `size` how many bytes of
    the body were seen (a streamed body is read no further once over the limit, so it may be
    longer; None when not known), `suggested_limit` a limit that holds them, and `fix` how to
    raise the limit, worded for the front end in use.
    """

    def __init__(
        self, side: str, limit: int, *, size: int | None = None, fix: str | None = None
    ) -> None:
        self.side = side
        self.limit = limit
        self.size = size
        self.fix = fix
        super().__init__(side, limit)

    @property
    def suggested_limit(self) -> int:
        """The limit every front end's advice suggests: `limit` doubled, and doubled again
        until it holds the `size` bytes seen."""
        suggested = max(self.limit * 2, 1)
        while suggested < (self.size or 0):
            suggested *= 2
        return suggested

    def __str__(self) -> str:
        fix = self.fix or f"raise it with max_body_bytes= (now {self.limit:,})"
        return (
            f"{self.side} body over {human_size(self.limit)}: sakura-http stores at most "
            f"{self.limit:,} bytes of a {self.side} body; {fix}"
        )


class UndecodableBodyError(UnsafeExchangeError):
    """A response body stays content-encoded (an encoding that cannot be decoded here, or
    corrupt data) while the request carried a declared secret: its bytes cannot be searched for
    echoes, so it is not written.  `reason` says why it stays encoded."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"response body not recorded: {reason}, so it cannot be searched for echoes of the "
            "declared secrets. Record it with the header `accept-encoding: identity` on the "
            "request (the server then sends it unencoded), or install the decoder httpx uses "
            "for that encoding"
        )


class UnwritableExchangeError(UnsafeExchangeError):
    """The exchange to be written is one the loader would refuse to read back: a field of the
    wrong type, chunks that do not add up to the body, timings without chunks, a status that is
    no HTTP status...  Writing it would leave the cassette unreadable for every later run, so
    nothing was written.

    `field` names the first field at fault (as `Exchange` names it), `problem` says what the
    loader says of it, and `hook` names the `before_record` hook that returned the exchange
    (None when no hook changed it, which would be a bug of sakura-http).
    """

    def __init__(self, field: str, problem: str, *, hook: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.hook = hook
        if hook is None:
            text = (
                f"the exchange to write has a field {field!r} the loader would refuse: {problem}. "
                "Nothing was written. This is a bug of sakura-http: please report it"
            )
        else:
            how = (
                "a hook that changes a streamed body sets chunks=None and timings_ms=None"
                if field in ("chunks", "timings_ms")
                else "docs/cassette-format.md says what each field holds"
            )
            text = (
                f"the before_record hook {hook} returned an exchange whose field {field!r} the "
                f"loader would refuse: {problem}. Nothing was written. Make the hook keep that "
                f"field as the cassette format defines it ({how}), or return None to skip "
                "recording the exchange"
            )
        super().__init__(text)


def human_size(n: int, *, rounded: bool = False) -> str:
    """`n` bytes for people: "16 MiB" when it is a whole number of units, else "1,234 bytes".

    With `rounded` (listings, where width matters more than the last byte): "46 B",
    "1.5 KiB", "16.0 MiB".
    """
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if rounded and n >= size:
            return f"{n / size:.1f} {unit}"
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B" if rounded else f"{n:,} bytes"


def hidden_in_tracebacks(excinfo: Any) -> bool:
    """Whether pytest leaves a frame of the engine out of a traceback: yes when the error is
    sakura-http's own, whose message says everything (a miss, a refusal), so a failing test
    shows its own frames rather than ~100 lines of the library's; an engine module sets
    ``__tracebackhide__ = hidden_in_tracebacks``.  Any other exception (a bug) keeps every
    frame.  `excinfo` is pytest's ExceptionInfo (None when pytest has none)."""
    return excinfo is not None and isinstance(excinfo.value, CassetteError)
