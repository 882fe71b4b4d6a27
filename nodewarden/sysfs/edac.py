"""``/sys/devices/system/edac/mc``: the EDAC memory controllers and their DIMMs, as records.

Kernel ABI: ``Documentation/ABI/testing/sysfs-devices-edac`` (the files) and
``drivers/edac/edac_mc_sysfs.c`` (which objects exist). A memory controller ``mc<N>/`` holds
``mc_name``, ``seconds_since_reset``, ``ce_count``/``ue_count`` (all its errors) and
``ce_noinfo_count``/``ue_noinfo_count`` (errors the driver could not place), and one of two
layouts (Y-001):

* per DIMM (kernels >= 3.5): ``dimm<K>/`` (``rank<K>/`` for chip-select based drivers) with
  ``dimm_ce_count``, ``dimm_ue_count``, ``dimm_label`` (``CPU_SrcID#0_Ha#0_Chan#2_DIMM#0`` as
  sb_edac/skx_edac name slots; empty when unset) and ``dimm_location`` (``channel 2 slot 0``);
* legacy, per chip-select row: ``csrow<R>/`` with ``ce_count``, ``ue_count`` and per channel
  ``ch<C>_ce_count`` and ``ch<C>_dimm_label``. Kernels built with ``CONFIG_EDAC_LEGACY_SYSFS``
  show it beside the per-DIMM objects, counting the same errors.

The records hold what the files say, nothing more: which layout counts, and the series and
events, are :mod:`nodewarden.collectors.edac`'s. An empty ``dimm_label``/``ch<C>_dimm_label``
or ``mc_name`` is None, as is any file that is absent or unreadable (an unreadable one, or a
count that is not a number, is counted by the :class:`~nodewarden.sysfs.attrs.AttrReader`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from nodewarden.sysfs.attrs import AttrReader, listdir

MC_DIR = Path("devices", "system", "edac", "mc")  # below the sysfs root
_MC = re.compile(r"^mc\d+$", re.ASCII)
_DIMM = re.compile(r"^(?:dimm|rank)\d+$", re.ASCII)
_CSROW = re.compile(r"^csrow\d+$", re.ASCII)
_CH_CE = re.compile(r"^ch(\d+)_ce_count$", re.ASCII)


@dataclasses.dataclass(frozen=True, slots=True)
class Dimm:
    """One ``mc<N>/dimm<K>/`` or ``mc<N>/rank<K>/``."""

    name: str              # the directory: dimm3, rank2
    label: str | None      # dimm_label (None when empty)
    location: str | None   # dimm_location
    ce: int | None         # dimm_ce_count
    ue: int | None         # dimm_ue_count


@dataclasses.dataclass(frozen=True, slots=True)
class Channel:
    """One channel of a legacy ``csrow<R>/``: the ``ch<C>_*`` files."""

    index: int             # C of ch<C>_ce_count
    label: str | None      # ch<C>_dimm_label (None when empty)
    ce: int | None         # ch<C>_ce_count


@dataclasses.dataclass(frozen=True, slots=True)
class Csrow:
    """One legacy ``mc<N>/csrow<R>/``."""

    name: str                        # the directory: csrow2
    ce: int | None                   # ce_count
    ue: int | None                   # ue_count
    channels: tuple[Channel, ...]    # ch<C>_ce_count, ch<C>_dimm_label, by C


@dataclasses.dataclass(frozen=True, slots=True)
class Controller:
    """One ``mc<N>/``."""

    name: str                              # the directory: mc0
    mc_name: str | None = None             # mc_name (the driver's name of the controller)
    seconds_since_reset: int | None = None  # seconds_since_reset
    ce: int | None = None                  # ce_count
    ue: int | None = None                  # ue_count
    ce_noinfo: int | None = None           # ce_noinfo_count
    ue_noinfo: int | None = None           # ue_noinfo_count
    dimms: tuple[Dimm, ...] = ()           # dimm<K>/, rank<K>/
    csrows: tuple[Csrow, ...] = ()         # csrow<R>/


def read_controller(mcdir: Path, r: AttrReader) -> Controller:
    """The record of one controller directory ``mcdir`` (``.../edac/mc/mc0``); its objects in
    natural order (``dimm2`` before ``dimm10``). Never raises: a file that is absent or
    unreadable is None (counted in ``r`` when it is there but unreadable)."""
    dimms: list[Dimm] = []
    csrows: list[Csrow] = []
    for entry in listdir(mcdir):
        d = mcdir / entry
        if _DIMM.match(entry):
            dimms.append(Dimm(entry, r.text(d / "dimm_label") or None, r.text(d / "dimm_location") or None,
                              r.counter(d / "dimm_ce_count"), r.counter(d / "dimm_ue_count")))
        elif _CSROW.match(entry):
            channels = []
            for f in listdir(d):
                m = _CH_CE.match(f)
                if m:
                    c = int(m.group(1))
                    channels.append(Channel(c, r.text(d / f"ch{c}_dimm_label") or None, r.counter(d / f)))
            channels.sort(key=lambda ch: ch.index)
            csrows.append(Csrow(entry, r.counter(d / "ce_count"), r.counter(d / "ue_count"), tuple(channels)))
    return Controller(mcdir.name, r.text(mcdir / "mc_name") or None, r.counter(mcdir / "seconds_since_reset"),
                      r.counter(mcdir / "ce_count"), r.counter(mcdir / "ue_count"),
                      r.counter(mcdir / "ce_noinfo_count"), r.counter(mcdir / "ue_noinfo_count"),
                      tuple(dimms), tuple(csrows))


def read_controllers(sysfs: Path, r: AttrReader | None = None) -> list[Controller]:
    """Every ``<sysfs>/devices/system/edac/mc/mc<N>`` in natural order (``mc2`` before
    ``mc10``); ``[]`` when the directory is absent (no EDAC driver loaded). ``r`` counts the
    files found but unreadable (a fresh reader when None). Never raises."""
    root = Path(sysfs) / MC_DIR
    r = r if r is not None else AttrReader()
    return [read_controller(root / m, r) for m in listdir(root) if _MC.match(m)]
