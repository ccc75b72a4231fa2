"""`UsageError`: a usage error or unreadable input, which every command reports the same way.

A module of its own so that the command modules raise it without importing the CLI package,
which imports them."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A usage error or unreadable input: printed as one line, exit code 2."""
