"""The plugin's LLM side: SDK fixtures, ``patch_clients``, and misses the SDKs wrap.

* fixtures ``sakura_anthropic``, ``sakura_async_anthropic``, ``sakura_openai``,
  ``sakura_async_openai``: the SDK's own client (built by `sakura_http.llm`) over the test's
  cassette, with the marker's ``anthropic={...}`` / ``openai={...}`` as SDK keywords.
* ``@pytest.mark.cassette(patch_clients=True)`` and the ini key ``sakura_patch_clients``: the
  httpx / httpx2 clients, requests sessions (``requests.get`` too) and aiohttp sessions the
  app builds itself use the test's cassette (`ClientPatch`), with the
  SDK fixtures' defaults: `LLM_SECRET_HEADERS` secret, `Rules.llm()` for the providers'
  exchanges (`PATCH_CLIENTS_RULES`), no retry of a miss, and `PLACEHOLDER_API_KEY` in the SDKs'
  key variables while replaying (from the start of the run with the ini key, so clients built
  when the app is imported start too).
* a test failing with an error that wraps a `CassetteError` (as the SDKs wrap a miss in their
  connection error) gets that error in its summary line, and its full message once.

Registered by the plugin (``pytest_plugins`` in `sakura_http.pytest_plugin`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from .._core import RecordMode, resolve_mode
from .._exceptions import CassetteError
from .._format import Exchange
from .._rules import Rules
from ..llm import (
    LLM_SECRET_HEADERS,
    PLACEHOLDER_API_KEY,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    llm_transport_options,
    openai_client,
)
from ._caught import raised_in
from ._factory import CassetteFactory, fail_if_unused, marker_cassette
from ._patch import ClientPatch
from ._state import plugin_state

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = [
    "PATCH_CLIENTS_RULES",
    "sakura_anthropic",
    "sakura_async_anthropic",
    "sakura_async_openai",
    "sakura_openai",
]

#: For each SDK: the variables its key is read from when recording, and its credential keywords.
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "anthropic": (("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"), ("api_key", "auth_token")),
    "openai": (("OPENAI_API_KEY",), ("api_key",)),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "sakura_patch_clients",
        "sakura-http: patch_clients=True for every test (httpx/httpx2 clients, requests and "
        "aiohttp sessions that would reach the network use the test's cassette).",
        type="bool",
        default=False,
    )


# --- SDK fixtures --------------------------------------------------------------------------


def _sdk_client(
    request: pytest.FixtureRequest,
    factory: CassetteFactory,
    sdk: str,
    build: Callable[..., Any],
) -> tuple[Any, Any]:
    item = request.node
    assert isinstance(item, pytest.Item)
    name, options = marker_cassette(item)
    marker = item.get_closest_marker("cassette")
    sdk_options = dict((marker.kwargs.get(sdk) if marker is not None else None) or {})
    transport = factory(name, **llm_transport_options(options))
    variables, keywords = _KEYS[sdk]
    if transport.mode is not RecordMode.NONE and not (
        any(sdk_options.get(k) is not None for k in keywords)
        or any(os.environ.get(v) for v in variables)
    ):
        # Under --verify the transport's cassette is a temporary one: name the real one.
        live_run = plugin_state(request.config).live_run
        real = live_run.real_path(transport.path) if live_run is not None else None
        going_live = f"verifying {real}" if real is not None else f"recording {transport.path}"
        pytest.fail(
            f"{going_live} needs an {sdk} API key: set {' or '.join(variables)} in "
            f"the environment (it is sent, never written), or pass it in "
            f'@pytest.mark.cassette({sdk}={{"api_key": ...}})',
            pytrace=False,
        )
    return build(transport, **sdk_options), transport


@pytest.fixture
def sakura_anthropic(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> Iterator[anthropic.Anthropic]:
    """An ``anthropic.Anthropic`` client over the test's cassette (see `anthropic_client`).

    The cassette is the marker's, as for ``sakura_transport``; the marker's ``anthropic={...}``
    are keywords of the client (``base_url``, ``max_retries``, ...).  When recording, the key
    comes from ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``); when replaying none is
    needed.  The client is closed at teardown.
    """
    client, transport = _sdk_client(request, sakura_recording, "anthropic", anthropic_client)
    yield client
    client.close()
    fail_if_unused(transport, "sakura_anthropic")


@pytest.fixture
async def sakura_async_anthropic(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An ``anthropic.AsyncAnthropic`` client over the test's cassette, as ``sakura_anthropic``;
    closed inside the test's own event loop (use it from ``@pytest.mark.anyio`` tests)."""
    client, transport = _sdk_client(request, sakura_recording, "anthropic", async_anthropic_client)
    yield client
    await client.close()
    fail_if_unused(transport, "sakura_async_anthropic")


