"""CPU memory ECC error counts from ``/sys/devices/system/edac/mc``.

Kernel ABI: ``Documentation/ABI/testing/sysfs-devices-edac`` (files), ``drivers/edac/
edac_mc_sysfs.c`` (which objects exist). A memory controller ``mc<N>/`` holds ``mc_name``,
``seconds_since_reset``, ``ce_count``/``ue_count`` (all errors) and ``ce_noinfo_count``/
``ue_noinfo_count`` (errors the driver could not place), and one of two layouts (Y-001):

* per DIMM (kernels >= 3.5): ``dimm<K>/`` — or ``rank<K>/`` for chip-select based drivers —
  with ``dimm_ce_count``, ``dimm_ue_count``, ``dimm_label`` (``CPU_SrcID#0_Ha#0_Chan#2_DIMM#0``
  as sb_edac/skx_edac name slots; empty when unset) and ``dimm_location``
  (``channel 2 slot 0``);
* legacy per chip-select row: ``csrow<R>/`` with ``ce_count``, ``ue_count`` and per channel
  ``ch<C>_ce_count``, ``ch<C>_dimm_label``. Kernels built with ``CONFIG_EDAC_LEGACY_SYSFS``
  show it *beside* the per-DIMM objects, counting the same errors: the per-DIMM layout wins
  whenever it is present, so nothing is counted twice.

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

import dataclasses
import datetime as dt
import re
import time
from pathlib import Path
from typing import Callable

from nodewarden import events as ev
from nodewarden.collectors.base import COUNTER, GAUGE, Snapshot
from nodewarden.sysfs.attrs import AttrReader, listdir, natural_key

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
_MC = re.compile(r"^mc\d+$")
_DIMM = re.compile(r"^(?:dimm|rank)\d+$")
_CSROW = re.compile(r"^csrow\d+$")
_CH_CE = re.compile(r"^ch(\d+)_ce_count$")


@dataclasses.dataclass
class Dimm:
    """``dimm<K>/`` or ``rank<K>/``."""

    name: str                 # dimm3
    label: str | None         # dimm_label
    location: str | None      # dimm_location
    ce: int | None            # dimm_ce_count
    ue: int | None            # dimm_ue_count


@dataclasses.dataclass
class Csrow:
    """Legacy ``csrow<R>/``."""

    name: str                 # csrow2
    ce: int | None            # ce_count
    ue: int | None            # ue_count
    channels: list[tuple[int, str | None, int | None]]  # (C, ch<C>_dimm_label, ch<C>_ce_count)


@dataclasses.dataclass
class Controller:
    """``mc<N>/``."""

    name: str                          # mc0
    mc_name: str | None = None         # mc_name
    seconds_since_reset: int | None = None  # seconds_since_reset
    ce: int | None = None              # ce_count
    ue: int | None = None              # ue_count
    ce_noinfo: int | None = None       # ce_noinfo_count
    ue_noinfo: int | None = None       # ue_noinfo_count
    dimms: list[Dimm] = dataclasses.field(default_factory=list)
    csrows: list[Csrow] = dataclasses.field(default_factory=list)


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
            for idx, label, ce in row.channels:
                add(label or f"{row.name}_ch{idx}", CE, ce)
                known += ce or 0
            if row.ce is not None and (not row.channels or row.ce > known):
                add(row.name, CE, row.ce - known)  # CEs the driver could not give a channel
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


# ---- thin reads ------------------------------------------------------------------------------

def read_controller(mcdir: Path, r: AttrReader) -> Controller:
    mc = Controller(mcdir.name, r.text(mcdir / "mc_name") or None, r.counter(mcdir / "seconds_since_reset"),
                    r.counter(mcdir / "ce_count"), r.counter(mcdir / "ue_count"),
                    r.counter(mcdir / "ce_noinfo_count"), r.counter(mcdir / "ue_noinfo_count"))
    for entry in listdir(mcdir):
        d = mcdir / entry
        if _DIMM.match(entry):
            mc.dimms.append(Dimm(entry, r.text(d / "dimm_label") or None, r.text(d / "dimm_location") or None,
                                 r.counter(d / "dimm_ce_count"), r.counter(d / "dimm_ue_count")))
        elif _CSROW.match(entry):
            channels = []
            for f in listdir(d):
                m = _CH_CE.match(f)
                if m:
                    idx = int(m.group(1))
                    channels.append((idx, r.text(d / f"ch{idx}_dimm_label") or None, r.counter(d / f)))
            mc.csrows.append(Csrow(entry, r.counter(d / "ce_count"), r.counter(d / "ue_count"), channels))
    return mc


class EdacCollector:
    """Polls ``<sysfs>/devices/system/edac/mc``. No EDAC driver loaded: empty snapshot."""

    name = NAME

    def __init__(self, sysfs: str | Path = "/sys", clock: Callable[[], float] = time.time) -> None:
        self.sysfs = Path(sysfs)
        self.clock = clock
        self._counts: dict[tuple[str, str, str], int] = {}
        self._mc_names: dict[str, str | None] = {}

    def collect(self) -> Snapshot:
        snap = Snapshot()
        root = self.sysfs / "devices" / "system" / "edac" / "mc"
        mcs = [m for m in listdir(root) if _MC.match(m)]
        if not mcs:
            self._counts = {}
            return snap
        r = AttrReader()
        counts: dict[tuple[str, str, str], int] = {}
        mc_names: dict[str, str | None] = {}
        for m in mcs:
            try:
                mc = read_controller(root / m, r)
            except OSError:  # the controller went away while being read (driver unload)
                r.unreadable += 1
                continue
            mc_names[m] = mc.mc_name
            ctl = (("controller", m),)
            snap.add("nodewarden_edac_controller_info", ctl + (("mc_name", mc.mc_name or ""),), 1, GAUGE,
                     HELP["nodewarden_edac_controller_info"])
            if mc.seconds_since_reset is not None:
                snap.add("nodewarden_edac_since_reset_seconds", ctl, mc.seconds_since_reset, GAUGE,
                         HELP["nodewarden_edac_since_reset_seconds"])
            per = dimm_counts(mc)
            for (dimm, typ), value in sorted(per.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
                snap.add(METRIC[typ], ctl + (("dimm", dimm),), value, COUNTER, HELP[METRIC[typ]])
                counts[(m, dimm, typ)] = value
        snap.add(UNREADABLE, {"collector": NAME}, r.unreadable, GAUGE, HELP[UNREADABLE])
        now = self.clock()
        for (m, dimm, typ), delta, value in rises(self._counts, counts):
            snap.events.append(ecc_event(m, dimm, typ, delta, value, mc_names.get(m), now))
        self._counts, self._mc_names = counts, mc_names
        return snap


def ecc_event(controller: str, dimm: str, typ: str, delta: int, count: int, mc_name: str | None,
              now: float) -> ev.FaultEvent:
    what = "CE" if typ == CE else "UE"
    msg = f"EDAC {controller}: {delta} {what} on {dimm} (sysfs count {count})"
    return ev.FaultEvent(
        kind=ev.CPU_ECC, message=msg, raw=msg, time=dt.datetime.fromtimestamp(now, tz=dt.timezone.utc),
        time_kind=ev.TIME_WALL, raw_time=f"{now:.6f}", source="sysfs", device=f"{controller}/{dimm}",
        category=typ,
        attrs={"controller": controller, "dimm": dimm, "type": typ, "delta": delta, "count": count,
               "mc_name": mc_name})
