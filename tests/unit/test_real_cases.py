"""The reference corpus of real kernel-log lines, case by case: the events each case must give
and the fields the corpus says a correct parser extracts from it.

Inputs are the files under ``tests/fixtures/real_cases/`` (one per corpus case, verbatim; see
MANIFEST.md there). Expected values are written from the corpus text and the driver/kernel
formats, never from parser output: hex fields are written as the line prints them.

Year-less stamps (RFC 3164, journalctl short) take their year from :data:`REFERENCE`, as they
would from a log file's mtime; stamps without an offset are read as UTC.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nodewarden.events import iso_utc
from nodewarden.parsing.envelope import TimeContext, parse_line
from nodewarden.parsing.stream import KernelLogParser

UTC = dt.timezone.utc
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real_cases"
REFERENCE = dt.datetime(2026, 1, 1, tzinfo=UTC)
UUID1 = "GPU-00000000-0000-0000-0000-000000000001"


# -- loader ------------------------------------------------------------------------------------

def load_case(name: str) -> list[str]:
    """The physical lines of one case file (trailing blanks kept)."""
    return (FIXTURES / f"{name}.log").read_text(encoding="utf-8").split("\n")


def parse_lines(lines: list[str], tz: str = "UTC") -> list:
    ctx = TimeContext.make(tz=tz, reference=REFERENCE)
    return list(KernelLogParser(source="file").feed_lines(lines, ctx))


def parse_case(name: str, tz: str = "UTC") -> list:
    return parse_lines(load_case(name), tz)


def view(e) -> dict:
    """One flat dict per event: the event's own fields over its attrs."""
    d = dict(e.attrs)
    d.update(kind=e.kind, xid=e.code, time=iso_utc(e.time), time_kind=e.time_kind,
             monotonic=e.monotonic, host=e.host, device=e.device, category=e.category)
    return d


def check_events(events: list, expected: list[dict]) -> None:
    """Same number of events, in order; each has every expected field (None = absent)."""
    got = [view(e) for e in events]
    assert len(got) == len(expected), f"{len(got)} events: {got}"
    for i, (g, exp) in enumerate(zip(got, expected)):
        wrong = {k: {"expected": v, "got": g.get(k)} for k, v in exp.items() if g.get(k) != v}
        assert not wrong, f"event {i}: {wrong}"


def X(**kw) -> dict:  # noqa: N802 - reads like the table it builds
    return {"kind": "xid", **kw}


# -- A. Xid lines ------------------------------------------------------------------------------

P43 = "0000:43:00.0"
PCB = "0000:cb:00.0"
P19 = "0000:19:00.0"
TIMEOUT = "CTX SWITCH TIMEOUT"

