"""The decision table: every cell, the environment rules, and the docs' copy of the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sakura_http import ConfigurationError, RecordingForbidden, RecordMode
from sakura_http._core import (
    ACTIONS,
    REFUSALS,
    Action,
    Lookup,
    Refusal,
    actions,
    decide,
    resolve_mode,
)

EXPECTED = {
    ("none", "HIT"): "replay",
    ("none", "EXHAUSTED"): "repeat",
    ("none", "ABSENT"): "miss",
    ("new_episodes", "HIT"): "replay",
    ("new_episodes", "EXHAUSTED"): "record",
    ("new_episodes", "ABSENT"): "record",
    ("all", "HIT"): "record",
    ("all", "EXHAUSTED"): "record",
    ("all", "ABSENT"): "record",
}


@pytest.mark.parametrize(("mode", "lookup"), list(EXPECTED))
def test_every_cell(mode: str, lookup: str) -> None:
    assert decide(RecordMode(mode), Lookup[lookup]).action.value == EXPECTED[mode, lookup]


def test_the_table_is_complete() -> None:
    assert set(ACTIONS) == {(m, lk) for m in RecordMode for lk in Lookup}


def test_allow_repeats_false_turns_repeat_into_miss() -> None:
    missed = decide(RecordMode.NONE, Lookup.EXHAUSTED, allow_repeats=False)
    assert missed.action is Action.MISS
    assert "allow_repeats=False" in missed.reason
    recorded = decide(RecordMode.NEW_EPISODES, Lookup.EXHAUSTED, allow_repeats=False)
    assert recorded.action is Action.RECORD


REFUSED = {"yes": "record", "no outer": "refuse", "host": "refuse"}
_REFUSAL_NAMES = {"yes": Refusal.MAY_RECORD, "no outer": Refusal.NO_OUTER, "host": Refusal.HOST}


@pytest.mark.parametrize("mode", list(RecordMode))
@pytest.mark.parametrize("lookup", list(Lookup))
@pytest.mark.parametrize("refusal", list(Refusal))
def test_refusal_applies_only_where_the_table_records(
    mode: RecordMode, lookup: Lookup, refusal: Refusal
) -> None:
    decision = decide(mode, lookup, refusal=refusal)
    plain = ACTIONS[mode, lookup]
    if plain is Action.RECORD:
        assert decision.action is REFUSALS[refusal]
        if refusal is not Refusal.MAY_RECORD:
            assert refusal.value in decision.reason
    else:
        assert decision.action is plain  # replaying or missing never needs the network


@pytest.mark.parametrize("mode", list(RecordMode))
@pytest.mark.parametrize("allow_repeats", [True, False])
@pytest.mark.parametrize("refusal", list(Refusal))
def test_a_callers_row_is_the_table_read_for_each_lookup(
    mode: RecordMode, allow_repeats: bool, refusal: Refusal
) -> None:
    row = actions(mode, allow_repeats, refusal)
    assert row == tuple(
        decide(mode, lookup, allow_repeats, refusal).action
        for lookup in (Lookup.HIT, Lookup.EXHAUSTED, Lookup.ABSENT)
    )
    assert row.exhausted is decide(mode, Lookup.EXHAUSTED, allow_repeats, refusal).action


def test_docs_show_the_same_refusal_table() -> None:
    text = (Path(__file__).parent.parent / "docs" / "matching.md").read_text()
    rows = dict(re.findall(r"^\| may record: (.+?) +\| (\w+) +\|$", text, re.M))
    documented = {_REFUSAL_NAMES[name]: action for name, action in rows.items()}
    assert documented == {refusal: REFUSALS[refusal].value for refusal in Refusal}


def test_docs_show_the_same_table() -> None:
    text = (Path(__file__).parent.parent / "docs" / "matching.md").read_text()
    rows = re.findall(r"^\| `(\w+)` +\| (\w+) +\| (\w+)[^|]*\| (\w+) +\|$", text, re.M)
    documented = {
        (mode, lookup): action
        for mode, hit, exhausted, absent in rows
        for lookup, action in (("HIT", hit), ("EXHAUSTED", exhausted), ("ABSENT", absent))
    }
    assert documented == EXPECTED


def test_resolve_mode() -> None:
    assert resolve_mode("none", {}) is RecordMode.NONE
    assert resolve_mode(RecordMode.ALL, {}) is RecordMode.ALL
    assert resolve_mode("none", {"SAKURA_HTTP_RECORD": "all"}) is RecordMode.ALL
    assert resolve_mode("all", {"SAKURA_HTTP_RECORD": ""}) is RecordMode.ALL
    with pytest.raises(ConfigurationError, match="one of 'none', 'new_episodes', 'all'"):
        resolve_mode("none", {"SAKURA_HTTP_RECORD": "yes"})
    with pytest.raises(RecordingForbidden, match="SAKURA_HTTP_STRICT"):
        resolve_mode("new_episodes", {"SAKURA_HTTP_STRICT": "1"})
    assert resolve_mode("none", {"SAKURA_HTTP_STRICT": "1"}) is RecordMode.NONE
    assert resolve_mode("all", {"SAKURA_HTTP_STRICT": "0"}) is RecordMode.ALL
