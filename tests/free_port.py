#!/usr/bin/env python3
"""A TCP port for a test's server, free when chosen: `free_port()`, or run as a script to print
one. It is taken below the kernel's ephemeral range where that range leaves room: a port the
kernel hands out (bind to port 0) is one it may give next as the source port of any other
connection on the machine, so in a busy test run it can be taken before the server binds it
("Address already in use", seen in CI from PyTorch's TCPStore)."""
import random
import socket


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port(host="127.0.0.1"):
    low = _ephemeral_low()
    for _ in range(100 if low > 12000 else 0):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    with socket.socket() as s:  # no room below the range: any free port
        s.bind((host, 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(free_port())
