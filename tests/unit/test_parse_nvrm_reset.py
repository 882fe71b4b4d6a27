"""NVRM reset-required and assertion lines, Xid 154 recovery actions, Xid text that is no Xid
record, and the scanner/JSON envelopes of the reference case S-101.

Lines are built from the driver's format strings (NVIDIA/open-gpu-kernel-modules 595.45.04; file
and function next to each) with values from the reference corpus (W-101, X-040). Expected
values are written from those strings, never from parser output.
"""

from __future__ import annotations

import json

import pytest

from nodewarden import cli
from nodewarden.parsing import xid
from nodewarden.parsing.envelope import TimeContext, parse_line
from nodewarden.parsing.stream import KernelLogParser

CTX = TimeContext.make(tz="UTC")


def events_of(lines: list[str]) -> list:
    return list(KernelLogParser().feed_lines(lines, CTX))


# -- assertions ------------------------------------------------------------------------------------
# src/nvidia/src/libraries/utils/nvassert.c, printed through NV_PRINTF's "NVRM: [GPUn ]<function>: " prefix:
#   nvAssertFailed[NoLog]:   "Assertion failed: " "%s @ %s:%d"  (expression, trimmed file name, line)
#   nvAssertOkFailed[NoLog]: "Assertion failed: %s (0x%08X) returned from " "%s @ %s:%d"
#     with nvstatusToString(status) = "<text> [NV_ERR_NAME]" (src/common/sdk/nvidia/inc/nvstatuscodes.h)
#   builds without strings:  "%s" replaced by "0x%016llx" (the return address)

RESET = ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
         "returned from status @ kernel_channel.c:{line}")

