"""The listening sockets of a process tree (what a run opens on the network)."""

from __future__ import annotations

import ipaddress

import psutil


def listeners(root: psutil.Process) -> dict[tuple[str, int], str]:
    """(ip, port) -> process name, for every socket listening in `root`'s process tree."""
    out = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out[(c.laddr.ip, c.laddr.port)] = name
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:  # ::ffff:127.0.0.1
        addr = addr.ipv4_mapped
    return addr.is_loopback
