"""The NVSwitch SXid catalog: which unit of the switch an SXid code is from, and whether NVIDIA
counts it fatal or non-fatal to the fabric.

Data: ``sxid_catalog.csv`` beside this module, read once on first use (nothing at import time).
One row per code range or code, ``first,last,unit,mnemonic,name,severity,severity_basis,fm_class``:

* range rows (``first`` < ``last``, e.g. ``12000,12999,egress``) give the unit of every code in
  a thousand: the driver's error classes (``NVSWITCH_ERR_HW_NPORT_EGRESS = 12000`` ...);
* code rows (``first == last``) give the driver's enum name (``mnemonic``), the driver's report
  text where it prints one string for the code (``name``), and ``severity``: ``fatal``,
  ``non_fatal`` or ``unknown``. ``severity_basis`` says where it comes from: ``fm_guide`` (the
  SXid tables of NVIDIA's Fabric Manager user guide, whose class is in ``fm_class``:
  ``non_fatal``, ``fatal``, ``always_fatal``, ``other_notable``), ``driver_report`` (the
  driver reports the code only through its non-fatal or only through its fatal report macro),
  or empty (neither says). ``SOURCES.md`` has the sources and versions.

The severity here is a default: a kernel line that prints ``Fatal``/``Non-fatal`` (or the
``Severity N`` record) says what this one error was, and wins.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from importlib import resources

__all__ = ["SEVERITIES", "SxidInfo", "lookup", "unit_of"]

CATALOG_FILE = "sxid_catalog.csv"
SEVERITIES = ("fatal", "non_fatal", "unknown")


@dataclasses.dataclass(frozen=True)
class SxidInfo:
    """What the catalog says about one SXid code.

    ``code``: the SXid; ``unit``: the switch unit (``ingress``, ``egress``, ``route``, ``minion``,
    ``dlpl``, ``nvltlc``, ``soe`` ...); ``mnemonic``: the driver's ``NVSWITCH_ERR_HW_*`` name or
    None for a code the driver does not list; ``name``: the driver's report text or None;
    ``severity``: one of :data:`SEVERITIES`; ``severity_basis``: ``fm_guide``,
    ``driver_report`` or None; ``fm_class``: the Fabric Manager guide's class or None.
    """

    code: int
    unit: str | None
    mnemonic: str | None
    name: str | None
    severity: str
    severity_basis: str | None
    fm_class: str | None


@functools.cache
def _table() -> tuple[dict[int, SxidInfo], tuple[tuple[int, int, str, str | None], ...]]:
    text = resources.files(__package__).joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    codes: dict[int, SxidInfo] = {}
    ranges: list[tuple[int, int, str, str | None]] = []
    for row in csv.DictReader(io.StringIO(text)):
        first, last = int(row["first"]), int(row["last"])
        if row["severity"] not in SEVERITIES:
            raise ValueError(f"{CATALOG_FILE}: severity {row['severity']!r} of {first} is not one of {SEVERITIES}")
        if first < last:
            ranges.append((first, last, row["unit"], row["mnemonic"] or None))
            continue
        codes[first] = SxidInfo(code=first, unit=row["unit"] or None, mnemonic=row["mnemonic"] or None,
                                name=row["name"] or None, severity=row["severity"],
                                severity_basis=row["severity_basis"] or None, fm_class=row["fm_class"] or None)
    return codes, tuple(ranges)


def unit_of(code: int) -> str | None:
    """The switch unit of ``code`` from the range rows (``12028`` -> ``egress``), or None."""
    for first, last, unit, _mnemonic in _table()[1]:
        if first <= code <= last:
            return unit
    return None


def lookup(code: int) -> SxidInfo:
    """What the catalog knows about ``code``. Never raises for an int: a code without a row of
    its own gets the unit of its range (None outside every range) and severity ``unknown``."""
    info = _table()[0].get(code)
    if info is not None:
        return info
    return SxidInfo(code=code, unit=unit_of(code), mnemonic=None, name=None, severity="unknown",
                    severity_basis=None, fm_class=None)
