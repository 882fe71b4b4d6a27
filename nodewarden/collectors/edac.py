"""CPU memory ECC error counts from ``/sys/devices/system/edac/mc``: the records of
:mod:`nodewarden.sysfs.edac` (files, layouts, kernel ABI) mapped to series and events.

The per-DIMM layout wins whenever a controller has it: the legacy ``csrow<R>/`` view that
``CONFIG_EDAC_LEGACY_SYSFS`` shows beside it counts the same errors, so nothing is counted twice.

Series (``controller`` is ``mc0``; ``dimm`` the DIMM's label, else its object name ``dimm3``,
``rank3`` or ``csrow2_ch1``; the legacy layout's UEs, which it counts per row only, are
``csrow2``; a row's CEs whose channel the driver did not know are ``csrow2`` too; the
``*_noinfo_count`` errors are ``unknown``; a controller without any per-DIMM object exports
its ``ce_count``/``ue_count`` as ``unknown``):

* ``nodewarden_edac_correctable_errors_total{controller,dimm}``
* ``nodewarden_edac_uncorrectable_errors_total{controller,dimm}``
* ``nodewarden_edac_controller_info{controller,mc_name} 1``
* ``nodewarden_edac_since_reset_seconds{controller}``
* ``nodewarden_collector_unreadable_files{collector="edac"}``

``sum by (controller)`` of the two counters equals the controller's ``ce_count``/``ue_count``.
A count that rises between two polls is a ``cpu_ecc`` event (source ``sysfs``, device
``mc0/<dimm>``, attrs ``delta``, ``type`` corrected/uncorrected); a count that falls (someone
wrote ``reset_counters``) only moves the baseline.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Callable

from nodewarden import events as ev
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.sysfs.attrs import AttrReader, natural_key
from nodewarden.sysfs.edac import Controller, read_controllers

NAME = "edac"
UNREADABLE = "nodewarden_collector_unreadable_files"
CE, UE = "corrected", "uncorrected"
UNKNOWN = "unknown"
METRIC = {CE: "nodewarden_edac_correctable_errors_total", UE: "nodewarden_edac_uncorrectable_errors_total"}
HELP = {
    METRIC[CE]: "Corrected memory errors counted by the EDAC driver (sysfs), per DIMM.",
    METRIC[UE]: "Uncorrected memory errors counted by the EDAC driver (sysfs), per DIMM.",
    "nodewarden_edac_controller_info": "EDAC memory controller and its driver's name; always 1.",
    "nodewarden_edac_since_reset_seconds": "Seconds since the controller's EDAC counters were last reset.",
    UNREADABLE: "Files the collector found but could not read or parse in its latest poll.",
}


# ---- pure ------------------------------------------------------------------------------------

def dimm_counts(mc: Controller) -> dict[tuple[str, str], int]:
    """``{(dimm, corrected|uncorrected): count}`` for one controller (see the module doc for
    the naming and for which layout counts). DIMMs that share a label are summed."""
    out: dict[tuple[str, str], int] = {}

    def add(dimm: str, typ: str, value: int | None) -> None:
        if value is not None:
            out[(dimm, typ)] = out.get((dimm, typ), 0) + value

    if mc.dimms:
        for d in mc.dimms:
            name = d.label or d.name
            add(name, CE, d.ce)
            add(name, UE, d.ue)
    elif mc.csrows:
        for row in mc.csrows:
            known = 0
            for ch in row.channels:
                add(ch.label or f"{row.name}_ch{ch.index}", CE, ch.ce)
                known += ch.ce or 0
            # CEs the driver could not give a channel; not while a channel's count is unreadable
            # (its CEs would pass for the row's: a false event, then a count that falls).
            if row.ce is not None and all(ch.ce is not None for ch in row.channels) and (
                    not row.channels or row.ce > known):
                add(row.name, CE, row.ce - known)
            add(row.name, UE, row.ue)
    if mc.dimms or mc.csrows:
        add(UNKNOWN, CE, mc.ce_noinfo)
        add(UNKNOWN, UE, mc.ue_noinfo)
    else:
        add(UNKNOWN, CE, mc.ce)
        add(UNKNOWN, UE, mc.ue)
    return out


def rises(before: dict[tuple[str, str, str], int], after: dict[tuple[str, str, str], int]
          ) -> list[tuple[tuple[str, str, str], int, int]]:
    """``[((controller, dimm, type), delta, new count)]`` for every count that rose. New series
    and counts that fell (reset_counters) give nothing."""
    out = []
    for key, value in after.items():
        old = before.get(key)
        if old is not None and value > old:
            out.append((key, value - old, value))
    return out


# ---- collector -------------------------------------------------------------------------------

class EdacCollector:
    """Polls ``<sysfs>/devices/system/edac/mc`` (:func:`nodewarden.sysfs.edac.read_controllers`).
    No EDAC driver loaded: an empty snapshot. ``clock``: Unix time of the events."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys", clock: Callable[[], float] = time.time) -> None:
        self.sysfs = Path(sysfs)
        self.clock = clock
        self._counts: dict[tuple[str, str, str], int] = {}  # (controller, dimm, type) -> the last poll's count

    def collect(self) -> Snapshot:
        snap = Snapshot()
        r = AttrReader()
        controllers = read_controllers(self.sysfs, r)
        if not controllers:
            self._counts = {}
            return snap
        counts: dict[tuple[str, str, str], int] = {}
        for mc in controllers:
            ctl = (("controller", mc.name),)
            snap.add("nodewarden_edac_controller_info", ctl + (("mc_name", mc.mc_name or ""),), 1, GAUGE,
                     HELP["nodewarden_edac_controller_info"])
            if mc.seconds_since_reset is not None:
                snap.add("nodewarden_edac_since_reset_seconds", ctl, mc.seconds_since_reset, GAUGE,
                         HELP["nodewarden_edac_since_reset_seconds"])
            per = dimm_counts(mc)
            for (dimm, typ), value in sorted(per.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
                snap.add(METRIC[typ], ctl + (("dimm", dimm),), value, COUNTER, HELP[METRIC[typ]])
                counts[(mc.name, dimm, typ)] = value
        snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        now = self.clock()
        mc_names = {mc.name: mc.mc_name for mc in controllers}
        for (m, dimm, typ), delta, value in rises(self._counts, counts):
            snap.events.append(ecc_event(m, dimm, typ, delta, value, mc_names.get(m), now))
        self._counts = counts
        return snap


def ecc_event(controller: str, dimm: str, typ: str, delta: int, count: int, mc_name: str | None,
              now: float) -> ev.FaultEvent:
    """The ``cpu_ecc`` event of a count that rose by ``delta`` to ``count`` on ``dimm`` of
    ``controller`` (``typ`` corrected/uncorrected), dated ``now`` (Unix time, wall clock)."""
    what = "CE" if typ == CE else "UE"
    msg = f"EDAC {controller}: {delta} {what} on {dimm} (sysfs count {count})"
    return ev.FaultEvent(
        kind=ev.CPU_ECC, message=msg, raw=msg, time=dt.datetime.fromtimestamp(now, tz=dt.timezone.utc),
        time_kind=ev.TIME_WALL, raw_time=f"{now:.6f}", source="sysfs", device=f"{controller}/{dimm}",
        category=typ,
        attrs={"controller": controller, "dimm": dimm, "type": typ, "delta": delta, "count": count,
               "mc_name": mc_name})
