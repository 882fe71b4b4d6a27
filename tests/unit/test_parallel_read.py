"""Large files are parsed by several processes, one byte range each: the events must be exactly
those of the sequential parse, records across range boundaries included."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nodewarden.logfiles import LogFile, parallel, read

MCE = [
    "mce: [Hardware Error]: Machine check events logged",
    "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: cc00008000010090",
    "mce: [Hardware Error]: TSC 0 ADDR 3fff81c0 MISC 9001000400800086",
    "mce: [Hardware Error]: PROCESSOR 0:50657 TIME 1700000000 SOCKET 0 APIC 6 microcode 5003604",
]
FALLEN = ["NVRM: The NVIDIA GPU 0000:b3:00.0", "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
          "               NVRM: fallen off the bus and is not responding to commands."]
CONTAINED = ["NVRM: Xid (PCI:0000:19:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No",
             "NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008",
             "NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000009"]
SINGLE = ["NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
          "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)",
          "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN", "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE"]
NOISE = ["systemd[1]: Started Session 1 of user root.", "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"]


def _write(path: Path, n_groups: int, seed: int) -> None:
    rng = random.Random(seed)
    mono = 10.0
    out = []
    for _ in range(n_groups):
        group = rng.choice([MCE, FALLEN, CONTAINED, [rng.choice(SINGLE)], [rng.choice(NOISE)] * rng.randrange(1, 40)])
        for line in group:
            mono += 0.001
            out.append(line if line.startswith(" ") else f"[{mono:12.6f}] {line}")
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parallel_equals_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    log = tmp_path / "kern.log"
    _write(log, 6000, seed)
    f = LogFile(log, "node01")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1 << 60)
    sequential, seq_parser = read.read_file(f)
    size = log.stat().st_size
    # Small ranges, warm-up and look-ahead: many boundaries fall inside multi-line records.
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", size // 4)
    monkeypatch.setattr(parallel, "WARMUP", 4096)
    monkeypatch.setattr(parallel, "LOOKAHEAD", 4096)
    monkeypatch.setattr(read, "_CPUS", 4)
    in_ranges, parser = read.read_file(f)
    assert len(sequential) > 1000
    assert [e.to_json() for e in in_ranges] == [e.to_json() for e in sequential]
    assert parser.stats.events == len(sequential)
    # each candidate record counted once, not again in a neighbour's warm-up or look-ahead
    assert parser.stats.records == seq_parser.stats.records
