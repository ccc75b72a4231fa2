"""``pytest --verify``: the suite runs against the live APIs, into temporary cassettes, and each
live exchange's shape is compared with the one its cassette holds.

Every cassette a test opens (`CassetteFactory.config`, so the SDK fixtures, ``patch_clients``
and ``sakura_proxy`` too) is swapped for a temporary one (`LiveRun.live_path`) in a folder of
this process, recorded in mode "new_episodes": every request of a test goes to the live API (a
request repeated within a test is sent again) and is written there through the usual pipeline
(secret headers dropped, echoes redacted, the rules' scrubs), never to the real file.

Each test has temporary cassettes of its own (`begin_test`), empty when it starts, even for a
cassette several tests share: a temporary cassette shared too would replay to the second test
the answer the first one recorded live, and that request would never go live.  It is also what
the pairing needs: a replay run opens a shared cassette afresh in each test (its session closes
when the test ends), so each test plays the recorded exchanges from the first one on; at the end
of each test, the exchanges its sessions recorded live are paired with the recorded exchanges
that replay would have played (`_drift.replay_pairs`, from the first one on, one test at a time)
and compared (`_drift.check_exchange`, leaving out the response headers the cassette's matching
ignores, as ``sakura-http verify --ignore-header`` does), the same report `sakura-http verify`
prints.  A test that drifted fails only under ``--verify-strict``; the terminal summary lists
every drifted cassette, and the requests that went live with no recorded cassette to compare
them with.  Under pytest-xdist each worker has its own temporary folder and sends what it found
to the controller (`send`, `merge`).  The temporary folder is removed at the end of the run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .._cassette import load_cassette
from .._drift import Checked, check_exchange, replay_pairs
from .._exceptions import CassetteError
from .._format import Exchange, encode_header
from .._matching import Matcher
from .._shown import shown_url

__all__ = ["LiveRun"]

_WIRE_KEY = "sakura_http_verified"


class LiveRun:
    """What ``pytest --verify`` found in this process: the temporary cassette of each real one,
    and per real cassette, the report of each recorded exchange a live one was compared with."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self._folder: Path | None = None
        self._tests = 0  # how many tests began (`begin_test`)
        #: (test, real path resolved) -> its temporary cassette
        self._live: dict[tuple[int, str], Path] = {}
        self._real: dict[str, str] = {}  # temporary cassette (resolved) -> real path
        #: real path -> its exchanges, why it cannot be read, or None: it does not exist
        self._recorded: dict[str, list[Exchange] | str | None] = {}
        #: real path -> recorded position -> (drifted?, report lines); a drift found once stays.
        self.checked: dict[str, dict[int, tuple[bool, list[str]]]] = {}
        #: real path -> live requests no recorded exchange matches (a replay would miss them).
        self.unmatched: dict[str, list[str]] = {}
        #: real path -> why it could not be compared (it cannot be read).
        self.unreadable: dict[str, str] = {}
        #: real path (a cassette never recorded) -> how many requests went live through it.
        self.missing: dict[str, int] = {}

    def begin_test(self) -> int:
        """A number standing for one run of one test: the temporary cassettes `live_path` gives
        it are its own."""
        self._tests += 1
        return self._tests

    def live_path(self, real: Path, test: int) -> Path:
        """The temporary cassette standing for `real` in the test `test` (`begin_test`),
        created on its first use in that test: with only a header line when `real` exists (so
        the test sees a cassette, as on replay), absent when it does not."""
        key = os.path.realpath(real)
        live = self._live.get((test, key))
        if live is None:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="sakura-http-verify-"))
            digest = hashlib.sha256(key.encode()).hexdigest()[:16]
            live = self._folder / str(test) / digest / real.name
            live.parent.mkdir(parents=True)
            if os.path.exists(key):
                live.write_bytes(encode_header())
            self._live[(test, key)] = live
            self._real[os.path.realpath(live)] = str(real)
        return live

    def check(self, live_key: str, played: Iterable[Exchange], matcher: Matcher) -> list[str]:
        """Compare what one test's session of the temporary cassette `live_key` played or
        recorded with the real cassette; the report lines of the exchanges that drifted."""
        real = self._real.get(os.path.realpath(live_key))
        if real is None:
            return []
        recorded = self._load(real)
        if recorded is None:
            sent = len(list(played))
            if sent:
                self.missing[real] = self.missing.get(real, 0) + sent
            return []
        if isinstance(recorded, str):
            self.unreadable[real] = recorded
            return []
        # The response headers the cassette's matching leaves out of requests (the ini option
        # sakura_ignore_headers, the project's, the marker's and the fixture's rules) are left
        # out of the comparison too, as `sakura-http verify --ignore-header` leaves them out.
        ignored = matcher.ignore | matcher.rules.ignore_headers
        drifted: list[str] = []
        found = self.checked.setdefault(real, {})
        for position, live in replay_pairs(recorded, played, matcher):
            if position is None:
                request = f"{live.method} {shown_url(live.url, matcher.secret_query)}"
                missing = self.unmatched.setdefault(real, [])
                if request not in missing:
                    missing.append(request)
                continue
            checked: Checked = check_exchange(
                position, recorded[position], live, ignore_headers=ignored
            )
            lines = checked.lines()
            if checked.outcome == "drifted":
                drifted.extend(lines)
            if position not in found or (checked.outcome == "drifted" and not found[position][0]):
                found[position] = (checked.outcome == "drifted", lines)
        return drifted

    def _load(self, real: str) -> list[Exchange] | str | None:
        if real not in self._recorded:
            try:
                self._recorded[real] = (
                    load_cassette(real).exchanges if os.path.exists(real) else None
                )
            except (CassetteError, OSError) as exc:
                self._recorded[real] = f"the cassette cannot be read ({exc})"
        return self._recorded[real]

    def strict_failure(self, drifted: Mapping[str, list[str]], shown: Callable[[str], str]) -> str:
        """The teardown failure of a test whose live exchanges drifted, under --verify-strict."""
        lines = ["--verify-strict: the live answers drifted from the shapes the cassettes hold:"]
        for real, report in drifted.items():
            lines.append(f"  {shown(real)}")
            lines.extend(f"    {line}" for line in report)
        lines.append(f"  {_update_advice(sorted(shown(real) for real in drifted))}")
        return "\n".join(lines)

    def real_path(self, live_key: str) -> str | None:
        return self._real.get(os.path.realpath(live_key))

    def close(self) -> None:
        """Remove the temporary cassettes (the sessions using them are closed by now)."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # --- pytest-xdist --------------------------------------------------------------------------

    def send(self, workeroutput: dict[str, Any]) -> None:
        """pytest-xdist worker: hand what it found to the controller."""
        workeroutput[_WIRE_KEY] = {
            "checked": {
                real: {
                    str(position): [drifted, lines] for position, (drifted, lines) in found.items()
                }
                for real, found in self.checked.items()
            },
            "unmatched": self.unmatched,
            "unreadable": self.unreadable,
            "missing": self.missing,
        }

    def merge(self, output: Mapping[str, Any]) -> None:
        """pytest-xdist controller: add what a worker found (`send`)."""
        wire = output.get(_WIRE_KEY) or {}
        for real, found in wire.get("checked", {}).items():
            kept = self.checked.setdefault(str(real), {})
            for position, (drifted, lines) in found.items():
                index = int(position)
                if index not in kept or (drifted and not kept[index][0]):
                    kept[index] = (bool(drifted), [str(line) for line in lines])
        for real, requests in wire.get("unmatched", {}).items():
            missing = self.unmatched.setdefault(str(real), [])
            missing.extend(str(r) for r in requests if r not in missing)
        self.unreadable.update(wire.get("unreadable", {}))
        for real, sent in wire.get("missing", {}).items():
            self.missing[str(real)] = self.missing.get(str(real), 0) + int(sent)

    # --- the summary ---------------------------------------------------------------------------

    def summarize(
        self, terminalreporter: Any, shown: Callable[[str], str], failed: list[str]
    ) -> None:
        """The run's part of the terminal summary: each cassette that drifted, with each
        drifted exchange and its differences, the requests no cassette holds, the cassettes
        never recorded that requests went live through, the counts."""
        terminalreporter.write_sep("=", "sakura-http: live answers compared with the cassettes")
        write = terminalreporter.write_line
        drifted_cassettes: list[str] = []
        for real in sorted(self.checked, key=shown):
            found = self.checked[real]
            drifted = [found[position] for position in sorted(found) if found[position][0]]
            if not drifted:
                continue
            drifted_cassettes.append(shown(real))
            write(f"{shown(real)}: {len(drifted)} of {_count(len(found))} drifted")
            for _, lines in drifted:
                write(f"  {lines[0]}")
                for line in lines[1:]:
                    write(f"  {line}")
        for real in sorted(self.unmatched, key=shown):
            requests = self.unmatched[real]
            write(f"{shown(real)}: {_count(len(requests), 'request')} not compared")
            for request in requests:
                write(f"  {request}: not in the cassette (a replay run misses it)")
        for real in sorted(self.unreadable, key=shown):
            write(f"{shown(real)}: not compared: {self.unreadable[real]}")
        for real in sorted(self.missing, key=shown):
            write(
                f"{shown(real)}: not compared: no recorded cassette "
                f"({_count(self.missing[real], 'request')} went live); `pytest --record` "
                "records it"
            )
        exchanges = sum(len(found) for found in self.checked.values())
        drifted_count = sum(d for found in self.checked.values() for d, _ in found.values())
        if not exchanges:
            write(f"No live exchange was compared: {self._nothing_compared()}")
        else:
            cassettes = _count(len(self.checked), "cassette")
            write(
                f"{_count(exchanges)} of {cassettes} compared: {exchanges - drifted_count} same "
                f"shape, {drifted_count} drifted (the cassettes were not changed)"
            )
        if drifted_cassettes:
            write(_update_advice(drifted_cassettes))
        if failed:
            shown_failed = ", ".join(failed[:5]) + (
                f" and {len(failed) - 5} more" if len(failed) > 5 else ""
            )
            write(
                f"{_count(len(failed), 'test')} failed against the live APIs (see above); a "
                f"changed API can be the cause: {shown_failed}"
            )

    def _nothing_compared(self) -> str:
        """Why no exchange was compared, when none was."""
        missing = sum(self.missing.values())
        unmatched = sum(len(requests) for requests in self.unmatched.values())
        if missing:
            also = (
                f", and {_count(unmatched, 'other request')} no cassette holds" if unmatched else ""
            )
            return (
                f"{_count(missing, 'request')} went live, and no cassette was recorded to compare "
                f"them with ({_count(len(self.missing), 'cassette')} missing){also}: "
                "`pytest --record` records them"
            )
        if unmatched:
            return (
                f"{_count(unmatched, 'request')} went live, and no recorded exchange of their "
                "cassettes matches them (listed above)"
            )
        if self.unreadable:
            return "the cassettes the tests used cannot be read (listed above)"
        return "no test sent a request through a cassette"


def _count(n: int, what: str = "exchange") -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _update_advice(cassettes: list[str]) -> str:
    return (
        f"Update them: sakura-http verify --update {' '.join(cassettes)} --record-host HOST "
        "(and --header for the credentials), or re-record their tests with `pytest --record-all`"
    )
