"""NVIDIA driver (NVRM) lines: Xid errors of every driver generation, the text-only
"fallen off the bus" form, the "GPU at PCI ... GPU-<uuid>" line, and NVRM assertions
(``nvAssert...Failed...: Assertion failed: ...``, :func:`parse_assertion`).

Before a GPU's first Xid the driver prints ``NVRM: GPU at PCI:%04x:%02x:%02x: %s`` (the GPU's
UUID) and ``NVRM: GPU Board Serial Number: %s``, once per GPU and driver load
(open-gpu-kernel-modules ``src/nvidia/src/kernel/gpu/rc/kernel_rc.c``, ``_krcLogUuidOnce``).
The UUID line maps the bus id to the GPU (:func:`parse_gpu_at`; the Xid events get
``gpu_uuid``); the serial line names no GPU and is read as no event: the UUID names the board.

Text that names an Xid without being an Xid record is no Xid: ``NVRM: _kgspLogXid119: ****
GSP Timeout ****`` (the banner of kernel_gsp.c's ``_kgspLogXid119``, r535-r550; named
``_kgspLogRpcTimeout`` since), ``XidCriticalError`` outside the device plugin's log, an NVSwitch
``SXid (...)`` line (:mod:`nodewarden.parsing.sxid`): :data:`XID_RE` wants ``NVRM: Xid (``.

Pure functions over the message text (the envelope already removed). Shapes follow the
driver's format strings (NVIDIA/open-gpu-kernel-modules) and the real lines in the reference
corpus: no ``PCI:`` prefix (r304), no pid (<= r418), ``pid=`` without ``name=`` (r440-r470),
``pid='<unknown>'``, MIG ``GPU-I:NN``, any PCI domain, multi-space payloads.

Every pattern is matched at the start of the driver's message (``re.match`` on the text that
:func:`nodewarden.parsing.lines.driver_message` gives), never searched for inside other text:
a message quoting a driver line (``segfault ... in NVRM: Xid ...``) is no fault. Numbers are
ASCII digits, bounded (at most 9 decimal digits): a longer run does not match.
"""

from __future__ import annotations

import re
from typing import Any

from nodewarden.parsing.pci import normalize_pci

# "NVRM: Xid (PCI:0000:43:00): 13, ..." -- matched at the start of the driver's message only
# (nodewarden.parsing.lines.driver_message); hand transcriptions drop the colon ("NVRM Xid (...) :
# 32"). What the parentheses hold is a bus id as drivers print it, redacted (``...``, ``$pci``) or
# with a MIG ``GPU-I:NN``: short and without brackets, so that a task name of 15 characters
# ("NVRM: Xid (PCI:" + "[pid]: segfault ...") cannot open it. Digits are ASCII (``re.A``) and
# bounded: int() of a 5,000-digit run raises.
XID_RE = re.compile(
    r"NVRM:?\s*Xid\s*\((?P<inner>[^()\[\]\n]{0,48})\)\s*:\s*(?P<xid>-?[0-9]{1,9})\b,?\s*(?P<rest>.*)", re.S | re.A)
# NVIDIA's codes run to the low hundreds; a code past this is a mangled line, never an Xid.
MAX_XID = 9999
# Something that mentions an Xid but did not match XID_RE: counted as unparsed.
XID_HINT_RE = re.compile(r"NVRM:?\s*Xid\b", re.A)
_INNER = re.compile(
    r"(?:PCI:)?\s*(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)?\s*(?:GPU-I:\s*(?P<gi>[0-9]{1,9}))?")
_PID = re.compile(r"pid=(?:'?<unknown>'?|(?P<pid>[0-9]{1,9}))\s*(?:,\s*|$)")
_NAME = re.compile(r"name=(?P<name>.*?)(?:,\s+|,$|$)", re.S)

