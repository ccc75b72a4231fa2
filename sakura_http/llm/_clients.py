"""Build the anthropic and openai SDK clients over a `RecordingTransport`.

The SDKs take an ``http_client=`` of the HTTP library they were built for: anthropic >= 1.0 and
current openai releases take only an ``httpx2`` client (``TypeError: Invalid http_client
argument`` for an httpx one), older releases an ``httpx`` client.  `http_library_of` reads
which one from the SDK itself (the base class of its ``DefaultHttpxClient``), so no version
number is written down here.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._config import CassetteConfig, CassetteOptions
from .._core import RecordMode
from .._libraries import DefaultOuter
from .._rules import Rules
from .._transport import RecordingTransport

if TYPE_CHECKING:
    from collections.abc import Mapping

    import anthropic
    import openai
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

    from .._transport import AsyncOuterTransport, OuterTransport

__all__ = [
    "LLM_SECRET_HEADERS",
    "PLACEHOLDER_API_KEY",
    "anthropic_client",
    "async_anthropic_client",
    "async_openai_client",
    "http_library_of",
    "llm_transport_options",
    "openai_client",
]

#: Every credential header the two SDKs send, declared secret by every helper and fixture:
#: ``authorization`` (anthropic >= 2.0 and openai: ``Bearer <key>``), ``x-api-key`` (anthropic
#: before 2.0), ``api-key`` (openai on Azure), and the account ids openai sends when configured
#: (``openai-organization``, ``openai-project``).  Secret headers are forwarded, never written
#: to the cassette and never matched.
LLM_SECRET_HEADERS: tuple[str, ...] = (
    "authorization",
    "x-api-key",
    "api-key",
    "openai-organization",
    "openai-project",
)

#: The API key a client gets when its cassette only replays and no credential was given: the
#: SDKs refuse to build a client without one, and a replayed request never leaves the process.
PLACEHOLDER_API_KEY = "sakura-http-replay-placeholder-key"


class _HelperOptions(CassetteOptions, total=False):
    """The keywords every SDK helper takes: the transport's (`CassetteOptions`, ``outer``,
    ``environ``, ``config`` as a `CassetteConfig`) and the keywords both SDKs' clients take."""

    outer: OuterTransport | AsyncOuterTransport | None
    environ: Mapping[str, str] | None
    config: CassetteConfig | Mapping[str, Any] | None  # anthropic has a config= of its own
    api_key: Any
    base_url: Any
    timeout: Any
    max_retries: int
    default_headers: Mapping[str, str] | None
    default_query: Mapping[str, object] | None


class AnthropicOptions(_HelperOptions, total=False):
    """`anthropic_client`'s keywords: the transport's and ``anthropic.Anthropic``'s (as of
    anthropic 2.x; a keyword a newer SDK adds is passed on, and typed here once it is known)."""

    auth_token: str | None
    credentials: Any
    profile: str | None
    webhook_key: str | None
    open_telemetry: Any
    middleware: Any


class OpenAIOptions(_HelperOptions, total=False):
    """`openai_client`'s keywords: the transport's and ``openai.OpenAI``'s (as of openai 3.x)."""

    admin_api_key: str | None
    workload_identity: Any
    organization: str | None
    project: str | None
    webhook_secret: str | None
    provider: Any
    data_residency: Any
    websocket_base_url: Any


# Keywords that configure the RecordingTransport; every other keyword goes to the SDK client.
# ``config`` goes to the transport only as a CassetteConfig: anthropic has a ``config=`` too.
_TRANSPORT_OPTIONS = frozenset(
    {field.name for field in dataclasses.fields(CassetteConfig)} | {"outer", "environ"}
)


@dataclass(frozen=True, slots=True)
class _Sdk:
    module: str
    sync_class: str
    async_class: str
    #: SDK keywords that carry a credential: given one, no placeholder key is added.
    credentials: tuple[str, ...]


_ANTHROPIC = _Sdk(
    "anthropic", "Anthropic", "AsyncAnthropic", ("api_key", "auth_token", "credentials")
)
_OPENAI = _Sdk("openai", "OpenAI", "AsyncOpenAI", ("api_key", "admin_api_key", "workload_identity"))


def http_library_of(sdk: ModuleType) -> ModuleType:
    """The HTTP library (the ``httpx`` or ``httpx2`` module) the installed `sdk` module uses.

    Read from the base class of the SDK's ``DefaultHttpxClient``; an SDK too old to have one
    uses httpx.
    """
    default_client = getattr(sdk, "DefaultHttpxClient", None)
    for cls in getattr(default_client, "__mro__", ()):
        library = cls.__module__.partition(".")[0]
        if cls.__name__ == "Client" and library in ("httpx", "httpx2"):
            return importlib.import_module(library)
    return importlib.import_module("httpx")


def _import(sdk: _Sdk) -> ModuleType:
    try:
        return importlib.import_module(sdk.module)
    except ImportError as exc:
        raise ImportError(
            f"sakura_http.llm needs the {sdk.module} SDK: "
            f'pip install "sakura-http[{sdk.module}]" (or pip install {sdk.module})'
        ) from exc


