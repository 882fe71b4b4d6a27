"""Synthetic fleet kernel logs with a known ground truth, for checking the analysis end to end.

``simulate(out_dir, nodes, days, seed, rates, start)`` writes one directory per host holding
rotated kernel logs (``kern.log``, ``kern.log.1``, ``kern.log.2.gz``, ...; the older files
gzipped, every file's mtime set to its last line's time) and ``ground_truth.csv`` with one row
per injected fault line group.

Semantics, kept identical to the parser's:
* one Xid line is one ``xid`` event. Xid 13 faults print a burst of 1-3 lines as the driver does;
  each line is one event and one ground-truth row (rows of a burst share ``fault_id``);
* one EDAC CE line is one ``cpu_ecc`` event;
* an IB flash cut is one row (kind ``ib_flash_cut``) and two lines: ``Link DOWN`` then
  ``Link ACTIVE`` on the same port 1-30 s later (one ``ib_link_down`` + one ``ib_link_up`` event).

All formats carry wall-clock times (RFC 3164 syslog with the ``[mono]`` stamp, RFC 3339 syslog,
``journalctl -k -o short-iso``, ``dmesg -T``), all in UTC, so every event is dated without
``--boot-time``. Fault groups on one host are at least a minute apart and never within minutes of
a rotation point, so no record is mistaken for a copy of another across files.

The rates come from a TOML file (``fleet_default.toml``: the Fire-Flyer 2 paper's Tables VI, VII
and VIII; see its comments). Its counts are those of its ``[fleet]`` nodes over its span
(``start``..``end``), so they are rates per node-day: :func:`window_schedule` scales them to the
fleet simulated and repeats them over the window.
* Days: the schedule is drawn over the file's whole span and then cut to the requested window,
  so a window inside the span returns exactly the part of the tables that falls inside it (the
  same per-day rates); a window reaching outside it gets the span's schedule again, drawn anew
  and shifted by whole spans (a two-span window holds every count twice).
* Nodes: ``nodes`` other than the file's multiply every count by ``nodes / [fleet] nodes``
  (``fault_scale`` sets the factor instead; 1 keeps the file's fleet-wide totals on any fleet):
  the schedule is drawn ceil(factor) times and each (kind, Xid, table source) group keeps
  floor(n * factor) or ceil(n * factor) of the n lines the file gives it (the fraction decides
  which, drawn from the seed; an Xid 13 burst is cut short to fit), faults chosen uniformly, so
  every count of the tables is the file's times the factor to within one per group.
With the file's nodes and a window inside its span nothing is scaled or repeated: the schedule
is the file's, drawn as before.

Kinds beyond the paper (NVSwitch SXid, PCIe AER, reset-required GPUs, AMD MCA and GHES memory
errors) are off unless the rates file's ``[beyond_paper]`` table gives them a count over the span
(:data:`BEYOND_KINDS`; an Xid 154 is a ``[xid_year]`` "154" count).
Each fault is a group of lines in the driver's or kernel's own format (the shapes of the real
cases S-001, S-101, P-101, W-101, X-040, E-101 and of the kernel's format strings), parsed by the
real parsers: one ground-truth row per event the group must give (an AER group: its record and
each recovery line), with the extra columns of :data:`EXTRA_TRUTH_FIELDS` (written only when a
row fills one, so the paper-default ground truth keeps its columns). ``[chains]`` may lead an
Xid with one of these kinds (``"pcie_aer_fatal_gpu>79"``, ``"sxid_fatal>74"``): the group is
printed 5-60 ms before the Xid, on the same host (and, for the AER, the same GPU).
With none of them the schedule draws exactly what it drew before they existed.
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import gzip
import math
import os
import random
import tomllib
from pathlib import Path
from typing import Any, Callable

DEFAULT_RATES = Path(__file__).with_name("fleet_default.toml")
UTC = dt.timezone.utc
US = 1_000_000
DAY_US = 86_400 * US

TRUTH_FIELDS = ("time", "host", "kind", "xid", "device", "port", "down_time", "up_time",
                "fault_id", "table_source", "line_format", "after_fault_id")
# Columns of the kinds beyond the paper, after TRUTH_FIELDS, written only when a row fills one:
#   code (SXid), severity (sxid/pcie_aer/cpu_ecc), category (the event's category: severity,
#   gpu_lost_precursor, a recovery outcome), switch (nvidia-nvswitchN), action (reset-required
#   action; an Xid 154's new action), first_error (the AER bit marked "(First)"), errors (an AER
#   record's bit names, space-separated, as printed), affected_devices (the functions that
#   printed "can't recover" for the record, space-separated).
EXTRA_TRUTH_FIELDS = ("code", "severity", "category", "switch", "action", "first_error", "errors",
                      "affected_devices")
# A chained fault's head is printed this long before the fault it leads (real cascades: the DBE,
# row-remap and contained-error lines of one GPU within 170 ms, real_log_cases ).
CHAIN_LEAD_US = (5_000, 60_000)

GPU_BUSES = ("0e", "13", "48", "4d", "87", "8c", "b8", "bd")
IB_BUSES = ("1a", "3c", "9a", "bc", "0c", "2c", "8c", "ac")
MON = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
WDAY = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
BURST_XIDS = frozenset({13})
BURST_SIZES = (1, 2, 2, 3, 3)
ROTATE_AT_US = (6 * 3600 + 25 * 60) * US  # cron.daily's 06:25
MIN_GAP_US = 120 * US  # between a host's fault groups: twice analyze's default co-occurrence window
ROTATE_GUARD_US = 300 * US

XID_TEMPLATES: dict[int, tuple[str, ...]] = {
    13: ("NVRM: Xid (PCI:0000:{b}:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x{r1:x}=0x{v1:x} 0x{r2:x}=0x{v2:x} 0x52e7a8=0xc81eb60 0x52e7ac=0x1174",),
    31: ("NVRM: Xid (PCI:0000:{b}:00): 31, pid={p}, name=python, Ch 000000{ch:02x}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{g} faulted @ 0x7f{a:x}_{a2:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
         "NVRM: Xid (PCI:0000:{b}:00): 31, pid={p}, name=pt_main_thread, Ch 000000{ch:02x}, intr 10000000. MMU Fault: ENGINE CE3 HUBCLIENT_CE1 faulted @ 0x7f{a:x}_{a2:08x}. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_WRITE"),
    43: ("NVRM: Xid (PCI:0000:{b}:00): 43, pid={p}, name=pt_main_thread, Ch 000000{ch:02x}",
         "NVRM: Xid (PCI:0000:{b}:00): 43, pid={p}, name=python3, Ch 000000{ch:02x}"),
    45: ("NVRM: Xid (PCI:0000:{b}:00): 45, pid={p}, name=pt_main_thread, Ch 000000{ch:02x}",),
    74: ("NVRM: Xid (PCI:0000:{b}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {g}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",),
    63: ("NVRM: Xid (PCI:0000:{b}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000{a:x}{a2:03x}) marked for remapping, reset gpu to activate.",),
    64: ("NVRM: Xid (PCI:0000:{b}:00): 64, pid='<unknown>', name=<unknown>, Dynamic Page Retirement: Blacklisting failed.  Page should have been blacklisted on boot(0x00000000007{a2:05x}).",),
    94: ("NVRM: Xid (PCI:0000:{b}:00): 94, pid={p}, Contained: SM (0x1). RST: No, D-RST: No",),
    95: ("NVRM: Xid (PCI:0000:{b}:00): 95, pid={p}, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",),
    44: ("NVRM: Xid (PCI:0000:{b}:00): 44, pid='<unknown>', name=<unknown>, Ch 000000{ch:02x}, intr 00000000",),
    48: ("NVRM: Xid (PCI:0000:{b}:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7f{a2:07x} partition 7, subpartition 1.",),
    61: ("NVRM: Xid (PCI:0000:{b}:00): 61, pid='<unknown>', name=<unknown>, Internal micro-controller breakpoint/warning (0x0000)",),
    62: ("NVRM: Xid (PCI:0000:{b}:00): 62, pid='<unknown>', name=<unknown>, Internal micro-controller halt",),
    69: ("NVRM: Xid (PCI:0000:{b}:00): 69, pid={p}, name=python, Class Error: ChId 00{ch:02x}, Class 0000c6c0, Offset 00000000, Data 00000000, ErrorCode 000000a4",),
    79: ("NVRM: Xid (PCI:0000:{b}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",),
    119: ("NVRM: Xid (PCI:0000:{b}:00): 119, pid={p}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU{g} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x410).",),
}
# Xid 154 (real_log_cases X-040; NVIDIA's Xid catalog): "GPU recovery action changed from 0xF (F)
# to 0xT (T)", the actions of NVML's nvmlDeviceGpuRecoveryAction_t as the driver names them.
XID_154 = "NVRM: Xid (PCI:0000:{b}:00): 154, GPU recovery action changed from 0x{f:x} ({fn}) to 0x{t:x} ({tn})"
RECOVERY_ACTIONS = ((0, "None", "none"), (1, "GPU Reset Required", "gpu_reset"),
                    (2, "Node Reboot Required", "node_reboot"), (3, "Drain P2P", "drain_p2p"),
                    (4, "Drain and Reset", "drain_and_reset"))
GENERIC_XID = "NVRM: Xid (PCI:0000:{b}:00): {code}, pid='<unknown>', name=<unknown>, Ch 000000{ch:02x}"

EDAC_CE = ("EDAC MC{mc}: 1 CE memory read error on CPU_SrcID#{s}_Ha#0_Chan#{c}_DIMM#{d} (channel:{c} slot:{d} "
           "page:0x{page:x} offset:0x{off:x} grain:32 syndrome:0x0 -  area:DRAM err_code:0001:009{c} socket:{s} "
           "ha:0 channel_mask:{mask} rank:{rank})")

# ---- kinds beyond the paper: line shapes ---------------------------------------------------

# [beyond_paper] keys, in the order they are drawn (a count each over the rates file's span).
BEYOND_KINDS = ("sxid_non_fatal", "sxid_fatal", "sxid_data_only", "pcie_aer_corrected", "pcie_aer_non_fatal",
                "pcie_aer_fatal_gpu", "gpu_reset_required", "amd_mca_edac", "ghes_memory")
# How long each group's lines take (at least its last line's offset from its first, see
# _beyond_group), so that a chained Xid comes after all of them, never between them (an SXid's
# Severity line is printed 5.1 ms after its Data line, an AER record's recovery ends 1.05 s on).
BEYOND_SPAN_US = {"sxid_non_fatal": 5_100, "sxid_fatal": 5_100, "sxid_data_only": 0, "pcie_aer_corrected": 60,
                  "pcie_aer_non_fatal": 2_500, "pcie_aer_fatal_gpu": 1_100_000, "gpu_reset_required": 0,
                  "amd_mca_edac": 75_000, "ghes_memory": 11_000}

# NVSwitch SXid (real_log_cases S-001, S-101; open-gpu-kernel-modules src/common/nvswitch:
# NVSWITCH_PRINT_SXID prints "nvidia-nvswitchN: SXid (PCI:<bdf>): <code>, " before each of an
# error's lines: the "Data {...}" record (NVSWITCH_LOG_*_DATA), the description of
# NVSWITCH_REPORT_NONFATAL / NVSWITCH_REPORT_FATAL ("Non-fatal, Link %02d %s%s", "Fatal, Link %02d
# %s%s", kernel/inc/intr_nvswitch.h) and "Severity %d Engine instance %02d Sub-engine instance %02d").
NVSWITCHES = (("nvidia-nvswitch0", "0000:05:00.0"), ("nvidia-nvswitch1", "0000:84:00.0"),
              ("nvidia-nvswitch2", "0000:85:00.0"), ("nvidia-nvswitch3", "0000:04:00.0"))
SXID_HEAD = "{sw}: SXid (PCI:{pci}): {code}, "
# (SXid, description as the driver's interrupt handlers print it; ls10/lr10 intr_*.c, the codes
# of ctrl_dev_nvswitch.h NVSWITCH_ERR_HW_*; 22013 as printed in S-001)
SXID_NON_FATAL = ((12028, "egress non-posted PRIV error"), (12029, "egress non-posted HW error"),
                  (12021, "egress input ECC error limit"), (14007, "TS tag store single-bit threshold"),
                  (22013, "Minion Link DLREQ interrupt"))
SXID_FATAL = ((14008, "TS tag store fatal ECC"), (14010, "TS crumbstore fatal ECC"), (14017, "TS ATO timeout"),
              (14001, "TS pointer crossover"))
# Printed with only their Data line (S-101): the severity comes from the SXid catalog, where
# NVIDIA's Fabric Manager guide lists 12028 and 12021 as non-fatal (S-002: "non-fatal error 12028").
SXID_DATA_ONLY = ((12028, "non_fatal"), (12021, "non_fatal"))

# PCIe AER (real_log_cases P-101; drivers/pci/pcie/aer.c aer_print_port_info "%s%s error received:
# %04x:%02x:%02x.%d", aer_print_error "PCIe Bus Error: severity=%s, type=%s, (%s)" and "  device
# [%04x:%04x] error status/mask=%08x/%08x", __aer_print_error "   [%2d] %-22s%s" with " (First)",
# __print_tlp_header "  TLP Header: ..."; drivers/pci/pcie/err.c "can't recover (no error_detected
# callback)", "device recovery successful", "device recovery failed"; aer_root_reset "Root Port link
# has been reset (%d)"). The AER driver's messages carry its "AER: " prefix (dev_fmt); the record's
# lines printed with pci_printk do not.
AER_RECEIVED = "{drv} {port}: AER: {multi}{sev} error received: {src}"
AER_BUS_ERROR = "{drv} {dev}: PCIe Bus Error: severity={sev}, type={layer}, ({agent})"
AER_DEVICE = "{drv} {dev}:   device [{vendor}] error status/mask={status:08x}/{mask:08x}"
AER_BIT = "{drv} {dev}:    [{bit:2d}] {name:<22}{first}"
AER_TLP = "{drv} {dev}: AER:   TLP Header: {tlp}"
AER_CANT_RECOVER = "{drv} {dev}: AER: can't recover (no error_detected callback)"
AER_FAILED = "pcieport {port}: AER: device recovery failed"
AER_RECOVERED = "pcieport {port}: AER: device recovery successful"
AER_LINK_RESET = "pcieport {port}: AER: Root Port link has been reset ({rc})"
ROOT_PORT_ID = "8086:6f08"  # P-101's root port
NIC_BUSES = ("17", "31", "a9", "cb")  # ConnectX NICs beside the GPUs (mlx5_core, [15b3:1021])

# NVRM assertion carrying the reset-required status (real_log_cases W-101; the location differs
# across driver builds: kernel_channel.c:2827 there, 2874 in another build).
RESET_REQUIRED = ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
                  "(0x00000062) returned from status @ kernel_channel.c:{line}")

# AMD MCA decode and its EDAC line (real_log_cases E-101; drivers/edac/mce_amd.c decode_smca_error
# / amd_decode_mce, drivers/edac/amd64_edac.c): one corrected DRAM error, one cpu_ecc event.
AMD_MCA = ("[Hardware Error]: Corrected error, no action required.",
           "[Hardware Error]: CPU:{cpu} (17:31:0) MC{bank}_STATUS[{over}|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: "
           "0x{status:016x}",
           "[Hardware Error]: Error Addr: 0x{addr:016x}",
           "[Hardware Error]: IPID: 0x{ipid:016x}, Syndrome: 0x{syn:016x}",
           "[Hardware Error]: Unified Memory Controller Ext. Error Code: 0",
           "EDAC MC{mc}: 1 CE Cannot decode normalized address on mc#{mc}csrow#{cs}channel#{ch} (csrow:{cs} "
           "channel:{ch} page:0x0 offset:0x0 grain:64 syndrome:0x{esyn:x})")
# GHES firmware-first memory error: the ghes_edac line and its CPER record (drivers/edac/ghes_edac.c
# ghes_edac_report_mem_error, drivers/firmware/efi/cper.c cper_print_mem, drivers/acpi/apei/ghes.c;
# the shape of the real sample in a linux-edac patch by Shuai Xue (Alibaba) on ghes_edac's "APEI
# location" text, where the EDAC line comes first), in either order (see _beyond_group).
GHES_MEMORY = (
    "EDAC MC{mc}: 1 CE Single-symbol ChipKill ECC on unknown memory (node:0 card:0 module:0 rank:{rank} "
    "bank:{bank} bank_group:{bg} bank_address:{ba} row:{row} col:{col} bit_pos:0 DIMM DMI handle: 0x0000 chipID: 0 "
    "page:0x{page:x} offset:0x{off:x} grain:1 syndrome:0x0 - APEI location: node:0 card:0 module:0 rank:{rank} "
    "bank:{bank} bank_group:{bg} bank_address:{ba} row:{row} col:{col} bit_pos:0 DIMM DMI handle: 0x0000 chipID: 0 "
    "status(0x0000000000000000): reserved requestorID: 0x0000000000000000 responderID: 0x0000000000000000 "
    "targetID: 0x0000000000000000)",
    "{{{n}}}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: {src}",
    "{{{n}}}[Hardware Error]: It has been corrected by h/w and requires no further action",
    "{{{n}}}[Hardware Error]: event severity: corrected",
    "{{{n}}}[Hardware Error]:  Error 0, type: corrected",
    "{{{n}}}[Hardware Error]:   section_type: memory error",
    "{{{n}}}[Hardware Error]:   error_status: 0x0000000000000000",
    "{{{n}}}[Hardware Error]:   physical_address: 0x{addr:016x}",
    "{{{n}}}[Hardware Error]:   physical_address_mask: 0x0000000000000000",
    "{{{n}}}[Hardware Error]:   node: 0 card: 0 module: 0 rank: {rank} bank: {bank} bank_group: {bg} bank_address: "
    "{ba} device: 0 row: {row} column: {col} bit_position: 0 requestor_id: 0x0000000000000000 responder_id: "
    "0x0000000000000000",
    "{{{n}}}[Hardware Error]:   error_type: 4, single-symbol chipkill ECC",
    "{{{n}}}[Hardware Error]:   DIMM location: not present. DMI handle: 0x0000",
)

NOISE = (
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib{i}: link becomes ready",
    "audit: type=1400 audit({t}.{ms:03d}:{n}): apparmor=\"DENIED\" operation=\"open\" profile=\"snap.lxd.activate\" name=\"/proc/{p}/mounts\" pid={p} comm=\"snap-exec\" requested_mask=\"r\" denied_mask=\"r\" fsuid=0 ouid=0",
    "systemd-journald[{p2}]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0 ({n} of {n2} items, 25165824 file size, 347 bytes per hash table item), suggesting rotation.",
    "systemd-journald[{p2}]: /var/log/journal/system.journal: Journal header limits reached or header out-of-date, rotating.",
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "docker0: port {i}(veth{h:07x}) entered blocking state",
    "docker0: port {i}(veth{h:07x}) entered disabled state",
    "device veth{h:07x} entered promiscuous mode",
    "docker0: port {i}(veth{h:07x}) entered forwarding state",
    "eth0: renamed from veth{h:07x}",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{h:07x}: link becomes ready",
    "overlayfs: upperdir is in-use as upperdir/workdir of another mount, accessing files from both mounts will result in undefined behavior.",
    "nfs: server storage{i:02d} not responding, still trying",
    "nfs: server storage{i:02d} OK",
    "python[{p}]: segfault at 0 ip 00007f{h:08x} sp 00007ffd{h:08x} error 4 in libc.so.6[7f{h:08x}+195000]",
    "Code: 48 8b 05 31 5d 10 00 48 8b 00 48 85 c0 74 0a ff e0 0f 1f 80 00 00 00 00 41 54",
    "perf: interrupt took too long (2502 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.  Check SNMP counters.",
    "nvidia-uvm: Loaded the UVM driver, major device number 508.",
    "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  535.129.03  Thu Oct 19 18:42:12 UTC 2023",
    "NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.",
    "mlx5_core 0000:{ib}:00.0: mlx5_fw_tracer_handle_traces:739:(pid {p}): FWTracer: Events were lost",
    "mlx5_core 0000:{ib}:00.0: poll_health:815:(pid 0): device's health compromised - reached miss count",
    "mlx5_core 0000:{ib}:00.0: print_health_info:424:(pid 0): Health issue observed, firmware internal error, severity(3) ERROR:",
    "infiniband mlx5_{i}: mlx5_ib_dealloc_ucontext:2127:(pid {p}): Free context",
    "ib_srpt received unrecognized IB event 12",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "EXT4-fs (md0): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "Process accounting resumed",
    "loop{i}: detected capacity change from 0 to 8",
    "cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice",
    "kauditd_printk_skb: {i} callbacks suppressed",
    "hrtimer: interrupt took {n} ns",
    "clocksource: timekeeping watchdog on CPU{i}: hpet wd-wd read-back delay of {n}ns",
    "INFO: task python:{p} blocked for more than 120 seconds.",
    "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-{h:08x}.scope,mems_allowed=0-1,task=python,pid={p},uid=1000",
    "Memory cgroup out of memory: Killed process {p} (python) total-vm:{n}kB, anon-rss:{n2}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:{i}kB oom_score_adj:0",
    "bond0: (slave eno1): link status definitely up, 25000 Mbps full duplex",
    "igb 0000:05:00.0 eno2: igb: eno2 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: RX/TX",
    "sd 0:0:0:0: [sda] Synchronizing SCSI cache",
    "xfs filesystem being remounted at /data supports timestamps until 2038 (0x7fffffff)",
)

BOOT = (
    "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 (Ubuntu 5.15.0-91.101-generic 5.15.131)",
    "Command line: BOOT_IMAGE=/boot/vmlinuz-5.15.0-91-generic root=UUID=6c0d4e4b-3a7c-4b9e-9f0a-1c2d3e4f5a6b ro quiet splash iommu=pt pci=realloc=off",
    "DMI: Supermicro SYS-4029GP-TRT/X11DPG-OT-CPU, BIOS 3.4 11/02/2021",
    "smpboot: Allowing 128 CPUs, 0 hotplug CPUs",
    "EDAC MC0: Giving out device to module skx_edac controller Skylake Socket#0 IMC#0: DEV 0000:3a:0a.0 (INTERRUPT)",
    "nvidia: loading out-of-tree module taints kernel.",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023",
    "mlx5_core 0000:{ib}:00.0: firmware version: 20.39.1002",
    "mlx5_core 0000:{ib}:00.0: Port module event: module 0, Cable plugged",
)


def load_rates(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    with open(path or DEFAULT_RATES, "rb") as f:
        return tomllib.load(f)


MAX_COUNT = 10_000_000  # faults of one kind: a hundred times the default year's largest (74: 5,521)
MAX_SCALE = 10_000  # fault_scale: the default rates on 12.5 million nodes; each whole unit is one more draw
_TABLES = ("fleet", "chains", "xid_year", "xid_monthly", "cpu_ecc_monthly", "ib_monthly", "ib_month_source", "ib_daily",
           "beyond_paper")


def check_rates(rates: dict[str, Any]) -> None:
    """Raise ValueError naming the first part of a rates file that has the wrong shape: a table
    that is not one, a count that is no whole number >= 0, a rate that is not finite."""
    for name in _TABLES:
        if name in rates and not isinstance(rates[name], dict):
            raise ValueError(f"rates: [{name}] must be a table")
    for month, counts in rates.get("xid_monthly", {}).items():
        if not isinstance(counts, dict):
            raise ValueError(f"rates: [xid_monthly.\"{month}\"] must be a table of Xid counts")
    for key in rates.get("beyond_paper", {}):
        if key not in BEYOND_KINDS:
            raise ValueError(f"rates: [beyond_paper] {key!r} is not one of {', '.join(BEYOND_KINDS)}")
    for name in ("xid_year", "cpu_ecc_monthly", "ib_monthly", "ib_daily", "chains", "beyond_paper"):
        for key, n in rates.get(name, {}).items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_COUNT:
                raise ValueError(f"rates: [{name}] {key!r} = {n!r} is not a whole number from 0 to {MAX_COUNT:,}")
    for month, counts in rates.get("xid_monthly", {}).items():
        for key, n in counts.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_COUNT:
                raise ValueError(f"rates: [xid_monthly.\"{month}\"] {key!r} = {n!r} is not a whole number from 0 "
                                 f"to {MAX_COUNT:,}")
    fleet = rates.get("fleet", {})
    nodes = fleet.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_COUNT):
        raise ValueError(f"rates: [fleet] nodes = {nodes!r} is not a whole number from 1 to {MAX_COUNT:,} "
                         "(the fleet its counts are for)")
    for key in ("noise_per_node_day", "reboots_per_node_year"):
        v = fleet.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e6):
            raise ValueError(f"rates: [fleet] {key} = {v!r} is not a number from 0 to 1e6")
    formats = fleet.get("formats")
    if formats is not None and (not isinstance(formats, dict) or not formats):
        raise ValueError("rates: [fleet] formats must name at least one log format")
    for key in rates.get("chains", {}):
        a, _, b = str(key).partition(">")
        if a.strip() == b.strip():
            raise ValueError(f"rates: [chains] {key!r}: a fault cannot lead itself")


def _date(text: str) -> dt.date:
    return dt.date.fromisoformat(str(text))


def _us(d: dt.date) -> int:
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()) * US


def _month_range(month: str) -> tuple[int, int]:
    y, m = map(int, month.split("-"))
    a = dt.date(y, m, 1)
    b = dt.date(y + (m == 12), m % 12 + 1, 1)
    return _us(a), _us(b)


def _iso(t_us: int) -> str:
    return dt.datetime.fromtimestamp(t_us // US, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{t_us % US:06d}Z"


class _Fault:
    __slots__ = ("t", "kind", "xid", "source", "host", "lines", "rows", "burst", "lead", "lead_us", "after",
                 "bus", "fid")

    def __init__(self, t: int, kind: str, xid: int | None, source: str, burst: int = 1) -> None:
        self.t, self.kind, self.xid, self.source, self.burst = t, kind, xid, source, burst
        self.host = -1
        self.lead: _Fault | None = None   # the fault this one is printed just before (chains)
        self.lead_us = 0
        self.after: _Fault | None = None  # the chain head printed just before this one
        self.bus = ""
        self.fid = 0
        self.lines: list[tuple[int, str]] = []
        self.rows: list[dict[str, Any]] = []


def rates_span(rates: dict[str, Any]) -> tuple[int, int]:
    """The rates file's span ``[start, end + 1 day)`` in UTC microseconds since the epoch."""
    fleet = rates.get("fleet", {})
    return _us(_date(fleet.get("start", "2023-04-19"))), _us(_date(fleet.get("end", "2024-03-31"))) + DAY_US


