"""PCIe AER lines of the kernel log (nodewarden.parsing.aer) and their assembly into ``pcie_aer`` /
``pcie_aer_recovery`` events (nodewarden.parsing.stream), plus the ``dmesg -H`` / delta stamps.

Every input line is built from a kernel format string, with its provenance next to it:
``drivers/pci/pcie/aer.c`` (``aer/aerdrv_errprint.c`` in v3.x kernels), ``drivers/pci/pcie/err.c``,
util-linux ``sys-utils/dmesg.c`` (``print_record``). The device prefix is ``dev_printk``'s
``"<driver> <dev_name>: "``; ``AER: `` is the ``dev_fmt`` aer.c and err.c define (newer kernels)
or part of the format (older). Expected values are the format's
arguments, never parser output.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodewarden.events import iso_utc
from nodewarden.parsing import aer
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record, parse_line
from nodewarden.parsing.lines import TRIGGERS
from nodewarden.parsing.stream import KernelLogParser

UTC = dt.timezone.utc
CTX = TimeContext.make(tz="UTC", reference=dt.datetime(2026, 1, 1, tzinfo=UTC))


def events(lines: list[str]) -> list:
    return list(KernelLogParser(source="file").feed_lines(lines, CTX))


def kinds(evs: list) -> list[tuple[str, str | None, str | None]]:
    return [(e.kind, e.device, e.category) for e in evs]


# -- one line: parse_line, by format string ------------------------------------------------------

LINES = [
    # aer_print_port_info, aerdrv_errprint.c (v3.10): "AER: %s%s error received: id=%04x" (Requester ID:
    # bus << 8 | devfn, in the port's domain); 0x00e0 = 00:1c.0, 0x0010 = 00:02.0.
    ("pcieport 0000:00:1c.0: AER: Corrected error received: id=00e0", "received",
     dict(driver="pcieport", pci="0000:00:1c.0", severity="corrected", severity_text="Corrected", multiple=False,
          source_device="0000:00:1c.0")),
    ("pcieport 0002:00:02.0: AER: Multiple Uncorrected (Non-Fatal) error received: id=0010", "received",
     dict(severity="non_fatal", multiple=True, source_device="0002:00:02.0")),
    # aer_print_port_info, aer.c (v5.x-6.7): "%s%s error received: %04x:%02x:%02x.%d" after dev_fmt "AER: "
    ("pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:03:00.0", "received",
     dict(severity="fatal", severity_text="Uncorrected (Fatal)", source_device="0000:03:00.0")),
    # aer.c after "PCI/AER: Use 'Correctable' and 'Uncorrectable' spec terms" and "Decode Requester ID" (v6.8):
    # "%s%s error message received from %04x:%02x:%02x.%d%s", aer_print_source details " (no details found)"
    ("pcieport 0000:00:1c.5: AER: Correctable error message received from 0000:00:1c.5", "received",
     dict(severity="corrected", severity_text="Correctable", details_found=True)),
    ("pcieport 0000:00:1c.0: AER: Multiple Uncorrectable (Non-Fatal) error message received from 0000:73:00.1",
     "received", dict(severity="non_fatal", severity_text="Uncorrectable (Non-Fatal)", multiple=True,
                      source_device="0000:73:00.1")),
    ("pci 0000:00:01.0: AER: Correctable error message received from 0000:02:00.0 (no details found)", "received",
     dict(driver="pci", details_found=False, source_device="0000:02:00.0")),
    ("pcieport 7657:00:02.0: AER: Uncorrectable (Fatal) error message received from 7657:01:00.0", "received",
     dict(pci="7657:00:02.0", source_device="7657:01:00.0")),
    ("pcieport 10000:e0:06.0: AER: Corrected error received: 10000:e1:00.0", "received",  # VMD: 5-digit domain
     dict(pci="10000:e0:06.0", source_device="10000:e1:00.0")),
    # aer_print_error, aerdrv_errprint.c (v3.10): "PCIe Bus Error: severity=%s, type=%s, id=%04x(%s)" via dev_err
    ("pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e0(Receiver ID)",
     "bus_error", dict(severity="corrected", type="Physical Layer", agent="Receiver ID", bus="PCIe")),
    ("pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Unaccessible, "
     "id=0010(Unregistered Agent ID)", "bus_error", dict(type="Unaccessible", agent="Unregistered Agent ID")),
    # aer.c (v5.x-6.x): "PCIe Bus Error: severity=%s, type=%s, (%s)" (pci_err with dev_fmt "AER: ", or pci_printk)
    ("nvidia 0000:01:00.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
     "bus_error", dict(driver="nvidia", agent="Transmitter ID", type="Data Link Layer")),
    ("mlx5_core 0000:17:00.1: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
     "bus_error", dict(driver="mlx5_core", severity="fatal", agent="Requester ID")),
    ("nvme 0000:5e:00.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Inaccessible, "
     "(Unregistered Agent ID)", "bus_error", dict(driver="nvme", type="Inaccessible")),
    # aer.c with aer_err_bus() (newest): "%s Bus Error: ..." with "PCIe" or "CXL"
    ("cxl_pci 0000:0d:00.0: CXL Bus Error: severity=Correctable, type=Transaction Layer, (Completer ID)",
     "bus_error", dict(bus="CXL", agent="Completer ID")),
    # "  device [%04x:%04x] error status/mask=%08x/%08x" (aer.c; " device" in aerdrv_errprint.c v3.10)
    ("xhci_hcd 0000:3e:00.0:   device [8086:15ec] error status/mask=00100000/00004000", "device",
     dict(driver="xhci_hcd", vendor_id=0x8086, device_id=0x15ec, status=0x00100000, mask=0x00004000)),
    ("snd_hda_intel 0000:03:00.1:  device [10de:10f0] error status/mask=00000001/00002000", "device",
     dict(vendor_id=0x10de, device_id=0x10f0, status=0x1, mask=0x2000)),
    # __aer_print_error: "   [%2d] %-22s%s" with " (First)" (aer.c, short names; v3.10 " [%2d]", long names)
    ("pcieport 0000:00:1c.0:    [ 0] RxErr                  (First)", "bit", dict(bit=0, name="RxErr", first=True)),
    ("pcieport 0000:00:03.0:    [ 5] SDES                  ", "bit", dict(bit=5, name="SDES", first=False)),
    ("pcieport 0000:00:1c.0:  [12] Replay Timer Timeout  ", "bit", dict(bit=12, name="Timeout", first=False)),
    ("pcieport 0000:00:03.0:  [14] Completion Timeout     (First)", "bit", dict(bit=14, name="CmpltTO", first=True)),
    ("pcieport 0000:00:1c.0: AER:    [20] UnsupReq               (First)", "bit", dict(bit=20, name="UnsupReq")),
    ("nvidia 0000:01:00.0:    [31] Unknown Error Bit", "bit", dict(bit=31, name="Unknown Error Bit")),
    # __print_tlp_header "  TLP Header: %08x %08x %08x %08x" (aer.c); v3.10 four %02x%02x%02x%02x groups
    ("pcieport 0000:00:1d.0: AER:   TLP Header: 34000000 08000052 00000000 00000000", "tlp",
     dict(tlp_header=[0x34000000, 0x08000052, 0x0, 0x0])),
    ("pcieport 0000:00:1d.0:  TLP Header: 4a000001 01000004 00000000 00000000", "tlp",
     dict(tlp_header=[0x4a000001, 0x01000004, 0x0, 0x0])),
    # "  Error of this Agent is reported first" (aer.c v6.x), " Error of this Agent(%04x) is reported first" (v3.10)
    ("mlx5_core 0000:01:00.1:   Error of this Agent is reported first", "reported_first", {}),
    ("mlx5_core 0000:01:00.1:  Error of this Agent(0101) is reported first", "reported_first", {}),
    # find_source_device: "can't find device of ID%04x" (older), "found no error details for ..." (v6.8 series)
    ("pcieport 0000:00:1c.5: AER: can't find device of ID00e5", "no_details", dict(source_device="0000:00:1c.5")),
    ("pcieport 0000:00:1c.5: AER: found no error details for 0000:00:1c.5", "no_details", {}),
    # err.c report_error_detected: "AER: Can't recover (no error_detected callback)" (v5.x, pci_info),
    # "can't recover (no error_detected callback)" (later, dev_fmt "AER: ")
    ("nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)", "recovery",
     dict(driver="nvidia", pci="0000:03:00.0", outcome="no_error_detected_callback")),
    ("thunderbolt 0000:0a:00.0: AER: Can't recover (no error_detected callback)", "recovery",
     dict(outcome="no_error_detected_callback")),
    # pcie_do_recovery: "AER: Device recovery failed/successful" (v5.x), lower case later
    ("pcieport 0000:00:03.0: AER: device recovery failed", "recovery", dict(outcome="recovery_failed")),
    ("pcieport 0000:00:1c.0: AER: Device recovery successful", "recovery", dict(outcome="recovered")),
    # aer_root_reset: "Root Port link has been reset" (older), "Root Port link has been reset (%d)";
    # "%s Port link has been reset (%d)" Root/Downstream (later); err.c default_reset_link (v5.x, debug)
    ("pcieport 0000:00:03.0: AER: Root Port link has been reset (0)", "recovery",
     dict(outcome="link_reset", port="Root", reset_status=0)),
    ("pcieport 0000:00:03.0: Root Port link has been reset", "recovery", dict(outcome="link_reset", port="Root")),
    ("pcieport 0000:40:01.1: AER: Downstream Port link has been reset (-25)", "recovery",
     dict(port="Downstream", reset_status=-25)),
    ("pcieport 0000:40:01.1: downstream link has been reset", "recovery", dict(port="Downstream")),
    # pci_print_aer (firmware-first, aer_recover_work_func): "aer_status: 0x%08x, aer_mask: 0x%08x",
    # "aer_layer=%s, aer_agent=%s", "aer_uncor_severity: 0x%08x"
    ("nvidia 0000:17:00.0: AER: aer_status: 0x00100000, aer_mask: 0x00000000", "aer_status",
     dict(status=0x00100000, mask=0x0)),
    ("nvidia 0000:17:00.0: AER: aer_layer=Transaction Layer, aer_agent=Requester ID", "aer_layer",
     dict(type="Transaction Layer", agent="Requester ID")),
    ("nvidia 0000:17:00.0: AER: aer_uncor_severity: 0x00062030", "aer_uncor_severity", dict(uncor_severity=0x62030)),
]


@pytest.mark.parametrize("line, kind, fields", LINES, ids=[f"{k}:{line[:60]}" for line, k, _ in LINES])
def test_format(line: str, kind: str, fields: dict) -> None:
    got = aer.parse_line(line)
    assert got is not None and got[0] == kind
    assert {k: got[1].get(k) for k in fields} == fields


@pytest.mark.parametrize("line", [
    "pcieport 0000:00:1c.0: AER: enabled with IRQ 122",  # aer_probe: service start, no error
    "acpi PNP0A08:00: _OSC: OS now controls [PCIeHotplug SHPCHotplug PME AER PCIeCapability LTR]",
    "pcieport 0000:00:1c.0: PME: Signaling with IRQ 122",
    "pcieport 0000:00:03.0:    [32] Bit33                  (First)",  # no bit 32 in a 32-bit register
    "pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=100004020/00000000",  # 9 hex digits
    "pcieport 0000:00:03.0: PCIe Bus Error: severity=Sort of bad, type=Transaction Layer, (Requester ID)",
    "PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",  # no device prefix
    "python[4711]: pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0",
])
def test_not_an_aer_line(line: str) -> None:
    assert aer.parse_line(line) is None


def test_long_names_map_to_the_short_names_of_the_same_bits() -> None:
    # aerdrv_errprint.c (v3.x) and aer.c (v6.x) tables, bit by bit: every long name is a short one.
    assert set(aer.LONG_NAMES.values()) <= set(aer.CORRECTABLE_ERRORS.values()) | set(aer.UNCORRECTABLE_ERRORS.values())
    assert aer.LONG_NAMES["Surprise Down Error"] == aer.UNCORRECTABLE_ERRORS[5] == "SDES"


# -- records: one event per error record ---------------------------------------------------------

# A v3.10 correctable record (aerdrv_errprint.c) at the root port, with an unrelated Xid that another
# CPU printed between its lines: the Xid neither ends the record nor joins it. A corrected record
# (no recovery follows) ends when its window passes, its device's next record starts, or at flush.
OLD_CORRECTED = [
    "[   10.000001] pcieport 0000:00:1c.0: AER: Corrected error received: id=00e0",
    "[   10.000002] pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e0(Receiver ID)",
    "[   10.000003] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=x, Graphics Exception",
    "[   10.000004] pcieport 0000:00:1c.0:   device [8086:a110] error status/mask=00000001/00002000",
    "[   10.000005] pcieport 0000:00:1c.0:    [ 0] Receiver Error         (First)",
]


def test_a_corrected_record_is_one_event_across_another_drivers_line() -> None:
    x, e = events(OLD_CORRECTED)
    assert (x.kind, x.code) == ("xid", 13)
    assert (e.kind, e.device, e.category, e.monotonic) == ("pcie_aer", "0000:00:1c.0", "corrected", 10.000001)
    assert {k: e.attrs[k] for k in ("severity", "type", "agent", "reporting_device", "source_device", "driver",
                                    "vendor_id", "device_id", "status", "mask", "errors", "first_error", "via")} == dict(
        severity="corrected", type="Physical Layer", agent="Receiver ID", reporting_device="0000:00:1c.0",
        source_device="0000:00:1c.0", driver="pcieport", vendor_id=0x8086, device_id=0xa110, status=0x1,
        mask=0x2000, errors=[{"bit": 0, "name": "RxErr", "first": True}], first_error="RxErr", via="kernel")
    assert e.raw.count("\n") == 3  # its four lines


@pytest.mark.parametrize("sev_text, severity", list(aer.SEVERITIES.items()))
@pytest.mark.parametrize("driver, vendor, precursor", [
    ("pcieport", "8086", False), ("mlx5_core", "15b3", False), ("nvidia", "10de", True),
    ("pci", "10de", True),  # an NVIDIA function no driver is bound to (vendor 0x10de)
    ("snd_hda_intel", "10de", True),  # the GPU's audio function: an NVIDIA function too
])
def test_every_severity_spelling_and_prefix(sev_text: str, severity: str, driver: str, vendor: str,
                                            precursor: bool) -> None:
    # aer_error_severity_string before and since v6.8; an uncorrected error on an NVIDIA function is
    # a GPU-lost precursor (the nvidia driver registers no AER callbacks).
    dev = "0000:41:00.0"
    (e,) = events([
        f"{driver} {dev}: AER: PCIe Bus Error: severity={sev_text}, type=Transaction Layer, (Requester ID)",
        f"{driver} {dev}:   device [{vendor}:2330] error status/mask=00004000/00000000",
    ])
    assert (e.attrs["severity"], e.attrs["severity_text"], e.attrs["driver"], e.device) == (severity, sev_text,
                                                                                          driver, dev)
    want = "gpu_lost_precursor" if precursor and severity != "corrected" else severity
    assert e.category == want
    # no bit line printed: the bits come from status & ~mask, named by the severity's table (bit 14 is
    # CorrIntErr in aer_correctable_error_string, CmpltTO in aer_uncorrectable_error_string)
    name = "CorrIntErr" if severity == "corrected" else "CmpltTO"
    assert e.attrs["errors"] == [{"bit": 14, "name": name, "first": False}]


def test_multiple_errors_under_one_received_line_are_one_event_per_device() -> None:
    # aer_process_err_devices prints one aer_print_error block per device with an error logged.
    evs = events([
        "[ 20.100000] pcieport 0000:00:01.0: AER: Multiple Correctable error message received from 0000:01:00.0",
        "[ 20.100001] nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Transmitter ID)",
        "[ 20.100002] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00001000/00000000",
        "[ 20.100003] nvidia 0000:01:00.0:    [12] Timeout               ",
        "[ 20.100004] mlx5_core 0000:01:00.1: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)",
        "[ 20.100005] mlx5_core 0000:01:00.1:   device [15b3:1021] error status/mask=00000001/00000000",
        "[ 20.100006] mlx5_core 0000:01:00.1:    [ 0] RxErr                  (First)",
        "[ 20.100007] mlx5_core 0000:01:00.1:   Error of this Agent is reported first",
    ])
    assert kinds(evs) == [("pcie_aer", "0000:01:00.0", "corrected"), ("pcie_aer", "0000:01:00.1", "corrected")]
    a, b = evs
    assert (a.attrs["multiple"], a.attrs["reporting_device"], a.attrs["first_error"]) == (True, "0000:00:01.0", None)
    assert (b.attrs["multiple"], b.attrs["reporting_device"], b.attrs["first_error"]) == (True, "0000:00:01.0", "RxErr")
    assert b.attrs["reported_first"] is True and b.monotonic == 20.100004


def test_a_fatal_record_keeps_its_recovery_lines_and_tlp_header() -> None:
    evs = events([
        "[ 50.100000] pcieport 0000:00:01.0: AER: Uncorrectable (Fatal) error message received from 0000:01:00.0",
        "[ 50.100001] nvidia 0000:01:00.0: AER: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Transaction Layer, "
        "(Receiver ID)",
        "[ 50.100002] nvidia 0000:01:00.0: AER:   device [10de:2330] error status/mask=00040000/00000000",
        "[ 50.100003] nvidia 0000:01:00.0: AER:    [18] MalfTLP                (First)",
        "[ 50.100004] nvidia 0000:01:00.0: AER:   TLP Header: 4a000001 01000004 00000000 00000000",
        "[ 50.900000] pcieport 0000:00:01.0: AER: Downstream Port link has been reset (0)",
        "[ 50.900001] pcieport 0000:00:01.0: AER: device recovery successful",
    ])
    assert kinds(evs) == [("pcie_aer", "0000:01:00.0", "gpu_lost_precursor"),
                          ("pcie_aer_recovery", "0000:00:01.0", "link_reset"),
                          ("pcie_aer_recovery", "0000:00:01.0", "recovered")]
    assert evs[0].attrs["tlp_header"] == [0x4a000001, 0x01000004, 0, 0]
    assert evs[0].attrs["affected_devices"] == []


def test_recovery_lines_past_the_window_are_events_of_their_own() -> None:
    # The record's recovery comes within 2 s; a "can't recover" 5 s later is another error's.
    evs = events([
        "[ 60.000000] mlx5_core 0000:17:00.1: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)",
        "[ 65.000000] nvidia 0000:18:00.0: AER: can't recover (no error_detected callback)",
    ])
    assert kinds(evs) == [("pcie_aer", "0000:17:00.1", "non_fatal"),
                          ("pcie_aer_recovery", "0000:18:00.0", "gpu_lost_precursor")]
    assert evs[0].attrs["affected_devices"] == []


def test_a_received_line_without_details_is_an_event() -> None:
    (e,) = events(["pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5",
                   "pcieport 0000:00:1c.5: AER: can't find device of ID00e5"])
    assert (e.kind, e.device, e.category, e.attrs["details_found"], e.attrs["type"]) == (
        "pcie_aer", "0000:00:1c.5", "corrected", False, None)


@pytest.mark.parametrize("severity_line, severity, category", [
    (None, "corrected", "corrected"),  # pci_print_aer prints aer_uncor_severity for uncorrectable errors only
    ("aer_uncor_severity: 0x00062030", "non_fatal", "non_fatal"),  # bit 20 not in the severity register
    ("aer_uncor_severity: 0x00162030", "fatal", "fatal"),  # bit 20 set: fatal
])
def test_firmware_first_print_without_its_ghes_record(severity_line: str | None, severity: str, category: str) -> None:
    lines = ["mlx5_core 0000:17:00.0: AER: aer_status: 0x00100000, aer_mask: 0x00000000",
             "mlx5_core 0000:17:00.0:    [20] UnsupReq               (First)",
             "mlx5_core 0000:17:00.0: AER: aer_layer=Transaction Layer, aer_agent=Requester ID"]
    if severity_line:
        lines.append("mlx5_core 0000:17:00.0: AER: " + severity_line)
    (e,) = events(lines)
    assert (e.kind, e.attrs["via"], e.attrs["severity"], e.category, e.attrs["type"], e.attrs["agent"]) == (
        "pcie_aer", "ghes", severity, category, "Transaction Layer", "Requester ID")


def test_firmware_first_ghes_record_and_its_aer_print_are_one_event() -> None:
    # ghes_handle_aer queues the CPER PCIe section for aer_recover_work_func, which prints it with
    # pci_print_aer and runs pcie_do_recovery: one error.
    evs = events([
        "[ 70.000001] {2}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1",
        "[ 70.000002] {2}[Hardware Error]: event severity: recoverable",
        "[ 70.000003] {2}[Hardware Error]:  Error 0, type: recoverable",
        "[ 70.000004] {2}[Hardware Error]:   section_type: PCIe error",
        "[ 70.000005] {2}[Hardware Error]:   port_type: 0, PCIe end point",
        "[ 70.000006] {2}[Hardware Error]:   device_id: 0000:17:00.0",
        "[ 70.000007] {2}[Hardware Error]:   vendor_id: 0x10de, device_id: 0x2330",
        "[ 70.010000] nvidia 0000:17:00.0: AER: aer_status: 0x00100000, aer_mask: 0x00000000",
        "[ 70.010001] nvidia 0000:17:00.0:    [20] UnsupReq               (First)",
        "[ 70.010002] nvidia 0000:17:00.0: AER: aer_layer=Transaction Layer, aer_agent=Requester ID",
        "[ 70.010003] nvidia 0000:17:00.0: AER: aer_uncor_severity: 0x00062030",
        "[ 70.020000] nvidia 0000:17:00.0: AER: can't recover (no error_detected callback)",
        "[ 70.020001] pcieport 0000:16:02.0: AER: device recovery failed",
    ])
    # the "can't recover" joined the record: its outcome (the record is the precursor)
    assert kinds(evs) == [("pcie_aer", "0000:17:00.0", "gpu_lost_precursor"),
                          ("pcie_aer_recovery", "0000:17:00.0", "no_error_detected_callback"),
                          ("pcie_aer_recovery", "0000:16:02.0", "recovery_failed")]
    a = evs[0].attrs
    assert (a["via"], a["severity"], a["ghes_severity"], a["vendor_id"], a["status"], a["first_error"],
            a["port_type"], a["affected_devices"], evs[0].monotonic) == (
        "ghes", "non_fatal", "recoverable", 0x10de, 0x00100000, "UnsupReq", 0, ["0000:17:00.0"], 70.000001)


# -- records of several ports, other lines between them, wrappers ---------------------------------

def test_two_root_ports_records_interleaved_are_two_events() -> None:
    # aer_isr runs per root port (drivers/pci/pcie/aer.c aer_isr / aer_isr_one_error): two ports'
    # printks interleave. aer_print_port_info prints the received line with the port's prefix and
    # the source id; aer_print_error prints the block with the affected device's (pci_err(dev, ...)).
    evs = events([
        "[  100.000001] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0",
        "[  100.000002] pcieport 0000:00:02.0: AER: Corrected error received: 0000:02:00.0",
        "[  100.000003] nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "[  100.000004] mlx5_core 0000:02:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
        "(Transmitter ID)",
        "[  100.000005] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
        "[  100.000006] mlx5_core 0000:02:00.0:   device [15b3:101d] error status/mask=00000080/00002000",
        "[  100.000007] nvidia 0000:01:00.0:    [ 0] RxErr                  (First)",
        "[  100.000008] mlx5_core 0000:02:00.0:    [ 7] BadDLLP                (First)",
    ])
    keys = ("reporting_device", "source_device", "driver", "type", "agent", "vendor_id", "device_id", "status",
            "mask", "errors", "first_error")
    got = {e.device: ({k: e.attrs[k] for k in keys}, e.monotonic, e.category) for e in evs}
    assert got == {
        "0000:01:00.0": (dict(reporting_device="0000:00:01.0", source_device="0000:01:00.0", driver="nvidia",
                              type="Physical Layer", agent="Receiver ID", vendor_id=0x10de, device_id=0x2330,
                              status=0x1, mask=0xe000, errors=[{"bit": 0, "name": "RxErr", "first": True}],
                              first_error="RxErr"), 100.000001, "corrected"),
        "0000:02:00.0": (dict(reporting_device="0000:00:02.0", source_device="0000:02:00.0", driver="mlx5_core",
                              type="Data Link Layer", agent="Transmitter ID", vendor_id=0x15b3, device_id=0x101d,
                              status=0x80, mask=0x2000, errors=[{"bit": 7, "name": "BadDLLP", "first": True}],
                              first_error="BadDLLP"), 100.000002, "corrected"),
    }
    assert len(evs) == 2


def test_a_devices_next_record_ends_its_previous_one() -> None:
    # One device, two records: the second received line for the same source starts the next.
    rx = "pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"
    block = ["nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
             "nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000041/00000000"]
    evs = events([f"[ 1.000001] {rx}", *(f"[ 1.000002] {b}" for b in block),
                  f"[ 1.000011] {rx}", *(f"[ 1.000012] {b}" for b in block)])
    assert [(e.device, e.monotonic, e.attrs["reporting_device"]) for e in evs] == [
        ("0000:01:00.0", 1.000001, "0000:00:01.0"), ("0000:01:00.0", 1.000011, "0000:00:01.0")]
    # status 0x41: bits 0 and 6 of the Correctable Error Status register (RxErr, BadTLP)
    assert [[b["name"] for b in e.attrs["errors"]] for e in evs] == [["RxErr", "BadTLP"]] * 2


def test_a_fatal_record_keeps_its_precursor_across_another_devices_record() -> None:
    # A fatal error at the GPU's root port, a corrected one of a NIC behind another port printed before
    # the GPU's "can't recover" (err.c report_error_detected, on the functions below the port): the
    # fatal record still gets the NVIDIA function that could not recover.
    evs = events([
        "[  500.000001] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0",
        "[  500.000005] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "(Requester ID)",
        "[  500.000009] pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000",
        "[  500.000013] pcieport 0000:00:03.0:    [14] CmpltTO                (First)",
        "[  500.000020] pcieport 0000:80:01.0: AER: Corrected error received: 0000:81:00.0",
        "[  500.000021] mlx5_core 0000:81:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "[  500.000022] mlx5_core 0000:81:00.0:   device [15b3:101d] error status/mask=00000001/00002000",
        "[  500.000023] mlx5_core 0000:81:00.0:    [ 0] RxErr                  (First)",
        "[  500.000921] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
        "[  501.050439] pcieport 0000:00:03.0: AER: Root Port link has been reset (0)",
        "[  501.050480] pcieport 0000:00:03.0: AER: device recovery failed",
    ])
    assert sorted(kinds(evs)) == sorted([
        ("pcie_aer", "0000:00:03.0", "gpu_lost_precursor"),
        ("pcie_aer_recovery", "0000:03:00.0", "no_error_detected_callback"),  # the record's: it is the precursor
        ("pcie_aer_recovery", "0000:00:03.0", "link_reset"), ("pcie_aer_recovery", "0000:00:03.0", "recovery_failed"),
        ("pcie_aer", "0000:81:00.0", "corrected")])
    fatal = next(e for e in evs if e.device == "0000:00:03.0" and e.kind == "pcie_aer")
    nic = next(e for e in evs if e.device == "0000:81:00.0")
    assert (fatal.attrs["severity"], fatal.attrs["affected_devices"], fatal.attrs["first_error"]) == (
        "fatal", ["0000:03:00.0"], "CmpltTO")
    assert (nic.attrs["affected_devices"], nic.attrs["reporting_device"]) == ([], "0000:80:01.0")


def test_recovery_lines_join_the_record_of_their_port() -> None:
    # Two ports' uncorrected records open at once: each port's recovery lines go to its own record.
    evs = events([
        "[ 7.000001] pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:00:01.0",
        "[ 7.000002] pcieport 0000:00:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:00:02.0",
        "[ 7.000003] pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)",
        "[ 7.000004] pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Completer ID)",
        "[ 7.000005] pcieport 0000:00:02.0: AER: device recovery successful",
        "[ 7.000006] pcieport 0000:00:01.0: AER: device recovery failed",
    ])
    assert [(e.kind, e.device, e.category) for e in evs] == [
        ("pcie_aer", "0000:00:02.0", "non_fatal"), ("pcie_aer_recovery", "0000:00:02.0", "recovered"),
        ("pcie_aer", "0000:00:01.0", "non_fatal"), ("pcie_aer_recovery", "0000:00:01.0", "recovery_failed")]
    assert [e.attrs["agent"] for e in evs if e.kind == "pcie_aer"] == ["Completer ID", "Requester ID"]


# The same stream through the agent's path (every /dev/kmsg record fed to KernelLogParser.feed, as
# nodewarden/agent/follower.py does) and the file path (the byte scanner's candidate records only,
# nodewarden/parsing/scan.py): lines without any trigger word sit between the lines of held records.
MIXED = [
    (100_000_001, "pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"),
    (100_000_003, "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"),
    (100_000_004, "usb 1-1: new high-speed USB device number 3 using xhci_hcd"),
    (100_000_005, "nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000"),
    (100_000_007, "nvidia 0000:01:00.0:    [ 0] RxErr                  (First)"),
    (200_000_001, "[Hardware Error]: Corrected error, no action required."),
    (200_000_002, "systemd[1]: Started Session 4 of user root."),
    (200_000_003, "[Hardware Error]: CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: "
                  "0xdc2040000000011b"),
    (200_000_004, "[Hardware Error]: Error Addr: 0x0000000313c7a020"),
    (200_000_005, "usb 1-1: USB disconnect, device number 3"),
    (200_000_006, "[Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01"),
    (200_000_007, "[Hardware Error]: Unified Memory Controller Ext. Error Code: 0, DRAM ECC error."),
    (200_000_008, "EDAC MC0: 1 CE on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x313c7a offset:0x20 grain:64 "
                  "syndrome:0x800)"),
    (200_000_009, "[Hardware Error]: cache level: L3/GEN, mem/io: MEM, mem-tx: RD, part-proc: RES (no timeout)"),
    (300_000_001, "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1"),
    (300_000_002, "{1}[Hardware Error]: event severity: corrected"),
    (300_000_003, "systemd[1]: Started Session 5 of user root."),
    (300_000_004, "{1}[Hardware Error]:  Error 0, type: corrected"),
    (300_000_005, "{1}[Hardware Error]:   section_type: memory error"),
    (300_000_006, "{1}[Hardware Error]:   physical_address: 0x0000001111111000"),
    (300_000_007, "{1}[Hardware Error]:   error_type: 2, single-bit ECC"),
    (303_500_000, "systemd[1]: Started Session 6 of user root."),  # past every window
    (303_600_000, "pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"),
    (303_600_001, "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"),
    (303_600_002, "usb 1-1: new high-speed USB device number 4 using xhci_hcd"),
    (303_600_003, "nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000040/0000e000"),
]


def _view(e) -> tuple:
    return (e.kind, e.device, e.category, e.monotonic, {k: v for k, v in e.attrs.items() if k != "seq"})


def test_the_agent_path_and_the_file_path_give_the_same_events() -> None:
    from nodewarden.logfiles import events_from_bytes

    agent = KernelLogParser(source="kmsg")
    live = []
    for seq, (usec, msg) in enumerate(MIXED, start=1):
        live.extend(agent.feed(parse_kmsg_record(f"3,{seq},{usec},-;{msg}", CTX)))
    live.extend(agent.flush())
    text = "".join(f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {msg}\n" for usec, msg in MIXED)
    filed = list(events_from_bytes(text.encode(), KernelLogParser(source="file"), CTX))
    assert [_view(e) for e in live] == [_view(e) for e in filed]
    assert [(e.kind, e.device, e.monotonic) for e in live] == [
        ("pcie_aer", "0000:01:00.0", 100.000001), ("cpu_ecc", "mc0/mc#0csrow#1channel#3", 200.000008),
        ("cpu_ecc", None, 300.000001), ("pcie_aer", "0000:01:00.0", 303.6)]
    first, umc, _ghes, second = live
    # the USB line between the PCIe Bus Error line and its detail lines ended nothing: the record has them
    assert (first.attrs["status"], first.attrs["mask"], first.attrs["errors"]) == (
        0x1, 0xe000, [{"bit": 0, "name": "RxErr", "first": True}])
    assert (umc.attrs["mca_addr"], umc.attrs["mca_ipid"], umc.attrs["mca_bank"]) == (0x313c7a020, 0x9600350f00, 18)
    assert second.attrs["errors"] == [{"bit": 6, "name": "BadTLP", "first": False}]  # status 0x40: bit 6


def test_each_aer_line_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    parse = aer.parse_line
    monkeypatch.setattr(aer, "parse_line", lambda m: calls.append(m) or parse(m))
    lines = [f"[ {100 + i}.000001] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"
             for i in range(3)]
    lines += ["[ 103.000002] nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
              "(Receiver ID)",
              "[ 103.000003] NVRM: Xid (PCI:0000:01:00): 13, pid=1, name=x, Graphics Exception"]
    assert [e.kind for e in events(lines)] == ["pcie_aer", "pcie_aer", "xid", "pcie_aer"]  # 3 records, the Xid
    assert len(calls) == 4  # the four AER lines, each once; the Xid line is no AER line


# gpud's scanner logs the kernel line it matched under "line", its own note under "msg".
GPUD = '{"level":"warn","ts":"2025-01-28T06:47:16Z","msg":"known aer","line":"kern  :err   : %s %s"}'


def test_a_kernel_record_in_a_json_wrappers_line_key_is_read() -> None:
    (e,) = events([
        GPUD % ("2025-01-25T10:34:54,859532+00:00",
                "pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0"),
        GPUD % ("2025-01-25T10:34:54,859540+00:00",
                "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
                "(Requester ID)"),
        GPUD % ("2025-01-25T10:34:54,859544+00:00",
                "pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000"),
        GPUD % ("2025-01-25T10:34:54,859548+00:00", "pcieport 0000:00:03.0:    [14] CmpltTO                (First)"),
    ])
    # the kernel's stamp (dmesg --time-format iso), not the wrapper's "ts"
    assert (e.kind, e.device, e.category, iso_utc(e.time)) == ("pcie_aer", "0000:00:03.0", "fatal",
                                                               "2025-01-25T10:34:54.859532Z")
    assert {k: e.attrs[k] for k in ("severity", "type", "agent", "reporting_device", "source_device", "vendor_id",
                                    "device_id", "status", "mask", "errors")} == dict(
        severity="fatal", type="Transaction Layer", agent="Requester ID", reporting_device="0000:00:03.0",
        source_device="0000:00:03.0", vendor_id=0x8086, device_id=0x6f08, status=0x4020, mask=0,
        errors=[{"bit": 14, "name": "CmpltTO", "first": True}])


@pytest.mark.parametrize("word", TRIGGERS)
def test_a_json_wrapper_unwraps_a_line_holding_any_trigger_word(word: str) -> None:
    # One list decides both which records the stream reads and which wrapped value is the kernel line:
    # a word added for a new fault kind unwraps too.
    rec = parse_line(json.dumps({"level": "warn", "msg": "known", "line": f"kern  :err   : x {word} y"}), CTX)
    assert (rec.fmt, rec.message, rec.facility, rec.level) == ("json", f"x {word} y", "kern", "err")


# -- bad input: never raises, malformed lines are counted -----------------------------------------

def test_a_truncated_record_is_still_its_event() -> None:
    # The input ends after the PCIe Bus Error line: the error happened, its details are lost.
    p = KernelLogParser()
    evs = list(p.feed_lines(["pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0",
                             "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                             "type=Transaction Layer, (Requester ID)"], CTX))
    assert kinds(evs) == [("pcie_aer", "0000:00:03.0", "fatal")]
    assert (evs[0].attrs["status"], evs[0].attrs["errors"], p.stats.unparsed) == (None, [], 0)


def test_a_record_split_across_two_inputs() -> None:
    # A rotated file ends inside the record: the head is an event, the tail lines (another stream)
    # are counted as unparsed, none is lost.
    head = ["pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
            "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)"]
    tail = ["pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000",
            "pcieport 0000:00:03.0:    [ 5] SDES                  ",
            "pcieport 0000:00:03.0:    [14] CmpltTO                (First)"]
    assert kinds(events(head)) == [("pcie_aer", "0000:00:03.0", "fatal")]
    p = KernelLogParser()
    evs = list(p.feed_lines(tail, CTX))
    assert [e.kind for e in evs] == ["unparsed"] * 3 and p.stats.unparsed == 3
    assert {e.attrs["family"] for e in evs} == {"aer"}


def test_a_bit_line_of_another_device_is_not_folded() -> None:
    evs = events(["nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
                  "mlx5_core 0000:02:00.0:    [ 0] RxErr                  (First)"])
    assert [e.kind for e in evs] == ["unparsed", "pcie_aer"]
    assert evs[1].attrs["errors"] == []


@pytest.mark.parametrize("line", [
    "pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=1ffffffff/00000000",  # status past 32 bits
    "pcieport 0000:00:03.0:    [99] CmpltTO                (First)",  # a bit past 31
    "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer",  # cut
    "pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03",  # BDF cut
])
def test_malformed_aer_lines_are_unparsed(line: str) -> None:
    p = KernelLogParser()
    evs = list(p.feed_lines([line], CTX))
    assert [(e.kind, e.attrs["family"]) for e in evs] == [("unparsed", "aer")] and p.stats.unparsed == 1


def test_held_records_report_their_kmsg_seqs_until_released() -> None:
    # /dev/kmsg records (prio,seq,usec,flags;msg): the agent must not move its cursor past them.
    p = KernelLogParser(source="kmsg")
    recs = [parse_kmsg_record(t, CTX) for t in (
        "3,101,50100000,-;pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0",
        "3,102,50100001,-;pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
        "(Requester ID)",
    )]
    assert [e for r in recs for e in p.feed(r)] == []
    assert p.pending_seqs() == (101, 102)
    assert [e.attrs["seq"] for e in p.flush()] == [101] and p.pending_seqs() == ()


AER_PIECES = st.sampled_from([
    "pcieport 0000:00:03.0: ", "nvidia 0000:03:00.0: ", "AER: ", "Multiple ", "Uncorrected (Fatal)", "Corrected",
    " error received: ", "0000:00:03.0", "id=00e0", "PCIe Bus Error: severity=", ", type=", "Transaction Layer",
    ", (", "Requester ID", ")", "  device [8086:6f08] error status/mask=", "00004020", "/", "   [14] ", "CmpltTO",
    " (First)", "can't recover (no error_detected callback)", "device recovery failed", "TLP Header: ", "9" * 40,
    "\n", " ", "[  +0.000844] ", "[Jan21 10:22] ", "{1}[Hardware Error]: ", "aer_status: 0x", "²",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(AER_PIECES, max_size=12).map("".join), max_size=8))
def test_the_stream_never_raises_on_aer_text(lines: list[str]) -> None:
    for line in lines:
        aer.parse_line(line)
    for e in KernelLogParser().feed_lines(lines, CTX):
        e.to_json()
        assert e.kind != "unparsed" or e.attrs["family"] != "error", e.attrs


# -- dmesg -H / --time-format=delta stamps --------------------------------------------------------

@pytest.mark.parametrize("line, fields", [
    # util-linux print_record, DMESG_TIMEFTM_RELTIME: "[  %+8.06f] " (delta < 10 s), "[ %+9.06f] "
    ("[  +0.000844] nvidia 0000:03:00.0: AER: x", dict(fmt="dmesg_delta", raw_time="+0.000844", time=None,
                                                       time_kind="none", monotonic=None,
                                                       message="nvidia 0000:03:00.0: AER: x")),
    ("[ +12.345678] msg", dict(fmt="dmesg_delta", raw_time="+12.345678", time=None)),
    ("[+0.000001]msg", dict(fmt="dmesg_delta", raw_time="+0.000001", message="msg")),  # older builds, no blanks
    # DMESG_TIMEFTM_DELTA: "[<%12.06f>] "
    ("[<    0.000844>] msg", dict(fmt="dmesg_delta", raw_time="<0.000844>", time=None, message="msg")),
    # the reltime anchor at a minute change: short_ctime "%b%d %H:%M", to the minute (year from the reference)
    ("[Jan21 10:22] msg", dict(fmt="dmesg_reltime", raw_time="Jan21 10:22", time="2025-01-21T10:22:00Z",
                               time_kind="wall", message="msg")),
    # DMESG_TIMEFTM_TIME_DELTA "[%5ld.%06ld <%12.06f>] " and CTIME_DELTA "[%s <%12.06f>] ": the stamp counts
    ("[ 1234.567890 <    0.000844>] msg", dict(fmt="dmesg+delta", monotonic=1234.56789, time_kind="mono",
                                               message="msg")),
    ("[Fri Aug 30 11:43:09 2024 <    0.000844>] msg", dict(fmt="dmesg_ctime+delta", time="2024-08-30T11:43:09Z",
                                                          message="msg")),
    # --decode with -H
    ("kern  :err   : [  +0.000004] msg", dict(fmt="decode+dmesg_delta", facility="kern", level="err",
                                             raw_time="+0.000004", message="msg")),
])
def test_relative_dmesg_stamps(line: str, fields: dict) -> None:
    rec = parse_line(line, CTX)
    got = {k: getattr(rec, k) for k in fields}
    got["time"] = iso_utc(rec.time) if "time" in fields else None
    assert {k: got[k] for k in fields} == fields


def test_deltas_after_an_anchor_give_no_time() -> None:
    # The anchor is printed to the minute: deltas added to it would be off by up to 59 s.
    evs = events(["[Jan21 10:22] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0",
                  "[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                  "type=Transaction Layer, (Requester ID)",
                  "[  +0.900000] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)"])
    assert [(e.kind, iso_utc(e.time), e.raw_time) for e in evs] == [
        ("pcie_aer", "2025-01-21T10:22:00Z", "Jan21 10:22"),
        ("pcie_aer_recovery", None, "+0.900000")]
    assert evs[0].category == "gpu_lost_precursor" and evs[0].attrs["affected_devices"] == ["0000:03:00.0"]


# -- the precursor rule, one place for the kernel log, the sysfs collector and the agent ----------

@pytest.mark.parametrize("severity, driver, vendor, cant_recover, want", [
    ("fatal", "pcieport", 0x8086, False, False),  # P-101's Broadwell root port [8086:6f08] alone
    ("fatal", "pcieport", 0x8086, True, True),    # ... and its nvidia function printed "can't recover"
    ("non_fatal", "nvidia", 0x10DE, False, True),  # an uncorrected error on the GPU itself
    ("fatal", "pci", 0x10DE, False, True),          # an NVIDIA function no driver is bound to
    ("fatal", None, 0x10DE, False, True),           # sysfs: the vendor only
    ("non_fatal", "mlx5_core", 0x15B3, False, False),
    ("corrected", "nvidia", 0x10DE, True, False),   # a corrected error starts no recovery
    ("unknown", "nvidia", 0x10DE, False, False),    # a GHES record of no known severity
    (None, None, None, False, False),
])
def test_is_precursor(severity, driver, vendor, cant_recover: bool, want: bool) -> None:
    assert aer.is_precursor(severity, driver, vendor, cant_recover) is want


@pytest.mark.parametrize("driver, outcome, alone", [
    ("nvidia", "no_error_detected_callback", "gpu_lost_precursor"),
    ("nvidia", "recovery_failed", "gpu_lost_precursor"),
    ("nvidia", "link_reset", "link_reset"),
    ("snd_hda_intel", "no_error_detected_callback", "no_error_detected_callback"),
    ("pcieport", "recovery_failed", "recovery_failed"),
])
def test_recovery_category_alone_and_in_a_record(driver: str, outcome: str, alone: str) -> None:
    # a line that joined its record has its outcome: the record is the precursor (one per error)
    f = {"driver": driver, "pci": "0000:03:00.0", "outcome": outcome}
    assert (aer.recovery_category(f), aer.recovery_category(f, in_record=True)) == (alone, outcome)