_CHANNEL_PATTERNS = (
    re.compile(r"\bCh\s+(?P<v>[0-9a-fA-F]{8})\b"),
    re.compile(r"\bchannel\s+0x(?P<v>[0-9a-fA-F]+)\b", re.I),
    re.compile(r"\bChannel ID\s+(?P<v>[0-9a-fA-F]{8})\b"),
    re.compile(r"\bChannel\s+(?P<v>[0-9a-fA-F]{8})\b"),
    re.compile(r"\bChID\s+(?P<v>[0-9a-fA-F]{4})\b"),
)
_HEX_FIELDS = {
    "intr": re.compile(r"\bintr\s+(?P<v>[0-9a-fA-F]{8})\b"),
    "engmask": re.compile(r"\bengmask\s+(?P<v>[0-9a-fA-F]{8})\b"),
    "info": re.compile(r"\bInfo\s+(?P<v>0x[0-9a-fA-F]+)\b"),
    "phys_addr": re.compile(r"\bphysAddr:?\s+(?P<v>0x[0-9a-fA-F]+)\b"),
    # Xid 16 (display engine hung, r304 era): "Head 00000000 Count 00000001".
    "head": re.compile(r"\bHead\s+(?P<v>[0-9a-fA-F]{8})\b"),
    "head_count": re.compile(r"\bHead\s+[0-9a-fA-F]{8}\s+Count\s+(?P<v>[0-9a-fA-F]{8})\b"),
}
_HEX_HINTS = {"intr": "intr", "engmask": "engmask", "info": "Info", "phys_addr": "physAddr", "head": "Head",
              "head_count": "Count"}
_ERROR_STRING = re.compile(r"\berrorString\s+(?P<v>.*?)(?:,\s*Info\b|$)")
_GPC = re.compile(r"\(GPC (?P<gpc>[0-9]{1,9}), TPC (?P<tpc>[0-9]{1,9}), SM (?P<sm>[0-9]{1,9})\)")
_PARTITION = re.compile(r"\bpartition (?P<p>[0-9]{1,9}), subpartition (?P<sp>[0-9]{1,9})")
_ROW_REMAP = re.compile(r"Row Remapper: New row \((?P<v>0x[0-9a-fA-F]+)\)")
_PAGE = re.compile(r"(?:Blacklisting|Retirement)[^()]*\((?P<v>0x[0-9a-fA-F]+)\)")
_MMU = re.compile(
    r"MMU Fault: ENGINE (?P<engine>\S+) (?P<client>\S+) faulted @ (?P<va>0x[0-9a-fA-F_]+)\. "
    r"Fault is of type (?P<type>\S+) ACCESS_TYPE_(?P<access>\S+)")
_CONTAINMENT = re.compile(
    r"(?P<c>Contained|Uncontained): (?P<unit>.+?)(?: \((?P<loc>0x[0-9a-fA-F]+(?:, 0x[0-9a-fA-F]+)*)\))?\."
    r"(?: physAddr: (?P<addr>0x[0-9a-fA-F]+))?\s*RST: (?P<rst>Yes|No), D-RST: (?P<drst>Yes|No)")
_NVLINK_FATAL = re.compile(
    r"NVLink: (?P<sev>fatal|non-fatal|nonfatal)? ?error detected on link (?P<link>-?[0-9]{1,9})\s*(?:\((?P<regs>[^)]*)\))?",
    re.I)
# Hopper/Blackwell NVLink subsystem lines: "<UNIT> <Fatal|Nonfatal> XC0 i0 Link 13 (regs)".
_NVLINK_UNIT = re.compile(
    r"(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\s+(?P<xc>XC[0-9]{1,9})\s+(?P<inst>i[0-9]{1,9})\s+"
    r"Link\s+(?P<link>-?[0-9]{1,9})\s*(?:\((?P<regs>[^)]*)\))?")
