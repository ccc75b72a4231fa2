"""Where cassettes live: the fixtures folder of a test, a cassette name inside it (refused when
it escapes), the default name of a test's cassette, and paths as the summary shows them."""

from __future__ import annotations

import os
from pathlib import Path, PurePath, PureWindowsPath

import pytest

from .._cassette import cassette_stem, default_fixtures_folder
from .._exceptions import ConfigurationError
from ._state import plugin_state

__all__ = [
    "common_folders",
    "default_cassette_name",
    "display",
    "fixtures_folder",
    "resolve_cassette_path",
]


def fixtures_folder(config: pytest.Config, test_path: Path) -> Path:
    """The fixtures folder for a test file: ``sakura_fixtures`` if set; else ``fixtures/`` in
    the nearest ancestor folder named ``tests`` (within the rootdir); else
    ``<rootdir>/tests/fixtures``.  The folder is not created."""
    state = plugin_state(config)
    if state.fixtures_option is not None:
        return state.fixtures_option
    return default_fixtures_folder(test_path, state.rootpath)


def resolve_cassette_path(folder: Path, name: str | os.PathLike[str]) -> Path:
    """`name` inside `folder`; raises `ConfigurationError` for a name that escapes it.

    Refused: an empty name, an absolute path, a ``..`` part, a path whose symlinks lead out
    of the folder, and a NUL character (which no file name can hold).
    """
    text = os.fspath(name)
    if "\0" in text:
        raise ConfigurationError(
            f"cassette name {text!r} holds a NUL character: give a plain file name inside the "
            f'fixtures folder {folder}, such as "billing.jsonl"'
        )
    pure = PurePath(text)
    escapes = (
        not text.strip()
        or pure.is_absolute()
        or bool(PureWindowsPath(text).anchor)
        or ".." in pure.parts
        or ".." in PureWindowsPath(text).parts
    )
    candidate = folder / pure
    if not escapes:
        real_folder = os.path.realpath(folder)
        real_target = os.path.realpath(candidate)
        escapes = os.path.commonpath([real_folder, real_target]) != real_folder
    if escapes:
        raise ConfigurationError(
            f"cassette name {text!r} escapes the fixtures folder {folder}: give a relative "
            'path inside it, such as "billing.jsonl" or "payments/refund.jsonl" (no "..", no '
            "absolute path, no symlink that leads out)"
        )
    return candidate


def default_cassette_name(item: pytest.Item) -> str:
    """``<test module stem>/<test name>.jsonl``; a test in a class is ``<Class>.<test name>``,
    and characters that are not file-safe in parametrize ids become ``-`` (`cassette_stem`)."""
    name = item.name
    cls = getattr(item, "cls", None)
    if cls is not None:
        name = f"{cls.__name__}.{name}"
    return f"{item.path.stem}/{cassette_stem(name)}.jsonl"


def display(path: str | os.PathLike[str], root: Path) -> str:
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)


def common_folders(folders: list[str]) -> list[str]:
    """The shortest folders covering `folders`, e.g. tests/fixtures for its subfolders."""
    kept: list[str] = []
    for folder in sorted(folders, key=len):
        if not any(folder == k or folder.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(folder)
    return sorted(kept)