XID_CASES = [
    pytest.param("X-001", [
        X(xid=13, pci_bus_id=P43, pid=None, process=None, time_kind="mono", monotonic=93297.027938, time=None,
          payload="Graphics Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174"),
        X(xid=13, pci_bus_id=P43, pid=None, process=None, monotonic=93297.029837),
        X(xid=13, pci_bus_id=P43, pid=None, process=None, monotonic=93297.031618),
    ], id="X-001 Xid 13 burst, pid='<unknown>'"),
    pytest.param("X-002", [  # the nvidia-peermem line first is not an Xid
        X(xid=13, pci_bus_id=PCB, pid=None, process=None, gpc=7, tpc=7, sm=0, time="2024-08-30T11:43:09Z",
          time_kind="wall"),
        X(xid=13, pci_bus_id=PCB, gpc=7, tpc=7, sm=0, time="2024-08-30T11:43:09Z"),
        X(xid=13, pci_bus_id=PCB, gpc=None, time="2024-08-30T11:43:09Z"),
        X(xid=109, pci_bus_id=PCB, pid=1797828, process="pt_main_thread", channel=0x8, error_string=TIMEOUT,
          info=0x58005, time="2024-08-30T11:43:14Z"),
    ], id="X-002 dmesg -T, Xid 13 GPC/TPC/SM and 109"),
    pytest.param("X-004", [
        X(xid=13, pci_bus_id="0000:01:00.0", pid=2183, process=None, host="node01", time="2025-10-20T18:54:04Z"),
        X(xid=13, pci_bus_id="0000:01:00.0", pid=2183, process=None, host="node01"),
        X(xid=13, pci_bus_id="0000:01:00.0", pid=25555, process=None, host="node01"),
    ], id="X-004 syslog, pid= without name="),
    pytest.param("X-006", [
        X(xid=13, pci_bus_id="0000:38:00.0", pid=None, process=None, time="2025-01-21T04:41:44.283302Z",
          gpc=8, tpc=5, sm=1),
        X(xid=13, pci_bus_id="0000:38:00.0", time="2025-01-21T04:41:44.283575Z", gpc=9, tpc=1, sm=1),
        X(xid=43, pci_bus_id="0000:38:00.0", pid=2924364, process="pt_main_thread", channel=0x8,
          time="2025-01-21T04:41:44.287197Z"),
    ], id="X-006 dmesg --decode --time-format iso"),
    pytest.param("X-007", [
        X(xid=31, pci_bus_id="0000:01:00.0", pid=None, time_kind="none", channel=0x5a, intr=0x10000000,
          mmu_engine="GRAPHICS", mmu_client="GPCCLIENT_T1_1", mmu_fault_address=0x0_00000000,
          mmu_fault_type="FAULT_PDE", mmu_access_type="READ", gpu_uuid=None),
        X(xid=31, monotonic=31543.449443, channel=0x3a, mmu_engine="GRAPHICS", mmu_client="GPCCLIENT_T1_3",
          mmu_fault_address=0x17_00592000, mmu_fault_type="FAULT_PDE", mmu_access_type="READ", gpu_uuid=UUID1),
        X(xid=13, monotonic=31609.615230, pid=None, gpu_uuid=UUID1),
        X(xid=13, monotonic=31609.615374, gpu_uuid=UUID1),
        X(xid=32, monotonic=31609.615516, channel=0x52, intr=0x02000000, gpu_uuid=UUID1),
    ], id="X-007 418-era Xid 31/13/32, GPU-at-PCI UUID"),
    pytest.param("X-008", [
        X(xid=31, pci_bus_id="0000:00:06.0", pid=2708, process=None, mmu_engine="NVDEC", channel=0x3d),
    ], id="X-008 pid= without name=, NVDEC, bare"),
    pytest.param("X-009", [  # "GPU at PCI:...: GPU-UID" is a hand redaction: no UUID learnt
        X(xid=31, pci_bus_id="0000:08:00.0", pid=169800, process="chrome", mmu_engine="CE0",
          mmu_fault_type="FAULT_PTE", mmu_access_type="VIRT_READ", gpu_uuid=None),
        X(xid=31, pci_bus_id="0000:08:00.0", pid=174421, process="chrome", mmu_engine="CE0",
          mmu_fault_type="FAULT_PTE", mmu_access_type="VIRT_READ", gpu_uuid=None),
    ], id="X-009 pid+name, GPU-UID placeholder"),
    pytest.param("X-011", [
        X(xid=32, pci_bus_id="0000:01:00.0", channel=0x0, intr=0x4000, monotonic=24128.828315),
        X(xid=32, pci_bus_id="0000:01:00.0", channel=0x0, intr=0x4000, monotonic=24128.828608),
        X(xid=31, pci_bus_id="0000:01:00.0", channel=0x3, engmask=0x101, intr=0x10000000),
    ], id="X-011 2015 engmask and Channel ID forms"),
    pytest.param("X-014", [
        X(xid=16, pci_bus_id="0000:01:00.0", head=0x0, head_count=0x0, gpu_uuid=UUID1),
        X(xid=16, pci_bus_id="0000:01:00.0", head=0x0, head_count=0x1, gpu_uuid=UUID1),
        X(xid=8, pci_bus_id="0000:01:00.0", channel=0x0, gpu_uuid=UUID1),
    ], id="X-014 r304 Xid without PCI: prefix"),
    pytest.param("X-016", [  # the blank lines are not records
        X(xid=109, pci_bus_id="0000:05:00.0", monotonic=3947.310904, channel=0x8, error_string=TIMEOUT,
          info=0x4ac003, gpu_uuid=UUID1),
        X(xid=109, channel=0xa, info=0x50c003, monotonic=3952.499874),
        X(xid=44, channel=0xa, intr=0x0, monotonic=3952.557659),
        X(xid=31, channel=0xa, mmu_engine="GRAPHICS", mmu_client="GPCCLIENT_GCC", mmu_access_type="VIRT_READ"),
    ], id="X-016 Xid 44/109/31, blank lines"),
    pytest.param("X-018", [  # the RmInitAdapter lines of the other GPU give no Xid
        X(xid=48, pci_bus_id="0000:07:00.0", host="node01", monotonic=219.470994, time="2025-12-02T11:38:47Z",
          phys_addr=0x7fffa8860, partition=7, subpartition=1),
        X(xid=64, pci_bus_id="0000:07:00.0", host="node01", monotonic=219.471050, page=0x7fffa8),
    ], id="X-018 DBE 48 and page-retirement 64, syslog+mono"),
    pytest.param("X-019", [  # 48 -> 63 -> 94: the per-channel 94 lines fold into the summary line
        X(xid=48, pci_bus_id=P19, phys_addr=0x12bac1c3e0, time="2024-11-15T12:02:03.470068Z"),
        X(xid=63, pci_bus_id=P19, row_address=0x00000012bac1c3e0, time="2024-11-15T12:02:03.498753Z"),
        X(xid=94, pci_bus_id=P19, containment="contained", unit="SM", location=[0x1], reset_required=False,
          drain_reset_required=False, channels=[0x8, 0x9, 0xf], pids=[1248209],
          time="2024-11-15T12:02:03.506595Z"),
    ], id="X-019 DBE->row remap->contained cascade"),
    pytest.param("X-021", [  # the second line ("device marked unhealthy") repeats it: no event
        X(xid=69, pci_bus_id=None, device=UUID1, gpu_uuid=UUID1, via="k8s-device-plugin",
          time="2020-08-10T19:09:42Z", category="uncorrectable"),
    ], id="X-021 k8s-device-plugin XidCriticalError"),
    pytest.param("X-022", [
        X(xid=74, pci_bus_id="0003:00:00.0", pid=None, process=None, link=14,
          registers=[0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0], monotonic=449410.332316),
    ], id="X-022 NVLink 74, domain 0003, link glued to registers"),
    pytest.param("X-023", [  # no Xid line: the three-line text form is Xid 79
        X(xid=79, pci_bus_id="0000:b3:00.0", pci_ids="10de:26b5", monotonic=1843.308145, category="uncorrectable"),
    ], id="X-023 text-only fallen off the bus"),
    pytest.param("X-025", [  # "hello" (syslog:emerg) is not a fault line
        X(xid=79, pci_bus_id="0000:04:00.0", facility="syslog", injected=True,
          time="2025-05-27T04:18:56.089671Z"),
    ], id="X-025 injected Xid 79 with syslog facility"),
    pytest.param("X-026", [
        X(xid=94, pci_bus_id="0000:01:00.0", gpu_instance=5, pid=7194, containment="contained",
          unit="CE User Channel", location=[0x9], reset_required=False, drain_reset_required=False),
        X(xid=94, pci_bus_id="0000:01:00.0", gpu_instance=None, pid=7062, unit="CE User Channel"),
        X(xid=95, pci_bus_id="0000:01:00.0", pid=7062, containment="uncontained", unit="LTC TAG",
          location=[0x2, 0x1], reset_required=True, drain_reset_required=False),
    ], id="X-026 Xid 94/95 driver format, MIG GPU-I"),
    pytest.param("X-027", [
        X(xid=95, pci_bus_id="0000:37:00.0", pid=5171, containment="uncontained", unit="FBHUB", location=None,
          reset_required=True, drain_reset_required=False),
    ], id="X-027 Xid line glued to ticket text"),
    pytest.param("X-028", [
        X(xid=109, pci_bus_id="0000:0b:00.0", pid=11263, process="Renderer", channel=0x20, info=0xac00d,
          error_string=TIMEOUT, gpu_uuid=UUID1),
        X(xid=109, pid=11263, process="Renderer", channel=0x20, info=0xac00d, monotonic=11272.551321),
    ], id="X-028 Xid 109 name=Renderer"),
    pytest.param("X-029", [
        X(xid=109, pci_bus_id="0000:26:00.0", pid=55914, process="re8.exe", channel=0x46, info=0x2c02c,
          error_string=TIMEOUT),
    ], id="X-029 trailing blanks, exe name"),
    pytest.param("X-031", [
        X(xid=119, pci_bus_id="0000:61:00.0", pid=1365232, process="nvidia-smi", rpc_function=76,
          rpc_function_name="GSP_RM_CONTROL", rpc_args=[0x20801348, 0x410], time="2023-03-03T04:44:24Z"),
        X(xid=119, pid=1365232, rpc_function=103, rpc_function_name="GSP_RM_ALLOC", rpc_args=[0x0, 0x6c],
          time="2023-03-03T04:45:09Z"),
        X(xid=119, pid=905052, process="python", rpc_function=76, rpc_args=[0x20801702, 0x4],
          time="2023-03-06T21:37:31Z"),
    ], id="X-031 Xid 119 older wording"),
    pytest.param("X-032", [  # RPC history rows and the kernel stack are not Xids
        X(xid=119, pci_bus_id="0000:9b:00.0", pid=2024380, process="nvidia-smi", rpc_timeout_s=6, gsp="GPU4",
          rpc_function=103, rpc_function_name="GSP_RM_ALLOC", rpc_args=[0x2081, 0x4], gpu_uuid=UUID1,
          sampled_1_in=None, time="2025-02-23T16:24:18Z"),
        X(xid=119, pid=2024380, rpc_function=10, rpc_function_name="FREE", rpc_args=[0xa55a0210, 0x0],
          sampled_1_in=None, time="2025-02-23T16:24:24Z"),
        # "Rate limiting GSP RPC error prints ... (printing 1 of every 30)": later 119s are samples
        X(xid=119, pid=1263500, process="cache_mgr_main", rpc_function=76, sampled_1_in=30),
        X(xid=119, pid=1240590, process="gpud", rpc_function=76, rpc_args=[0x20803032, 0x58c], sampled_1_in=30),
    ], id="X-032 Xid 119 newer wording, RPC history, rate limit"),
    pytest.param("X-034", [  # RmInitAdapter of 0000:41:00.0 and "currently unavailable" give no Xid
        X(xid=119, pci_bus_id="0000:61:00.0", pid=123417, process="nv-hostengine", gsp="GPU0",
          rpc_function=10, rpc_function_name="FREE", rpc_args=[0xc0000005, 0x0], sampled_1_in=None),
        X(xid=119, pci_bus_id="0000:61:00.0", pid=126121, process="nvidia-smi", rpc_function=76, sampled_1_in=30),
    ], id="X-034 Xid 119 name=nv-hostengine"),
    pytest.param("X-035", [  # the CrashCat banner and the RISC-V register dump are not events
        X(xid=120, pci_bus_id="0000:02:00.0", pid=None, process=None, host="node01", gsp_cause=0xd,
          gsp_pc=0x140ca4a, gsp_partition="4#0", gsp_task=3, gpu_uuid=UUID1, time="2025-04-19T13:16:41Z"),
    ], id="X-035 Xid 120 GSP task exception"),
    pytest.param("X-037", [
        X(xid=145, pci_bus_id=None, device=None, link=11, nvlink_unit="RLW_RXPIPE", nvlink_severity="nonfatal",
          registers=None),
        X(xid=137, pci_bus_id=None, link=11),
    ], id="X-037 redacted PCI id (PCI:...)"),
    pytest.param("X-038", [  # err-status is the 2nd register word
        X(xid=144, pci_bus_id="0000:01:00.0", nvlink_unit="SAW_MVB", nvlink_severity="nonfatal", nvlink_xc="XC0",
          nvlink_instance="i0", link=0, registers=[0x1, 0x8, 0x0, 0x0, 0x0, 0x0]),
    ], id="X-038 Xid 144 six registers"),
    pytest.param("X-039", [
        X(xid=149, pci_bus_id="0018:01:00.0", pid=None, nvlink_unit="NETIR_BER_EVENT", nvlink_xc="XC0", link=3),
        X(xid=145, pci_bus_id="0018:01:00.0", pid=876767, process="ray::WorkerDict", nvlink_unit="RLW_RXPIPE",
          nvlink_xc="XC0", link=13),
        X(xid=145, pci_bus_id="0019:01:00.0", pid=None, process=None, nvlink_unit="RLW_SRC_TRACK",
          nvlink_xc="XC1", link=12),
        X(xid=145, pci_bus_id="0008:01:00.0", pid=11436, process="cache_mgr_main", nvlink_xc="XC1", link=3),
        X(xid=145, pci_bus_id="0018:01:00.0", pid=922932, process="acctg", nvlink_xc="XC1", link=3),
    ], id="X-039 GB200 domains, name with ::"),
    pytest.param("X-040", [
        X(xid=149, pci_bus_id="0009:01:00.0", nvlink_unit="NETIR_LINK_EVT", nvlink_severity="fatal", link=1,
          monotonic=171167.620236),
        X(xid=154, pci_bus_id="0009:01:00.0", recovery_from=0x0, recovery_from_name="None", recovery_to=0x4,
          recovery_to_name="Drain and Reset"),
        X(xid=149, pci_bus_id="0008:01:00.0", nvlink_unit="NETIR_LINK_EVT", link=1),
        X(xid=154, pci_bus_id="0019:01:00.0", recovery_from=0x4, recovery_from_name="Drain and Reset",
          recovery_to=0x1, recovery_to_name="GPU Reset Required"),
        X(xid=149, pci_bus_id="0009:01:00.0", nvlink_unit="NETIR_LINK_EVT", link=15),
        X(xid=149, pci_bus_id="0019:01:00.0", nvlink_unit="NETIR", nvlink_severity="fatal", link=-1,
          time_kind="none"),
    ], id="X-040 multi-space payload, Link -1, Xid 154"),
    pytest.param("X-042", [], id="X-042 GSP watchdog without Xid: no Xid event"),
    pytest.param("X-044", [  # printed 71 with the Xid 74 NVLink text: keep 71, flag the mismatch
        X(xid=71, pci_bus_id="0000:b9:00.0", link=6, code_text_mismatch=74, time="2024-08-21T18:35:35Z"),
    ], id="X-044 pretty-printed agent JSON, code/text mismatch"),
    pytest.param("X-045", [
        X(xid=119, pci_bus_id=None, pid=1582259, process="nvc:[driver]", gsp="GPU1", rpc_function=76,
          monotonic=6085126.134786),
        X(xid=119, pci_bus_id="0002:00:00.0", pid=1582259, process="nvc:[driver]", monotonic=16450076.435595),
    ], id="X-045 <3> prefix, $pci, name=nvc:[driver]"),
    pytest.param("X-046", [  # synthetic: MMU-fault text under 74; keyed on the code, mismatch flagged
        X(xid=74, pci_bus_id="0000:04:00.0", pid=1234, process="python3", code_text_mismatch=31),
    ], id="X-046 injector text under wrong code"),
    pytest.param("W-002", [], id="W-002 GSP heartbeat/RPC history: no event"),
    pytest.param("W-003", [  # nvassert.c nvCheckOkFailedNoLog: "Check failed: %s (0x%08X) returned from %s @ %s:%d";
        # the RmInitAdapter failure lines after it are no event
        dict(kind="driver_assertion", function="nvCheckOkFailedNoLog", status=0x1A,
             status_name="NV_ERR_INSUFFICIENT_RESOURCES", status_text="Ran out of a critical resource, other than memory",
             expression="kfspSendBootCommands_HAL(pGpu, pKernelFsp)", location="kernel_gsp_gh100.c:756",
             gpu=None, device=None, xid=None, category="driver_assertion", monotonic=279.950429),
    ], id="W-003 failed NV_CHECK_OK before the RmInitAdapter failure"),
]


