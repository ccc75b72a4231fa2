"""`CassetteFrontEnd`: what every in-process front end shows of its cassette.

`RecordingTransport` (httpx, httpx2), `RecordingAdapter` (requests) and `RecordingMiddleware`
(aiohttp) each drive a `CassetteUser` of the cassette's shared session; this base holds that
user and answers the questions a test asks of any of them: the configuration, the path, the
effective mode, what was written, what the cassette holds and what was played.
"""

from __future__ import annotations

import os

from ._config import CassetteConfig
from ._core import RecordMode
from ._exceptions import CassetteError
from ._format import Exchange
from ._session import CassetteSession, CassetteUser

__all__ = ["CassetteFrontEnd"]


class CassetteFrontEnd:
    """The cassette side of a front end; `_open()` joins the cassette's session."""

    _user: CassetteUser
    _config: CassetteConfig
    _closed: bool
    #: Every `CassetteError` this front end raised, in order, even if the caller caught it.
    raised: list[CassetteError]
    #: How many requests went to `passthrough_hosts` (sent on, never matched or written).
    passed_through: int

    def _open(
        self, path: str | os.PathLike[str], config: CassetteConfig, *, can_record: bool
    ) -> None:
        """Join the session of `path` (reading the cassette if no one has it open): raises
        `CassetteFormatError` for an unreadable one, `ConfigurationError` for a bad path or a
        mode that conflicts with another user's."""
        self._user = CassetteSession.open(path, config, can_record=can_record)
        self._config = config
        self._closed = False
        self.raised = []
        self.passed_through = 0

    @property
    def config(self) -> CassetteConfig:
        """The configuration, with the effective mode."""
        return self._config

    @property
    def path(self) -> str:
        """The cassette file."""
        return str(self._user.path)

    @property
    def mode(self) -> RecordMode:
        """The effective mode (after `SAKURA_HTTP_RECORD`)."""
        return self._user.mode

    @property
    def appended(self) -> int:
        """How many exchanges this front end has written."""
        return self._user.appended

    @property
    def exchanges(self) -> list[Exchange]:
        """The cassette's exchanges in file order, as this run holds them: those loaded, then
        those recorded so far (in mode "all", only those recorded so far).  A copy: changing
        it changes nothing.  Every front end of the cassette shares them (see `play_count`)."""
        return list(self._user.session.exchanges)

    @property
    def play_count(self) -> int:
        """How many answers the cassette's session has replayed in this run: every transport,
        adapter, middleware, SDK client, fixture and proxy on the cassette file counts, a
        repeat (`allow_repeats`) counts again, a recorded exchange does not.  vcrpy's
        ``cassette.play_count``."""
        return self._user.session.replays

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges that no request has played yet, in cassette order (none left:
        vcrpy's ``cassette.all_played``)."""
        return self._user.unplayed()

    def _note_error(self, exc: BaseException) -> None:
        """Note a `CassetteError` this front end raised, in `raised` (the pytest plugin fails a
        test whose code caught one)."""
        if isinstance(exc, CassetteError):
            self.raised.append(exc)
