"""Everything that guards the disk: credential refusal, redaction, body limits.

These rules hold before anything can reach the cassette file or the matcher (the order in
which they apply to what is written is the write pipeline's, `_pipeline.prepare`):

* a request carrying a credential header (`is_credential_header`: the known names, provider
  credential headers and credential-shaped names, minus an allow set) that is not declared in
  `secret_headers` is refused with `CredentialHeaderError`;
* declared secret headers are forwarded but never written, and every value of theirs (and of
  the secret query parameters, `query_secrets`) that is echoed anywhere in what is written, in
  any of the forms a server plausibly writes it in, is replaced by `<redacted>` (`Redactor`);
  a session searches for every secret any of its requests carried (`SecretMemory`);
* `set-cookie` and `set-cookie2` response headers are stored as `<redacted>`
  (`REDACTED_RESPONSE_HEADERS`);
* bodies are capped at `max_body_bytes` (16 MiB by default); reading and decoding stop there;
* content-encoded responses are stored decoded, bounded by the same limit, and a body left
  encoded while it may hold a secret is refused: that is `_decoding.py`.

docs/security.md states what these rules guarantee and what they do not.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import functools
import json
import re
import threading
from collections.abc import Collection, Iterable, Iterator
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from ._credentials import (
    CREDENTIAL_HEADERS,
    NOT_CREDENTIAL_HEADERS,
    PROVIDER_CREDENTIAL_HEADERS,
    REDACTED,
    REDACTED_FORMS,
    REDACTED_RESPONSE_HEADERS,
    is_credential_header,
    is_known_credential_header,
    refuse_credentials,
)
from ._exceptions import BodyTooLargeError
from ._exchange import RequestData
from ._format import Headers
from ._placeholders import PLACEHOLDER_MARKERS, is_placeholder
from ._shown import (
    SHOWN_CHARS,
    SHOWN_HEAD,
    names_a_secret,
    shown_header_value,
    shown_url,
    shown_value,
)

__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_MAX_BODY_BYTES",
    "EVERY_ENCODING",
    "NOT_CREDENTIAL_HEADERS",
    "PROVIDER_CREDENTIAL_HEADERS",
    "REDACTED",
    "REDACTED_RESPONSE_HEADERS",
    "SHOWN_CHARS",
    "SHOWN_HEAD",
    "Redactor",
    "SecretMemory",
    "charset_of",
    "check_body_size",
    "is_credential_header",
    "is_known_credential_header",
    "names_a_secret",
    "query_secrets",
    "refuse_credentials",
    "secrets_of",
    "shown_header_value",
    "shown_url",
    "shown_value",
]

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

# Secrets shorter than this are still dropped from request headers, but not searched for in
# response bodies: replacing every "1" in a body would destroy it without protecting anything.
_MIN_ECHO_LENGTH = 4


def check_body_size(size: int, limit: int, side: str) -> None:
    """Raise `BodyTooLargeError` (with the `size` seen) when `size` bytes is over `limit`."""
    if size > limit:
        raise BodyTooLargeError(side, limit, size=size)


# --- redaction ----------------------------------------------------------------------------


def _candidates(name: str, value: str) -> Iterator[str]:
    """The strings of one declared secret header a server may echo: the whole value, the
    credential after an auth scheme (`Bearer x`, `Token x`, `Basic x`, plus the `user:password`
    and the password a Basic credential decodes to), and each cookie's value and pair."""
    yield value
    scheme, _, credential = value.strip().partition(" ")
    if credential and scheme.isalnum():
        yield credential
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(credential.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                pair = ""
            if pair:
                yield pair
                yield pair.partition(":")[2]
    if name == "cookie":
        for cookie in value.split(";"):
            yield cookie
            yield cookie.partition("=")[2]


#: What URL builders leave unescaped besides letters, digits and ``-._~``, for a secret in a
#: URL the client made itself (a redirect's ``location`` echoing it raw): httpx and browsers
#: (the WHATWG URL standard's query, path and fragment sets), requests (``requote_uri``), and
#: yarl (aiohttp), with a space as ``+`` in a query.  ``%`` both kept and escaped: builders
#: keep a ``%`` that begins an escape and differ on one that does not.
_PRINTABLE = "".join(map(chr, range(0x21, 0x7F)))
_URL_BUILDER_SAFE = tuple(
    safe + percent
    for safe in (
        "".join(c for c in _PRINTABLE if c not in '"#<>%'),  # WHATWG query
        "".join(c for c in _PRINTABLE if c not in '"#<>?`{}%'),  # WHATWG path
        "".join(c for c in _PRINTABLE if c not in '"<>`%'),  # WHATWG fragment
        "!#$&'()*+,/:;=?@[]~",  # requests
        "!$&'()*+,;=:@/?",  # yarl
    )
    for percent in ("", "%")
)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _escaped(text: str, safe: str, space: str) -> str:
    """`text` with every character outside `safe` and the unreserved ones percent-escaped as
    UTF-8 (upper-case hex), a space written as `space`."""
    out = []
    for char in text:
        if char in _UNRESERVED or char in safe:
            out.append(char)
        elif char == " ":
            out.append(space)
        else:
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")))
    return "".join(out)


def _url_forms(text: str) -> set[str]:
    forms = {quote(text, safe=""), quote(text), quote_plus(text, safe=""), quote_plus(text)}
    if not text.isalnum():  # (a token of letters and digits is the same in every form)
        forms |= {_escaped(text, safe, "%20") for safe in _URL_BUILDER_SAFE}
        forms |= {_escaped(text, safe, "+") for safe in _URL_BUILDER_SAFE[-2:]}
    # Servers write percent escapes in either case.
    return forms | {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), f) for f in forms}


