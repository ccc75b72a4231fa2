"""Lists of "host" or "host:port" entries: `record_hosts`, `passthrough_hosts`, the guard's.

One parser for every such list: entries are case-insensitive, "host" allows any port, and an
IPv6 address with a port is written "[::1]:8000".
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_PORTS", "HostList", "split_host_entry"]

#: The port a URL of each scheme means when it names none (dropped from a canonical URL).
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def split_host_entry(entry: str) -> tuple[str, int | None]:
    """("host", port) for "host:port", ("host", None) for "host"; lower-case, IPv6 unbracketed."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return entry, None


class HostList:
    """`(host, port) in hosts` is true when an entry names the host with any port, or with that
    port."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(entries)
        self._any_port: set[str] = set()
        self._with_port: set[tuple[str, int]] = set()
        for entry in self.entries:
            host, port = split_host_entry(entry)
            if port is None:
                self._any_port.add(host)
            else:
                self._with_port.add((host, port))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __contains__(self, host_port: tuple[str, int | None]) -> bool:
        host, port = host_port
        host = host.lower()
        return host in self._any_port or (port is not None and (host, port) in self._with_port)
