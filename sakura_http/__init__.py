"""sakura-http: record real httpx traffic into JSON Lines cassettes and replay it offline."""

from ._exceptions import (
    BodyTooLargeError,
    CassetteError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingForbidden,
    UnsafeExchangeError,
)

__all__ = [
    "BodyTooLargeError",
    "CassetteError",
    "CassetteFormatError",
    "CassetteMiss",
    "ConfigurationError",
    "CredentialHeaderError",
    "RecordingForbidden",
    "UnsafeExchangeError",
]