_LINK_GENERIC = re.compile(r"\b[Ll]ink (?P<link>-?[0-9]{1,9})\b")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<v>[0-9]{1,9})")
_GSP_FN = re.compile(r"Expected function (?P<fn>[0-9]{1,9}) \((?P<name>[A-Z0-9_]+)\)(?: \((?P<a0>0x[0-9a-fA-F]+) (?P<a1>0x[0-9a-fA-F]+)\))?")
_GSP_TIMEOUT = re.compile(r"Timeout after (?P<s>[0-9]{1,9})s of waiting for RPC response from (?P<gsp>GPU[0-9]{1,9}) GSP")
# Xid 120 and the GSP-CrashCat watchdog line: "GSP task exception: load access page fault
# (cause:0xd) @ pc:0x140ca4a, partition:4#0, task:3" / "GSP task watchdog timeout @ pc:..., task:3".
_GSP_TASK = re.compile(
    r"GSP task [^@]*?(?:\(cause:(?P<cause>0x[0-9a-fA-F]+)\)\s*)?@ pc:(?P<pc>0x[0-9a-fA-F]+), "
    r"partition:(?P<part>[^,\s]+), task:(?P<task>[0-9]{1,9})")
# The numbers are "0x%x" of the 32-bit NV2080_CTRL_GPU_RECOVERY_ACTION (1..8 hex digits); a longer
# run is no such line: the recovery fields stay absent (the Xid event stays).
_RECOVERY = re.compile(
    r"recovery action changed from (?P<f>0x[0-9a-fA-F]{1,8}) \((?P<fn>[^)]*)\) "
    r"to (?P<t>0x[0-9a-fA-F]{1,8}) \((?P<tn>[^)]*)\)", re.A)
_HEXWORD = re.compile(r"0x[0-9a-fA-F]+")
# The break of a message printed over several lines (joined continuation lines, each may repeat
# the "NVRM: " prefix): collapsed to one space.
_CONTINUATION = re.compile(r"\s*\n\s*(?:NVRM:\s*)?")
# Xid 13: "Graphics SM Warp Exception on (GPC 1, TPC 1, SM 1): MMU Fault", "Graphics SM Global
# Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors", "Graphics Exception: ESR 0x5167b0=0x80f0017 ...".
_SM_EXCEPTION = re.compile(
    r"Graphics SM (?P<kind>Warp|Global) Exception on \(GPC [0-9]{1,9}, TPC [0-9]{1,9}, SM [0-9]{1,9}\):\s*(?P<err>.+?)\s*$",
    re.S)
_ESR = re.compile(r"\bESR((?:\s+0x[0-9a-fA-F]{1,16}=0x[0-9a-fA-F]{1,16})+)")
_ESR_PAIR = re.compile(r"0x([0-9a-fA-F]{1,16})=0x([0-9a-fA-F]{1,16})")

# Xid 154 "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)": the driver's action numbers
# and the names it prints for them (NVIDIA/open-gpu-kernel-modules, src/common/sdk/nvidia/inc/
# ctrl/ctrl2080/ctrl2080gpu.h, enum NV2080_CTRL_GPU_RECOVERY_ACTION; src/nvidia/src/kernel/gpu/gpu.c,
# _gpuRecoveryActionName and _gpuRefreshRecoveryActionInLock: 0-5). NVML's nvmlDeviceGpuRecoveryAction_t
# numbers them the same way and adds 6 (BUS_RESET) and 7 (SYSTEM_REBOOT) (NVML API reference,
# cuda.bindings.nvml.DeviceGpuRecoveryAction).
RECOVERY_ACTIONS: dict[int, str] = {
    0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset", 5: "recover_imex_domain",
    6: "bus_reset", 7: "system_reboot",
}
_RECOVERY_NAMES: dict[str, str] = {
    "none": "none", "gpu reset required": "gpu_reset", "node reboot required": "node_reboot",
    "drain p2p": "drain_p2p", "drain and reset": "drain_and_reset", "recover imex domain": "recover_imex_domain",
}