ASSERTIONS = [
    pytest.param(RESET.format(line=2827), "gpu_reset_required",
                 dict(status=0x62, status_name="NV_ERR_RESET_REQUIRED", status_text="Reset required",
                      expression="status", location="kernel_channel.c:2827", action="gpu_reset", gpu=None,
                      pci_bus_id=None, function="nvAssertOkFailedNoLog"), id="W-101 reset required"),
    # N-011's build: the same status at another file:line: the token decides, not the location
    pytest.param(RESET.format(line=2874), "gpu_reset_required",
                 dict(location="kernel_channel.c:2874", action="gpu_reset"), id="reset required, other line"),
    pytest.param("NVRM: GPU3 nvAssertOkFailed: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
                 "returned from rmStatus @ kernel_fifo.c:1203", "gpu_reset_required",
                 dict(gpu=3, function="nvAssertOkFailed", expression="rmStatus", location="kernel_fifo.c:1203"),
                 id="GPUn prefix, logging variant"),
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
                 "returned from 0x00007f3a12345678", "gpu_reset_required",
                 dict(status=0x62, expression="0x00007f3a12345678", location=None), id="build without strings"),
    pytest.param("NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ kernel_gsp.c:1476", "driver_assertion",
                 dict(expression="0", location="kernel_gsp.c:1476", status=None, function="nvAssertFailedNoLog"),
                 id="W-101 GSP init assertion"),
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Generic Error: Invalid state [NV_ERR_INVALID_STATE] "
                 "(0x00000040) returned from status @ mem_mgr.c:512", "driver_assertion",
                 dict(status=0x40, status_name="NV_ERR_INVALID_STATE", status_text="Generic Error: Invalid state",
                      expression="status", location="mem_mgr.c:512"), id="other status"),
    pytest.param("NVRM: nvAssertFailed: Assertion failed: pKernelChannel != NULL @ kernel_channel.c:190",
                 "driver_assertion", dict(expression="pKernelChannel != NULL", location="kernel_channel.c:190"),
                 id="expression with blanks"),
    pytest.param("NVRM: nvAssertFailedNoLog: Assertion failed: 0x00007f3a12345678", "driver_assertion",
                 dict(expression="0x00007f3a12345678", location=None), id="address only"),
    # W-101's line cut after the token (a paste, a truncated record): the token decides
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x0000",
                 "gpu_reset_required", dict(status=None, status_name="NV_ERR_RESET_REQUIRED", status_text="Reset required",
                                            expression=None, location=None, action="gpu_reset"), id="cut in the status"),
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED]",
                 "gpu_reset_required", dict(status=None, status_name="NV_ERR_RESET_REQUIRED", action="gpu_reset"),
                 id="cut after the token"),
    # a status of 9 hex digits is no 0x%08X: absent, the token and the rest still read
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x000000062)",
                 "gpu_reset_required", dict(status=None, status_name="NV_ERR_RESET_REQUIRED", location=None),
                 id="9-digit status"),
    pytest.param("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x000000062) "
                 "returned from status @ kernel_channel.c:2827", "gpu_reset_required",
                 dict(status=None, status_name="NV_ERR_RESET_REQUIRED", expression="status",
                      location="kernel_channel.c:2827"), id="9-digit status, whole line"),
    # nvassert.c nvCheckOkFailed[NoLog] (NV_CHECK_OK): "Check failed: %s (0x%08X) returned from %s @ %s:%d"
    pytest.param("NVRM: nvCheckOkFailedNoLog: Check failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
                 "returned from status @ kernel_channel.c:2827", "gpu_reset_required",
                 dict(status=0x62, status_name="NV_ERR_RESET_REQUIRED", status_text="Reset required",
                      expression="status", location="kernel_channel.c:2827", action="gpu_reset",
                      function="nvCheckOkFailedNoLog"), id="Check failed, reset required"),
    pytest.param("NVRM: GPU1 nvCheckOkFailed: Check failed: Reset required [NV_ERR_RESET_REQUIRED] (0x0000",
                 "gpu_reset_required", dict(gpu=1, status=None, status_name="NV_ERR_RESET_REQUIRED",
                                            function="nvCheckOkFailed"), id="Check failed, cut"),
    # W-003's line (nvtrust#77)
    pytest.param("NVRM: nvCheckOkFailedNoLog: Check failed: Ran out of a critical resource, other than memory "
                 "[NV_ERR_INSUFFICIENT_RESOURCES] (0x0000001A) returned from kfspSendBootCommands_HAL(pGpu, pKernelFsp) "
                 "@ kernel_gsp_gh100.c:756", "driver_assertion",
                 dict(status=0x1a, status_name="NV_ERR_INSUFFICIENT_RESOURCES",
                      status_text="Ran out of a critical resource, other than memory",
                      expression="kfspSendBootCommands_HAL(pGpu, pKernelFsp)", location="kernel_gsp_gh100.c:756",
                      function="nvCheckOkFailedNoLog"), id="W-003 Check failed, other status"),
    # nvassert.c nvCheckFailed[NoLog] (NV_CHECK): "Check failed: %s @ %s:%d"
    pytest.param("NVRM: nvCheckFailedNoLog: Check failed: pGpu != NULL @ gpu.c:4242", "driver_assertion",
                 dict(expression="pGpu != NULL", location="gpu.c:4242", status=None, function="nvCheckFailedNoLog"),
                 id="Check failed, expression"),
    # an expression with a bracketed name is no status token
    pytest.param("NVRM: nvAssertFailed: Assertion failed: pTable[NV_ERR_GENERIC] == 0 @ table.c:12", "driver_assertion",
                 dict(expression="pTable[NV_ERR_GENERIC] == 0", location="table.c:12", status_name=None),
                 id="bracket inside the expression"),
]


@pytest.mark.parametrize("message, kind, expected", ASSERTIONS)
def test_assertion(message: str, kind: str, expected: dict) -> None:
    (e,) = events_of([f"[  373871.354096] {message}"])
    assert e.kind == kind
    assert {k: e.attrs.get(k) for k in expected} == expected
    assert (e.code, e.device, e.monotonic) == (None, None, 373871.354096)


def test_assertion_text_elsewhere_is_no_event() -> None:
    # a daemon quoting the line, and text that is no NVRM assertion
    lines = ["Jan  2 11:00:00 node01 myagent[12]: saw " + RESET.format(line=2827),
             "[ 1.0] python3[4711]: AssertionError: Assertion failed: x == 1",
             "[ 1.0] NVSwitch: Assertion failed"]
    assert events_of(lines) == []


