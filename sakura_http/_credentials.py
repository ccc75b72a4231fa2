"""Which request headers carry a credential, and the marker written in place of a secret.

One list of names and one rule of shape (`is_credential_header`), used to refuse an undeclared
credential (`refuse_credentials`), to redact (`_policy`) and to keep secrets out of messages
(`_shown`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from urllib.parse import quote

from ._exceptions import CredentialHeaderError

__all__ = [
    "CREDENTIAL_HEADERS",
    "NOT_CREDENTIAL_HEADERS",
    "PROVIDER_CREDENTIAL_HEADERS",
    "REDACTED",
    "REDACTED_FORMS",
    "REDACTED_RESPONSE_HEADERS",
    "is_credential_header",
    "is_known_credential_header",
    "refuse_credentials",
]

REDACTED = "<redacted>"
#: `REDACTED` as it is and as a URL spells it: a value already redacted.
REDACTED_FORMS = frozenset({REDACTED, quote(REDACTED, safe="")})

#: Request headers that carry credentials; they must be declared in `secret_headers`.
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token", "cookie"}
)

#: Credential headers of well-known providers, refused like `CREDENTIAL_HEADERS` (most of them
#: also have a credential shape; the list keeps them refused whatever the shapes become).
PROVIDER_CREDENTIAL_HEADERS = frozenset(
    {
        "x-goog-api-key",  # Google (Gemini, Maps)
        "ocp-apim-subscription-key",  # Azure API Management, Azure AI
        "x-amz-security-token",  # AWS session credentials
        "private-token",  # GitLab
        "job-token",  # GitLab CI
        "x-functions-key",  # Azure Functions
        "x-vault-token",  # HashiCorp Vault
        "x-consul-token",  # HashiCorp Consul
        "x-shopify-access-token",  # Shopify
        "x-figma-token",  # Figma
        "x-riot-token",  # Riot Games
        "x-cg-pro-api-key",  # CoinGecko
        "x-rapidapi-key",  # RapidAPI
        "x-algolia-api-key",  # Algolia
        "x-api-token",
        "x-access-token",
        "x-session-token",
    }
)

#: Response headers whose every value is written as `REDACTED`: cookies the server sets (the
#: obsolete `set-cookie2` of RFC 2965 included).  Recording, `convert` and `lint` use this set.
REDACTED_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})

#: Header names with a credential shape that are not credentials: idempotency keys are random
#: per request (see `DEFAULT_IGNORE_HEADERS`), the WebSocket key is a public nonce.
NOT_CREDENTIAL_HEADERS = frozenset({"idempotency-key", "x-idempotency-key", "sec-websocket-key"})

#: Words that make a header name a credential wherever they appear in it, even inside a longer
#: word (`x-apitoken`, `cookie2`, `x-hub-signature-256`, `x-csrftoken`); `api-key` is matched
#: after every non-alphanumeric character was made a `-`.
_CREDENTIAL_PARTS = (
    "auth",
    "api-key",
    "apikey",
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "jwt",
    "session",
    "csrf",
    "xsrf",
    "signature",
    "credential",
    "bearer",
    "cookie",
)
#: Words that make a name a credential only as a whole part between separators: `x-pat` (a
#: personal access token), not `x-path` or `x-compat`; `key` only as the last part or alone.
_CREDENTIAL_WORDS = frozenset({"pat"})
_CREDENTIAL_SUFFIXES = ("-key",)
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def is_known_credential_header(name: str) -> bool:
    """Whether `name` (lower-case) is one of `CREDENTIAL_HEADERS` or
    `PROVIDER_CREDENTIAL_HEADERS`: a credential by name, not only by shape."""
    return name in CREDENTIAL_HEADERS or name in PROVIDER_CREDENTIAL_HEADERS


def is_credential_header(name: str, allow: Collection[str] = ()) -> bool:
    """Whether a request header named `name` carries a credential, so it must be declared in
    `secret_headers` to be sent: one of `CREDENTIAL_HEADERS` or `PROVIDER_CREDENTIAL_HEADERS`,
    or a name of credential shape: containing, anywhere, ``auth``, ``api-key``, ``apikey``,
    ``password``, ``passwd``, ``pwd``, ``secret``, ``token``, ``jwt``, ``session``, ``csrf``,
    ``xsrf``, ``signature``, ``credential``, ``bearer`` or ``cookie``; holding ``pat`` as a
    whole part (``x-pat``); or being ``key`` or ending in ``-key``.  Any run of characters
    other than letters and digits counts as one ``-`` (``X_API_KEY`` is ``x-api-key``).

    `NOT_CREDENTIAL_HEADERS` and the names in `allow` (lower-case) are never credentials.
    """
    name = name.lower()
    return name not in allow and _credential_by_name(name)


@functools.lru_cache(maxsize=4096)
def _credential_by_name(name: str) -> bool:
    # Checked for every header of every request whose header list was not checked before
    # (`CassetteUser`), which is every request of an LLM SDK (its idempotency key is new each
    # time): a client sends the same few names over and over, so each name's answer is
    # remembered (bounded, for clients that make names up).  Benchmark row "1. The same, each
    # request carrying an LLM SDK's headers": 1.24x the floor with it, 1.43x and 1.48x without.
    if name in NOT_CREDENTIAL_HEADERS:
        return False
    if is_known_credential_header(name):
        return True
    shape = _SEPARATORS.sub("-", name)
    return (
        any(part in shape for part in _CREDENTIAL_PARTS)
        or shape == "key"
        or shape.endswith(_CREDENTIAL_SUFFIXES)
        or not _CREDENTIAL_WORDS.isdisjoint(shape.split("-"))
    )


def refuse_credentials(
    headers: Iterable[tuple[str, str]],
    secret_headers: frozenset[str],
    allow: Collection[str] = frozenset(),
) -> None:
    """Raise `CredentialHeaderError` for the first credential header (`is_credential_header`)
    not declared secret; `allow` names headers that are not credentials after all."""
    for name, value in headers:
        if name not in secret_headers and is_credential_header(name, allow):
            raise CredentialHeaderError(name, value)
