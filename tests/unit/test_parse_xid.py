"""The lines the NVIDIA driver prints before a GPU's first Xid: ``GPU at PCI`` (the GPU's UUID)
and ``GPU Board Serial Number``.

Lines are built from the driver's format strings (NVIDIA/open-gpu-kernel-modules,
``src/nvidia/src/kernel/gpu/rc/kernel_rc.c``, ``_krcLogUuidOnce``, printed once per GPU and
driver load, then ``krcReportXid_IMPL``'s Xid line):
  ``"NVRM: GPU at PCI:%04x:%02x:%02x: %s\\n"``  (domain, bus, device, the GPU's UUID)
  ``"NVRM: GPU Board Serial Number: %s\\n"``    (the InfoROM's board serial; only when it has one)
  ``"NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s\\n"``
with values from a guest VM's log (kvm@vger.kernel.org, Nov 2022). Expected values are written
from those strings, never from parser output.
"""

from __future__ import annotations

import pytest

from nodewarden.parsing import xid
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser

UUID = "GPU-fcdeaa4c-664a-4de8-2e32-23e14628ce8c"
GPU_AT = f"NVRM: GPU at PCI:0000:00:06: {UUID}"
SERIAL = "NVRM: GPU Board Serial Number: 1651522000466"
XID119 = ("NVRM: Xid (PCI:0000:00:06): 119, pid='<unknown>', name=<unknown>, Timeout waiting for RPC "
          "from GSP! Expected function FREE (0x0 0x0).")


@pytest.mark.parametrize("message, expected", [
    (GPU_AT, ("0000:00:06.0", UUID)),
    ("NVRM: GPU at PCI:0000:1c:00: GPU-<uuid>", ("0000:1c:00.0", None)),  # redacted: the bus id only
    (SERIAL, None),
    ("NVRM: GPU at PCI:zz:1c:00: " + UUID, None),
])
def test_parse_gpu_at(message: str, expected: tuple[str, str | None] | None) -> None:
    assert xid.parse_gpu_at(message) == expected


def test_the_serial_line_is_no_event_and_the_xid_names_its_gpu() -> None:
    lines = [f"[  113.{669214 + i}] {m}" for i, m in enumerate((GPU_AT, SERIAL, XID119))]
    parser = KernelLogParser()
    events = list(parser.feed_lines(lines, TimeContext.make(tz="UTC")))
    assert [(e.kind, e.code, e.device, e.attrs.get("gpu_uuid")) for e in events] == [
        ("xid", 119, "0000:00:06.0", UUID)]
    assert parser.stats.unparsed == 0
    assert not any("serial" in k for k in events[0].attrs)