#: Characters JSON encoders write as ``\\u00XX`` although JSON does not ask them to: Go's
#: encoding/json (``&``, ``<``, ``>``, HTML-safe), Gson's HTML-safe mode (also ``=`` and ``'``),
#: .NET's System.Text.Json (also ``+``, the backtick and the quote).
_ESCAPED_BY_ENCODERS = ("&<>", "&<>='", "&<>'+`\"")
_HEX_ESCAPE = re.compile(r"\\u[0-9a-f]{4}")


def _json_forms(text: str) -> set[str]:
    """`text` as JSON encoders write it inside a string: Python's (ASCII-only or not), with
    ``/`` escaped (PHP and others), with the characters of `_ESCAPED_BY_ENCODERS` escaped, and
    with upper-case hex digits in the ``\\u`` escapes (Java's and .NET's encoders)."""
    forms = {json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    forms |= {f.replace("/", "\\/") for f in forms}
    for escaped in _ESCAPED_BY_ENCODERS:
        if any(c in text for c in escaped):
            forms |= {_u_escaped(f, escaped) for f in forms}
    if "\\u" in "".join(forms):
        forms |= {_HEX_ESCAPE.sub(lambda m: "\\u" + m.group()[2:].upper(), f) for f in forms}
    return forms


def _u_escaped(form: str, characters: str) -> str:
    """`form` (JSON-escaped text) with each of `characters` written as a ``\\u00XX`` escape."""
    for character in characters:
        plain = '\\"' if character == '"' else character  # a quote is escaped already
        form = form.replace(plain, f"\\u{ord(character):04x}")
    return form


def _base64_forms(data: bytes) -> set[str]:
    """Base64 (standard and URL-safe) of `data` on its own, and the part of it that stays the
    same wherever `data` sits inside a longer base64-encoded text (three alignments)."""
    plain = base64.b64encode(data).decode("ascii")
    forms = {plain, plain.rstrip("=")}
    for shift in (0, 1, 2):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii")
        stable = encoded[4 if shift else 0 : (shift + len(data)) // 3 * 4]
        if len(stable) >= 8:
            forms.add(stable)
    return forms | {f.translate(_URLSAFE) for f in forms}


_URLSAFE = str.maketrans("+/", "-_")


@functools.lru_cache(maxsize=1024)
def _text_forms(secret: str) -> frozenset[str]:
    """Every form in which a server plausibly echoes `secret`, as text."""
    forms = {secret, *_url_forms(secret), *_json_forms(secret)}
    forms |= _base64_forms(secret.encode("utf-8"))
    with contextlib.suppress(UnicodeEncodeError):
        forms |= _base64_forms(secret.encode("latin-1"))
    return frozenset(forms)


#: The charset that stands for every encoding a body is searched in (`Redactor.body`).
EVERY_ENCODING = "*"
_EVERY_ENCODING = ("utf-8", "latin-1", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # (before UTF-16's, which begins it)
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _encodings_of(charset: str | None) -> tuple[str, ...]:
    """The byte encodings to search a body in: UTF-8, Latin-1 and the declared charset (every
    one of them for `EVERY_ENCODING`)."""
    if charset == EVERY_ENCODING:
        return _EVERY_ENCODING
    names = ["utf-8", "latin-1"]
    if charset:
        try:
            name = codecs.lookup(charset).name
        except LookupError:
            name = ""
        if name in ("utf-16", "utf-32"):
            names += [name + "-le", name + "-be"]  # either byte order, without a BOM
        elif name:
            names.append(name)
    return tuple(dict.fromkeys(names))


def _longest_first(form: str) -> tuple[int, str]:
    return -len(form), form


def _needle_first(pair: tuple[bytes, bytes]) -> tuple[int, bytes]:
    return -len(pair[0]), pair[0]


class _Needles:
    """The compiled search set for one set of secrets: built once, shared by every request
    that carries the same secrets.  `extended` adds secrets to a copy, reusing the work done,
    so a session that learns one secret per request never rebuilds what it knew."""

    def __init__(self, secrets: frozenset[str]) -> None:
        # Longest first, so a whole "Bearer xyz" is replaced before its "xyz" part.
        self.text = sorted(_forms(secrets), key=_longest_first)
        self._bytes: dict[str | None, list[tuple[bytes, bytes]]] = {}
        self._lower: list[str] | None = None

    def extended(self, secrets: frozenset[str]) -> _Needles:
        """A copy searching for `secrets` too (this one is left as it is: redactors in use by
        other threads keep it)."""
        new = _forms(secrets).difference(self.text)
        copy = object.__new__(_Needles)
        copy._lower = None
        copy.text = sorted([*self.text, *new], key=_longest_first)  # (two sorted runs: linear)
        copy._bytes = {}
        for charset, found in self._bytes.items():
            known = {needle for needle, _ in found}
            added = [pair for pair in _encoded(new, charset).items() if pair[0] not in known]
            copy._bytes[charset] = sorted([*found, *added], key=_needle_first)
        return copy

    def lower_text(self) -> list[str]:
        """The text forms lower-cased, as a header name holding one is written."""
        if self._lower is None:
            self._lower = sorted({form.lower() for form in self.text}, key=_longest_first)
        return self._lower

    def bytes_for(self, charset: str | None) -> list[tuple[bytes, bytes]]:
        """(needle, marker) for every form in every encoding `charset` asks for (see
        `_encodings_of`), longest needle first; the marker is `REDACTED` in the needle's
        encoding, so a UTF-16 body stays UTF-16."""
        found = self._bytes.get(charset)
        if found is None:
            found = sorted(_encoded(self.text, charset).items(), key=_needle_first)
            self._bytes[charset] = found
        return found


def _forms(secrets: Iterable[str]) -> set[str]:
    """Every text form of `secrets` searched for (`_text_forms`), at least 4 characters long."""
    forms: set[str] = set()
    for secret in secrets:
        forms |= _text_forms(secret)
    forms = {f for f in forms if len(f) >= _MIN_ECHO_LENGTH and f not in _MARKERS}
    # How a non-UTF-8 header value decoded as Latin-1 shows a UTF-8 echo.
    return forms | {f.encode("utf-8").decode("latin-1") for f in forms if not f.isascii()}


def _encoded(forms: Iterable[str], charset: str | None) -> dict[bytes, bytes]:
    """`forms` in every encoding a body is searched in (`_encodings_of(charset)`), each with
    the marker that replaces it."""
    out: dict[bytes, bytes] = {}
    for encoding in _encodings_of(charset):
        marker = REDACTED.encode(encoding)
        for form in forms:
            with contextlib.suppress(UnicodeEncodeError):
                out.setdefault(form.encode(encoding), marker)
    return out


_BOM_STARTS = frozenset(bom[:2] for bom, _ in _BOMS)

# Needles never searched for: text that is part of the replacement itself.
_URL_REDACTED = quote(REDACTED, safe="")
_MARKERS = REDACTED_FORMS


@functools.lru_cache(maxsize=64)
def _needles(secrets: frozenset[str]) -> _Needles:
    return _Needles(secrets)


def _replace_all(value: str, needles: Iterable[str], marker: str) -> str:
    for needle in needles:
        if needle in value:
            value = value.replace(needle, marker)
    return value


def query_secrets(url: str, names: Collection[str]) -> frozenset[str]:
    """The values of the query parameters of `url` named in `names` (case-insensitively, as
    `canonical_url` redacts them): as sent and percent-decoded, those long enough to be searched
    for, placeholders left out (as `secrets_of` leaves them).  They are written as `<redacted>`
    in the URL; these are searched for everywhere else."""
    _, question, rest = url.partition("?")
    if not question or not names:
        return frozenset()
    found = set()
    for item in rest.partition("#")[0].split("&"):
        name, equals, value = item.partition("=")
        if equals and unquote_plus(name).lower() in names:
            found |= {value, unquote(value), unquote_plus(value)}
    return frozenset(v for v in found if len(v) >= _MIN_ECHO_LENGTH and not _stands_in(v))


def secrets_of(
    headers: Iterable[tuple[str, str]], secret_headers: Collection[str]
) -> frozenset[str]:
    """The strings of the declared secret headers among `headers` that are searched for
    (`_candidates`, at least 4 characters long), placeholders another tool wrote left out
    (`_stands_in`: searching for ``REDACTED`` would rewrite every ``REDACTED-RAY``)."""
    found = {
        candidate.strip()
        for name, value in headers
        if name in secret_headers
        for candidate in _candidates(name, value)
    }
    return frozenset(s for s in found if len(s) >= _MIN_ECHO_LENGTH and not _stands_in(s))


def _stands_in(candidate: str) -> bool:
    """Whether a secret header's `candidate` string is a placeholder another tool wrote
    (`is_placeholder`) holding one of the marker words no credential holds
    (`PLACEHOLDER_MARKERS`: ``REDACTED``, ``Bearer FILTERED``, ``__cf_bm=scrubbed``).  Other
    placeholders are still searched for: a word or a shape (``passwd``, ``000000``, ``<a1b2>``)
    may well be a real secret, such as a test server's password (httpbin's
    /basic-auth/user/passwd)."""
    if not is_placeholder(candidate):
        return False
    lowered = candidate.lower()
    return any(marker in lowered for marker in PLACEHOLDER_MARKERS)


class Redactor:
    """Replaces every value of a declared secret wherever something to be written echoes it.

    The secrets are the values of the declared secret headers of the live request (plus any
    `extra` values, such as those a session saw on earlier requests: see `SecretMemory`), in
    every form in which a server plausibly echoes them (`_candidates` x raw, URL-encoded,
    JSON-escaped and base64, in UTF-8, Latin-1 and the response's declared charset).  The search
    set is built once per set of secrets.  A redactor with nothing to search for is false.
    """

    __slots__ = ("_needles", "secrets")

    def __init__(
        self,
        headers: Iterable[tuple[str, str]],
        secret_headers: Collection[str],
        extra: Iterable[str] = (),
    ) -> None:
        #: The secret strings searched for (in all their forms), never shown anywhere.
        self.secrets = secrets_of(headers, secret_headers) | frozenset(
            s for s in extra if len(s) >= _MIN_ECHO_LENGTH
        )
        self._needles = _needles(self.secrets) if self.secrets else None

    def __bool__(self) -> bool:
        return self._needles is not None

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        """A redactor searching for `secrets` too (this one, when they add nothing)."""
        new = frozenset(s for s in secrets if len(s) >= _MIN_ECHO_LENGTH) - self.secrets
        if not new:
            return self
        redactor = object.__new__(Redactor)
        redactor.secrets = self.secrets | new
        redactor._needles = _needles(new) if self._needles is None else self._needles.extended(new)
        return redactor

    def text(self, value: str) -> str:
        """`value` (a header value, an error message) with every echo replaced."""
        if self._needles is None:
            return value
        return _replace_all(value, self._needles.text, REDACTED)

    def url(self, value: str) -> str:
        """A URL with every echo replaced by the URL-encoded marker, so a client following a
        redacted redirect (`location: ...<redacted>`) requests exactly the URL written."""
        if self._needles is None:
            return value
        return _replace_all(value, self._needles.text, _URL_REDACTED)

    def body(self, body: bytes, charset: str | None = None) -> bytes:
        """`body` with every echo replaced, searched in UTF-8, Latin-1 and `charset` (or, with
        no charset, the UTF-16 or UTF-32 its byte order mark says; `EVERY_ENCODING`: in all
        of these)."""
        if self._needles is None or not body:
            return body
        if charset is None and body[:2] in _BOM_STARTS:
            charset = next((name for bom, name in _BOMS if body.startswith(bom)), None)
        for needle, marker in self._needles.bytes_for(charset):
            if needle in body:
                body = body.replace(needle, marker)
        return body

    def cut_partial(self, body: bytes, charset: str | None = None) -> bytes:
        """`body`, which ends early (a truncated stream), without a last part that could be
        the start of a secret: the rest of the secret never arrived, so no search can find it.
        """
        if self._needles is None or not body:
            return body
        if charset is None and body[:2] in _BOM_STARTS:  # (as `body` reads it)
            charset = next((name for bom, name in _BOMS if body.startswith(bom)), None)
        cut = 0
        for needle, _ in self._needles.bytes_for(charset):
            for size in range(min(len(needle) - 1, len(body)), cut, -1):
                if body.endswith(needle[:size]):
                    cut = size
                    break
        return body[: len(body) - cut]

    def name(self, name: str) -> str:
        """A header name (lower-case) with every echo replaced, whatever its case was."""
        if self._needles is None:
            return name
        return _replace_all(name, self._needles.lower_text(), REDACTED)

    def headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """Header values with every echo replaced."""
        return tuple((name, self.text(value)) for name, value in headers)

    def request(self, request: RequestData) -> RequestData:
        """`request` as matched: URL, headers and body with every echo replaced (declared
        secret headers themselves are dropped on writing, and never matched).  Its URL stays
        canonical, as a `RequestData`'s is: an echo becomes ``<redacted>``, the canonical form
        of the marker a written URL holds (`url`), so it matches the exchange written for it."""
        if self._needles is None:
            return request
        return request._replace(
            url=_replace_all(request.url, self._needles.text, REDACTED),
            headers=self.headers(request.headers),
            body=self.body(request.body, charset_of(request.headers)),
        )


_NOTHING_SECRET = Redactor((), ())


class SecretMemory:
    """Every secret value a session has seen, so that each exchange it writes is searched for
    all of them: a token echoed in a redirect's `location` must not reach the next hop's
    recorded URL, although the client drops `authorization` across origins and the next hop
    may go through another transport of the same cassette.

    Kept for the session's life, in memory only: a signature that changes on every request adds
    one secret per request, so a test run's worth is a few thousand at most, and each one learned
    extends the search set rather than rebuilding it.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The redactor searching for every secret known (false while none is).
        self.redactor = _NOTHING_SECRET

    def learn(self, secrets: Collection[str]) -> Redactor:
        """Remember `secrets` (those under 4 characters are not searched for); the redactor
        searching for them and for every secret known before."""
        redactor = self.redactor
        if redactor.secrets.issuperset(secrets):
            return redactor
        with self._lock:
            self.redactor = self.redactor.with_secrets(secrets)
            return self.redactor


def charset_of(headers: Iterable[tuple[str, str]]) -> str | None:
    """The `charset` parameter of the `content-type` header, if any."""
    for name, value in headers:
        if name == "content-type":
            for param in value.split(";")[1:]:
                key, _, found = param.strip().partition("=")
                if key.strip().lower() == "charset" and found.strip():
                    return found.strip().strip('"')
    return None