@pytest.mark.parametrize("case, expected", XID_CASES)
def test_xid_case(case: str, expected: list[dict]) -> None:
    check_events(parse_case(case), expected)


# -- B. CPU memory: EDAC and MCE ---------------------------------------------------------------

def ECC(**kw) -> dict:  # noqa: N802
    return {"kind": "cpu_ecc", **kw}


def MCE(**kw) -> dict:  # noqa: N802
    return {"kind": "mce", **kw}


CPU_CASES = [
    pytest.param("E-001", [  # the sbridge MCE decode before the EDAC line belongs to it
        ECC(mc=0, count=1, type="corrected", operation="memory read", label="CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
            socket=0, ha=0, channel=2, dimm=0, page=0x849923, offset=0x380, grain=32, syndrome=0x0,
            mce_cpu=0, mce_bank=5, mce_status=0x8c00004000010092, mce_addr=0x849923380,
            time="2020-01-27T19:27:15Z", device="mc0/CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"),
    ], id="E-001 sbridge CE with MCE decode"),
    pytest.param("E-003", [
        ECC(mc=0, count=4, type="corrected", operation=None, label="CPU#0Channel#2_DIMM#0", socket=0, channel=2,
            dimm=0, page=0x0, host="node01", monotonic=21584690.529877),
        ECC(mc=0, count=2, label="CPU#0Channel#2_DIMM#0", monotonic=21584691.723198),
    ], id="E-003 legacy label grammar, count > 1"),
    pytest.param("E-004", [  # "HANDLING MCE" of the next error is no EDAC error; the GHES record {1}
        # (interleaved with mce:/EDAC lines) is a firmware-first PCIe error: severity recoverable
        # (cper_severity_to_aer: non-fatal), device_id 0000:5e:00.0, vendor 0x144d device 0xa808 (NVMe).
        ECC(mc=3, count=1, type="uncorrected", operation="memory read", label="CPU_SrcID#1_MC#1_Chan#2_DIMM#0",
            socket=1, imc=1, channel=2, dimm=0, flags=["OVERFLOW"], monotonic=11189.970968),
        dict(kind="pcie_aer", via="ghes", severity="non_fatal", ghes_severity="recoverable", ghes_record=1,
             ghes_source=1, device="0000:5e:00.0", pci_bus_id="0000:5e:00.0", vendor_id=0x144D, device_id=0xA808,
             category="non_fatal", monotonic=11219.196524),
    ], id="E-004 skx UE with OVERFLOW, GHES PCIe record"),
    pytest.param("M-001", [
        MCE(cpu=0, bank=9, status=0x0, tsc=0x2ac997e3063c3, cpu_vendor=0, cpuid=0x50663, time=None,
            socket=0, apic=0, microcode=0x7000019, monotonic=1366.830251, device="cpu0/bank9"),
    ], id="M-001 four-line mce record"),
    pytest.param("M-002", [  # the mcelog daemon line after it is not a kernel record
        MCE(cpu=0, bank=4, status=0xa600000000020408, addr=0xfef4c9e0, cpuid=0x706a1, microcode=0x28,
            monotonic=0.064265, host=None, time="2025-09-16T19:51:15Z"),
    ], id="M-002 mce with ADDR, syslog without host"),
    pytest.param("M-004", [], id="M-004 mcelog daemon lines: not kernel records"),
]


