"""The candidate scanner (nodewarden.parsing.scan) must find exactly the records a plain loop over
the lines finds: every record (head line plus its indented continuation lines) that holds a
keyword, whole, once, in order; whatever the matcher (Hyperscan or bytes.find) and however the
input is cut into chunks.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden.logfiles.stream import events_from_stream, iter_regions
from nodewarden.parsing import scan
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

BACKENDS = [
    pytest.param(True, id="find"),
    pytest.param(False, id="hyperscan",
                 marks=envneeds.needs(scan.backend() != "hyperscan", "hyperscan", "the [analysis] extra's scanner",
                                      expected=envneeds.ON_X86_64)),
]
REAL_CASES = Path(__file__).resolve().parent.parent / "fixtures" / "real_cases"


# -- the reference: a plain line loop -----------------------------------------------------------

def naive_records(data: bytes) -> list[bytes]:
    """Records holding a keyword, by walking the lines one by one."""
    records: list[list[bytes]] = []
    for line in data.split(b"\n"):
        if line[:1] in (b" ", b"\t") and line.strip() and records:
            records[-1].append(line)
        else:
            records.append([line])
    joined = [b"\n".join(r) for r in records]
    return [r for r in joined if any(k in r for k in scan.KEYWORDS)]


# -- a generated log ---------------------------------------------------------------------------

NOISE = [
    "[{t}] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    "[{t}] IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "Oct 20 18:54:04 node01 systemd[1]: Started Session 42 of User user.",
    "[{t}] audit: type=1400 audit(1700000000.123:45): apparmor=\"STATUS\" operation=\"profile_load\"",
    "[{t}] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode",
    "",
    "   ",
    "[{t}] Call Trace:\n  <TASK>\n  dump_stack_lvl+0x48/0x70\n  </TASK>",
    "[{t}] xhci_hcd 0000:00:14.0: xmlns and other words that are no keyword",
]
FAULTS = [
    "[{t}] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e",
    "[{t}] NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)",
    "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 43, pid=2924364, name=pt_main_thread, Ch 00000008",
    "Dec  2 11:38:47 node01 kernel: [{t}] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
    "[{t}] NVRM: The NVIDIA GPU 0000:b3:00.0\n               NVRM: (PCI ID: 10de:26b5) installed in this system has\n               NVRM: fallen off the bus and is not responding to commands.",
    "[{t}] NVRM: GPU at PCI:0000:02:00: GPU-00000000-0000-0000-0000-000000000001",
    "[{t}] NVRM:     RISC-V CSR State:",
    "[{t}] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:4 rank:0)",
    "[{t}] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 0000000000000000\n[{t}] mce: [Hardware Error]: TSC 2ac997e3063c3 \n[{t}] mce: [Hardware Error]: PROCESSOR 0:50663 TIME 947185249 SOCKET 0 APIC 0 microcode 7000019",
    "[{t}] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN",
    "[{t}] mlx5_core 0000:53:00.0 enp83s0f0np0: Link up",
    "[{t}] mlx5_core 0000:01:00.1: Port module event: module 1, Cable plugged",
    "4,17,{u},-;NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus\n SUBSYSTEM=pci\n DEVICE=+pci:0000:04:00.0",
    # keyword only in a continuation line: the whole record is a candidate
    "[{t}] some driver: multi-line message\n               NVRM: continued here",
    # keyword at the very end of a long line
    "[{t}] " + "x" * 3000 + " Xid",
]


def generated_log(seed: int, records: int = 3000) -> bytes:
    rnd = random.Random(seed)
    out = []
    t = 0.0
    for _ in range(records):
        t += rnd.random()
        tmpl = rnd.choice(FAULTS) if rnd.random() < 0.2 else rnd.choice(NOISE)
        out.append(tmpl.format(t=f"{t:12.6f}", u=int(t * 1e6)))
    text = "\n".join(out)
    if seed % 2:
        text += "\n"  # with and without a final newline
    return text.encode()


def scanned(data: bytes, force_find: bool) -> list[bytes]:
    return [data[s:e] for s, e in scan.candidate_records(data, force_find=force_find)]


# -- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("force_find", BACKENDS)
def test_same_records_as_a_line_loop(seed: int, force_find: bool) -> None:
    data = generated_log(seed)
    expected = naive_records(data)
    assert len(expected) > 300
    assert scanned(data, force_find) == expected


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"NVRM", id="keyword is the whole input"),
    pytest.param(b"  NVRM: continuation with no head", id="continuation first"),
    pytest.param(b"\n\n[ 1.0] EDAC MC0: x\n\n", id="blank lines around"),
    pytest.param(b"[ 1.0] a\r\n[ 2.0] Xid\r\n", id="CRLF"),
    pytest.param(b"[ 1.0] noise\n\t  \n  mlx5 in an orphaned continuation", id="blank-but-indented separator"),
    pytest.param(b"\x00\xff mce: \x00\n\x00Port: \xfe", id="binary bytes"),
])
@pytest.mark.parametrize("force_find", BACKENDS)
def test_edge_inputs(data: bytes, force_find: bool) -> None:
    assert scanned(data, force_find) == naive_records(data)


@pytest.mark.parametrize("chunk", [64, 100, 257, 4096])
def test_chunk_boundaries_do_not_split_or_repeat_records(chunk: int) -> None:
    data = generated_log(4)
    found: list[bytes] = []
    for buf, hi in iter_regions(io.BytesIO(data), chunk=chunk):
        found += [bytes(buf[s:e]) for s, e in scan.candidate_records(buf, hi=hi)]
    assert found == naive_records(data)


@pytest.mark.parametrize("data", [
    pytest.param(b"[ 1.0] " + b"a" * 40 + b"\n[ 2.0] NVRM: x\n  continued", id="ends in a continuation line"),
    pytest.param(b"[ 1.0] NVRM: head\n" + b"   " * 30 + b"NVRM: continuation\n[ 2.0] next", id="cut inside an indent"),
])
@pytest.mark.parametrize("chunk", [16, 64])
def test_chunked_tail_records(data: bytes, chunk: int) -> None:
    # The reader reuses its buffer: bytes past the data of the last read must never leak in.
    found: list[bytes] = []
    for buf, hi in iter_regions(io.BytesIO(data), chunk=chunk):
        found += [bytes(buf[s:e]) for s, e in scan.candidate_records(buf, hi=hi)]
    assert found == naive_records(data)


def test_backends_agree() -> None:
    if scan.backend() != "hyperscan":
        envneeds.need("hyperscan", "the [analysis] extra's scanner", expected=envneeds.ON_X86_64)
    data = generated_log(5)
    assert scanned(data, force_find=False) == scanned(data, force_find=True)


def _events_by_lines(data: bytes) -> list[dict]:
    ctx = TimeContext.make(tz="UTC")
    lines = data.decode("utf-8", "replace").split("\n")
    return [e.to_dict() for e in KernelLogParser().feed_lines(lines, ctx)]


def _events_by_scan(data: bytes) -> list[dict]:
    ctx = TimeContext.make(tz="UTC")
    return [e.to_dict() for e in events_from_stream(io.BytesIO(data), KernelLogParser(), ctx)]


def test_scanned_file_gives_the_events_of_the_line_loop() -> None:
    data = generated_log(6)
    by_lines = _events_by_lines(data)
    assert len(by_lines) > 300
    assert _events_by_scan(data) == by_lines


@pytest.mark.parametrize("case", sorted(p.stem for p in REAL_CASES.glob("*.log")))
def test_real_case_scanned_like_the_line_loop(case: str) -> None:
    data = (REAL_CASES / f"{case}.log").read_bytes()
    assert _events_by_scan(data) == _events_by_lines(data)
