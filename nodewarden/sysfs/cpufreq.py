"""``/sys/devices/system/cpu/cpu<N>/cpufreq`` (and, without cpufreq, ``/proc/cpuinfo``): CPU
frequency scaling as typed records.

Kernel ABI: ``Documentation/admin-guide/pm/cpufreq.rst`` (``scaling_governor``,
``scaling_cur_freq``, ``scaling_max_freq``, ``cpuinfo_max_freq``, all frequencies in kHz) and
``Documentation/filesystems/proc.rst`` (``cpu MHz`` lines of ``/proc/cpuinfo``, x86). Both roots
are parameters: a fixture tree is read as it is, never the machine the process runs on. The one
rule for "the CPU frequency" of a node is :func:`mean_frequency_hz`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable

from nodewarden.sysfs.attrs import AttrReader, listdir

CPUFREQ, CPUINFO = "cpufreq", "cpuinfo"

_CPU_DIR = re.compile(r"cpu(\d+)")
_MHZ = re.compile(r"^cpu MHz\s*:\s*([\d.]+)", re.M)


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


def cpuinfo_mhz(procfs: Path, reader: AttrReader | None = None) -> list[float]:
    """The ``cpu MHz`` of every CPU in ``<procfs>/cpuinfo`` (x86 prints one per CPU); ``[]``
    when the file or the lines are absent."""
    path = Path(procfs) / "cpuinfo"
    try:
        text = path.read_text(errors="replace")  # one line per field per CPU: more than 4 KiB
    except OSError:
        if reader is not None and os.path.lexists(path):
            reader.unreadable += 1
        return []
    return [float(m) for m in _MHZ.findall(text)]


def governors(records: Iterable[CpuFreq]) -> dict[int, str]:
    """``{cpu: governor}`` of the CPUs whose governor could be read."""
    return {r.cpu: r.governor for r in records if r.governor is not None}


def mean_frequency_hz(records: list[CpuFreq], mhz: list[float]) -> tuple[float | None, str | None]:
    """The node's CPU frequency in Hz and where it came from: the mean ``scaling_cur_freq`` of
    ``records`` (source ``cpufreq``; the frequency None when no CPU's could be read), else the
    mean ``cpu MHz`` of ``/proc/cpuinfo`` (``cpuinfo``); (None, None) when neither is there."""
    if records:
        cur = [r.cur_khz * 1e3 for r in records if r.cur_khz is not None]
        return (sum(cur) / len(cur) if cur else None), CPUFREQ
    if mhz:
        return sum(mhz) / len(mhz) * 1e6, CPUINFO
    return None, None
