"""Which cassette an exchange through the proxy goes to: the one cassette (`OneCassette`), or,
with ``--cassette-dir``, one per upstream origin in a folder (`CassetteFolder`).

Both answer the same questions, so the server and `Proxy` do not tell them apart: the
configuration, the cassette user of a request's URL (`user_for`), what was appended and is
unplayed, and closing.  A folder's cassettes are separate sessions, opened at the first request
for their origin and closed (each replaced, in mode "all", on its own) when the proxy stops.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from .._config import CassetteConfig
from .._core import RecordMode
from .._format import Exchange
from .._session import CassetteSession, CassetteUser

__all__ = ["CassetteFolder", "Cassettes", "OneCassette", "cassette_name"]

# What may stay of a host in a file name; anything else (an IPv6 address's colons) becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


def cassette_name(url: httpx.URL) -> str:
    """The file name of `url`'s origin in a cassette folder: ``<host>.jsonl``, or
    ``<host>_<port>.jsonl`` when the port is not its scheme's default (80, 443)."""
    host = _UNSAFE.sub("_", url.host) or "_"
    return f"{host}.jsonl" if url.port is None else f"{host}_{url.port}.jsonl"


class OneCassette:
    """Every exchange in the one cassette of `user`."""

    def __init__(self, user: CassetteUser) -> None:
        self.user = user
        self.config: CassetteConfig = user.config

    @property
    def path(self) -> Path:
        return self.user.path

    @property
    def mode(self) -> RecordMode:
        return self.user.mode

    @property
    def appended(self) -> int:
        return self.user.appended

    def user_for(self, url: httpx.URL) -> CassetteUser:
        return self.user

    def unplayed(self) -> list[Exchange]:
        return self.user.unplayed()

    def close(self, *, failed: bool = False) -> None:
        self.user.close(failed=failed)


class CassetteFolder:
    """One cassette per upstream origin in `folder` (`cassette_name`), each its own session."""

    def __init__(self, folder: Path, config: CassetteConfig) -> None:
        self.path = folder
        self.config = config
        self._users: dict[str, CassetteUser] = {}
        self._closed = False

    @property
    def mode(self) -> RecordMode:
        return self.config.mode

    @property
    def appended(self) -> int:
        return sum(user.appended for user in self._users.values())

    def user_for(self, url: httpx.URL) -> CassetteUser:
        """The user of `url`'s cassette, joined on first use (which reads the file, if any)."""
        name = cassette_name(url)
        user = self._users.get(name)
        if user is None:
            if self.config.mode is not RecordMode.NONE:
                self.path.mkdir(parents=True, exist_ok=True)
            user = CassetteSession.open(self.path / name, self.config, can_record=True)
            self._users[name] = user
        return user

    def unplayed(self) -> list[Exchange]:
        """Unplayed exchanges of the cassettes used so far, by file name."""
        return [e for _, user in sorted(self._users.items()) for e in user.unplayed()]

    def close(self, *, failed: bool = False) -> None:
        """Close every cassette opened; the first error is raised after all are closed."""
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        for user in self._users.values():
            try:
                user.close(failed=failed)
            except BaseException as exc:  # close the others all the same
                error = error or exc
        if error is not None:
            raise error


#: What the server and `Proxy` use: either kind.
Cassettes = OneCassette | CassetteFolder