@pytest.mark.parametrize("case, expected", CPU_CASES)
def test_cpu_memory_case(case: str, expected: list[dict]) -> None:
    check_events(parse_case(case), expected)


def test_m001_epoch_time_field_is_kept_as_printed() -> None:
    # TIME 947185249 (a bogus RTC in 2000) is the record's own field, not the event time.
    (e,) = parse_case("M-001")
    assert e.attrs["time"] == 947185249 and e.time is None


def test_e004_dram_geometry_and_err_code() -> None:
    e, _ghes_pcie = parse_case("E-004")
    assert {k: e.attrs["details"][k] for k in ("bg", "ba", "row", "col", "err_code")} == {
        "bg": "3", "ba": "0", "row": "1a1e8", "col": "180", "err_code": "0101:0092"}


def test_e001_err_code_and_area() -> None:
    (e,) = parse_case("E-001")
    assert (e.attrs["details"]["err_code"], e.attrs["details"]["area"]) == ("0001:0092", "DRAM")


# -- C. InfiniBand / RoCE ----------------------------------------------------------------------

IB_CASES = [
    pytest.param("I-001", [  # firmware/PCIe bandwidth/slot power lines are not events
        dict(kind="nic_module_event", pci_bus_id="0004:01:00.0", module=0, status="Cable plugged",
             monotonic=11.097374),
    ], id="I-001 module event, domain 0004"),
    pytest.param("I-002", [  # module 1 is on function .1; netdev after the BDF is space-separated
        dict(kind="nic_module_event", pci_bus_id="0000:01:00.0", module=0, status="Cable plugged"),
        dict(kind="nic_module_event", pci_bus_id="0000:01:00.1", module=1, status="Cable plugged"),
        dict(kind="net_link_up", pci_bus_id="0000:01:00.0", netdev="enp1s0f0", device="enp1s0f0"),
        dict(kind="net_link_up", pci_bus_id="0000:01:00.1", netdev="enp1s0f1"),
    ], id="I-002 cable plugged then netdev link up"),
    pytest.param("I-004", [
        dict(kind="ib_port_state", rdma_device="mlx5_5", port=1, state="INIT", pci_bus_id="0000:ab:00.0",
             device="mlx5_5/1", host="node01", time="2025-02-14T05:03:41Z"),
        dict(kind="ib_link_up", rdma_device="mlx5_5", port=1, state="ACTIVE", pci_bus_id="0000:ab:00.0"),
    ], id="I-004 IB core port state INIT -> ACTIVE"),
    pytest.param("I-005a", [
        dict(kind="ib_link_down", rdma_device="mlx5_0", port=1, state="DOWN", pci_bus_id="0000:08:00.0"),
        dict(kind="ib_link_up", rdma_device="rdmap8s0f0", port=2, state="ACTIVE", pci_bus_id="0000:08:00.0"),
    ], id="I-005 patch format strings"),
    pytest.param("I-005b", [  # bonding lines are not events
        dict(kind="ib_link_up", device="mlx5_3/1", pci_bus_id="0000:53:00.0", monotonic=4441.769587),
        dict(kind="net_link_down", device="enp83s0f0np0", pci_bus_id="0000:53:00.0", monotonic=4443.968257),
        dict(kind="ib_link_down", device="mlx5_3/1", pci_bus_id="0000:53:00.0", monotonic=4443.974372),
        dict(kind="net_link_up", device="enp83s0f0np0", pci_bus_id="0000:53:00.0", monotonic=4450.318539),
        dict(kind="ib_link_up", device="mlx5_3/1", pci_bus_id="0000:53:00.0", monotonic=4450.320122),
    ], id="I-005 RoCE flap seen by netdev and rdma"),
    pytest.param("I-006", [
        dict(kind="nic_module_event", device="mlx5_core0", pci_bus_id=None, module=0, status="plugged and enabled"),
    ], id="I-006 FreeBSD mlx5 module event"),
    pytest.param("I-007", [  # "EDAC i10nm: No hbm memory" (debug) is not an EDAC error
        dict(kind="nic_module_event", pci_bus_id="0000:1a:00.0", module=0, status="Cable plugged",
             time="2025-01-17T15:36:26.478501Z"),
    ], id="I-007 mlx5 probe, decode+iso"),
]


