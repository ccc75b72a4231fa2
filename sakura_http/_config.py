"""`CassetteConfig`: every option of a cassette, spelled out once and validated once.

`RecordingTransport(**options)` builds one from its keyword arguments; the pytest plugin, the
proxy and the LLM helpers build one too and hand it down, so an option is defined, defaulted
and checked in this module alone.  An invalid value raises `ConfigurationError` (also a
`ValueError`) naming the option.

Every user of one cassette in one process (transports, fixtures, proxy handlers) shares one
session: one list of exchanges and one record of what was played.  Each brings its own
configuration; the one thing they must agree on is whether the cassette is being re-recorded
(mode "all" or not).  Users matching with different rules get their own index over the same
exchanges.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from ._advice import Advice
from ._core import RecordMode, parse_mode, resolve_mode
from ._exceptions import ConfigurationError
from ._hosts import HostList, split_host_entry
from ._matching import DEFAULT_IGNORE_HEADERS
from ._policy import DEFAULT_MAX_BODY_BYTES
from ._rules import Rules

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SECRET_QUERY_PARAMS",
    "CassetteConfig",
    "CassetteOptions",
    "resolve_config",
]

#: Query parameters that carry credentials: written as ``<redacted>``, left out of matching
#: (names are compared case-insensitively).  Besides API keys and tokens: passwords, and the
#: credential and signature of Google Cloud Storage and AWS signed URLs.
DEFAULT_SECRET_QUERY_PARAMS = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "access_token",
        "refresh_token",
        "id_token",
        "token",
        "client_secret",
        "secret",
        "password",
        "passwd",
        "pwd",
        "sig",
        "signature",
        "x-goog-credential",
        "x-goog-signature",
        "x-amz-credential",
        "x-amz-signature",
        "x-amz-security-token",
    }
)

#: Chunk size for replaying an exchange recorded without chunk boundaries (httpcore reads 64 KiB).
DEFAULT_CHUNK_SIZE = 65_536


def _names(option: str, value: Any) -> frozenset[str]:
    """A set of lower-case names (header or query parameter names) from `value`."""
    if isinstance(value, (str, bytes)):
        raise ConfigurationError(
            f"{option} takes a list of names, not the single string {value!r}: "
            f"write {option}=[{value!r}]"
        )
    try:
        items = list(value)
    except TypeError:
        raise ConfigurationError(
            f"{option} takes a list of names, not {type(value).__name__}"
        ) from None
    names = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ConfigurationError(f"{option} holds {item!r}, which is not a name")
        names.add(item.strip().lower())
    return frozenset(names)


def _hosts(option: str, value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)):
        raise ConfigurationError(
            f'{option} takes a list of "host" or "host:port" entries, not the single string '
            f"{value!r}: write {option}=[{value!r}]"
        )
    entries = []
    for entry in value:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigurationError(f'{option} holds {entry!r}, which is not "host[:port]"')
        host, _port = split_host_entry(entry)
        if not host or any(c.isspace() or c in "/?#@" for c in host):
            raise ConfigurationError(f'{option} holds {entry!r}, which is not "host[:port]"')
        entries.append(entry.strip())
    return tuple(entries)


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{option} must be True or False, not {value!r}")
    return value


class CassetteOptions(TypedDict, total=False):
    """The option keywords every front end takes (`RecordingTransport`, the SDK helpers,
    `serve()`, the plugin's factories), as a caller may spell them: a mode by name, names in any
    iterable.  Typed so that a misspelt option is a type error (``**options:
    Unpack[CassetteOptions]``); `CassetteConfig` holds them validated, one field each."""

    mode: RecordMode | str
    secret_headers: Iterable[str]
    allow_headers: Iterable[str]
    secret_query_params: Iterable[str]
    ignore_headers: Iterable[str]
    record_hosts: Iterable[str] | None
    passthrough_hosts: Iterable[str]
    max_body_bytes: int
    allow_repeats: bool
    record_errors: bool
    stream_through: bool
    record_timings: bool
    replay_latency: float
    replay_chunk_size: int
    rules: Rules | None
    advice: Advice


# init=False: the constructor below takes the options as callers spell them (`CassetteOptions`),
# and the fields hold them validated.
@dataclass(frozen=True, slots=True, init=False)
class CassetteConfig:
    """Every option of a cassette, validated once; see `RecordingTransport` for each one.

    Build it with keyword arguments (`CassetteOptions`: collections may be any iterable; names
    are lower-cased) and derive variants with `replace()`.  Equal configurations compare equal.
    An unknown keyword raises `TypeError`, an invalid value `ConfigurationError`.
    """

    mode: RecordMode = RecordMode.NONE
    secret_headers: frozenset[str] = frozenset()
    allow_headers: frozenset[str] = frozenset()
    secret_query_params: frozenset[str] = DEFAULT_SECRET_QUERY_PARAMS
    # The volatile set (names or `*`-patterns); `Rules.ignore_headers` adds to it.
    ignore_headers: frozenset[str] = DEFAULT_IGNORE_HEADERS
    record_hosts: tuple[str, ...] | None = None
    passthrough_hosts: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    allow_repeats: bool = True
    record_errors: bool = False
    stream_through: bool = False
    record_timings: bool = False
    replay_latency: float = 0.0
    replay_chunk_size: int = DEFAULT_CHUNK_SIZE
    rules: Rules = field(default_factory=Rules)
    advice: Advice = field(default_factory=Advice, compare=False)

    def __init__(self, **options: Unpack[CassetteOptions]) -> None:
        given: dict[str, Any] = dict(options)
        for option in dataclasses.fields(self):
            if option.name in given:
                value = given.pop(option.name)
            elif option.default_factory is not dataclasses.MISSING:
                value = option.default_factory()
            else:
                value = option.default
            object.__setattr__(self, option.name, value)
        if given:
            raise TypeError(
                f"CassetteConfig.__init__() got an unexpected keyword argument "
                f"{next(iter(given))!r}"
            )
        self._validate()

    def _validate(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("mode", parse_mode(self.mode, "mode"))
        for name in ("secret_headers", "allow_headers", "secret_query_params", "ignore_headers"):
            put(name, _names(name, getattr(self, name)))
        if self.record_hosts is not None:
            put("record_hosts", _hosts("record_hosts", self.record_hosts))
        put("passthrough_hosts", _hosts("passthrough_hosts", self.passthrough_hosts))
        for name in ("allow_repeats", "record_errors", "stream_through", "record_timings"):
            _flag(name, getattr(self, name))
        limit = self.max_body_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigurationError(
                f"max_body_bytes must be a whole number of bytes, 0 or more, not {limit!r}"
            )
        size = self.replay_chunk_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"replay_chunk_size must be at least 1, not {size!r}")
        latency = self.replay_latency
        if (
            isinstance(latency, bool)
            or not isinstance(latency, (int, float))
            or not math.isfinite(latency)
            or latency < 0
        ):
            raise ConfigurationError(f"replay_latency must be 0 or more, not {latency!r}")
        put("replay_latency", float(latency))
        if self.rules is None:
            put("rules", Rules())
        elif not isinstance(self.rules, Rules):
            raise ConfigurationError(f"rules must be a sakura_http.Rules, not {self.rules!r}")
        if not isinstance(self.advice, Advice):
            raise ConfigurationError(f"advice must be a sakura_http.Advice, not {self.advice!r}")
        both = self.secret_headers & self.allow_headers
        if both:
            name = sorted(both)[0]
            raise ConfigurationError(
                f"header {name} is in both secret_headers and allow_headers: a header is either "
                "a secret (never written) or allowed (written as it is); keep it in one"
            )

    def replace(self, **changes: Unpack[CassetteOptions]) -> CassetteConfig:
        """A copy with `changes` applied (and validated)."""
        current: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return CassetteConfig(**{**current, **changes})

    @property
    def record_host_list(self) -> HostList | None:
        """`record_hosts` parsed, or None when every host may be recorded from."""
        return None if self.record_hosts is None else HostList(self.record_hosts)

    @property
    def passthrough_host_list(self) -> HostList:
        return HostList(self.passthrough_hosts)


def resolve_config(
    caller: str,
    config: CassetteConfig | None,
    options: CassetteOptions,
    environ: Mapping[str, str] | None,
) -> CassetteConfig:
    """The configuration a front end was given: `config`, or one built from the option keywords
    (never both), with the effective mode (``SAKURA_HTTP_RECORD`` / ``SAKURA_HTTP_STRICT`` read
    from `environ`, default `os.environ`).  `caller` names the front end in a `TypeError`."""
    if config is None:
        try:
            config = CassetteConfig(**options)
        except TypeError as exc:
            raise TypeError(f"{caller}: {exc}") from None
    elif options:
        raise TypeError(
            f"{caller} takes config= or option keywords, not both: use "
            f"config.replace({', '.join(f'{k}=...' for k in options)})"
        )
    mode = resolve_mode(config.mode, os.environ if environ is None else environ)
    return config if mode is config.mode else config.replace(mode=mode)
