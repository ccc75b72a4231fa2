"""The plugin's fixtures for the requests and aiohttp front ends.

* ``sakura_requests``: a `requests.Session` whose adapter (`sakura_http.requests.RecordingAdapter`)
  replays and records on the test's cassette, closed at teardown.
* ``sakura_aiohttp``: an `aiohttp.ClientSession` with `sakura_http.aiohttp.RecordingMiddleware`
  on the test's cassette, closed at teardown inside the test's event loop (asyncio).

Both take the cassette and its configuration from ``sakura_cassette`` (the ``cassette`` marker's
name and options, the mode from ``--record``, the ini options, the plugin's advice), and hand
what they open to ``sakura_recording`` to be checked and closed at teardown, so the
swallowed-error check, ``expect_errors``, ``assert_all_played`` and the summary hold for them;
like ``sakura_transport``, a fixture no request went through fails the test when its cassette
does not exist (the code under test ran live, with sessions of its own).
requests and aiohttp are imported when a fixture is used, never with the plugin.

Registered by the plugin (``pytest_plugins`` in `sakura_http.pytest_plugin`); this module
imports only the engine and the two front ends' public API.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import aiohttp
    import requests

__all__ = ["sakura_aiohttp", "sakura_requests"]


@pytest.fixture
def sakura_requests(sakura_cassette: Any, sakura_recording: Any) -> Iterator[requests.Session]:
    """A ``requests.Session`` on the test's cassette (the ``cassette`` marker's, as for
    ``sakura_transport``): a `RecordingAdapter` is mounted for ``http://`` and ``https://``.
    Recording sends through a plain ``HTTPAdapter``.  The session is closed at teardown."""
    import requests

    from sakura_http.requests import RecordingAdapter

    adapter = RecordingAdapter(sakura_cassette.path, config=sakura_cassette.config, environ={})
    sakura_recording.track(adapter)  # (assert_all_played: sakura_cassette's, session-wide)
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    try:
        yield session
    finally:
        session.close()
    _fail_if_unused(adapter, "sakura_requests", "session.get(...)")


@pytest.fixture
async def sakura_aiohttp(
    sakura_cassette: Any, sakura_recording: Any
) -> AsyncIterator[aiohttp.ClientSession]:
    """An ``aiohttp.ClientSession`` on the test's cassette, its requests through a
    `RecordingMiddleware` (recording goes through the session's own connector); closed at
    teardown, inside the test's event loop (use it from async tests on asyncio)."""
    import aiohttp

    from sakura_http.aiohttp import RecordingMiddleware

    middleware = RecordingMiddleware(
        sakura_cassette.path, config=sakura_cassette.config, environ={}
    )
    sakura_recording.track(middleware)
    session = aiohttp.ClientSession(middlewares=[middleware])
    try:
        yield session
    finally:
        await session.close()
        await middleware.aclose()
    _fail_if_unused(middleware, "sakura_aiohttp", "async with session.get(...)")


def _fail_if_unused(opened: Any, fixture: str, call: str) -> None:
    """Fail the test if no request went through `fixture`'s session while its cassette does not
    exist: the code under test most likely sent its requests with a session of its own, live
    (the check ``sakura_transport`` makes, worded for a ready-made session)."""
    if opened.raised or opened.appended or opened.passed_through or os.path.exists(opened.path):
        return
    pytest.fail(
        f"{fixture}: no request went through the {fixture} session, and its cassette "
        f"{opened.path} does not exist: the code under test probably sent its requests with a "
        f"session of its own, so they ran without a cassette. Send them with the fixture's "
        f"session ({call.replace('session', fixture, 1)}), or, for an app that builds its own "
        "sessions, use @pytest.mark.cassette(patch_clients=True).",
        pytrace=False,
    )
