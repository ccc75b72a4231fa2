"""The plugin's state for one pytest run (`State`, kept in ``config.stash``) and the stash keys
the plugin's modules share."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .._core import RecordMode
from .._format import Exchange
from .._rules import Rules
from ._advice import PytestAdvice
from ._guard import NetworkGuard
from ._prune import PlayLedger

if TYPE_CHECKING:  # (imported when --verify is given: see `pytest_configure`)
    from ._verify import LiveRun

__all__ = [
    "CALL_EXCINFO",
    "EXPECT_ERRORS",
    "GUARD",
    "STATE",
    "State",
    "Written",
    "plugin_state",
]

# `Written` is a plain slotted class, and `State` a dataclass with neither a generated == (it is
# compared by identity) nor a repr: for benchmark row "6. Import" (<= 30 ms; 16 ms on a quiet
# machine, about 29 ms expected in this VM's slow processes), as plain dataclasses both cost 4.5
# million instructions more, about 0.7 ms, in every pytest run (docs/performance.md, "Plain code").


class Written:
    """What a run wrote into one cassette."""

    __slots__ = ("appended", "discarded", "folder", "incomplete", "rerecorded")

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.appended = 0
        self.rerecorded = False
        #: A re-recording was dropped because its test failed (the old file was kept).
        self.discarded = False
        #: A re-recording was dropped because an exchange its test sent could not be written.
        self.incomplete = False


@dataclass(eq=False, repr=False)
class State:
    """The plugin's per-session state, kept in `config.stash`."""

    requested: RecordMode  # from --record / --record-all
    effective: RecordMode  # after SAKURA_HTTP_RECORD
    record_hosts: tuple[str, ...]
    secret_headers: tuple[str, ...]
    allow_headers: tuple[str, ...]
    block_network: bool
    patch_clients: bool  # sakura_patch_clients: every test's clients use its cassette
    fixtures_option: Path | None
    rootpath: Path
    written: dict[str, Written] = field(default_factory=dict)
    #: The header rules of sakura_ignore_headers, under every cassette's own rules.
    header_rules: Rules = field(default_factory=Rules)
    #: Cassettes re-recorded by an earlier test of this process: later tests append to them.
    rerecorded_paths: set[str] = field(default_factory=set)
    advice: PytestAdvice = field(default_factory=PytestAdvice)
    prune: bool = False  # --prune: drop the exchanges no test played (see _prune)
    ledger: PlayLedger = field(default_factory=PlayLedger)
    #: What the end of the run found: cassette -> (exchanges no test played, how many pruned).
    dead: dict[str, tuple[list[Exchange], int]] = field(default_factory=dict)
    #: sakura_max_age (None: not set), and whether SAKURA_HTTP_STRICT=1 makes it a failure.
    max_age: datetime.timedelta | None = None
    age_strict: bool = False
    #: What the end of the run found: cassette -> (exchanges older than max_age, of how many,
    #: the oldest day); and the cassettes holding exchanges without a day (age unknown).
    old: dict[str, tuple[int, int, datetime.date]] = field(default_factory=dict)
    undated: list[str] = field(default_factory=list)
    #: --verify: the run goes live into temporary cassettes, compared with the real ones.
    live_run: LiveRun | None = None

    @property
    def recording(self) -> bool:
        return self.effective is not RecordMode.NONE

    def note(
        self,
        path: str,
        folder: str,
        appended: int,
        rerecorded: bool,
        discarded: bool = False,
        incomplete: bool = False,
    ) -> None:
        entry = self.written.setdefault(path, Written(folder))
        entry.appended += appended
        entry.rerecorded = entry.rerecorded or rerecorded
        entry.discarded = entry.discarded or discarded
        entry.incomplete = entry.incomplete or incomplete


STATE = pytest.StashKey[State]()
CALL_EXCINFO = pytest.StashKey["pytest.ExceptionInfo[BaseException] | None"]()
GUARD = pytest.StashKey[NetworkGuard]()
EXPECT_ERRORS = pytest.StashKey[bool]()


def plugin_state(config: pytest.Config) -> State:
    return config.stash[STATE]
