"""The end of a run: what each pytest-xdist worker sends the controller, the dead exchanges (see
`_prune`), the cassettes older than ``sakura_max_age``, and the terminal summary of the cassettes
recorded, the exchanges no test played and the cassettes too old."""

from __future__ import annotations

import datetime
import os
from typing import Any

from .._age import age_text, is_older
from .._cassette import load_cassette
from .._core import ENV_STRICT
from ._factory import outcome
from ._paths import common_folders, display
from ._prune import dead_exchanges, prune_cassette
from ._state import State

__all__ = [
    "find_dead_exchanges",
    "find_old_cassettes",
    "gather_from_worker",
    "send_to_controller",
    "summarize",
]

_WORKER_OUTPUT_KEY = "sakura_http_recorded"
_LEDGER_KEY = "sakura_http_played"


def send_to_controller(workeroutput: dict[str, Any], state: State) -> None:
    """pytest-xdist worker: hand what it recorded and played to the controller."""
    workeroutput[_WORKER_OUTPUT_KEY] = [
        [path, entry.folder, entry.appended, entry.rerecorded, entry.discarded, entry.incomplete]
        for path, entry in state.written.items()
    ]
    workeroutput[_LEDGER_KEY] = state.ledger.to_wire()
    if state.live_run is not None:
        state.live_run.send(workeroutput)


def gather_from_worker(state: State, output: dict[str, Any]) -> None:
    """pytest-xdist controller: add what a worker sent (`send_to_controller`) to `state`."""
    for path, folder, appended, rerecorded, discarded, incomplete in output.get(
        _WORKER_OUTPUT_KEY, ()
    ):
        state.note(
            str(path), str(folder), int(appended), bool(rerecorded), bool(discarded), incomplete
        )
    state.ledger.merge(output.get(_LEDGER_KEY, {}))
    if state.live_run is not None:
        state.live_run.merge(output)


def find_dead_exchanges(state: State) -> None:
    """Fill `state.dead`, pruning under --prune when nothing blocks it (see _prune)."""
    for path, played in sorted(state.ledger.plays.items()):
        dead = dead_exchanges(path, played)
        if not dead:
            continue
        pruned = 0
        if state.prune and not state.ledger.blockers:
            pruned = prune_cassette(path, played)
        state.dead[display(path, state.rootpath)] = (dead, pruned)


def find_old_cassettes(state: State, now: datetime.datetime | None = None) -> bool:
    """Fill `state.old` and `state.undated` from the cassettes the run used (every worker's),
    under ``sakura_max_age``; whether any is too old.  Nothing without the ini option.  A
    cassette that is gone or unreadable is left out (the tests that opened it said so)."""
    if state.max_age is None:
        return False
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for path in sorted(state.ledger.plays):
        if not os.path.exists(path):
            continue
        try:
            exchanges = load_cassette(path).exchanges
        except Exception:  # reported by the tests that opened it
            continue
        days = [e.recorded_at for e in exchanges]
        old = [day for day in days if day is not None and is_older(day, state.max_age, now)]
        shown = display(path, state.rootpath)
        if old:
            state.old[shown] = (len(old), len(days), min(old))
        if None in days:
            state.undated.append(shown)
    return bool(state.old)


def summarize(terminalreporter: Any, state: State) -> None:
    """The plugin's part of the terminal summary."""
    _summarize_written(terminalreporter, state)
    _summarize_dead(terminalreporter, state)
    _summarize_old(terminalreporter, state)
    if state.live_run is not None:  # --verify
        failed = [report.nodeid for report in terminalreporter.stats.get("failed", ())]
        root = state.rootpath
        state.live_run.summarize(terminalreporter, lambda real: display(real, root), failed)