@pytest.mark.parametrize("case, expected", IB_CASES)
def test_ib_case(case: str, expected: list[dict]) -> None:
    check_events(parse_case(case), expected)


def test_i005_flap_down_interval() -> None:
    # The same port went down at 4443.97 s and was back ACTIVE at 4450.32 s: about 6.3 s.
    ib = [e for e in parse_case("I-005b") if e.kind.startswith("ib_link")]
    down = next(e for e in ib if e.kind == "ib_link_down")
    up = next(e for e in ib if e.kind == "ib_link_up" and e.monotonic > down.monotonic)
    assert up.monotonic - down.monotonic == pytest.approx(6.35, abs=0.01)


# -- envelope fields of corpus lines -----------------------------------------------------------

def record_view(rec) -> dict:
    d = {name: getattr(rec, name) for name in rec.__slots__}
    d["time"] = iso_utc(rec.time)
    d.update(rec.extra or {})
    return d


ENVELOPES = [
    # case, line index, fields
    ("F-001", 0, dict(fmt="kmsg", facility="kern", level="info", seq=3964, monotonic=206.764307, flags="-",
                      message="nvidia-nvswitch2: open (major=510)")),
    ("F-001", 2, dict(seq=3973, monotonic=227.996636, level="info")),
    ("F-002", 0, dict(time="2025-01-02T07:20:12Z", host="node01", ident="kernel",
                      message="docker0: port 1(vetha17b2cc) entered disabled state")),
    ("F-002", 1, dict(time="2025-01-17T17:10:43Z", host="node02.job-svc", ident="kernel")),
    ("F-003", 0, dict(time="2024-11-15T05:39:15.491363Z", facility=None, level=None, host=None,
                      message="nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
                              "skipping further processing")),
    ("F-004", 0, dict(level="info", facility="kern", monotonic=201.650687, message="sysrq: SysRq : Trigger a crash")),
    ("F-004", 1, dict(level="alert", monotonic=201.654822)),
    ("F-004", 2, dict(level="warn", monotonic=201.673948)),
    ("F-006", 0, dict(time="2025-01-07T21:16:59.312055Z", host="node01", ident="kernel", monotonic=1378283.684891)),
    ("X-002", 1, dict(time="2024-08-30T11:43:09Z", time_kind="wall", raw_time="Fri Aug 30 11:43:09 2024")),
    ("X-006", 0, dict(facility="kern", level="warn", time="2025-01-21T04:41:44.283302Z")),
    ("X-016", 0, dict(monotonic=3947.310901, time_kind="mono")),
    ("X-018", 0, dict(time="2025-12-02T11:38:46Z", host="node01", monotonic=218.250408)),
    ("X-025", 0, dict(facility="syslog", level="emerg", kernel=False, message="hello")),
    ("X-025", 1, dict(facility="syslog", level="err", kernel=False, time="2025-05-27T04:18:56.089671Z")),
    ("X-031", 0, dict(time="2023-03-03T04:44:24Z")),
    ("X-045", 0, dict(facility="kern", level="err", monotonic=6085126.134786)),
    ("X-045", 1, dict(ident="kernel", monotonic=16450076.435595)),
    ("E-003", 1, dict(host="node01", monotonic=21584690.529877, time="2025-05-07T06:45:12Z")),
    ("M-002", 0, dict(host=None, ident="kernel", monotonic=0.064261, time="2025-09-16T19:51:15Z")),
    ("I-007", 4, dict(facility="kern", level="debug", time="2025-01-17T15:37:19.314136Z",
                      message="EDAC i10nm: No hbm memory")),
]