# NVRM assertions (src/nvidia/src/libraries/utils/nvassert.c: nvAssertFailed[NoLog],
# nvAssertOkFailed[NoLog]; printed with NV_PRINTF's "NVRM: [GPUn ]<function>: " prefix):
#   "Assertion failed: %s @ %s:%d" (expression, file, line) or "Assertion failed: 0x%016llx" (the
#   return address, builds without strings), and for a failed status
#   "Assertion failed: %s (0x%08X) returned from %s @ %s:%d" where the first %s is
#   nvstatusToString(status): "<description> [NV_ERR_NAME]" (src/common/sdk/nvidia/inc/nvstatuscodes.h).
# The same file's checks (NV_CHECK / NV_CHECK_OK: nvCheckFailed[NoLog], nvCheckOkFailed[NoLog]) print
# the same bodies after "Check failed: " (real_log_cases W-003).
ASSERT_RE = re.compile(
    r"NVRM:\s*(?:GPU(?P<gpu>[0-9]{1,4})\s+)?(?P<func>nv(?:Assert|Check)[A-Za-z]{0,16}Failed[A-Za-z]{0,16}):\s*"
    r"(?:Assertion|Check) failed:\s*(?P<body>.*)", re.S | re.A)
ASSERT_HINT_RE = re.compile(
    r"NVRM:?\s*(?:GPU[0-9]{1,4}\s+)?nv(?:Assert|Check)\w{0,32}:\s*(?:Assertion|Check) failed\b", re.A)
_ASSERT_STATUS = re.compile(
    r"(?P<text>.*?)\s*\((?P<status>0x[0-9a-fA-F]{1,8})\)\s+returned from\s+(?P<expr>.*?)"
    r"(?:\s+@\s+(?P<loc>[^\s@]{1,200}:[0-9]{1,9}))?\s*$", re.S | re.A)
_ASSERT_PLAIN = re.compile(r"(?P<expr>.*?)(?:\s+@\s+(?P<loc>[^\s@]{1,200}:[0-9]{1,9}))?\s*$", re.S | re.A)
_STATUS_NAME = re.compile(r"\[(?P<name>NV_[A-Z0-9_]{1,64})\]", re.A)
# A failed status whose line is cut or mangled after its "[NV_ERR_NAME]" token ("... [NV_ERR_RESET_REQUIRED]
# (0x0000", a 9-digit status; the token ends the line or "(" follows it): the token decides; the
# status, "returned from" and location are read when printed whole, else absent.
_ASSERT_TOKEN = re.compile(
    r"(?P<text>[^\[\]]{0,200}?)\s*\[(?P<name>NV_[A-Z0-9_]{1,64})\](?=\s*(?:\(|$))"
    r"(?:\s*\((?:(?P<status>0x[0-9a-fA-F]{1,8})\)|[^)]{0,32}\)?))?"
    r"(?:\s+returned from\s+(?P<expr>.*?)(?:\s+@\s+(?P<loc>[^\s@]{1,200}:[0-9]{1,9}))?\s*$)?", re.S | re.A)
# nvstatuscodes.h: NV_STATUS_CODE(NV_ERR_RESET_REQUIRED, 0x00000062, "Reset required").
NV_ERR_RESET_REQUIRED = 0x62

# The text-only Xid 79 form (NVIDIA/NVSentinel#155) and the one-line variants.
FALLEN_RE = re.compile(
    r"NVRM: (?:The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)\s+(?:NVRM:\s*)?\(PCI ID: (?P<ids>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)"
    r"\s+installed in this system has\s+(?:NVRM:\s*)?fallen off the bus"
    r"|GPU (?P<pci2>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): GPU has fallen off the bus)")