def _summarize_written(terminalreporter: Any, state: State) -> None:
    if not state.written:
        return
    terminalreporter.write_sep("=", "sakura-http: cassettes recorded")
    for path, entry in sorted(state.written.items()):
        count = f"{entry.appended} exchange{'s' if entry.appended != 1 else ''}"
        if entry.discarded and not entry.rerecorded:
            why = (
                "an exchange its test sent could not be written"
                if entry.incomplete
                else "its test failed"
            )
            terminalreporter.write_line(
                f"{path}: re-recording of {count} dropped because {why} (the old file was kept)"
            )
        elif entry.rerecorded:
            terminalreporter.write_line(f"{path}: re-recorded, {count} (replaced the old file)")
        else:
            terminalreporter.write_line(f"{path}: {count} appended")
    # A dropped re-recording wrote nothing: only what was written is worth a review.
    folders = sorted({e.folder for e in state.written.values() if e.rerecorded or not e.discarded})
    if not folders:
        return
    where = " ".join(common_folders(folders))
    terminalreporter.write_line(
        f"Review the changes before committing: git diff {where} "
        f"(new cassettes: git status {where})"
    )


def _summarize_dead(terminalreporter: Any, state: State) -> None:
    if not state.dead:
        return
    terminalreporter.write_sep("=", "sakura-http: recorded exchanges no test played")
    for path, (dead, pruned) in sorted(state.dead.items()):
        count = f"{len(dead)} exchange{'s' if len(dead) != 1 else ''}"
        if pruned:
            terminalreporter.write_line(f"{path}: pruned {count} no test played")
        else:
            terminalreporter.write_line(f"{path}: {count} no test played")
        for exchange in dead[:5]:
            terminalreporter.write_line(
                f"  {exchange.method} {exchange.url} -> {outcome(exchange)}"
            )
        if len(dead) > 5:
            terminalreporter.write_line(f"  ... and {len(dead) - 5} more")
        if state.prune and not pruned and not state.ledger.blockers:
            # prune_cassette leaves a cassette whole when none of it was played.
            terminalreporter.write_line(
                "  no test played any exchange of it: --prune keeps it whole (delete the file "
                "if no test needs it)"
            )
    if any(pruned for _, pruned in state.dead.values()):
        return
    blockers = state.ledger.blockers
    if state.prune:
        if not blockers:
            return
        shown = "; ".join(blockers[:3]) + (
            f"; and {len(blockers) - 3} more" if len(blockers) > 3 else ""
        )
        terminalreporter.write_line(
            f"Not pruned: pruning needs a run in which every test ran and passed, and {shown}"
        )
    elif blockers:
        terminalreporter.write_line(
            "Tests that did not run or pass in this run may play them; once the whole suite "
            "passes, drop the rest with `pytest --record --prune`"
        )
    else:
        terminalreporter.write_line(
            "They are left over from earlier recordings (a request that changed since): drop "
            "them with `pytest --record --prune`, or re-record with `pytest --record-all`"
        )


def _summarize_old(terminalreporter: Any, state: State) -> None:
    if state.max_age is None or not (state.old or state.undated):
        return
    limit = age_text(state.max_age)
    heading = f"older than sakura_max_age ({limit})" if state.old else "of unknown age"
    terminalreporter.write_sep("=", f"sakura-http: cassettes {heading}")
    if state.old:
        for path, (count, total, oldest) in sorted(state.old.items()):
            terminalreporter.write_line(
                f"{path}: {count} of {_plural(total, 'exchange')} recorded more than {limit} ago "
                f"(the oldest on {oldest})"
            )
        terminalreporter.write_line(
            "The APIs may have changed since: check them with `pytest --verify`, then re-record "
            "the drifted ones with `pytest --record-all` on their tests (or raise sakura_max_age)"
        )
        if state.age_strict:
            terminalreporter.write_line(
                f"{ENV_STRICT}=1: the run fails because of them. Re-record them in a run "
                f"without {ENV_STRICT} (which forbids recording), or raise sakura_max_age",
                red=True,
            )
    if state.undated:
        shown = ", ".join(state.undated[:5]) + (
            f" and {len(state.undated) - 5} more" if len(state.undated) > 5 else ""
        )
        terminalreporter.write_line(
            f"Age unknown (exchanges recorded before sakura-http dated them, not counted as "
            f"too old): {shown}; re-record them with `pytest --record-all` to date them"
        )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
