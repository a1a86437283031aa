"""Which names a server of due's answers to: its defence against DNS rebinding.

A page of another site whose own name was re-pointed at this host's address
(DNS rebinding) reaches a server bound to it as its own origin, and reads
what it serves. The dashboard and `due metrics` bound to the loopback
interface answer only the loopback names and the address they are bound to;
`due metrics` bound elsewhere answers any address, and the names it is
told (`--allow-host`), once it is told any. Standard library only: `due
metrics` runs without the dashboard's extra.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this host's loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_address(name: str) -> bool:
    """Whether `name` is an IP address (no DNS name: nothing to re-point)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def hostname(host_header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8080" -> "::1")."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    name = host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header
    return name.lower()


def answered_names(bound: str, allowed: frozenset[str]) -> frozenset[str] | None:
    """The Host names a server bound to `bound` answers (None: any); with
    `allowed`, the names it was told besides. Bound to loopback: the loopback
    names and its own. Elsewhere: any, unless told names; then those, its
    own and the loopback names (and any address: `answers`)."""
    names = {name.lower() for name in allowed}
    if is_loopback(bound) or names:
        return frozenset(LOOPBACK_NAMES | {bound.lower()} | names)
    return None


def answers(name: str, bound: str, names: frozenset[str] | None) -> bool:
    """Whether a server bound to `bound`, answering `names`, answers a
    request for the host `name`."""
    if names is None or name in names:
        return True
    return not is_loopback(bound) and is_address(name)
