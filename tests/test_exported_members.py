"""The public surface: sorted, complete, documented."""

from __future__ import annotations

import sakura_http


def test_all_is_sorted_and_complete() -> None:
    public = {name for name in dir(sakura_http) if not name.startswith("_")} | {"__version__"}
    modules = {name for name in public if type(getattr(sakura_http, name)).__name__ == "module"}
    # Constants first, then classes, each alphabetical (ruff's RUF022 order).
    assert sakura_http.__all__ == sorted(sakura_http.__all__, key=lambda n: (not n.isupper(), n))
    assert set(sakura_http.__all__) == public - modules


def test_the_fixed_names_exist() -> None:
    for name in (
        "RecordingTransport",
        "RecordMode",
        "CassetteError",
        "CassetteMiss",
        "CredentialHeaderError",
        "BodyTooLargeError",
        "CassetteFormatError",
        "RecordingForbidden",
        "CassetteConfig",
        "ConfigurationError",
        "Exchange",
        "load_cassette",
        "__version__",
    ):
        assert name in sakura_http.__all__


def test_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    assert sakura_http.__version__ == version("sakura-http")


def test_every_public_name_has_a_docstring() -> None:
    for name in sakura_http.__all__:
        member = getattr(sakura_http, name)
        if isinstance(member, type):
            assert member.__doc__, name
