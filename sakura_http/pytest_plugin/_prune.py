"""Dead exchanges: the recorded exchanges no test of a run played, and `--prune`, which drops them.

After an intentional change of a request, `pytest --record` appends the new exchange and the old
one stays in the cassette, never played again.  The plugin keeps a `PlayLedger` of what the
tests played: at the end of each test, for each cassette it used, how many times each recorded
exchange (by the digest of its line) was played or recorded in that test's session.  Under
pytest-xdist each worker keeps its own ledger and the controller merges them, so an exchange
counts as alive when any test in any worker played it.  At the end of the run:

* the summary names each cassette with exchanges no test played (`dead_exchanges`);
* with ``--prune`` (and only when nothing blocks it, see below), those exchanges are dropped:
  the cassette is rewritten beside itself and atomically replaced, the way mode "all" replaces
  a re-recorded cassette, under the cassette's lock, so another process's append is never lost.

Pruning is all or nothing for a run: it happens only when every test of the suite ran and
passed.  A test that failed or was skipped may stop before it opens a cassette, and a test that
was deselected or not collected never says which cassettes it would have played, so any of
them could play an exchange that looks dead here; the run then prunes nothing and says why.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._cassette import AtomicRecording, load_cassette
from .._format import Exchange, encode_exchange

__all__ = ["PlayLedger", "dead_exchanges", "prune_cassette"]


def _digest(exchange: Exchange) -> str:
    """The identity of one recorded exchange: the digest of its cassette line.  Two identical
    lines are the same exchange for pruning; how many of them are kept is counted."""
    return hashlib.blake2b(encode_exchange(exchange), digest_size=16).hexdigest()


class PlayLedger:
    """What the tests of one process played, per cassette, and what blocks pruning."""

    def __init__(self) -> None:
        #: cassette path -> digest -> the most times one session played it.
        self.plays: dict[str, Counter[str]] = {}
        #: Why this run may not prune (empty: nothing blocks it).
        self.blockers: list[str] = []

    def observe(self, path: str, played: Iterable[Exchange]) -> None:
        """Note the exchanges one session of `path` played or recorded so far.  A cassette
        shared by several sessions needs, of identical lines, the most any one of them played;
        a session seen twice (two tests holding it) counts once, at its fullest."""
        counts = Counter(_digest(exchange) for exchange in played)
        kept = self.plays.setdefault(path, Counter())
        for digest, count in counts.items():
            kept[digest] = max(kept[digest], count)

    def block(self, reason: str) -> None:
        if reason not in self.blockers:
            self.blockers.append(reason)

    def to_wire(self) -> dict[str, Any]:
        """The ledger as plain data (pytest-xdist sends it from a worker to the controller)."""
        return {
            "plays": {path: dict(counts) for path, counts in self.plays.items()},
            "blockers": list(self.blockers),
        }

    def merge(self, wire: Mapping[str, Any]) -> None:
        """Add a worker's ledger (`to_wire`) to this one."""
        for path, counts in wire.get("plays", {}).items():
            kept = self.plays.setdefault(str(path), Counter())
            for digest, count in counts.items():
                kept[str(digest)] = max(kept[str(digest)], int(count))
        for reason in wire.get("blockers", ()):
            self.block(str(reason))


def _dead_positions(exchanges: list[Exchange], played: Counter[str]) -> list[int]:
    """The positions of `exchanges` nobody played: of identical lines, the last ones beyond
    the number played."""
    left = Counter(played)
    dead = []
    for position, exchange in enumerate(exchanges):
        digest = _digest(exchange)
        if left[digest] > 0:
            left[digest] -= 1
        else:
            dead.append(position)
    return dead


def dead_exchanges(path: str, played: Counter[str]) -> list[Exchange]:
    """The exchanges of the cassette at `path` that no test played (none if it is gone or
    unreadable: the run's own errors say so)."""
    if not os.path.exists(path):
        return []
    try:
        exchanges = load_cassette(path).exchanges
    except Exception:  # reported by the tests that opened it
        return []
    return [exchanges[p] for p in _dead_positions(exchanges, played)]


def prune_cassette(path: str, played: Counter[str]) -> int:
    """Drop the exchanges of `path` no test played; the number dropped.  The cassette is read
    again once its re-recording claim is taken (another process's append then waits for the
    claim's end or is refused, never lost), so nothing appended before is dropped.  A cassette
    with nothing to drop, or of which nothing was played at all, is left untouched."""
    header = load_cassette(path).header
    recording = AtomicRecording(Path(path), header)
    try:
        exchanges = load_cassette(path).exchanges
        dead = set(_dead_positions(exchanges, played))
        if not dead or len(dead) == len(exchanges):
            recording.discard()
            return 0
        for position, exchange in enumerate(exchanges):
            if position not in dead:
                recording.append(encode_exchange(exchange))
    except BaseException:
        recording.discard()
        raise
    recording.replace_cassette()
    return len(dead)