FALLEN_START_RE = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)\s*(?:\(PCI ID: (?P<ids>[^)]*)\))?")
# The last line of the text-only form when syslog wrote each printed line as its own record.
FALLEN_TAIL_RE = re.compile(r"NVRM:?\s*(?:\(PCI ID:[^)]*\)\s*installed in this system has\s*(?:NVRM:\s*)?)?fallen off the bus")
GPU_AT_RE = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):\s+(?P<uuid>\S+)")
_UUID_RE = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
RATE_LIMIT_RE = re.compile(
    r"NVRM: Rate limiting GSP RPC error prints for GPU at (?:PCI:)?"
    r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?) \(printing 1 of every (?P<n>[0-9]{1,9})\)")
# The driver banner printed when the kernel module loads: per-GPU driver state starts afresh.
DRIVER_LOAD_RE = re.compile(r"NVRM: loading NVIDIA UNIX")
# Kubernetes device plugin (NVML event, not a kernel line). Xid 999 is the plugin's own sentinel.
DEVICE_PLUGIN_RE = re.compile(r"XidCriticalError: Xid=(?P<xid>[0-9]{1,9}) on Device=(?P<dev>[^,\s]+)")


def parse_xid(message: str) -> dict[str, Any] | None:
    """Fields of an Xid line, or None when the message does not start with an ``NVRM: Xid (...)``
    header (or its code is past MAX_XID).

    Returns a dict with at least ``xid`` (int) and ``pci_bus_id`` (``DDDD:BB:DD.F`` or None when
    redacted/absent), ``pid`` (int or None for ``'<unknown>'``/absent), ``process`` (str or None),
    ``payload`` (the free text after pid/name) and whatever standard payload fields are present:
    ``gpu_instance``, ``channel``, ``intr``, ``engmask``, ``info``, ``error_string``, ``gpc``/``tpc``/``sm``,
    ``phys_addr``, ``partition``/``subpartition``, ``row_address``, ``page``, ``mmu_*``, ``containment``,
    ``unit``, ``location``, ``reset_required``, ``drain_reset_required``, ``nvlink_*``, ``link``,
    ``registers``, ``caused_by_xid``, ``rpc_function``, ``rpc_function_name``, ``rpc_args``,
    ``rpc_timeout_s``, ``gsp``, ``recovery_from``/``recovery_to`` (and their decoded names
    ``recovery_action``/``recovery_action_from``: :data:`RECOVERY_ACTIONS`), ``nvlink_intrinfo``,
    ``nvlink_error_status``, ``nvlink_subcode``, ``nvlink_injected`` (:func:`_nvlink5_fields`),
    ``sm_exception``/``sm_error`` (Xid 13 ``Graphics SM Warp|Global Exception on (...): <error>``)
    and ``esr`` (``[[address, value], ...]`` of ``Graphics Exception: ESR 0xA=0xV ...``).
    """
    m = XID_RE.match(message)
    if not m or not 0 <= int(m.group("xid")) <= MAX_XID:  # out of range: a mangled line (unparsed)
        return None
    out: dict[str, Any] = {"xid": int(m.group("xid"))}
    mi = _INNER.match(m.group("inner").strip())
    pci_text = mi.group("pci") if mi else None
    out["pci_bus_id"] = normalize_pci(pci_text)
    if mi and mi.group("gi") is not None:
        out["gpu_instance"] = int(mi.group("gi"))
    rest = m.group("rest")
    # Collapse the whitespace of joined continuation lines, drop trailing blanks and JSON quoting.
    rest = _CONTINUATION.sub(" ", rest).rstrip().rstrip('",').rstrip()
    pid = None
    process = None
    mp = _PID.match(rest)
    if mp:
        pid = int(mp.group("pid")) if mp.group("pid") else None
        rest = rest[mp.end():]
        mn = _NAME.match(rest)
        if mn:
            name = mn.group("name").strip()
            process = None if name in ("<unknown>", "'<unknown>'", "") else name
            rest = rest[mn.end():]
    out["pid"] = pid
    out["process"] = process
    out["payload"] = rest
    _payload_fields(rest, out)
    return out