@pytest.mark.parametrize("case, index, expected", [pytest.param(*c, id=f"{c[0]}:{c[1]}") for c in ENVELOPES])
def test_envelope_of_corpus_line(case: str, index: int, expected: dict) -> None:
    rec = parse_line(load_case(case)[index], TimeContext.make(tz="UTC", reference=REFERENCE))
    got = record_view(rec)
    assert {k: got.get(k) for k in expected} == expected


def test_dmesg_t_is_local_time() -> None:
    # dmesg -T prints local time without a zone: the same line read with --tz Asia/Shanghai is 8 h earlier in UTC.
    (e, *_rest) = [e for e in parse_case("X-002", tz="Asia/Shanghai") if e.code == 109]
    assert iso_utc(e.time) == "2024-08-30T03:43:14Z"


# -- cross-line rules --------------------------------------------------------------------------

ALL_CASES = sorted(p.stem for p in FIXTURES.glob("*.log"))


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_fault_line_of_the_corpus_is_understood(case: str) -> None:
    # A line that looks like a fault but cannot be parsed becomes an "unparsed" event.
    assert [e.raw for e in parse_case(case) if e.kind == "unparsed"] == []


@pytest.mark.parametrize("case", ["W-002", "W-003", "X-018", "X-032", "X-034", "X-035", "X-042", "X-014", "X-029"])
def test_neighbouring_nvrm_lines_give_no_event(case: str) -> None:
    # Everything of the case but its Xid (and NV_CHECK_OK) lines: GPU-at-PCI, serial, RPC history rows, register
    # dumps, CrashCat banners, RmInitAdapter failures, rate-limit notices, kernel stacks.
    lines = [ln for ln in load_case(case) if "Xid" not in ln and "Check failed:" not in ln]
    assert any("NVRM" in ln for ln in lines)
    assert parse_lines(lines) == []


