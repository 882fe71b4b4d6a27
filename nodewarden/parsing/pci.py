"""PCI bus ids as printed by the NVIDIA driver, NVML, DCGM, Fabric Manager and mlx5."""

from __future__ import annotations

import re

_BDF = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?$")


def normalize_pci(text: str | None) -> str | None:
    """``DDDD:BB:DD.F`` lower-case, function 0 when absent, domain 0000 when absent.

    ``0000:43:00`` -> ``0000:43:00.0``; ``00000019:01:00.0`` (NVML/DCGM 8-digit domain) ->
    ``0019:01:00.0``; ``01:00.0`` -> ``0000:01:00.0``. Returns None for text that is not a
    bus id (redacted ``...``, shell variables such as ``$pci``, empty).
    """
    if not text:
        return None
    m = _BDF.match(text.strip())
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    if dom > 0xFFFF:
        return None
    return f"{dom:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"
