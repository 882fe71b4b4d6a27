"""``/sys/bus/pci/devices``: the PCI functions a GPU node cares about as typed records.

Kernel ABI: ``Documentation/ABI/testing/sysfs-bus-pci`` (``vendor``, ``device``, ``class``,
``current_link_speed``/``max_link_speed``, ``current_link_width``/``max_link_width``, ``physfn``
of an SR-IOV VF) and ``Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats``
(``aer_dev_correctable``, ``aer_dev_fatal``, ``aer_dev_nonfatal``: one ``<error> <count>`` line
per error bit, then ``TOTAL_ERR_COR``/``TOTAL_ERR_FATAL``/``TOTAL_ERR_NONFATAL``). The rules
every reader of a link follows are here: :func:`pcie_generation` and :func:`pcie_width`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from nodewarden.parsing.aer import LONG_NAMES  # the kernel's long error names (4.19-5.x) -> short ones
from nodewarden.parsing.pci import normalize_pci
from nodewarden.sysfs.attrs import AttrReader, StaticAttrs, listdir, visit

NVIDIA, MELLANOX = 0x10DE, 0x15B3
# PCIe transfer rate (GT/s) -> generation.
GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
# aer_dev_<severity> files, and the TOTAL_* line of each.
AER_FILES = (("aer_dev_correctable", "correctable"), ("aer_dev_fatal", "fatal"), ("aer_dev_nonfatal", "nonfatal"))
TOTAL_LINE = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL", "fatal": "TOTAL_ERR_FATAL"}

_GTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", re.ASCII)
_WIDTH = re.compile(r"^\s*x?(\d+)\s*$", re.ASCII)
_AER_LINE = re.compile(r"^(?P<name>\S(?:.*\S)?)\s+(?P<count>\d+)$", re.ASCII)
_BDF_DIR = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", re.ASCII)


# ---- value forms (rules) -----------------------------------------------------------------------

def pcie_generation(text: str | None) -> int | None:
    """``32.0 GT/s PCIe`` (kernels >= 5.x) or ``8 GT/s`` (older) -> 5 / 3; ``Unknown`` (the
    kernel's word for a link that is down), garbage or unreadable -> None."""
    m = _GTS.match(text or "")
    if not m:
        return None
    return GENERATIONS.get(float(m.group(1)))


def pcie_width(text: str | None) -> int | None:
    """Lanes: ``16`` or ``x16`` -> 16; ``0`` -> 0 (a link that is down: the kernel read zero
    lanes from the Link Status register); unreadable or garbage -> None (unknown)."""
    m = _WIDTH.match(text or "")
    return int(m.group(1)) if m else None


def parse_hex(text: str | None) -> int | None:
    """``0x10de`` -> 0x10de; None or garbage -> None."""
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def parse_aer(text: str, severity: str | None = None) -> tuple[dict[str, int], int, int | None]:
    """An ``aer_dev_*`` file -> ({error: count} without the TOTAL_* line, bad lines, records).

    ``RxErr 0\\nBadTLP 3\\n...TOTAL_ERR_COR 3`` -> ({"RxErr": 0, "BadTLP": 3, ...}, 0, 3); long
    names (``Bad TLP 3``) become short ones (``BadTLP``). ``records``: the count of the file's
    ``TOTAL_ERR_COR`` / ``TOTAL_ERR_FATAL`` / ``TOTAL_ERR_NONFATAL`` line (the one of
    ``severity`` ``correctable``/``fatal``/``nonfatal`` when given, else any ``TOTAL_ERR_*``
    line; the first one), None when there is no such line or it is not a count."""
    want = TOTAL_LINE[severity] if severity is not None else None
    out: dict[str, int] = {}
    bad = 0
    total: int | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _AER_LINE.match(line)
        if not m:
            bad += 1
            continue
        name = m.group("name")
        if name.startswith("TOTAL_"):
            if total is None and (name == want if want is not None else name.startswith("TOTAL_ERR_")):
                total = int(m.group("count"))
            continue
        name = LONG_NAMES.get(name, name)
        out[name] = out.get(name, 0) + int(m.group("count"))
    return out, bad, total


# ---- records -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """A function's link attributes as the kernel prints them; None when absent or unreadable."""

    current_speed: str | None   # current_link_speed ("32.0 GT/s PCIe", "8 GT/s", "Unknown")
    max_speed: str | None       # max_link_speed
    current_width: str | None   # current_link_width ("16"; "0" while the link is down)
    max_width: str | None       # max_link_width

    @property
    def generation(self) -> int | None:
        """The trained link's PCIe generation (1-7; :func:`pcie_generation`), None when unknown."""
        return pcie_generation(self.current_speed)

    @property
    def max_generation(self) -> int | None:
        """The highest generation the function supports, None when unknown."""
        return pcie_generation(self.max_speed)

    @property
    def lanes(self) -> int | None:
        """The trained link's width in lanes (:func:`pcie_width`: 0 while down), None when unknown."""
        return pcie_width(self.current_width)

    @property
    def max_lanes(self) -> int | None:
        """The widest link the function supports in lanes, None when unknown."""
        return pcie_width(self.max_width)


@dataclasses.dataclass(frozen=True, slots=True)
class AerStats:
    """One ``aer_dev_<severity>`` file: :func:`parse_aer`'s three values."""

    counts: Mapping[str, int]   # "<error> <count>" lines, short names
    records: int | None         # the TOTAL_ERR_* line: error records the kernel handled
    bad_lines: int              # lines that are not "<error> <count>"


@dataclasses.dataclass(frozen=True, slots=True)
class Function:
    """One PCI function (not an SR-IOV VF) as read at one moment."""

    bdf: str                         # bus/pci/devices/<bdf>
    pci_bus_id: str                  # <bdf> normalised (0000:18:00.0)
    vendor: int                      # vendor (0x10de)
    device: str | None               # device ("0x2330")
    pci_class: str | None            # class ("0x030200")
    link: Link                       # {current,max}_link_{speed,width}
    upstream: str | None = None      # the port above it: its resolved parent directory (a real /sys)
    upstream_link: Link | None = None  # that port's {current,max}_link_{speed,width}
    aer: Mapping[str, AerStats] = dataclasses.field(default_factory=dict)  # aer_dev_<severity>, when readable

    @property
    def class_code(self) -> int | None:
        """``class`` as a number (0x030200: 3D controller), None when unreadable."""
        return parse_hex(self.pci_class)


def is_gpu(f: Function) -> bool:
    """An NVIDIA GPU: vendor 0x10de, display base class 0x03 (VGA 0x0300, 3D controller 0x0302,
    other 0x0380); not an NVSwitch (0x0680, "bridge, other")."""
    cls = f.class_code
    return f.vendor == NVIDIA and cls is not None and cls >> 16 == 0x03


def is_network(f: Function) -> bool:
    """A network function (class 0x02: Ethernet 0x0200, InfiniBand 0x0207)."""
    cls = f.class_code
    return cls is not None and cls >> 16 == 0x02


# ---- readers -----------------------------------------------------------------------------------

def present(sysfs: Path) -> bool:
    """Whether ``<sysfs>/bus/pci/devices`` exists."""
    return (Path(sysfs) / "bus" / "pci" / "devices").is_dir()


def _speed(reader: AttrReader, path: str, kept: dict[str, Any] | None = None) -> str | None:
    """A ``*_link_speed`` file; text that is neither ``N GT/s`` of a known generation nor the
    kernel's ``Unknown`` (a link that is down) is counted unreadable (and kept, for the report).
    ``kept``: a :class:`~nodewarden.sysfs.attrs.StaticAttrs` directory entry (a static file)."""
    if kept is not None and path in kept:
        return kept[path]
    text = reader.text(path)
    ok = text is not None and (text == "Unknown" or reader.parsed(text, pcie_generation(text)) is not None)
    if ok and kept is not None:
        kept[path] = text
    return text


def _width(reader: AttrReader, path: str, kept: dict[str, Any] | None = None) -> str | None:
    """A ``*_link_width`` file; text that is not a lane count is counted unreadable."""
    if kept is not None and path in kept:
        return kept[path]
    text = reader.text(path)
    if reader.parsed(text, pcie_width(text)) is not None and kept is not None:
        kept[path] = text
    return text


def read_link(d: Path, reader: AttrReader, kept: dict[str, Any] | None = None) -> Link:
    """The four link attributes of the function directory ``d``; with ``kept`` (its
    :class:`~nodewarden.sysfs.attrs.StaticAttrs` entry), the ``max_*`` ones are read once."""
    s = str(d)  # string joins: a Path join costs more than the read
    return Link(_speed(reader, f"{s}/current_link_speed"), _speed(reader, f"{s}/max_link_speed", kept),
                _width(reader, f"{s}/current_link_width"), _width(reader, f"{s}/max_link_width", kept))


def _kept_text(reader: AttrReader, d: Path, name: str, kept: dict[str, Any] | None) -> str | None:
    if kept is not None and name in kept:
        return kept[name]
    text = reader.text(d / name)
    if text is not None and kept is not None:
        kept[name] = text
    return text


def upstream_port(d: Path) -> Path | None:
    """The port above a function on a real /sys (its resolved parent directory), when that is a
    PCI function with link attributes; None in a tree of plain directories."""
    try:
        parent = Path(os.path.realpath(d)).parent
    except OSError:
        return None
    if _BDF_DIR.match(parent.name) and (parent / "max_link_speed").exists():
        return parent
    return None


def read_aer(d: Path, reader: AttrReader) -> dict[str, AerStats]:
    """The readable ``aer_dev_*`` files of ``d`` by severity; a file with lines that are not
    ``<error> <count>`` is counted unreadable once (its good lines still count)."""
    out = {}
    s = str(d)
    for fname, severity in AER_FILES:
        text = reader.text(f"{s}/{fname}")
        if text is None:
            continue  # no AER capability, a kernel before 4.19, or a read error (counted)
        counts, bad, total = parse_aer(text, severity)
        if bad:
            reader.unreadable += 1
        out[severity] = AerStats(counts, total, bad)
    return out


def read_function(d: Path, vendor: int, reader: AttrReader, static: StaticAttrs | None = None,
                  kept: dict[str, Any] | None = None, upstream: bool = True) -> Function:
    """The function directory ``d`` (``bus/pci/devices/<bdf>``, vendor already read). With
    ``static``, what does not change while the function exists (``device``, ``class``, the
    maximum link, the upstream port and its maximum link) is read once (:class:`StaticAttrs`;
    ``kept``: ``static.of(d)`` when the caller has it). ``upstream`` False: the upstream port
    is not read (``upstream`` and ``upstream_link`` None), for a reader that does not judge it."""
    if kept is None and static is not None:
        kept = static.of(d)
    if not upstream:
        return Function(d.name, normalize_pci(d.name) or d.name, vendor, _kept_text(reader, d, "device", kept),
                        _kept_text(reader, d, "class", kept), read_link(d, reader, kept), None, None,
                        read_aer(d, reader))
    if kept is not None and "upstream" in kept:
        up = kept["upstream"]
    else:
        up = upstream_port(d)
        if kept is not None:
            kept["upstream"] = up
    up_kept = static.of(up) if static is not None and up is not None else None
    return Function(d.name, normalize_pci(d.name) or d.name, vendor, _kept_text(reader, d, "device", kept),
                    _kept_text(reader, d, "class", kept), read_link(d, reader, kept),
                    up.name if up is not None else None,
                    read_link(up, reader, up_kept) if up is not None else None, read_aer(d, reader))


def read_functions(sysfs: Path, reader: AttrReader | None = None,
                   vendors: Iterable[int] = (NVIDIA, MELLANOX), static: StaticAttrs | None = None,
                   upstream: bool = True) -> list[Function]:
    """The physical functions of ``vendors`` under ``<sysfs>/bus/pci/devices``, in bus order;
    ``[]`` when the directory is absent. SR-IOV VFs (a ``physfn`` link: their link fields are
    the PF's, or zero) are left out. Never raises: a function that is no directory (removed
    while read: a GPU that fell off the bus; a dangling link) is left out and counted, as is one
    whose ``vendor`` cannot be read. ``static``: a poller's :class:`StaticAttrs`, so that the
    attributes that do not change while a function exists (``vendor``, ``physfn``, ``device``,
    ``class``, ``max_link_*``, the upstream port) are read once per function directory; the
    records are the same as without it. ``upstream`` False: the ports above the functions are
    not read (:func:`read_function`)."""
    reader = reader if reader is not None else AttrReader()
    wanted = set(vendors)
    root = Path(sysfs) / "bus" / "pci" / "devices"
    out = []
    listed = set()
    for bdf in sorted(listdir(root), key=lambda b: normalize_pci(b) or b):
        d = root / bdf
        present, kept = visit(d, reader, static, listed)
        if not present:
            continue
        if kept is not None and "vendor" in kept:
            vendor, vf = kept["vendor"], kept["physfn"]
        else:
            text = reader.text(d / "vendor")
            vendor = reader.parsed(text, parse_hex(text))
            vf = os.path.lexists(d / "physfn")
            if kept is not None and vendor is not None:
                kept["vendor"], kept["physfn"] = vendor, vf
        if vendor is None or vendor not in wanted or vf:
            continue
        out.append(read_function(d, vendor, reader, static, kept, upstream))
        if kept is not None and kept.get("upstream") is not None:
            listed.add(str(kept["upstream"]))  # the upstream port's entry lives as long as its function's
    if static is not None:
        static.prune(listed)
    return out