# Constructed: X-023's three-line form plus the one-line form the driver maintainers quote in the
# same issue ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"), for the same GPU.
TEXT_79 = [
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
]
LINE_79 = "[ 1843.308150] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus"
OTHER_GPU_79 = "[ 1843.308160] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"


@pytest.mark.parametrize("lines, gpus", [
    pytest.param(TEXT_79 + [LINE_79], ["0000:b3:00.0"], id="text form then Xid line"),
    pytest.param([LINE_79] + TEXT_79, ["0000:b3:00.0"], id="Xid line then text form"),
    pytest.param(TEXT_79 + [OTHER_GPU_79], ["0000:b3:00.0", "0000:44:00.0"], id="two GPUs: two events"),
    pytest.param(["[ 1843.308100] NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus."] + [LINE_79],
                 ["0000:b3:00.0"], id="short text form then Xid line"),
])
def test_xid79_both_forms_of_one_gpu_count_once(lines: list[str], gpus: list[str]) -> None:
    events = parse_lines(lines)
    assert [(e.kind, e.code, e.attrs["pci_bus_id"]) for e in events] == [("xid", 79, g) for g in gpus]


def test_device_plugin_sentinel_999_is_not_an_xid() -> None:
    # k8s-device-plugin#259: "Xid=999" is the plugin's own marker, not a driver Xid.
    line = ("2020/09/01 10:00:00 XidCriticalError: Xid=999 on Device=GPU-00000000-0000-0000-0000-000000000001, "
            "the device will go unhealthy.")
    assert parse_lines([line]) == []
    assert [e.code for e in parse_lines(load_case("X-021") + [line])] == [69]


def test_rate_limit_ends_when_the_driver_reloads() -> None:
    # X-034's rate-limit notice, then the driver banner of W-002 (module reloaded), then X-034's
    # next Xid 119: the new driver instance prints every GSP RPC error again.
    x034, w002 = load_case("X-034"), load_case("W-002")
    lines = [x034[0], x034[1], w002[0], x034[4]]
    assert [(e.code, e.attrs.get("sampled_1_in")) for e in parse_lines(lines)] == [(119, None), (119, None)]
    assert [(e.code, e.attrs.get("sampled_1_in")) for e in parse_lines([x034[0], x034[1], x034[4]])] == [
        (119, None), (119, 30)]