def rates_nodes(rates: dict[str, Any]) -> int:
    """The fleet size the rates file's counts are for (``[fleet] nodes``, default 1250)."""
    return int(rates.get("fleet", {}).get("nodes", 1250))


def _schedule(rates: dict[str, Any], rng: random.Random) -> tuple[list[_Fault], int, int]:
    """Fault times over the rates file's whole span (before hosts are assigned)."""
    fleet = rates.get("fleet", {})
    span_a, span_b = rates_span(rates)
    faults: list[_Fault] = []

    def within(a: int, b: int) -> tuple[int, int]:
        return max(a, span_a), min(b, span_b)

    def place(n: int, a: int, b: int, kind: str, xid: int | None, source: str) -> None:
        if n <= 0:
            return
        if b <= a:
            raise ValueError(f"{n} {kind} {xid or ''} to place in an empty interval")
        for _ in range(n):
            faults.append(_Fault(rng.randrange(a, b), kind, xid, source))

    monthly = rates.get("xid_monthly", {})
    pinned_months = sorted(m for m in monthly if within(*_month_range(m))[0] < within(*_month_range(m))[1])
    free = []  # the span minus the pinned months
    cur = span_a
    for m in pinned_months:
        a, b = within(*_month_range(m))
        if a > cur:
            free.append((cur, a))
        cur = max(cur, b)
    if cur < span_b:
        free.append((cur, span_b))

    for code_s, total in sorted(rates.get("xid_year", {}).items(), key=lambda kv: int(kv[0])):
        code = int(code_s)
        pinned = 0
        for m in pinned_months:
            n = int(monthly[m].get(code_s, 0))
            pinned += n
            place(n, *within(*_month_range(m)), "xid", code, "VII")
        rest = int(total) - pinned
        if rest < 0:
            raise ValueError(f"Xid {code}: monthly counts ({pinned}) exceed the yearly count ({total})")
        span_list = free if any(str(code) in monthly[m] for m in pinned_months) else [(span_a, span_b)]
        length = sum(b - a for a, b in span_list) if span_list is free else span_b - span_a
        if rest and not length:
            raise ValueError(f"Xid {code}: no time left outside the monthly-pinned months")
        bursts = []  # lines per fault: Xid 13 prints 1-3 lines; the count is of lines
        while rest > 0:
            n = min(rest, rng.choice(BURST_SIZES)) if code in BURST_XIDS else 1
            bursts.append(n)
            rest -= n
        for n in bursts:
            x = rng.randrange(length)
            for a, b in span_list:
                if x < b - a:
                    faults.append(_Fault(a + x, "xid", code, "VI", n))
                    break
                x -= b - a

    cpu = rates.get("cpu_ecc_monthly", {})
    other = int(fleet.get("cpu_ecc_other_months", 0))
    m_date = dt.date.fromtimestamp(span_a // US)
    month = f"{m_date.year:04d}-{m_date.month:02d}"
    while _month_range(month)[0] < span_b:
        a, b = within(*_month_range(month))
        if month in cpu:
            place(int(cpu[month]), a, b, "cpu_ecc", None, "VII")
        else:
            place(other, a, b, "cpu_ecc", None, "rate")
        y, mo = map(int, month.split("-"))
        month = f"{y + (mo == 12):04d}-{mo % 12 + 1:02d}"

    sources = rates.get("ib_month_source", {})
    default_src = str(sources.get("default", "VIII"))
    daily = rates.get("ib_daily", {})
    ib_monthly = rates.get("ib_monthly", {})
    months = sorted({d[:7] for d in daily} | set(ib_monthly))
    for month in months:
        src = str(sources.get(month, default_src))
        if src == "VII":
            a, b = within(*_month_range(month))
            if a < b:
                place(int(ib_monthly.get(month, 0)), a, b, "ib_flash_cut", None, "VII")
        elif src == "VIII":
            for day in sorted(d for d in daily if d.startswith(month)):
                a = _us(_date(day))
                a, b = within(a, a + DAY_US)
                if a < b:
                    place(int(daily[day]), a, b, "ib_flash_cut", None, "VIII")
        else:
            raise ValueError(f"ib_month_source {month!r}: {src!r} is neither 'VII' nor 'VIII'")
    beyond = rates.get("beyond_paper", {})
    for kind in BEYOND_KINDS:  # none by default: nothing drawn, the paper's schedule unchanged
        place(int(beyond.get(kind, 0)), span_a, span_b, kind, None, "beyond")
    _chain(rates, faults, rng)
    faults.sort(key=lambda f: (f.t, f.kind, f.xid or 0))
    return faults, span_a, span_b


def _chain(rates: dict[str, Any], faults: list[_Fault], rng: random.Random) -> None:
    """``[chains] "A>B" = n``: n of the Xid B faults are each led by an Xid A fault on the same
    GPU, printed CHAIN_LEAD_US before it. The A faults are moved to their B fault, so A must be
    a code no monthly table pins (its yearly count is all that is kept); the B faults stay."""
    monthly = rates.get("xid_monthly", {})
    for key, n in sorted(rates.get("chains", {}).items()):
        try:
            a_s, b_s = key.split(">")
            kind = a_s.strip() if a_s.strip() in BEYOND_KINDS else None  # a kind beyond the paper leads
            a, b, n = (kind if kind else int(a_s)), int(b_s), int(n)
        except ValueError:
            raise ValueError(f"chains: {key!r} = {n!r} is not \"A>B\" = count (A an Xid code or a [beyond_paper] "
                             "kind, B an Xid code)") from None
        if kind is None and any(str(a) in monthly[m] for m in monthly):
            raise ValueError(f"chains: Xid {a} is pinned to months (xid_monthly) and cannot lead a chain")
        if kind is None:
            heads = [f for f in faults if f.kind == "xid" and f.xid == a and f.lead is None and f.after is None]
        else:
            heads = [f for f in faults if f.kind == kind and f.lead is None]
        tails = [f for f in faults if f.kind == "xid" and f.xid == b and f.after is None and f.lead is None]
        if n > len(heads) or n > len(tails):
            name = kind or f"Xid {a}"
            raise ValueError(f"chains: {key} = {n}, but there are {len(heads)} {name} and {len(tails)} Xid {b} faults")
        span = BEYOND_SPAN_US.get(kind, 0) if kind else 0  # the head's lines end before the Xid
        for head, tail in zip(rng.sample(heads, n), rng.sample(tails, n)):
            head.lead, head.lead_us, tail.after = tail, span + rng.randrange(*CHAIN_LEAD_US), head
            head.t = tail.t - head.lead_us


def window_schedule(rates: dict[str, Any], rng: random.Random, seed: int, win_a: int, win_b: int,
                    scale: float) -> list[_Fault]:
    """The faults of ``[win_a, win_b)`` (UTC microseconds) for a fleet ``scale`` times the rates
    file's (``scale``: a finite number >= 0; nodes / ``[fleet] nodes`` for per-node-day rates).

    Period k of the window is the rates span shifted by k spans; each period draws the span's
    schedule ceil(scale) times (period 0's first draw from ``rng``, as :func:`_schedule` alone
    would, every other one from a stream of its own), and when ``scale`` is not a whole number
    each (kind, Xid, table source) group of a period keeps floor or ceil of n * scale / draws
    of its n drawn lines (one a fault; an Xid 13 burst 1-3, the last one kept cut short to
    fit), faults chosen uniformly (stream ``"{seed}:scale"``). A chain whose other end is left
    out is on its own. Sorted by time. ValueError: span empty, bad ``scale``."""
    if not 0 <= scale <= MAX_SCALE:  # NaN too
        raise ValueError(f"fault scale must be from 0 to {MAX_SCALE:,}, not {scale}")
    span_a, span_b = rates_span(rates)
    length = span_b - span_a
    if length <= 0:
        raise ValueError("rates: [fleet] end is before start")
    draws = max(1, math.ceil(scale))
    sampler = random.Random(f"{seed}:scale")
    faults: list[_Fault] = []
    for k in range((win_a - span_a) // length, -((span_a - win_b) // length)):  # periods meeting the window
        drawn: list[_Fault] = []
        for r in range(draws):
            part = _schedule(rates, rng if k == r == 0 else random.Random(f"{seed}:schedule:{k}:{r}"))[0]
            for f in part:
                f.t += k * length
            drawn += part
        if scale != draws:
            groups: dict[tuple[str, int, str], list[_Fault]] = {}
            for f in drawn:
                groups.setdefault((f.kind, f.xid or 0, f.source), []).append(f)
            drawn = []
            for key in sorted(groups):
                group = groups[key]
                want = sum(f.burst for f in group) * scale / draws  # lines: an Xid 13 fault prints 1-3
                keep = math.floor(want) + (sampler.random() < want - math.floor(want))
                taken = 0
                for f in sampler.sample(group, len(group)):  # in random order, until keep lines
                    if taken >= keep:
                        break
                    f.burst = min(f.burst, keep - taken)  # the last burst kept may be cut short
                    taken += f.burst
                    drawn.append(f)
        faults += (f for f in drawn if win_a <= f.t < win_b)
    kept = set(map(id, faults))
    for f in faults:  # a chain cut by the window or the scaling: what is left is on its own
        if f.lead is not None and id(f.lead) not in kept:
            f.lead = None
        if f.after is not None and id(f.after) not in kept:
            f.after = None
    faults.sort(key=lambda f: (f.t, f.kind, f.xid or 0))
    return faults


def _pick_formats(hosts: int, weights: dict[str, float], seed: int) -> list[str]:
    names = sorted(weights)
    w = [float(weights[n]) for n in names]
    return [random.Random(f"{seed}:fmt:{h}").choices(names, w)[0] for h in range(hosts)]


def _fmt_line(fmt: str, host: str, t_us: int, boot_us: int, msg: str) -> str:
    sec = t_us // US
    tm = dt.datetime.fromtimestamp(sec, UTC)
    mono = t_us - boot_us
    if fmt == "syslog3164":
        return f"{MON[tm.month - 1]} {tm.day:2d} {tm:%H:%M:%S} {host} kernel: [{mono // US:5d}.{mono % US:06d}] {msg}"
    if fmt == "rfc3339":
        return f"{tm:%Y-%m-%dT%H:%M:%S}.{t_us % US:06d}+00:00 {host} kernel: [{mono // US:5d}.{mono % US:06d}] {msg}"
    if fmt == "journal":
        return f"{tm:%Y-%m-%dT%H:%M:%S}+0000 {host} kernel: {msg}"
    if fmt == "dmesg_t":
        return f"[{WDAY[tm.weekday()]} {MON[tm.month - 1]} {tm.day:2d} {tm:%H:%M:%S} {tm.year}] {msg}"
    raise ValueError(f"unknown log format {fmt!r}")


def printed_time_us(fmt: str, t_us: int) -> int:
    """The time a line of ``fmt`` shows for an event at ``t_us`` (seconds-only formats truncate)."""
    return t_us if fmt == "rfc3339" else t_us - t_us % US


def _log_name(fmt: str) -> str:
    return {"journal": "journal.log", "dmesg_t": "dmesg.log"}.get(fmt, "kern.log")


def _fill(rng: random.Random, template: str, code: int = 0) -> str:
    return template.format(
        b=rng.choice(GPU_BUSES), p=rng.randrange(1000, 4_000_000), ch=rng.randrange(8, 64), g=rng.randrange(8),
        a=rng.randrange(0x10, 0xff), a2=rng.randrange(0x1000, 0xfffff), r1=0x52e7b0 + 0x80 * rng.randrange(16),
        r2=0x52e7b4 + 0x80 * rng.randrange(16), v1=rng.randrange(1 << 24), v2=rng.randrange(64), code=code,
        i=rng.randrange(8), n=rng.randrange(10_000, 10_000_000), n2=rng.randrange(10_000, 10_000_000),
        h=rng.randrange(1 << 28), t=rng.randrange(1_600_000_000, 1_800_000_000), ms=rng.randrange(1000),
        p2=rng.randrange(300, 2000), ib=rng.choice(IB_BUSES))


def simulate(out_dir: str | os.PathLike[str], nodes: int | None = None, days: int | None = None,
             seed: int = 0, rates: dict[str, Any] | str | os.PathLike[str] | None = None,
             start: dt.date | str | None = None, noise_per_node_day: float | None = None,
             gzip_level: int = 6, fault_scale: float | None = None,
             progress: Callable[[int, int, int], None] | None = None) -> dict[str, Any]:
    """Write the fleet's logs and ``ground_truth.csv`` under ``out_dir``; returns a summary
    (``nodes``, ``start``, ``end``, ``fault_scale``, ``faults``, ``truth_rows``, ``files``, ``lines``).
    ``progress``, when given, is called after each node's logs are written with (nodes written,
    nodes, lines written so far); it does not change what is written.

    ``nodes`` (default ``[fleet] nodes``) and ``days`` from ``start`` (default the rates span)
    keep the rates file's per-node-day rates: its counts are multiplied by ``fault_scale``
    (default ``nodes / [fleet] nodes``) and repeated past its span (:func:`window_schedule`).
    ValueError: bad rates, arguments, or a non-empty ``out_dir``."""
    if not isinstance(rates, dict):
        rates = load_rates(rates)
    check_rates(rates)
    out_path = Path(out_dir)
    if out_path.is_dir() and any(out_path.iterdir()):
        raise ValueError(f"{out_path}: not empty (old logs would mix with the new ones); give a new directory")
    fleet = rates.get("fleet", {})
    nodes = int(nodes if nodes is not None else fleet.get("nodes", 1250))
    if nodes < 1:
        raise ValueError("--nodes must be at least 1")
    noise = float(noise_per_node_day if noise_per_node_day is not None else fleet.get("noise_per_node_day", 8))
    if not 0 <= noise <= 1e6:  # NaN too
        raise ValueError(f"noise per node and day must be from 0 to 1e6, not {noise}")
    scale = float(fault_scale) if fault_scale is not None else nodes / rates_nodes(rates)
    rng = random.Random(f"{seed}:schedule")
    span_a, span_b = rates_span(rates)
    win_a = _us(_date(start)) if start is not None else span_a
    win_b = win_a + int(days) * DAY_US if days is not None else span_b
    if win_b <= win_a:
        raise ValueError("--days must be at least 1")
    faults = window_schedule(rates, rng, seed, win_a, win_b, scale)
    rot_days = int(fleet.get("rotation_days", 7))
    if rot_days < 1:
        raise ValueError("rotation_days must be at least 1")
    rot_us = rot_days * DAY_US
    rot0 = win_a + ROTATE_AT_US - rot_us  # rotation points: rot0 + k * rot_us

    def near_rotation(t: int) -> bool:
        off = (t - rot0) % rot_us
        return off < ROTATE_GUARD_US or off > rot_us - ROTATE_GUARD_US

    width = max(4, len(str(nodes)))
    hosts = [f"node{h:0{width}d}" for h in range(1, nodes + 1)]
    formats = _pick_formats(nodes, fleet.get("formats", {"syslog3164": 1}), seed)
    gpus = int(fleet.get("gpus_per_node", 8))
    n_ib = int(fleet.get("ib_devices_per_node", 4))
    busy: list[list[int]] = [[] for _ in range(nodes)]  # sorted fault-group times per host

    # Assign hosts (and move a fault off a rotation point); fault groups on a host >= 1 min apart.
    # A chain head goes with the fault it leads: same host, just before it.
    for fault in faults:
        if fault.lead is not None:
            continue
        if near_rotation(fault.t):
            fault.t += 2 * ROTATE_GUARD_US if fault.t + 2 * ROTATE_GUARD_US < win_b else -2 * ROTATE_GUARD_US
        gap = MIN_GAP_US + (fault.after.lead_us if fault.after is not None else 0)
        for _ in range(1000):
            h = rng.randrange(nodes)
            lst = busy[h]
            i = bisect.bisect_left(lst, fault.t)
            if (i == len(lst) or lst[i] - fault.t >= MIN_GAP_US) and (i == 0 or fault.t - lst[i - 1] >= gap):
                break
        else:
            raise ValueError("fleet too small for the fault rate (no host free a minute around a fault)")
        lst.insert(i, fault.t)
        fault.host = h
    for fault in faults:
        if fault.lead is not None:
            fault.t, fault.host = fault.lead.t - fault.lead_us, fault.lead.host
    faults.sort(key=lambda f: (f.t, f.host))

    # Lines and truth rows of each fault.
    fid = 0
    for fault in faults:
        fid += 1
        fault.fid = fid
        host, fmt = hosts[fault.host], formats[fault.host]
        base = {"host": host, "kind": fault.kind, "xid": "", "device": "", "port": "", "down_time": "",
                "up_time": "", "fault_id": fid, "table_source": fault.source, "line_format": fmt,
                "after_fault_id": fault.after.fid if fault.after is not None else ""}
        if fault.kind == "xid":
            code = fault.xid
            templates = XID_TEMPLATES.get(code, (GENERIC_XID,))
            bus = GPU_BUSES[rng.randrange(min(gpus, len(GPU_BUSES)))]
            if fault.after is not None and fault.after.bus:
                bus = fault.after.bus  # the chain's GPU
            fault.bus = bus
            t = fault.t
            for k in range(fault.burst):
                extra: dict[str, Any] = {}
                if code == 154:
                    (f, fname, _), (to, tname, action) = _recovery_change(rng)
                    msg = XID_154.format(b=bus, f=f, fn=fname, t=to, tn=tname)
                    extra["action"] = action
                else:
                    msg = _set_bus(_fill(rng, rng.choice(templates), code), bus)
                fault.lines.append((t, msg))
                fault.rows.append(dict(base, time=_iso(t), xid=code, device=f"0000:{bus}:00.0", **extra))
                t += rng.randrange(1500, 2500)
        elif fault.kind in BEYOND_KINDS:
            _beyond_group(fault, rng, base, gpus)
        elif fault.kind == "cpu_ecc":
            s, c, d = rng.randrange(2), rng.randrange(6), rng.randrange(2)
            label = f"CPU_SrcID#{s}_Ha#0_Chan#{c}_DIMM#{d}"
            msg = EDAC_CE.format(mc=s * 2, s=s, c=c, d=d, page=rng.randrange(0x100000, 0x3fffff),
                                 off=rng.randrange(0, 0x1000, 0x40), mask=1 << c, rank=rng.randrange(2))
            fault.lines.append((fault.t, msg))
            fault.rows.append(dict(base, time=_iso(fault.t), device=f"mc{s * 2}/{label}"))
        else:
            dev = rng.randrange(n_ib)
            up = fault.t + rng.randrange(1 * US, 30 * US + 1)
            prefix = f"mlx5_core 0000:{IB_BUSES[dev % len(IB_BUSES)]}:00.0 mlx5_{dev}: Port: 1 Link"
            fault.lines += [(fault.t, prefix + " DOWN"), (up, prefix + " ACTIVE")]
            fault.rows.append(dict(base, time=_iso(fault.t), device=f"mlx5_{dev}/1", port=1,
                                   down_time=_iso(fault.t), up_time=_iso(up)))

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    per_host: list[list[_Fault]] = [[] for _ in range(nodes)]
    for fault in faults:
        per_host[fault.host].append(fault)
    reboots_per_year = float(fleet.get("reboots_per_node_year", 3))
    files = 0
    total_lines = 0
    for h in range(nodes):
        hrng = random.Random(f"{seed}:host:{h}")
        host, fmt = hosts[h], formats[h]
        # (time, order, message) where order keeps a fault's lines and a boot banner together
        lines: list[tuple[int, int, str]] = []
        boots = [win_a - hrng.randrange(DAY_US, 30 * DAY_US)]
        n_reboot = _poisson(hrng, reboots_per_year * (win_b - win_a) / (365 * DAY_US))
        for t in sorted(hrng.randrange(win_a, win_b) for _ in range(n_reboot)):
            if near_rotation(t) or near_rotation(t + 10 * US):
                continue
            i = bisect.bisect_left(busy[h], t)
            if (i < len(busy[h]) and busy[h][i] - t < 2 * MIN_GAP_US) or (i and t - busy[h][i - 1] < 2 * MIN_GAP_US):
                continue  # not in the middle of a fault's lines
            boots.append(t)
            for k, template in enumerate(BOOT):
                lines.append((t + k * 37_000 + hrng.randrange(1000), 0, _fill(hrng, template)))
        days_n = (win_b - win_a) // DAY_US
        for d in range(days_n):
            n = _poisson(hrng, noise)
            day0 = win_a + d * DAY_US
            for _ in range(n):
                t = day0 + hrng.randrange(DAY_US)
                lines.append((t, 1, _fill(hrng, hrng.choice(NOISE))))
        for fault in per_host[h]:
            for t, msg in fault.lines:
                lines.append((t, 0, msg))
        lines.sort(key=lambda x: (x[0], x[1]))
        total_lines += len(lines)
        # Split into rotation periods.
        periods: list[list[str]] = []
        last_t: list[int] = []
        cur_k = None
        for t, _, msg in lines:
            k = (t - rot0) // rot_us
            if k != cur_k:
                periods.append([])
                last_t.append(t)
                cur_k = k
            b = bisect.bisect_right(boots, t) - 1
            periods[-1].append(_fmt_line(fmt, host, t, boots[max(b, 0)], msg))
            last_t[-1] = t
        hdir = out / host
        hdir.mkdir(exist_ok=True)
        name = _log_name(fmt)
        n_per = len(periods)
        for i, (plines, t_last) in enumerate(zip(periods, last_t)):
            age = n_per - 1 - i  # 0: the live file
            mtime = printed_time_us(fmt, t_last) / US
            data = ("\n".join(plines) + "\n").encode()
            if age == 0:
                path = hdir / name
                path.write_bytes(data)
            elif age == 1:
                path = hdir / f"{name}.1"
                path.write_bytes(data)
            else:
                path = hdir / f"{name}.{age}.gz"
                with open(path, "wb") as raw:
                    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=int(mtime),
                                       compresslevel=gzip_level) as gz:
                        gz.write(data)
            os.utime(path, (mtime, mtime))
            files += 1
        if progress is not None:
            progress(h + 1, nodes, total_lines)

    truth_rows = [row for fault in faults for row in fault.rows]
    fields = TRUTH_FIELDS
    if any(k in row for row in truth_rows for k in EXTRA_TRUTH_FIELDS):
        fields = TRUTH_FIELDS + EXTRA_TRUTH_FIELDS
    with open(out / "ground_truth.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n", restval="")
        w.writeheader()
        w.writerows(truth_rows)
    os.utime(out / "ground_truth.csv", (win_b / US, win_b / US))  # same seed, same files, same mtimes
    return {"nodes": nodes, "start": _iso(win_a), "end": _iso(win_b), "fault_scale": scale, "faults": len(faults),
            "truth_rows": len(truth_rows), "files": files, "lines": total_lines}


def _recovery_change(rng: random.Random) -> tuple[tuple, tuple]:
    """(from, to) recovery actions of an Xid 154: mostly from None to an action, sometimes an
    action to another, or back to None (a reset done)."""
    r = rng.random()
    if r < 0.6:
        return RECOVERY_ACTIONS[0], RECOVERY_ACTIONS[rng.randrange(1, len(RECOVERY_ACTIONS))]
    a, b = rng.sample(range(1, len(RECOVERY_ACTIONS)), 2)
    if r < 0.8:
        return RECOVERY_ACTIONS[a], RECOVERY_ACTIONS[b]
    return RECOVERY_ACTIONS[a], RECOVERY_ACTIONS[0]


def _gpu_port(bus: str) -> str:
    """The PCIe port above bus ``bus`` (a switch or root port on the bus before it; device 01, so
    that it is never a GPU's or a NIC's 00.0)."""
    return f"0000:{int(bus, 16) - 1:02x}:01.0"


def _beyond_group(fault: _Fault, rng: random.Random, base: dict[str, Any], gpus: int) -> None:
    """The lines and ground-truth rows of one fault of a kind beyond the paper (BEYOND_KINDS)."""
    t0, kind = fault.t, fault.kind
    lines, rows = fault.lines, fault.rows

    def row(t: int, kind: str, device: str, **extra: Any) -> None:
        rows.append(dict(base, time=_iso(t), kind=kind, device=device, **extra))

    if kind.startswith("sxid_"):
        sw, pci = NVSWITCHES[rng.randrange(len(NVSWITCHES))]
        head = SXID_HEAD.format(sw=sw, pci=pci, code="{code}")
        words = ", ".join(f"0x{rng.randrange(1 << 32):08x}" for _ in range(9))
        if kind == "sxid_data_only":
            code, severity = SXID_DATA_ONLY[rng.randrange(len(SXID_DATA_ONLY))]
            lines.append((t0, head.format(code=code) + f"Data {{{words}}}"))
        else:
            fatal = kind == "sxid_fatal"
            code, text = rng.choice(SXID_FATAL if fatal else SXID_NON_FATAL)
            link = rng.randrange(64)
            severity = "fatal" if fatal else "non_fatal"
            h = head.format(code=code)
            lines += [(t0, h + f"Data {{{words}}}"),
                      (t0 + 3_100, h + f"{'Fatal' if fatal else 'Non-fatal'}, Link {link:02d} {text}"),
                      (t0 + 5_100, h + f"Severity {int(fatal)} Engine instance {link:02d} Sub-engine instance 00")]
        row(t0, "sxid", pci, code=code, severity=severity, category=severity, switch=sw)
        return
    if kind == "pcie_aer_corrected":
        # a receiver error on a GPU's port, reported by the port itself (status RxErr, bit 0)
        port = _gpu_port(GPU_BUSES[rng.randrange(min(gpus, len(GPU_BUSES)))])
        d = dict(drv="pcieport", dev=port, port=port)
        lines += [(t0, AER_RECEIVED.format(**d, multi="", sev="Corrected", src=port)),
                  (t0 + 20, AER_BUS_ERROR.format(**d, sev="Corrected", layer="Physical Layer", agent="Receiver ID")),
                  (t0 + 40, AER_DEVICE.format(**d, vendor=ROOT_PORT_ID, status=0x1, mask=0x2000)),
                  (t0 + 60, AER_BIT.format(**d, bit=0, name="RxErr", first=""))]
        row(t0, "pcie_aer", port, severity="corrected", category="corrected", errors="RxErr")
        return
    if kind == "pcie_aer_non_fatal":
        # a NIC's Unsupported Request, recovered by its driver (mlx5_core has error handlers)
        nic = f"0000:{NIC_BUSES[rng.randrange(len(NIC_BUSES))]}:00.0"
        port = _gpu_port(nic.split(":")[1])
        d = dict(drv="mlx5_core", dev=nic, port=port)
        tlp = f"34000000 {int(nic.split(':')[1], 16):02x}000010 00000000 00000000"
        lines += [(t0, AER_RECEIVED.format(drv="pcieport", port=port, multi="", sev="Uncorrected (Non-Fatal)",
                                           src=nic)),
                  (t0 + 30, AER_BUS_ERROR.format(**d, sev="Uncorrected (Non-Fatal)", layer="Transaction Layer",
                                                 agent="Requester ID")),
                  (t0 + 60, AER_DEVICE.format(**d, vendor="15b3:1021", status=0x100000, mask=0)),
                  (t0 + 90, AER_BIT.format(**d, bit=20, name="UnsupReq", first=" (First)")),
                  (t0 + 120, AER_TLP.format(**d, tlp=tlp)),
                  (t0 + 2_500, AER_RECOVERED.format(port=port))]
        row(t0, "pcie_aer", nic, severity="non_fatal", category="non_fatal", first_error="UnsupReq",
            errors="UnsupReq")
        row(t0 + 2_500, "pcie_aer_recovery", port, category="recovered")
        return
    if kind == "pcie_aer_fatal_gpu":
        # P-101: a completion timeout on the GPU's port; the nvidia driver has no AER callback
        bus = GPU_BUSES[rng.randrange(min(gpus, len(GPU_BUSES)))]
        fault.bus = bus
        gpu, port = f"0000:{bus}:00.0", _gpu_port(bus)
        d = dict(drv="pcieport", dev=port, port=port)
        multi = rng.choice(("", "Multiple "))
        audio = rng.random() < 0.5  # a GPU with an HDMI audio function (.1) also prints its own line
        lines += [(t0, AER_RECEIVED.format(**d, multi=multi, sev="Uncorrected (Fatal)", src=port)),
                  (t0 + 4, AER_BUS_ERROR.format(**d, sev="Uncorrected (Fatal)", layer="Transaction Layer",
                                                agent="Requester ID")),
                  (t0 + 902, AER_DEVICE.format(**d, vendor=ROOT_PORT_ID, status=0x4020, mask=0)),
                  (t0 + 1_791, AER_BIT.format(**d, bit=5, name="SDES", first="")),
                  (t0 + 2_685, AER_BIT.format(**d, bit=14, name="CmpltTO", first=" (First)")),
                  (t0 + 3_606, AER_CANT_RECOVER.format(drv="nvidia", dev=gpu))]
        row(t0, "pcie_aer", port, severity="fatal", category="gpu_lost_precursor", first_error="CmpltTO",
            errors="SDES CmpltTO", affected_devices=gpu + (f" 0000:{bus}:00.1" if audio else ""))
        # the line joins its record (the record is the precursor): its category is its outcome
        row(t0 + 3_606, "pcie_aer_recovery", gpu, category="no_error_detected_callback")
        if audio:
            lines.append((t0 + 3_608, AER_CANT_RECOVER.format(drv="snd_hda_intel", dev=f"0000:{bus}:00.1")))
            row(t0 + 3_608, "pcie_aer_recovery", f"0000:{bus}:00.1", category="no_error_detected_callback")
        lines += [(t0 + 1_054_047, AER_LINK_RESET.format(port=port, rc=0)),
                  (t0 + 1_054_088, AER_FAILED.format(port=port))]
        row(t0 + 1_054_047, "pcie_aer_recovery", port, category="link_reset")
        row(t0 + 1_054_088, "pcie_aer_recovery", port, category="recovery_failed")
        return
    if kind == "gpu_reset_required":
        lines.append((t0, RESET_REQUIRED.format(line=rng.choice((2827, 2874)))))
        row(t0, "gpu_reset_required", "", action="gpu_reset")
        return
    if kind == "amd_mca_edac":
        mc, cs, ch = rng.randrange(8), rng.randrange(4), rng.randrange(8)
        over = rng.random() < 0.5
        v = dict(cpu=rng.randrange(128), bank=16 + rng.randrange(8), over="Over" if over else "-",
                 status=0xdc2040000000011b if over else 0x9c2040000000011b,
                 addr=rng.randrange(0x100000000, 0x4000000000) & ~0x1f, ipid=0x0000009600350f00 | (mc << 20),
                 syn=rng.randrange(1 << 64), mc=mc, cs=cs, ch=ch, esyn=rng.randrange(1 << 16))
        for k, template in enumerate(AMD_MCA):
            lines.append((t0 + k * 15_000, template.format(**v)))
        row(t0 + 5 * 15_000, "cpu_ecc", f"mc{mc}/mc#{mc}csrow#{cs}channel#{ch}", severity="corrected")
        return
    if kind == "ghes_memory":
        addr = rng.randrange(0x100000000, 0x4000000000) & ~0x1f
        v = dict(mc=0, n=rng.randrange(1, 5), src=rng.randrange(0, 4), rank=rng.randrange(2), bank=rng.randrange(2048),
                 bg=rng.randrange(8), ba=rng.randrange(4), row=rng.randrange(1 << 17), col=rng.randrange(1024),
                 addr=addr, page=addr >> 12, off=addr & 0xfff)
        # Both orders are the kernel's: ghes_proc() prints the record (ghes_print_estatus) before
        # ghes_do_proc() reports it to ghes_edac; ghes_proc_in_irq() (NMI/SEA path) the reverse.
        msgs = [template.format(**v) for template in GHES_MEMORY]
        if rng.random() < 0.5:
            msgs = msgs[1:] + msgs[:1]
        for k, msg in enumerate(msgs):
            lines.append((t0 + k * 1_000, msg))
        row(t0, "cpu_ecc", "", severity="corrected")
        return
    raise ValueError(f"unknown kind {kind!r}")


def _set_bus(msg: str, bus: str) -> str:
    """Put the fault's GPU bus into an Xid line (templates draw a random one)."""
    head, sep, rest = msg.partition("PCI:0000:")
    return head + sep + bus + rest[2:] if sep else msg


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, lam ** 0.5)))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
