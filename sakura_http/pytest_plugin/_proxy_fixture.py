"""The ``sakura_proxy`` fixture: a recording proxy on the test's cassette, for subprocesses and
clients that are not httpx (``subprocess.run([...], env={**os.environ, **sakura_proxy.env()})``).

It is built on the plugin as `sakura_transport` is: the cassette comes from the ``cassette``
marker (or the default name), its path, mode and options from `CassetteFactory.config()`, and
the factory closes and checks the proxy at teardown (`CassetteFactory.track`), so ``--record``,
``--record-all``, ``assert_all_played`` and the caught-error check behave the same.  The proxy's
own options (``upstream``, ``ca_dir``, ``verify``, ``listen``, ``shutdown_timeout``) may be given
in the marker too.  `sakura_http.proxy` (and cryptography with it) is imported only when a test
asks for the fixture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._factory import PROXY_OPTIONS, CassetteFactory, marker_cassette

if TYPE_CHECKING:
    from ..proxy import Proxy

__all__ = ["PROXY_OPTIONS", "sakura_proxy"]


@pytest.fixture
def sakura_proxy(request: pytest.FixtureRequest, sakura_recording: CassetteFactory) -> Proxy:
    """A `sakura_http.proxy.Proxy` on the test's cassette, running until the test ends.

    Forward mode by default (``sakura_proxy.env()`` routes a subprocess through it); give
    ``@pytest.mark.cassette(upstream="https://api.example.com")`` for reverse mode.  A request
    the cassette cannot answer gets a 502, and the test fails at teardown even if the client
    ignored it.
    """
    from ..proxy import start

    item = request.node
    assert isinstance(item, pytest.Item)
    name, options = marker_cassette(item)
    assert_all_played = bool(options.pop("assert_all_played", False))
    marker = item.get_closest_marker("cassette")
    given = marker.kwargs if marker is not None else {}
    own = {key: given[key] for key in PROXY_OPTIONS if key in given}
    path, config = sakura_recording.config(name, **options)
    proxy = start(path, config=config, environ={}, **own)
    sakura_recording.track(proxy, assert_all_played=assert_all_played)
    return proxy