def llm_transport_options(options: dict[str, Any]) -> dict[str, Any]:
    """`RecordingTransport` keywords (or a ``config``) with what every LLM cassette gets:
    `LLM_SECRET_HEADERS` declared secret and `Rules.llm()` combined with the rules given.
    The helpers and the pytest SDK fixtures both use it."""
    config = options.get("config")
    if config is not None:
        secrets = config.secret_headers | frozenset(LLM_SECRET_HEADERS)
        return {
            **options,
            "config": config.replace(secret_headers=secrets, rules=Rules.llm(config.rules)),
        }
    return {
        **options,
        "secret_headers": [*LLM_SECRET_HEADERS, *options.get("secret_headers", ())],
        "rules": Rules.llm(options.get("rules") or Rules()),
    }


def _build(
    sdk: _Sdk,
    helper: str,
    cassette: str | os.PathLike[str] | RecordingTransport,
    options: dict[str, Any],
    *,
    is_async: bool,
) -> Any:
    module = _import(sdk)
    if "http_client" in options:
        raise TypeError(
            f"{helper}() builds the http_client itself (over the cassette's transport); pass "
            "the SDK's other keywords, or build the SDK client yourself with "
            "http_client=<library>.Client(transport=RecordingTransport(...))"
        )
    transport_options = {k: options.pop(k) for k in list(options) if k in _TRANSPORT_OPTIONS}
    if isinstance(options.get("config"), CassetteConfig):
        transport_options["config"] = options.pop("config")
    if isinstance(cassette, RecordingTransport):
        if transport_options:
            raise TypeError(
                f"{helper}() got {', '.join(sorted(transport_options))} beside an existing "
                "RecordingTransport: give them to the RecordingTransport instead"
            )
        transport = cassette
    else:
        transport_options = llm_transport_options(transport_options)
        transport_options.setdefault("outer", DefaultOuter())
        transport = RecordingTransport(cassette, **transport_options)
    options.setdefault("max_retries", 0)
    replaying = transport.mode is RecordMode.NONE
    if replaying and all(options.get(name) is None for name in sdk.credentials):
        options["api_key"] = PLACEHOLDER_API_KEY
    http_client = _http_client(module, transport, is_async=is_async)
    client_class = getattr(module, sdk.async_class if is_async else sdk.sync_class)
    return client_class(http_client=http_client, **options)


def _http_client(sdk: ModuleType, transport: RecordingTransport, *, is_async: bool) -> Any:
    # The library's plain client: the SDKs' own DefaultHttpxClient refuses any transport whose
    # class has an httpx base (as RecordingTransport has), and the SDK still applies its own
    # timeouts per request.  Redirects are followed, as the SDKs' default clients do.
    library = http_library_of(sdk)
    client_class = library.AsyncClient if is_async else library.Client
    return client_class(transport=transport, follow_redirects=True)


def anthropic_client(
    cassette: str | os.PathLike[str] | RecordingTransport, /, **options: Unpack[AnthropicOptions]
) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` client whose requests go through a cassette.

    `cassette` is a cassette path (a `RecordingTransport` is built for it) or an existing
    `RecordingTransport`.  Keywords `RecordingTransport` takes (``mode``, ``outer``,
    ``secret_headers``, ``record_hosts``, ..., and ``config`` when it is a `CassetteConfig`)
    configure the transport; every other keyword goes to ``anthropic.Anthropic``.  The transport
    declares `LLM_SECRET_HEADERS` secret (plus any ``secret_headers`` given) and, when
    recording, reaches the network through a real transport of the library the SDK uses
    (``outer=`` replaces it).  ``max_retries`` defaults to 0, so a miss is reported once, at
    once.  When the transport only replays (mode "none") and no ``api_key`` / ``auth_token`` /
    ``credentials`` is given, the client gets `PLACEHOLDER_API_KEY`.

    Closing the client closes the transport.  Passing ``http_client=`` raises `TypeError`, as
    do transport keywords beside an existing transport.  Without the SDK installed it raises
    `ImportError` naming the ``sakura-http[anthropic]`` extra.
    """
    return _build(_ANTHROPIC, "anthropic_client", cassette, dict(options), is_async=False)  # type: ignore[no-any-return]


def async_anthropic_client(
    cassette: str | os.PathLike[str] | RecordingTransport, /, **options: Unpack[AnthropicOptions]
) -> anthropic.AsyncAnthropic:
    """An ``anthropic.AsyncAnthropic`` client over a cassette, as `anthropic_client` builds it.

    Use it as ``async with async_anthropic_client(...) as client:`` (or ``await
    client.close()``), so its transport closes inside the event loop that used it.
    """
    return _build(_ANTHROPIC, "async_anthropic_client", cassette, dict(options), is_async=True)  # type: ignore[no-any-return]


def openai_client(
    cassette: str | os.PathLike[str] | RecordingTransport, /, **options: Unpack[OpenAIOptions]
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client whose requests go through a cassette.

    The same rules as `anthropic_client`: transport keywords configure the transport, every
    other keyword goes to ``openai.OpenAI``; `LLM_SECRET_HEADERS` are secret; ``max_retries``
    defaults to 0; a replay-only client without ``api_key`` gets `PLACEHOLDER_API_KEY`.
    """
    return _build(_OPENAI, "openai_client", cassette, dict(options), is_async=False)  # type: ignore[no-any-return]


def async_openai_client(
    cassette: str | os.PathLike[str] | RecordingTransport, /, **options: Unpack[OpenAIOptions]
) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` client over a cassette, as `openai_client` builds it; use it
    as ``async with`` so its transport closes inside the event loop that used it."""
    return _build(_OPENAI, "async_openai_client", cassette, dict(options), is_async=True)  # type: ignore[no-any-return]
