"""sakura-http: record real httpx traffic into JSON Lines cassettes and replay it offline.

The engine is flat and private (`sakura_http._*`); this module re-exports its public names.  The
front ends built on it are packages of their own: `sakura_http.pytest_plugin`, `sakura_http.cli`,
and `sakura_http.httpx2` for httpx2-typed transports.  See docs/architecture.md.
"""

from ._advice import Advice
from ._cassette import load_cassette
from ._config import DEFAULT_SECRET_QUERY_PARAMS, CassetteConfig, CassetteOptions
from ._core import RecordMode
from ._exceptions import (
    BodyTooLargeError,
    CassetteError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    NetworkBlocked,
    RecordingForbidden,
    RecordingIncomplete,
    RerecordingInProgress,
    UndecodableBodyError,
    UnsafeExchangeError,
    UnwritableExchangeError,
)
from ._format import CassetteContent, Exchange, FaultInfo
from ._matching import DEFAULT_IGNORE_HEADERS, canonical_url
from ._policy import CREDENTIAL_HEADERS, DEFAULT_MAX_BODY_BYTES
from ._rules import EMAIL_PATTERN, LLM_VOLATILE_RESPONSE_HEADERS, JsonPath, Rules, Scrub
from ._transport import AsyncOuterTransport, OuterTransport, RecordingTransport

# Errors carry their public names: a traceback or pytest's summary says `sakura_http.CassetteMiss`,
# never the private module that defines it (and pickle finds them here).
for _error in (
    value
    for value in list(globals().values())
    if isinstance(value, type) and issubclass(value, BaseException)
):
    _error.__module__ = __name__
del _error


def __getattr__(name: str) -> str:
    # `__version__` is read from the installed metadata on first use, not at import: finding the
    # distribution scans sys.path, 1.5-2.4 ms on this VM, which benchmark row "6. Import"
    # (<= 30 ms, measured 16 ms) would pay in every test run.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("sakura-http")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version


__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_IGNORE_HEADERS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_SECRET_QUERY_PARAMS",
    "EMAIL_PATTERN",
    "LLM_VOLATILE_RESPONSE_HEADERS",
    "Advice",
    "AsyncOuterTransport",
    "BodyTooLargeError",
    "CassetteConfig",
    "CassetteContent",
    "CassetteError",
    "CassetteFormatError",
    "CassetteMiss",
    "CassetteOptions",
    "ConfigurationError",
    "CredentialHeaderError",
    "Exchange",
    "FaultInfo",
    "JsonPath",
    "NetworkBlocked",
    "OuterTransport",
    "RecordMode",
    "RecordingForbidden",
    "RecordingIncomplete",
    "RecordingTransport",
    "RerecordingInProgress",
    "Rules",
    "Scrub",
    "UndecodableBodyError",
    "UnsafeExchangeError",
    "UnwritableExchangeError",
    "__version__",
    "canonical_url",
    "load_cassette",
]
