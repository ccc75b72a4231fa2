"""What to do next: the words each front end uses to tell the user how to fix a problem.

The engine raises errors that carry facts (which request, which header, which limit); the last
sentence of a message, the fix, depends on how sakura-http is being used.  Under pytest it is
``pytest --record`` and the ``sakura_secret_headers`` ini option; for a `RecordingTransport`
built by hand it is ``mode="new_episodes"`` and ``secret_headers=[...]``; for the proxy, its
command-line flags.  Each front end passes its own `Advice` in `CassetteConfig.advice`; the
engine holds no front end's words.

`Advice` itself words the fixes for a `RecordingTransport` built in Python code.  A front end
subclasses it and overrides the methods whose wording differs.
"""

from __future__ import annotations

__all__ = ["Advice"]


class Advice:
    """The fixes named in error messages, worded for one front end (here: Python code)."""

    #: A short name for the front end, used in ``repr`` and in docs.
    front_end = "RecordingTransport"

    def record_missing(self) -> str:
        """How to record a request the cassette lacks (the end of a `CassetteMiss`)."""
        return (
            'to record it, pass mode="new_episodes" to RecordingTransport (under pytest: run '
            "`pytest --record`); if the request changed on purpose, re-record with "
            f"{self.rerecord()}"
        )

    def rerecord(self) -> str:
        """How to re-record a cassette whose requests changed on purpose, as the object of
        "re-record with ...".  The one place each front end words it: `record_missing` and the
        hints of a miss (the request changed) both use it."""
        return 'mode="all" (`pytest --record-all`)'

    def allow_repeats(self) -> str:
        """How to let identical requests replay the last recorded exchange again."""
        return "drop allow_repeats=False to replay the last one again, or record more of them"

    def declare_secret(self, header: str) -> str:
        """How to declare a credential header secret (the end of a `CredentialHeaderError`)."""
        return f'RecordingTransport(..., secret_headers=["{header}"])'

    def allow_header(self, header: str) -> str:
        """How to record a header that only looks like a credential as sent (offered after
        `declare_secret` for a name of credential shape, never for a credential by name)."""
        return f'allow_headers=["{header}"]'

    def raise_body_limit(self, side: str, suggested: int) -> str:
        """How to store larger bodies (the end of a `BodyTooLargeError`): a `max_body_bytes`
        of `suggested` bytes (`BodyTooLargeError.suggested_limit`) holds the body seen."""
        return f"raise the limit with RecordingTransport(..., max_body_bytes={suggested})"

    def add_record_host(self, host: str) -> str:
        """How to allow recording from a host outside `record_hosts`."""
        return f'record_hosts=["{host}"] (or sakura_record_hosts in the pytest ini options)'

    def give_outer(self) -> str:
        """How to give a transport its network (a request must be recorded, outer is None)."""
        return (
            "pass the real transport as outer=, e.g. RecordingTransport(..., "
            "outer=httpx.HTTPTransport())"
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self.front_end}>"
