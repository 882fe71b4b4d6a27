"""Shared by the end-to-end tests that write into the real /dev/kmsg."""

from __future__ import annotations

import os
import socket


def kmsg_refusal() -> str | None:
    """Why this run must not write into /dev/kmsg (a skip reason), or None."""
    if os.environ.get("NODEWARDEN_WRITE_KMSG") != "1":
        # The lines land in this machine's real kernel log, where a node's own monitoring
        # (DCGM, NHC, a nodewarden agent) would count them: only on request (tests/run.sh asks).
        return "writes test fault lines into this machine's /dev/kmsg: set NODEWARDEN_WRITE_KMSG=1"
    if os.geteuid() != 0:
        return "writing into /dev/kmsg needs root"
    if not os.access("/dev/kmsg", os.W_OK):
        return "/dev/kmsg is not writable here"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_kmsg(*lines: str) -> None:
    """One write(2) per line: each becomes one kernel log record (the kernel forces the user
    facility on it). Each line gets its own open file: with ``kernel.printk_devkmsg=ratelimit``
    (the default) the kernel silently drops writes past a burst of 10 per open file per 5 s
    (kernel/printk/printk.c devkmsg_write)."""
    for line in lines:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            os.write(fd, (line.rstrip("\n") + "\n").encode())
        finally:
            os.close(fd)
