"""Errors the code under test caught: sakura-http errors and network refusals that a test
swallowed fail it anyway (unless it expects them), and the chain of exceptions a failure was
raised from, which tells a caught error from the test's own failure."""

from __future__ import annotations

from typing import Any

import pytest

from ._state import EXPECT_ERRORS

__all__ = ["caught_message", "exception_chain", "expects_errors", "raised_in"]


def expects_errors(node: pytest.Item) -> bool:
    if node.stash.get(EXPECT_ERRORS, False):
        return True
    marker = node.get_closest_marker("cassette")
    return bool(marker is not None and marker.kwargs.get("expect_errors", False))


def raised_in(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception it was raised from or during, groups included, outermost
    first (each once)."""
    seen: set[int] = set()
    found: list[BaseException] = []
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        todo += list(getattr(current, "exceptions", ()))
    return found


def exception_chain(exc: BaseException) -> set[int]:
    """ids of `exc` and every exception it was raised from or during, groups included."""
    return {id(e) for e in raised_in(exc)}


def caught_message(errors: list[Any], what: str) -> str:
    lines = [
        f"the code under test caught {len(errors)} {what}(s); the test fails anyway, because "
        "a caught error would hide a missing or unsafe exchange:"
    ]
    for error in errors:
        text = str(error).replace("\n", "\n    ")
        # By its public name (sakura_http.CassetteMiss): the package re-exports every error.
        lines.append(f"  {type(error).__module__}.{type(error).__qualname__}: {text}")
    lines.append(
        "If the test provokes them on purpose, mark it @pytest.mark.cassette(expect_errors=True) "
        "or call sakura_recording.expect_errors()"
    )
    return "\n".join(lines)