def test_assertion_inside_another_kernel_message_is_unparsed() -> None:
    (e,) = events_of(["[ 1.0] foo: bar " + RESET.format(line=2827)])
    assert (e.kind, e.attrs["family"]) == ("unparsed", "nvrm_assert")
    (e,) = events_of(["[ 1.0] foo: bar " + RESET.format(line=2827).replace("nvAssert", "nvCheck").replace(
        "Assertion", "Check")])
    assert (e.kind, e.attrs["family"]) == ("unparsed", "nvrm_assert")


# -- Xid 154 ---------------------------------------------------------------------------------------
# src/nvidia/src/kernel/gpu/gpu.c, _gpuRefreshRecoveryActionInLock: nvErrorLog_va(pGpu,
# GPU_RECOVERY_ACTION_CHANGED, "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)", ...) with
# _gpuRecoveryActionName: None, GPU Reset Required, Node Reboot Required, Drain P2P, Drain and Reset,
# Recover IMEX Domain (NV2080_CTRL_GPU_RECOVERY_ACTION 0..5, ctrl2080gpu.h).

@pytest.mark.parametrize("to, name, action", [
    (0x0, "None", "none"), (0x1, "GPU Reset Required", "gpu_reset"), (0x2, "Node Reboot Required", "node_reboot"),
    (0x3, "Drain P2P", "drain_p2p"), (0x4, "Drain and Reset", "drain_and_reset"),
    (0x5, "Recover IMEX Domain", "recover_imex_domain"),
])
def test_xid154_action(to: int, name: str, action: str) -> None:
    line = f"[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x{to:x} ({name})"
    (e,) = events_of([line])
    assert (e.kind, e.code, e.attrs["recovery_action"], e.attrs["recovery_action_from"]) == (
        "xid", 154, action, "drain_and_reset")


@pytest.mark.parametrize("to, fields", [
    # "0x%x" of the 32-bit enum: at most 8 hex digits
    pytest.param("0x00000004 (Drain and Reset)", dict(recovery_to=4, recovery_action="drain_and_reset"), id="8 digits"),
    pytest.param("0xffffffff (Bogus)", dict(recovery_to=0xffffffff, recovery_action="unknown"), id="32-bit max"),
    # longer: no recovery-action line; the fields are absent, the Xid stays
    pytest.param("0x99999999999999999999 (Bogus)", dict(recovery_to=None, recovery_from=None, recovery_action=None),
                 id="20 digits"),
    pytest.param("0x100000000 (GPU Reset Required)", dict(recovery_to=None, recovery_action=None), id="9 digits"),
])
def test_xid154_numbers_are_32_bit(to: str, fields: dict) -> None:
    line = f"[171167.621164] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to {to}"
    (e,) = events_of([line])
    assert (e.kind, e.code, e.device) == ("xid", 154, "0009:01:00.0")
    assert {k: e.attrs.get(k) for k in fields} == fields


def test_xid154_long_from_number_is_absent_too() -> None:
    (e,) = events_of(["[1.0] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x000000000 (None) "
                      "to 0x1 (GPU Reset Required)"])
    assert (e.code, e.attrs.get("recovery_from"), e.attrs.get("recovery_action")) == (154, None, None)


def test_recovery_action_names() -> None:
    assert xid.recovery_action(4, "Drain and Reset") == "drain_and_reset"
    assert xid.recovery_action(99, "Node Reboot Required") == "node_reboot"  # an unknown number: the name
    assert xid.recovery_action(99, "Something New") == "unknown"
    assert xid.RECOVERY_ACTIONS[2] == "node_reboot"


# -- Xid text that is no Xid record ------------------------------------------------------------------
# src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c (r535-r550), _kgspLogXid119: NV_PRINTF(LEVEL_ERROR, "****
# GSP Timeout ****") and "Note: Please also check logs above.", printed with the function name.

@pytest.mark.parametrize("line", [
    "[ 84.300488] NVRM: _kgspLogXid119: ********************************* GSP Timeout **********************************",
    "[ 84.300490] NVRM: _kgspLogXid119: Note: Please also check logs above.",
    "[ 84.300500] NVRM: GPU6 _kgspLogXid119: ********************************************************************************",
    "[ 84.300510] NVRM: GPU0 _kgspLogXid119: Xid 119 reported",
    "Jan  2 11:00:00 node01 kernel: NVRM: nvidia-bug-report: XidCount=3",
])
def test_xid_text_that_is_no_record(line: str) -> None:
    assert events_of([line]) == []


