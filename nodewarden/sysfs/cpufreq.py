"""``/sys/devices/system/cpu/cpu<N>/cpufreq`` (and, without cpufreq, ``/proc/cpuinfo``): CPU
frequency scaling as typed records.

Kernel ABI: ``Documentation/admin-guide/pm/cpufreq.rst`` (``scaling_governor``,
``scaling_cur_freq``, ``scaling_max_freq``, ``cpuinfo_max_freq``, all frequencies in kHz) and
``Documentation/filesystems/proc.rst`` (``cpu MHz`` lines of ``/proc/cpuinfo``, x86). Both roots
are parameters: a fixture tree is read as it is, never the machine the process runs on. The one
rule for "the CPU frequency" of a node is :func:`mean_frequency_hz` (read by :func:`cpu_frequency`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Iterable, NamedTuple

from nodewarden.sysfs.attrs import AttrReader, listdir

CPUFREQ, CPUINFO = "cpufreq", "cpuinfo"

_CPU_DIR = re.compile(r"cpu(\d+)", re.ASCII)
_MHZ_LINE = re.compile(r"^cpu MHz\b", re.M | re.ASCII)
_MHZ = re.compile(r"^cpu MHz\s*:\s*(\d+(?:\.\d+)?)\s*$", re.M | re.ASCII)


@dataclasses.dataclass(frozen=True, slots=True)
class CpuFreq:
    """One CPU's cpufreq policy as read at one moment; None for an absent or unreadable file."""

    cpu: int                    # devices/system/cpu/cpu<N>
    governor: str | None        # cpufreq/scaling_governor ("performance", "powersave")
    cur_khz: int | None         # cpufreq/scaling_cur_freq (kHz)
    max_khz: int | None         # cpufreq/scaling_max_freq (kHz): the policy's cap
    hw_max_khz: int | None      # cpufreq/cpuinfo_max_freq (kHz): what the hardware can do

    @property
    def capped(self) -> bool:
        """The policy caps the CPU below what the hardware can do (``scaling_max_freq`` <
        ``cpuinfo_max_freq``)."""
        return self.max_khz is not None and self.hw_max_khz is not None and self.max_khz < self.hw_max_khz


def read_cpus(sysfs: Path, reader: AttrReader | None = None, cpus: Iterable[int] | None = None) -> list[CpuFreq]:
    """The CPUs under ``<sysfs>/devices/system/cpu`` that have a ``cpufreq`` directory, in CPU
    order (only ``cpus`` when given); ``[]`` without cpufreq (a VM, a kernel without a driver)."""
    reader = reader if reader is not None else AttrReader()
    root = Path(sysfs) / "devices" / "system" / "cpu"
    wanted = set(cpus) if cpus is not None else None
    out = []
    for entry in listdir(root):
        m = _CPU_DIR.fullmatch(entry)
        if not m or (wanted is not None and int(m.group(1)) not in wanted):
            continue
        d = root / entry / "cpufreq"
        if not d.is_dir():
            continue
        out.append(CpuFreq(int(m.group(1)), reader.text(d / "scaling_governor"), reader.counter(d / "scaling_cur_freq"),
                           reader.counter(d / "scaling_max_freq"), reader.counter(d / "cpuinfo_max_freq")))
    return out


CPUINFO_LIMIT = 16 << 20  # /proc/cpuinfo: ~1.3 KiB per CPU, far beyond one page


def cpuinfo_mhz(procfs: Path, reader: AttrReader | None = None) -> list[float]:
    """The ``cpu MHz`` of every CPU in ``<procfs>/cpuinfo`` (x86 prints one per CPU, ``cpu MHz
    : 2400.000``); ``[]`` when the file or the lines are absent. A ``cpu MHz`` line of another
    form is left out (and counted by ``reader``)."""
    reader = reader if reader is not None else AttrReader()
    text = reader.text(Path(procfs) / "cpuinfo", limit=CPUINFO_LIMIT)
    if text is None:
        return []
    values = [float(m) for m in _MHZ.findall(text)]
    reader.unreadable += max(0, len(_MHZ_LINE.findall(text)) - len(values))
    return values


def governors(records: Iterable[CpuFreq]) -> dict[int, str]:
    """``{cpu: governor}`` of the CPUs whose governor could be read."""
    return {r.cpu: r.governor for r in records if r.governor is not None}


class Frequency(NamedTuple):
    """The CPU frequency of a set of CPUs: ``hz`` (Hz; None when nothing could be read) and
    ``source`` (``cpufreq``, ``cpuinfo``, None)."""

    hz: float | None
    source: str | None


def mean_frequency_hz(records: list[CpuFreq], mhz: list[float]) -> Frequency:
    """The one rule for "the CPU frequency": the mean ``scaling_cur_freq`` of ``records`` that
    have one (source ``cpufreq``), else -- no cpufreq, or cpufreq directories whose
    ``scaling_cur_freq`` none could read -- the mean ``cpu MHz`` of ``/proc/cpuinfo``
    (``cpuinfo``); (None, None) when neither is there."""
    cur = [r.cur_khz * 1e3 for r in records if r.cur_khz is not None]
    if cur:
        return Frequency(sum(cur) / len(cur), CPUFREQ)
    if mhz:
        return Frequency(sum(mhz) / len(mhz) * 1e6, CPUINFO)
    return Frequency(None, None)


def cpu_frequency(sysfs: Path, procfs: Path, records: list[CpuFreq] | None = None,
                  cpus: Iterable[int] | None = None) -> Frequency:
    """:func:`mean_frequency_hz` of ``cpus`` (default: every CPU) read under ``sysfs`` (or the
    ``records`` already read of them), falling back to ``<procfs>/cpuinfo`` (whose ``cpu MHz``
    lines are all the CPUs': no per-CPU choice there)."""
    records = read_cpus(sysfs, cpus=cpus) if records is None else records
    if any(r.cur_khz is not None for r in records):
        return mean_frequency_hz(records, [])
    return mean_frequency_hz(records, cpuinfo_mhz(procfs))