@pytest.fixture
def sakura_openai(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> Iterator[openai.OpenAI]:
    """An ``openai.OpenAI`` client over the test's cassette (see `openai_client`); the marker's
    ``openai={...}`` are keywords of the client; when recording, the key comes from
    ``OPENAI_API_KEY``."""
    client, transport = _sdk_client(request, sakura_recording, "openai", openai_client)
    yield client
    client.close()
    fail_if_unused(transport, "sakura_openai")


@pytest.fixture
async def sakura_async_openai(
    request: pytest.FixtureRequest, sakura_recording: CassetteFactory
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An ``openai.AsyncOpenAI`` client over the test's cassette, as ``sakura_openai``; closed
    inside the test's own event loop."""
    client, transport = _sdk_client(request, sakura_recording, "openai", async_openai_client)
    yield client
    await client.close()
    fail_if_unused(transport, "sakura_async_openai")


# --- patch_clients -------------------------------------------------------------------------

#: The providers' API hosts: their exchanges get `Rules.llm()` under patch_clients.
LLM_HOSTS = frozenset({"api.anthropic.com", "api.openai.com"})
_LLM_RULES = Rules.llm()


def _from_a_provider(exchange: Exchange) -> bool:
    """An exchange with an LLM provider: to one of `LLM_HOSTS`, or sent by the anthropic or
    openai SDK whatever its ``base_url`` (its user-agent is the client class's name, such as
    ``AsyncAnthropic/Python 2.15.0`` or ``AzureOpenAI/Python 3.57.0``)."""
    if (urlsplit(exchange.url).hostname or "") in LLM_HOSTS:
        return True
    for name, value in exchange.headers:
        if name == "user-agent":
            product = value.partition("/")[0].lower()
            return "anthropic" in product or "openai" in product
    return False


def _llm_rules_for_providers(exchange: Exchange) -> Exchange:
    if not _from_a_provider(exchange):
        return exchange
    headers = _LLM_RULES.scrub_response_headers(exchange.response_headers)
    return dataclasses.replace(exchange, response_headers=headers)


#: The rules patch_clients adds to a cassette (before the marker's ``rules=``): `Rules.llm()`'s
#: scrubs for the exchanges with the LLM providers, so their per-call headers (date, request
#: ids, organization ids, rate limits) are written as stable placeholders, as the SDK fixtures
#: write them.  The other clients' exchanges are written as they are.
PATCH_CLIENTS_RULES = Rules(before_record=_llm_rules_for_providers)


def _placeholder_keys(env: pytest.MonkeyPatch) -> None:
    """Put `PLACEHOLDER_API_KEY` in each SDK's key variable unless one of them is set: the SDKs
    refuse to build a client without a key, and a replayed request never leaves the process."""
    for variables, _ in _KEYS.values():
        if not any(os.environ.get(v) for v in variables):
            env.setenv(variables[0], PLACEHOLDER_API_KEY)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """With ``sakura_patch_clients = true`` and a run that replays, the placeholder keys are
    set before any conftest or test module is imported (an app's SDK clients built at import
    time start), and removed when the run ends.  A run that goes live (``--record``,
    ``--record-all``, ``--verify``, ``--verify-strict``) takes the keys from the environment:
    a placeholder would be sent, and a missing key would not be named."""
    if not early_config.getini("sakura_patch_clients"):
        return
    options = early_config.known_args_namespace
    live = ("sakura_record", "sakura_record_all", "sakura_verify", "sakura_verify_strict")
    if any(getattr(options, name, False) for name in live):
        return
    try:
        replaying = resolve_mode(RecordMode.NONE, os.environ) is RecordMode.NONE
    except CassetteError:  # a bad SAKURA_HTTP_RECORD: pytest_configure says so
        return
    if replaying:
        env = pytest.MonkeyPatch()
        early_config.add_cleanup(env.undo)
        _placeholder_keys(env)


def _patching(request: pytest.FixtureRequest) -> bool:
    marker = request.node.get_closest_marker("cassette")
    if marker is not None and "patch_clients" in marker.kwargs:
        return bool(marker.kwargs["patch_clients"])
    return bool(request.config.getini("sakura_patch_clients"))


@pytest.fixture(autouse=True)
def _sakura_patch_clients(request: pytest.FixtureRequest) -> Iterator[None]:
    """With patch_clients, the httpx / httpx2 clients of the test use its cassette (see
    `ClientPatch`), with `LLM_SECRET_HEADERS` secret and `PATCH_CLIENTS_RULES`; while
    replaying, the SDKs' key variables that are not set hold `PLACEHOLDER_API_KEY`, so an app's
    own SDK clients start."""
    if not _patching(request):
        yield
        return
    factory: CassetteFactory = request.getfixturevalue("sakura_recording")
    item = request.node
    assert isinstance(item, pytest.Item)
    name, options = marker_cassette(item)
    secret_headers = [*LLM_SECRET_HEADERS, *options.pop("secret_headers", ())]
    rules = options.pop("rules", None)
    options["rules"] = (
        PATCH_CLIENTS_RULES | rules if isinstance(rules, Rules) else rules or PATCH_CLIENTS_RULES
    )  # anything but Rules is refused by the factory, naming the option
    transport = factory(name, outer=ClientPatch.outer(), secret_headers=secret_headers, **options)
    with pytest.MonkeyPatch.context() as env:
        if transport.mode is RecordMode.NONE:
            _placeholder_keys(env)
        with ClientPatch(transport, track=factory.track).installed():
            yield


# --- misses wrapped by the code under test -------------------------------------------------


def _shown(exc: BaseException, error: BaseException) -> bool:
    """Whether a traceback of `exc` shows `error` (the chain Python and pytest display)."""
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        if current is error:
            return True
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            return False
        else:
            current = current.__context__
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report: pytest.TestReport = outcome.get_result()
    if call.excinfo is None or not report.failed:
        return
    wrapper = call.excinfo.value
    if isinstance(wrapper, CassetteError):
        return
    error = next((e for e in raised_in(wrapper) if isinstance(e, CassetteError)), None)
    if error is None:
        return
    first_line = str(error).partition("\n")[0]
    outer = f"{type(wrapper).__module__}.{type(wrapper).__qualname__}"
    name = f"{type(error).__module__}.{type(error).__qualname__}"  # sakura_http.CassetteMiss
    headline = f"{name}: {first_line} (raised as {outer}: {wrapper})"
    reprcrash = getattr(report.longrepr, "reprcrash", None)
    if reprcrash is not None:
        reprcrash.message = headline
    tbstyle = item.config.getoption("tbstyle", "auto")
    if tbstyle in ("line", "no") or not _shown(wrapper, error):
        report.sections.append((f"sakura-http: {name}", str(error)))