def _payload_fields(p: str, out: dict[str, Any]) -> None:
    # Each pattern is tried only when a literal it needs is in the payload: most Xid lines carry
    # two or three of these fields, and the parser runs on every Xid of a year of fleet logs.
    if "Ch" in p or "ch" in p:
        for pat in _CHANNEL_PATTERNS:
            mc = pat.search(p)
            if mc:
                out["channel"] = int(mc.group("v"), 16)
                break
    for key, pat in _HEX_FIELDS.items():
        if _HEX_HINTS[key] in p:
            mh = pat.search(p)
            if mh:
                out[key] = int(mh.group("v"), 16)
    if "errorString" in p:
        me = _ERROR_STRING.search(p)
        if me:
            out["error_string"] = me.group("v").strip()
    if "(GPC" in p:
        mg = _GPC.search(p)
        if mg:
            out.update(gpc=int(mg.group("gpc")), tpc=int(mg.group("tpc")), sm=int(mg.group("sm")))
    if "partition" in p:
        mpt = _PARTITION.search(p)
        if mpt:
            out.update(partition=int(mpt.group("p")), subpartition=int(mpt.group("sp")))
    if "Row Remapper" in p:
        mr = _ROW_REMAP.search(p)
        if mr:
            out["row_address"] = int(mr.group("v"), 16)
    if "Blacklisting" in p or "Retirement" in p:
        mpg = _PAGE.search(p)
        if mpg:
            out["page"] = int(mpg.group("v"), 16)
    if "MMU Fault" in p:
        mm = _MMU.search(p)
        if mm:
            out.update(mmu_engine=mm.group("engine"), mmu_client=mm.group("client"),
                       mmu_fault_address=int(mm.group("va").replace("_", ""), 16),
                       mmu_fault_type=mm.group("type"), mmu_access_type=mm.group("access").rstrip("."))
    if "ontained" in p:
        mct = _CONTAINMENT.search(p)
        if mct:
            out.update(containment=mct.group("c").lower(), unit=mct.group("unit"),
                       reset_required=mct.group("rst") == "Yes", drain_reset_required=mct.group("drst") == "Yes")
            if mct.group("loc"):
                out["location"] = [int(x, 16) for x in _HEXWORD.findall(mct.group("loc"))]
            if mct.group("addr"):
                out["phys_addr"] = int(mct.group("addr"), 16)
    if "ink" in p:
        mu = _NVLINK_UNIT.search(p) if "Link" in p else None
        if mu:
            out.update(nvlink_unit=mu.group("unit"), nvlink_severity=mu.group("sev").lower().replace("-", ""),
                       nvlink_xc=mu.group("xc"), nvlink_instance=mu.group("inst"), link=int(mu.group("link")))
            _set_registers(mu.group("regs"), out)
            _nvlink5_fields(out)
        else:
            mf = _NVLINK_FATAL.search(p) if "NVLink" in p else None
            if mf:
                out["link"] = int(mf.group("link"))
                if mf.group("sev"):
                    out["nvlink_severity"] = mf.group("sev").lower().replace("-", "")
                _set_registers(mf.group("regs"), out)
            else:
                ml = _LINK_GENERIC.search(p)
                if ml:
                    out["link"] = int(ml.group("link"))
    if "caused by" in p:
        mcb = _CAUSED_BY.search(p)
        if mcb:
            out["caused_by_xid"] = int(mcb.group("v"))
    if "Expected function" in p:
        mgs = _GSP_FN.search(p)
        if mgs:
            out.update(rpc_function=int(mgs.group("fn")), rpc_function_name=mgs.group("name"))
            if mgs.group("a0"):
                out["rpc_args"] = [int(mgs.group("a0"), 16), int(mgs.group("a1"), 16)]
    if "Timeout after" in p:
        mt = _GSP_TIMEOUT.search(p)
        if mt:
            out.update(rpc_timeout_s=int(mt.group("s")), gsp=mt.group("gsp"))
    if "GSP task" in p:
        mgt = _GSP_TASK.search(p)
        if mgt:
            out.update(gsp_pc=int(mgt.group("pc"), 16), gsp_partition=mgt.group("part"),
                       gsp_task=int(mgt.group("task")))
            if mgt.group("cause"):
                out["gsp_cause"] = int(mgt.group("cause"), 16)
    if "recovery action" in p:
        mra = _RECOVERY.search(p)
        if mra:
            out.update(recovery_from=int(mra.group("f"), 16), recovery_from_name=mra.group("fn"),
                       recovery_to=int(mra.group("t"), 16), recovery_to_name=mra.group("tn"))
            out["recovery_action"] = recovery_action(out["recovery_to"], out["recovery_to_name"])
            out["recovery_action_from"] = recovery_action(out["recovery_from"], out["recovery_from_name"])
    if "Exception on" in p:
        msx = _SM_EXCEPTION.search(p)
        if msx:
            out.update(sm_exception=msx.group("kind").lower(), sm_error=msx.group("err"))
    if "ESR" in p:
        mesr = _ESR.search(p)
        if mesr:
            out["esr"] = [[int(a, 16), int(v, 16)] for a, v in _ESR_PAIR.findall(mesr.group(1))]


