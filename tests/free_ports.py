#!/usr/bin/env python3
"""free_ports.py N: N distinct free loopback TCP ports, one line, for the
tests' private daemons.

A port from bind(0) comes from the kernel's ephemeral range, the same range
outgoing connections take their source ports from: between this script's
exit and the daemon's bind, a connection (the test's own clients, etcd's
peers) could take it (CI: "Address already in use"). So the ports are drawn
at random below that range (10000 up to its start), and each is checked
free by binding it; the sockets are held until all are drawn so the N differ.
Imported as a module (python/tests/kvp_testlib.py): free_ports(n).
"""
import random
import socket
import sys


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    lo = _ephemeral_low()
    socks = []
    try:
        while len(socks) < n:
            s = socket.socket()
            try:
                # a range too narrow to draw from: the kernel's choice
                s.bind(("127.0.0.1", random.randrange(10000, lo) if lo > 11000 else 0))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        print("usage: free_ports.py N (--help says more)", file=sys.stderr)
        sys.exit(2)
    print(" ".join(str(p) for p in free_ports(int(sys.argv[1]))))
