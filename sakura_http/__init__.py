"""sakura-http: record real httpx traffic into JSON Lines cassettes and replay it offline."""

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
    UndecodableBodyError,
    UnsafeExchangeError,
)
from ._matching import DEFAULT_IGNORE_HEADERS
from ._policy import CREDENTIAL_HEADERS, DEFAULT_MAX_BODY_BYTES
from ._transport import RecordingTransport

__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_IGNORE_HEADERS",
    "DEFAULT_MAX_BODY_BYTES",
    "BodyTooLargeError",
    "CassetteError",
    "CassetteFormatError",
    "CassetteMiss",
    "ConfigurationError",
    "CredentialHeaderError",
    "NetworkBlocked",
    "RecordMode",
    "RecordingForbidden",
    "RecordingTransport",
    "UndecodableBodyError",
    "UnsafeExchangeError",
]