def _nvlink5_fields(out: dict[str, Any]) -> None:
    """Decode the NVLink5 Xid (144-150) line ``<UNIT> <Fatal|Nonfatal> XC<n> i<n> Link <n> (w0 w1 ...)``.

    The line is printed by GSP firmware, not by the open kernel module; its fields follow the
    argument order of the driver's NVLink error report, ``MODS_REPORT_NVLINK_ERROR(pGpu, sev, src,
    ecode, xcon, inj, link, lane, intr, estat, ...)`` (NVIDIA/open-gpu-kernel-modules,
    src/nvidia/generated/g_os_nvoc.h): XC = cross-containment, i = injected, then the interrupt
    info word (w0) and the error status word (w1). NVIDIA's Xid catalog ("XID 144-150 Decode"
    sheet, docs.nvidia.com/deploy/xid-errors) keys its rows on the unit, the error status and
    the bits of w0, whose bits 20-25 are the sub-code. Sets ``nvlink_intrinfo``,
    ``nvlink_error_status``, ``nvlink_subcode`` (ints) when two words are printed, and
    ``nvlink_injected`` (bool) from the ``i`` token."""
    inj = out.get("nvlink_instance", "")
    if inj[1:].isdigit():
        out["nvlink_injected"] = int(inj[1:]) != 0
    regs = out.get("registers")
    if regs and len(regs) >= 2:
        out.update(nvlink_intrinfo=regs[0], nvlink_error_status=regs[1], nvlink_subcode=(regs[0] >> 20) & 0x3F)


def recovery_action(number: int | None, name: str | None = None) -> str:
    """The action of a recovery-action number (:data:`RECOVERY_ACTIONS`), else of the name the
    driver printed for it (``"Drain and Reset"``), else ``"unknown"``."""
    if number is not None and number in RECOVERY_ACTIONS:
        return RECOVERY_ACTIONS[number]
    return _RECOVERY_NAMES.get((name or "").strip().lower(), "unknown")