def test_xid13_mmu_fault_text_stays_xid13() -> None:
    (e,) = events_of(["[Wed Jun 24 15:44:20 2026] NVRM: Xid (PCI:0000:70:00): 13, Graphics SM Warp Exception on "
                      "(GPC 1, TPC 1, SM 1): MMU Fault"])
    assert (e.code, e.category, e.attrs.get("code_text_mismatch"), e.attrs["sm_error"]) == (
        13, "software", None, "MMU Fault")


# -- envelopes: a scanner's "line " word, JSON "line" field, a record printed twice ------------------

KLINE = "kern  :err   : 2025-01-25T10:34:54,859532+00:00 NVRM: Xid (PCI:0000:84:00): 79, GPU has fallen off the bus"


def zap(line: str, ts: str = "2025-01-28T06:47:16Z") -> str:
    return json.dumps({"level": "warn", "ts": ts, "caller": "diagnose/scan.go:263", "msg": "known xid", "line": line})


def test_line_word_before_an_envelope() -> None:
    rec = parse_line("line " + KLINE, CTX)
    assert (rec.fmt, rec.facility, rec.level, rec.time.isoformat()) == (
        "line+decode+dmesg_iso", "kern", "err", "2025-01-25T10:34:54.859532+00:00")
    assert parse_line("line of text", CTX).fmt == "bare"  # no envelope after the word: message text


def test_json_line_field_takes_the_kernel_stamp() -> None:
    rec = parse_line(zap(KLINE), CTX)
    assert (rec.fmt, rec.time.isoformat(), rec.facility) == ("json", "2025-01-25T10:34:54.859532+00:00", "kern")
    assert rec.message.startswith("NVRM: Xid (PCI:0000:84:00): 79")
    # without an envelope of its own, the wrapper's time stays
    rec = parse_line(zap("NVRM: Xid (PCI:0000:84:00): 79, GPU has fallen off the bus"), CTX)
    assert rec.time.isoformat() == "2025-01-28T06:47:16+00:00"


def test_json_line_field_with_a_monotonic_stamp_keeps_the_wrapper_time() -> None:
    # "[mono]" gives no wall time without the boot time: the wrapper's time stays, the stamp is kept
    mono = "[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus"
    rec = parse_line(zap(mono), CTX)
    assert (rec.time.isoformat(), rec.monotonic) == ("2025-01-28T06:47:16+00:00", 1843.308145)
    p = KernelLogParser()
    assert [e.code for e in p.feed_lines(["line " + mono, zap(mono)], CTX)] == [79]
    assert p.stats.duplicates_suppressed == 1


@pytest.mark.parametrize("lines, xids, suppressed", [
    pytest.param(["line " + KLINE, zap(KLINE)], 1, 1, id="plain and JSON: one record"),
    pytest.param([KLINE, KLINE], 2, 0, id="same envelope twice: two records"),
    pytest.param([KLINE, "line " + KLINE, zap(KLINE), KLINE], 2, 2, id="two records, each re-printed"),
    pytest.param(["line " + KLINE, zap(KLINE.replace("859532", "859533"))], 2, 0, id="another microsecond"),
])
def test_record_reprinted_through_another_envelope_counts_once(lines: list[str], xids: int, suppressed: int) -> None:
    p = KernelLogParser()
    events = list(p.feed_lines(lines, CTX))
    assert [e.code for e in events] == [79] * xids
    assert p.stats.duplicates_suppressed == suppressed


# -- the CLI prints the new kinds --------------------------------------------------------------------

def test_events_command_prints_new_kinds(tmp_path, capsys) -> None:
    log = tmp_path / "node01.log"
    log.write_text("\n".join([
        "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
        "[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00",
        "[373871.354096] " + RESET.format(line=2827),
        "[   32.840884] NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ kernel_gsp.c:1476",
    ]) + "\n")
    assert cli.main(["events", str(log)]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sorted(d["kind"] for d in got) == ["driver_assertion", "gpu_reset_required", "sxid"]
    sx = next(d for d in got if d["kind"] == "sxid")
    assert (sx["pci_bus_id"], sx["category"], sx["attrs"]["sxid"], sx["attrs"]["link"]) == (
        "0000:04:00.0", "non_fatal", 22013, 44)