def parse_assertion(message: str) -> dict[str, Any] | None:
    """Fields of an ``NVRM: [GPUn ]nvAssert...Failed...: Assertion failed: ...`` line (or of an
    ``nvCheck...Failed...: Check failed: ...`` line, the same bodies), or None.

    Returns ``function`` (``nvAssertOkFailedNoLog``), ``gpu`` (the ``GPUn`` prefix number or None),
    ``expression`` (the asserted expression, ``status`` for a failed status check, or the return
    address of a build without strings), ``location`` (``kernel_channel.c:2827`` or None), and for
    a failed status ``status`` (int, ``0x62``), ``status_name`` (``NV_ERR_RESET_REQUIRED`` or None)
    and ``status_text`` (``Reset required``). A line cut (or mangled) after the ``[NV_ERR_...]``
    token keeps ``status_name`` and ``status_text``; ``status``, ``expression`` and ``location``
    are None unless printed whole. Formats: see :data:`ASSERT_RE`.
    """
    m = ASSERT_RE.match(message)
    if not m:
        return None
    body = _CONTINUATION.sub(" ", m.group("body")).strip()
    out: dict[str, Any] = {"function": m.group("func"), "gpu": int(m.group("gpu")) if m.group("gpu") else None}
    ms = _ASSERT_STATUS.match(body)
    if ms:
        name = _STATUS_NAME.search(ms.group("text"))
        out.update(status=int(ms.group("status"), 16), status_name=name.group("name") if name else None,
                   status_text=_STATUS_NAME.sub("", ms.group("text")).strip() or None,
                   expression=ms.group("expr") or None, location=ms.group("loc"))
        return out
    mt = _ASSERT_TOKEN.match(body)
    if mt:
        out.update(status=int(mt.group("status"), 16) if mt.group("status") else None, status_name=mt.group("name"),
                   status_text=mt.group("text").strip() or None, expression=mt.group("expr") or None,
                   location=mt.group("loc"))
        return out
    mp = _ASSERT_PLAIN.match(body)
    out.update(expression=(mp.group("expr") if mp else body) or None, location=mp.group("loc") if mp else None)
    return out


def _set_registers(text: str | None, out: dict[str, Any]) -> None:
    """The register words in ``(0x0, 0x10000, ...)``; none when the list is redacted (``(...)``)."""
    regs = [int(x, 16) for x in _HEXWORD.findall(text or "")]
    if regs:
        out["registers"] = regs


def parse_fallen_off_bus(message: str) -> dict[str, Any] | None:
    """The text-only Xid 79 forms (no Xid line). Returns ``pci_bus_id`` and ``pci_ids`` or None.

    ``NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen
    off the bus and is not responding to commands.`` (printed over three lines) and
    ``NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.``
    """
    flat = re.sub(r"\s*\n\s*", " ", message)
    m = FALLEN_RE.match(flat)
    if not m:
        return None
    pci = m.group("pci") or m.group("pci2")
    return {"pci_bus_id": normalize_pci(pci), "pci_ids": m.group("ids")}


def parse_rate_limit(message: str) -> tuple[str, int] | None:
    """``NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30)``
    -> (pci_bus_id, 30): from then on the driver prints one GSP RPC error (Xid 119) in N."""
    m = RATE_LIMIT_RE.match(message)
    if not m:
        return None
    pci = normalize_pci(m.group("pci"))
    return (pci, int(m.group("n"))) if pci else None


def parse_gpu_at(message: str) -> tuple[str, str | None] | None:
    """``NVRM: GPU at PCI:0000:01:00: GPU-<uuid>`` -> (pci_bus_id, uuid or None when redacted)."""
    m = GPU_AT_RE.match(message)
    if not m:
        return None
    pci = normalize_pci(m.group("pci"))
    if pci is None:
        return None
    uuid = m.group("uuid")
    return pci, uuid if _UUID_RE.match(uuid) else None


def parse_device_plugin(message: str) -> dict[str, Any] | None:
    """k8s-device-plugin ``XidCriticalError: Xid=69 on Device=GPU-...``; None for the 999 sentinel."""
    m = DEVICE_PLUGIN_RE.search(message)
    if not m or m.group("xid") == "999":
        return None
    if int(m.group("xid")) > MAX_XID:
        return None
    return {"xid": int(m.group("xid")), "gpu_uuid": m.group("dev")}
