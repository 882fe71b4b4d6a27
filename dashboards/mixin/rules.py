"""The Prometheus alerting and recording rules, as rule-group dicts.

:data:`ALERTS` is the table of every alert (name, severity, what it means); :func:`alert_groups`
builds their rules and :func:`recording_groups` the recording rules, both from a
:class:`~dashboards.mixin.config.Config`. The build writes them to ``alerts/nodewarden-alerts.yaml``
and ``rules/nodewarden-rules.yaml``; ``dashboards/tests/*.yaml`` are their promtool unit tests
and ``dashboards/runbooks.md`` has one section per alert (anchor: the name in lower case).

Counters and windows, the two kinds of "it happened" expression used here:

* Counters the agent creates at their first event, with value 1 (Xid per GPU and code, MCE and
  kernel-log EDAC per type, flash cuts, NVSwitch SXids, kernel-log PCIe AER records and recovery
  outcomes, GPU-lost precursors, reset-required events) or at their first count (the sysfs PCIe
  AER error bits): :func:`promql.increase_with_first`, because ``increase()`` never counts a
  series' first sample.
* Counters that exist from the agent's first poll at whatever value the hardware holds (GPU ECC,
  sysfs EDAC, the sysfs PCIe AER totals per function and severity, NVLink, kmsg loss):
  :func:`promql.window_increase` (the exact difference, not ``increase()``'s extrapolation, so a
  description quotes the count itself), which gives 0 for a counter that is non-zero but flat,
  so an old error never pages.

Every alert keeps the target's labels (``job``, ``instance``, ``node``, ``cluster``) and the
device's, and says in its description which node and device, and what to do.
"""

from __future__ import annotations

import dataclasses

from nodewarden import nvml

from . import promql
from .config import Config
from .promql import sel

SEVERITIES = ("critical", "warning", "info")

XID = "nodewarden_gpu_xid_errors_total"
XID_POLICY = "gpu_xid:nodewarden_gpu_xid_errors_total:policy"
GPU_COUNT = "cluster_node:nodewarden_gpus:count"  # GPUs NVML lists per node
# Exact counts per evaluation interval, for the failure-statistics tables over long ranges
# (promql.interval_increase): one series per cluster and code (or kind), not per GPU.
CLUSTER_XID = "cluster_xid:nodewarden_gpu_xid_errors:interval_increase"
CLUSTER_EDAC = "cluster:nodewarden_edac_errors:interval_increase"
CLUSTER_FLASH_CUTS = "cluster:nodewarden_ib_flash_cuts:interval_increase"
EDAC_CE, EDAC_UE = "nodewarden_edac_correctable_errors_total", "nodewarden_edac_uncorrectable_errors_total"
# Kernel-log fault kinds beyond the paper's tables (NVSwitch SXid, PCIe AER, GPU reset/recovery):
# one series per cluster and `kind` (the columns of `nodewarden analyze`'s beyond_paper_monthly).
CLUSTER_BEYOND = "cluster_kind:nodewarden_beyond_paper_events:interval_increase"
SXID = "nodewarden_nvswitch_sxid_errors_total"            # {switch, pci_bus_id, sxid, severity}
AER_LOGGED = "nodewarden_pcie_aer_logged_errors_total"    # {pci_bus_id, severity} kernel-log records
AER_SYSFS = "nodewarden_pcie_aer_errors_total"            # {pci_bus_id, severity} sysfs aer_dev_*: sum of its bits
AER_BITS = "nodewarden_pcie_aer_bit_errors_total"         # {pci_bus_id, severity, error} bits that counted
AER_RECOVERY = "nodewarden_pcie_aer_recovery_events_total"  # {pci_bus_id, outcome}
PRECURSOR = "nodewarden_gpu_lost_precursor_events_total"  # {gpu, pci_bus_id, reason}
RESET_EVENTS = "nodewarden_gpu_reset_required_events_total"  # {gpu, pci_bus_id, action}
RECOVERY_ACTION = "nodewarden_gpu_recovery_action"        # {gpu, action} 1 for the current action
# NVML's nvmlDeviceGpuRecoveryAction_t (nvml.h): the agent's `action` label names and the values
# (the ones every driver with the field has, nodewarden.nvml.RECOVERY_ACTION_LABELS; newer ones and
# `unknown` appear only while current).
RECOVERY_ACTIONS = {name: code for code, name in sorted(nvml.RECOVERY_ACTIONS.items())
                    if name in nvml.RECOVERY_ACTION_LABELS}
# Actions that need the node rebooted (NodewardenNodeRebootRequired); any other but none needs a
# GPU reset or a drain first (NodewardenGpuResetRequired), an action this mixin does not know too.
REBOOT_ACTIONS = "node_reboot|system_reboot"

# DCGM's NVLink health watch (modules/health/DcgmHealthWatch.cpp, limits in
# dcgm_gpu_hardware_limits.h): a CRC (flit or data) error counter fails the watch at
# DCGM_LIMIT_MAX_NVLINK_CRC_ERROR = 100 errors per second ("RM has informed us that CRC errors
# only matter at rates of 100+ per second"); any rise of the replay or recovery counter
# (DCGM_LIMIT_MAX_NVLINK_ERROR = 1) fails it. The alert uses the same limits.
NVLINK_CRC_PER_SECOND = 100
NVLINK_REPLAY_RECOVERY_COUNT = 1
NVIDIA_VENDOR = "0x10de"
HARDWARE = 'hardware="true"'
CURRENT, MAX = 'which="current"', 'which="max"'
# "GPU 3 (0000:5d:00.0, GPU-ceee...) on gpu-a": the bus id and uuid when the series has them
# A state alert (lost, remap pending/failed) keeps only the agent's labels and `gpu`, so that a
# restart of the agent, after which a lost GPU has no identity series, does not change the alert;
# its description looks the identity up (the last one within a week) when it is rendered.
GPU_LOOKUP = ('GPU [[gpu]]{{ with printf `last_over_time(nodewarden_gpu_info{%s,instance="%s",gpu="%s"}[1w])` '
              '"JOB" $labels.instance $labels.gpu | query }}{{ with first . }} ({{ .Labels.pci_bus_id }}, '
              '{{ .Labels.uuid }}){{ end }}{{ end }} on [[node]]')
GPU = ("GPU [[gpu]]{{ with $labels.pci_bus_id }} ({{ . }}{{ with $labels.uuid }}, {{ . }}{{ end }}){{ end }}"
       " on [[node]]")
# A kernel-log series whose `gpu` is empty when the line named no GPU the agent could map (a
# driver assertion without a PCI id): "GPU 3 (0000:5d:00.0) on gpu-a", "The GPU at 0000:5d:00.0
# on gpu-a", "A GPU on gpu-a" (it starts a sentence).
LOG_GPU = ("{{ if $labels.gpu }}GPU [[gpu]]{{ with $labels.pci_bus_id }} ({{ . }}){{ end }}"
           "{{ else }}{{ with $labels.pci_bus_id }}The GPU at {{ . }}{{ else }}A GPU{{ end }}{{ end }} on [[node]]")
LOG_GPU_SHORT = "{{ if $labels.gpu }}GPU [[gpu]]{{ else }}A GPU{{ end }}"
PRECURSOR_REASON = ('{{ if eq $labels.reason "fatal_aer" }}an uncorrected (fatal) PCIe AER error'
                    '{{ else if eq $labels.reason "non_fatal_aer" }}an uncorrected (non-fatal) PCIe AER error'
                    '{{ else if eq $labels.reason "aer_no_error_detected_callback" }}an AER error its driver could '
                    "not recover (no error_detected callback)"
                    '{{ else if eq $labels.reason "aer_recovery_failed" }}a failed AER device recovery'
                    "{{ else }}a precursor event ([[reason]]){{ end }}")


@dataclasses.dataclass(frozen=True)
class Alert:
    """One alert: its name (``NodewardenGpuLost``), ``severity`` label (critical pages, warning
    tickets), the rule group it is in, and one sentence saying what it means."""

    name: str
    severity: str
    group: str
    meaning: str


ALERTS: tuple[Alert, ...] = (
    Alert("NodewardenGpuLost", "critical", "nodewarden-gpu",
          "NVML answers GPU_IS_LOST for a GPU: it fell off the bus (Xid 79) and no job can use it."),
    Alert("NodewardenGpuMissing", "critical", "nodewarden-gpu",
          "NVML lists fewer GPUs on the node than it did within the last week: a GPU is gone from the driver."),
    Alert("NodewardenGpuUncorrectableEcc", "critical", "nodewarden-gpu",
          "The GPU's volatile uncorrected ECC counter rose: a double-bit error in its memory."),
    Alert("NodewardenGpuRowRemapFailure", "critical", "nodewarden-gpu",
          "The GPU could not remap a failing memory row (spare rows used up): it needs replacing."),
    Alert("NodewardenGpuRowRemapPending", "warning", "nodewarden-gpu",
          "A row remap is recorded but takes effect only after a GPU reset."),
    Alert("NodewardenGpuHardwareXid", "critical", "nodewarden-gpu",
          "An Xid the policy marks hardware (drain or reset_gpu) was logged; never an application Xid."),
    Alert("NodewardenGpuNvlinkErrors", "warning", "nodewarden-gpu",
          "An NVLink link replays or recovers, or has CRC errors at 100/s or more (DCGM's limits)."),
    Alert("NodewardenGpuLostPrecursor", "critical", "nodewarden-gpu",
          "An uncorrected PCIe AER error on an NVIDIA function, or AER recovery that failed for it: the GPU "
          "is about to fall off the bus."),
    Alert("NodewardenGpuResetRequired", "critical", "nodewarden-gpu",
          "The driver says a GPU must be reset (NVML recovery action, NV_ERR_RESET_REQUIRED or Xid 154)."),
    Alert("NodewardenNodeRebootRequired", "critical", "nodewarden-gpu",
          "The driver says the node must be rebooted to recover a GPU (recovery action node_reboot)."),
    Alert("NodewardenNvswitchFatalSxid", "critical", "nodewarden-nvswitch",
          "An NVSwitch logged a fatal SXid: NVLink traffic through it stopped, the jobs across it failed."),
    Alert("NodewardenNvswitchSxidStorm", "warning", "nodewarden-nvswitch",
          "An NVSwitch logged many non-fatal SXids within the storm window (10 in 1 h by default)."),
    Alert("NodewardenIbFlashCutStorm", "warning", "nodewarden-infiniband",
          "One IB port dropped and came back (flash cut) several times within the storm window."),
    Alert("NodewardenIbPortDown", "critical", "nodewarden-infiniband",
          "An IB/RoCE port has not been ACTIVE for the long `for` period."),
    Alert("NodewardenIbPortDegraded", "warning", "nodewarden-infiniband",
          "An ACTIVE port runs below the fastest port of the same link layer and board on its node."),
    Alert("NodewardenEdacUncorrectable", "critical", "nodewarden-host",
          "EDAC counted an uncorrectable CPU memory error on a DIMM."),
    Alert("NodewardenEdacCorrectableRate", "warning", "nodewarden-host",
          "A DIMM's corrected errors reached the mcelog threshold (10 in 24 h by default): it is failing."),
    Alert("NodewardenMachineCheck", "critical", "nodewarden-host",
          "The kernel logged an uncorrected machine check (CPU, cache, memory controller or bus)."),
    Alert("NodewardenPcieLinkDowntrained", "warning", "nodewarden-host",
          "A PCIe link trained below its maximum width (or generation, for non-NVIDIA functions)."),
    Alert("NodewardenPcieAerUncorrected", "warning", "nodewarden-host",
          "A PCI function (not a GPU-lost precursor) reported an uncorrected (fatal or non-fatal) AER error."),
    Alert("NodewardenPcieAerCorrectedStorm", "warning", "nodewarden-host",
          "A PCI function reported corrected AER errors at DCGM's PCIe replay limit (80 in 10 min) or more."),
    Alert("NodewardenValidatorFailed", "critical", "nodewarden-validator",
          "A check of the last scheduled `nodewarden validate` run failed: the node should be drained."),
    Alert("NodewardenValidatorIncomplete", "warning", "nodewarden-validator",
          "A check of the last validator run could not run (status error): the node's health is unknown."),
    Alert("NodewardenValidatorStale", "warning", "nodewarden-validator",
          "The node's last validator run is older than the stale limit (8 days), or it never ran."),
    Alert("NodewardenAgentDown", "warning", "nodewarden-agent",
          "Prometheus cannot scrape the agent: the node is down, or the agent, or the network."),
    Alert("NodewardenCollectorFailing", "warning", "nodewarden-agent",
          "One of the agent's collectors fails or hangs: its series are missing or stale."),
    Alert("NodewardenKmsgRecordsLost", "warning", "nodewarden-agent",
          "The kernel-log reader lost records: faults in them were not counted."),
)
BY_NAME: dict[str, Alert] = {a.name: a for a in ALERTS}


# ---- helpers ---------------------------------------------------------------------------------

def _t(text: str) -> str:
    """``[[node]]`` -> ``{{ $labels.node }}``, ``[[count]]`` -> the value as a whole number,
    ``[[value]]`` -> the value humanized: Go templates without brace escaping in Python."""
    text = text.replace("[[count]]", '{{ printf "%.0f" $value }}').replace("[[value]]", "{{ $value | humanize }}")
    out = []
    for i, part in enumerate(text.split("[[")):
        if i == 0:
            out.append(part)
            continue
        name, sep, rest = part.partition("]]")
        out.append(("{{ $labels.%s }}" % name if sep else "[[" + name) + rest)
    return "".join(out)


def _alert(name: str, expr: str, summary: str, description: str, for_: str | None = None) -> dict:
    a = BY_NAME[name]
    rule: dict = {"alert": name, "expr": expr}
    if for_ and for_ not in ("0", "0s"):
        rule["for"] = for_
    rule["labels"] = {"severity": a.severity}
    rule["annotations"] = {"summary": _t(summary), "description": _t(description)}  # + runbook_url: _finish
    return rule


def _with_gpu_info(cfg: Config, expr: str) -> str:
    """``expr`` (per ``gpu``) with ``pci_bus_id`` and ``uuid`` from ``nodewarden_gpu_info``; a GPU
    without an info series (lost before its first poll) keeps its alert without them."""
    # one info series per GPU even when a target is scraped twice or a GPU's identity changed
    # between two scrapes (two series in the lookback): a many-to-many match would fail the rule
    # the current identity, else the last one within the fault window: it stays while the
    # fault's own range does (an agent restart must not turn one alert into two with other
    # labels), and a GPU swapped in place is named by its new uuid
    gi = sel(cfg, "nodewarden_gpu_info")
    info = f"topk by (job, instance, gpu) (1, {gi} or on(job, instance, gpu) last_over_time({gi}[{cfg.fault_window}]))"
    return f"({expr}) * on(job, instance, gpu) group_left(pci_bus_id, uuid) {info} or on(job, instance, gpu) ({expr})"


def policy_labels(expr: str) -> str:
    """``expr`` (series with an ``xid`` label) with ``action`` and ``hardware`` added from the
    shipped policy: one ``label_replace`` per action over the codes that have it. Codes the
    catalog does not list keep the defaults, ``investigate`` and ``"false"``."""
    out = f'label_replace({expr}, "action", "investigate", "", "")'
    for action, codes in promql.xid_codes_by_action().items():
        if action != "investigate":
            out = f'label_replace({out}, "action", "{action}", "xid", "{promql.regex(codes)}")'
    out = f'label_replace({out}, "hardware", "false", "", "")'
    return f'label_replace({out}, "hardware", "true", "xid", "{promql.regex(promql.hardware_xid_codes())}")'


def _policy_increase(cfg: Config, matchers: str, window: str) -> str:
    """:func:`promql.increase_with_first` over the policy-labelled Xid series, where "new" is
    judged on the raw counter: a recorded series is also new right after the rules are first
    loaded, and every old Xid of the fleet would then count (and page) once."""
    return promql.increase_with_first(cfg, sel(cfg, XID_POLICY, matchers), window, born=sel(cfg, XID),
                                      ignoring="action, hardware")


def _grouping(cfg: Config, *labels: str) -> str:
    return ", ".join(name for name in (cfg.cluster_label, cfg.node_label, *labels) if name)


# ---- recording rules -------------------------------------------------------------------------

def recording_groups(cfg: Config) -> list[dict]:
    """The recording-rule groups:

    * ``gpu_xid:nodewarden_gpu_xid_errors_total:policy``: every Xid series with ``action``
      (drain|reset_gpu|restart_app|ignore|investigate) and ``hardware`` ("true"|"false") added
      from the shipped policy; the counter's own value. The Xid alert and panels read it.
    * ``cluster_xid:nodewarden_gpu_xid_errors:interval_increase`` (``job, cluster, xid,
      category, hardware``), ``cluster:nodewarden_edac_errors:interval_increase`` (``job,
      cluster, type`` corrected|uncorrected, the sysfs EDAC counters) and
      ``cluster:nodewarden_ib_flash_cuts:interval_increase`` (``job, cluster``): the exact
      number of new events in one evaluation interval (:func:`promql.interval_increase`; the
      raw counters' one interval late, so that a scrape that ended after an evaluation is
      counted, the Xid policy series' at once; a rise across a scrape gap or an agent restart
      within ``cfg.outage_lookback`` counted). They need a scrape timeout of at most the
      group's interval.
      ``sum_over_time(...[range])`` of them is the range's count: the failure-statistics
      dashboard's Tables VI and VII read one series per cluster and code, where the raw
      counters would load a sample per GPU and scrape over months.

    * ``cluster_node:nodewarden_gpus:count``: the GPUs NVML lists per node (``job, instance,
      cluster, node``), whose drop NodewardenGpuMissing watches over a day.
    * ``cluster_kind:nodewarden_beyond_paper_events:interval_increase`` (``job, cluster, kind``):
      the kernel-log events the paper's tables leave out, counted as the Xid count is, one series
      per ``kind``: ``sxid_fatal``, ``sxid_non_fatal``, ``sxid_unknown`` (NVSwitch SXids by
      severity), ``pcie_aer_fatal``, ``pcie_aer_non_fatal``, ``pcie_aer_corrected`` (AER records),
      ``gpu_reset_required``, ``gpu_lost_precursor``: the columns of ``nodewarden analyze``'s
      beyond_paper_monthly table. The failure-statistics dashboard's "beyond the paper" panels
      read it.

    One group, evaluated in order every ``cfg.interval``: the Xid count reads the policy
    series of the same evaluation."""
    i = cfg.interval
    job = "job, " + cfg.cluster_label if cfg.cluster_label else "job"
    xid = promql.interval_increase(cfg, sel(cfg, XID_POLICY), i, born=sel(cfg, XID), ignoring="action, hardware")
    def edac(metric: str, typ: str) -> str:
        inc = promql.interval_increase(cfg, sel(cfg, metric), i)
        return f'label_replace(sum by ({job}) ({inc}), "type", "{typ}", "", "")'
    cuts = promql.interval_increase(cfg, sel(cfg, "nodewarden_ib_flash_cuts_total"), i)

    def beyond(metric: str, kind: str, by_label: str = "") -> str:
        # kind "<prefix>_<severity>" from the series' own label, or a fixed kind
        inc = promql.interval_increase(cfg, sel(cfg, metric), i)
        if by_label:
            return (f'sum by ({job}, kind) (label_replace({inc}, "kind", "{kind}_$1", "{by_label}", "(.+)"))')
        return f'label_replace(sum by ({job}) ({inc}), "kind", "{kind}", "", "")'
    beyond_paper = " or ".join((beyond(SXID, "sxid", "severity"), beyond(AER_LOGGED, "pcie_aer", "severity"),
                                beyond(RESET_EVENTS, "gpu_reset_required"), beyond(PRECURSOR, "gpu_lost_precursor")))
    return [{
        "name": "nodewarden-xid.rules",
        "interval": i,
        "rules": [
            {"record": XID_POLICY, "expr": policy_labels(sel(cfg, XID))},
            {"record": CLUSTER_XID, "expr": f"sum by ({job}, xid, category, hardware) ({xid})"},
            {"record": CLUSTER_EDAC, "expr": f"{edac(EDAC_CE, 'corrected')} or {edac(EDAC_UE, 'uncorrected')}"},
            {"record": CLUSTER_FLASH_CUTS, "expr": f"sum by ({job}) ({cuts})"},
            # a GPU NVML lists, or one it reports lost (after an agent restart a lost GPU has no
            # identity series: it is NodewardenGpuLost's, not missing)
            {"record": GPU_COUNT,
             "expr": f"count by (job, instance, {_grouping(cfg)}) ("
                     f"max by (job, instance, {_grouping(cfg)}, gpu) ({sel(cfg, 'nodewarden_gpu_info')})"
                     f" or max by (job, instance, {_grouping(cfg)}, gpu) ({sel(cfg, 'nodewarden_gpu_lost')}))"},
            {"record": CLUSTER_BEYOND, "expr": beyond_paper},
        ],
    }]


# ---- alerts ----------------------------------------------------------------------------------

def _gpu(cfg: Config) -> list[dict]:
    w = cfg.fault_window
    ecc = sel(cfg, "nodewarden_gpu_ecc_errors_total", 'type="uncorrected"', 'scope="volatile"')
    nvl = "nodewarden_gpu_nvlink_errors_total"
    crc = sel(cfg, nvl, 'type=~"crc_flit|crc_data"')
    rr = sel(cfg, nvl, 'type=~"replay|recovery"')
    gpu = GPU
    # the job selector inside the template's query (its quotes escaped for the Go string)
    state_gpu = GPU_LOOKUP.replace('"JOB"', '"' + cfg.job_selector.replace('"', '\\"') + '"')
    count = sel(cfg, GPU_COUNT)
    up = sel(cfg, "up")
    target = f"job, instance, {_grouping(cfg)}"
    # the most GPUs the node listed within the window (sampled hourly: a week of minutes would
    # read 10,080 samples per node at each evaluation), and, when configured, the fleet's count
    expected = f"max_over_time({count}[{cfg.gpu_missing_window}:1h]) or max_over_time({count}[1h])"
    if cfg.expected_gpus_per_node > 0:
        expected = (f"clamp_min(({expected}), {cfg.expected_gpus_per_node}) or on({target}) "
                    f"max by ({target}) ({up} == 1) * 0 + {cfg.expected_gpus_per_node}")
    missing = (f"max by ({target}) ({expected}) > on({target}) ({count}"
               f" or on({target}) max by ({target}) ({up} == 1) * 0)")
    return [
        _alert("NodewardenGpuMissing", missing,
               "[[node]] lists fewer GPUs than it had",
               f"NVML on [[node]] lists fewer GPUs than the [[count]] it listed within the last "
               f"{cfg.gpu_missing_window}: a GPU did not come back after a reboot or reset, or the driver lost "
               "it (or NVML answers nothing at all). Jobs sized for the whole node cannot start. Drain the node, "
               "compare `nvidia-smi -L` and `lspci -d 10de:` with the node's GPU count; a GPU missing from lspci "
               "too needs a reseat or repair. The alert clears once the count is back (or, for a GPU removed "
               f"on purpose, {cfg.gpu_missing_window} later).", cfg.for_long),
        _alert("NodewardenGpuLost",
               f"{sel(cfg, 'nodewarden_gpu_lost')} == 1",
               "GPU [[gpu]] on [[node]] is lost (fell off the bus)",
               f"{state_gpu} answers NVML_ERROR_GPU_IS_LOST: it is off the bus (Xid 79) and its "
               "jobs have failed. Drain the node; a reboot (or a GPU reset) may bring it back, a repeat "
               "means hardware repair.", cfg.for_short),
        _alert("NodewardenGpuUncorrectableEcc",
               _with_gpu_info(cfg, f"sum without (type, scope) ({promql.window_increase(ecc, w)}) > 0"),
               "Uncorrectable ECC error on GPU [[gpu]] of [[node]]",
               f"{gpu}: [[count]] uncorrected (double-bit) ECC error(s) in the last {w}. "
               "The jobs on it may have read bad data. Drain the node, reset the GPU so the row remap "
               "applies, then run `nodewarden validate --checks gpu_memory`."),
        _alert("NodewardenGpuRowRemapFailure",
               f"{sel(cfg, 'nodewarden_gpu_row_remap_failure')} == 1",
               "Row remapping failed on GPU [[gpu]] of [[node]]",
               f"{state_gpu} could not remap a failing memory row: it has no spare rows left "
               "and can no longer hide bad memory. Drain the node and replace the GPU (RMA).",
               cfg.for_short),
        _alert("NodewardenGpuRowRemapPending",
               f"{sel(cfg, 'nodewarden_gpu_row_remap_pending')} == 1",
               "GPU [[gpu]] of [[node]] needs a reset to apply a row remap",
               f"{state_gpu} has a row remap pending: the bad row stays in use until the GPU "
               "is reset. Drain the node, reset the GPU (or reboot), run `nodewarden validate --checks "
               "gpu_memory`, and return it to service when it passes.", cfg.for_short),
        _alert("NodewardenGpuHardwareXid",
               f"({_policy_increase(cfg, HARDWARE, w)}) > 0",
               "Hardware Xid [[xid]] on GPU [[gpu]] of [[node]] (action: [[action]])",
               f"{gpu} logged Xid [[xid]] ([[category]]) [[count]] time(s) in the last {w}. "
               "nodewarden's policy for it: [[action]]. Run `nodewarden xid [[xid]]` on any host for "
               "the meaning and remedy, then follow the runbook section for [[action]]."),
        _alert("NodewardenGpuNvlinkErrors",
               _with_gpu_info(cfg, f"rate({crc}[{w}]) >= {NVLINK_CRC_PER_SECOND}"
                                   f" or ({promql.window_increase(rr, w)}) >= {NVLINK_REPLAY_RECOVERY_COUNT}"),
               "NVLink [[link]] of GPU [[gpu]] on [[node]]: [[type]] errors",
               f"NVLink [[link]] of {gpu}: "
               '{{ if or (eq $labels.type "replay") (eq $labels.type "recovery") }}'
               f"[[count]] [[type]] error(s) in the last {w}"
               f"{{{{ else }}}}[[type]] errors at [[value]]/s over the last {w}{{{{ end }}}}. "
               "Collectives over this link slow down or fail. Check `nvidia-smi nvlink -e -i [[gpu]]`, "
               "drain the node and run `nodewarden validate --checks links,allreduce`; reseat or "
               "replace the GPU/baseboard when it persists."),
    ]


def _recovery(cfg: Config, actions: str) -> str:
    """GPUs whose recovery action (``action`` label, matched by ``actions``) says they need it:
    NVML's current action (``nodewarden_gpu_recovery_action == 1``, with the GPU's bus id from
    ``nodewarden_gpu_info``), or a kernel-log event that said so within the fault window
    (``NV_ERR_RESET_REQUIRED``, an Xid 154 to that action) and that NVML does not report (yet, or
    at all: a driver without the field). Labels ``gpu``, ``pci_bus_id`` (when known), ``action``:
    the same for both sources, so that the NVML state taking over from the log event keeps one
    alert."""
    state = f"{sel(cfg, RECOVERY_ACTION, actions)} == 1"
    info = f"topk by (job, instance, gpu) (1, {sel(cfg, 'nodewarden_gpu_info')})"
    state = f"({state}) * on(job, instance, gpu) group_left(pci_bus_id) {info} or on(job, instance, gpu) ({state})"
    events = f"({promql.increase_with_first(cfg, sel(cfg, RESET_EVENTS, actions), cfg.fault_window)}) > 0"
    return f"({state}) or on(job, instance, gpu, action) ({events})"


def _gpu_recovery(cfg: Config) -> list[dict]:
    w = cfg.fault_window
    precursor = promql.increase_with_first(cfg, sel(cfg, PRECURSOR), w)
    return [
        _alert("NodewardenGpuLostPrecursor",
               f"({precursor}) > 0",
               "{{ if $labels.gpu }}GPU [[gpu]]{{ else }}NVIDIA function [[pci_bus_id]]{{ end }} of [[node]] "
               "is about to fall off the bus ([[reason]])",
               "{{ if $labels.gpu }}GPU [[gpu]] ([[pci_bus_id]]){{ else }}NVIDIA function [[pci_bus_id]]{{ end }}"
               f" on [[node]] had {PRECURSOR_REASON} ([[count]] in the last {w}). The nvidia driver cannot "
               "recover a GPU from an uncorrected PCIe error: such a GPU is usually lost next (Xid 79), with "
               "every job on it. Drain the node now. Read the AER record (`journalctl -k | grep "
               "-i -e aer -e 'pcie bus error'`), `lspci -vvv -s [[pci_bus_id]]` (UESta, LnkSta) and "
               "`nvidia-smi -q -i [[pci_bus_id]]`; reboot, then run `nodewarden validate --checks links,gpu_memory`. "
               "A repeat on the same GPU or slot: reseat or replace the GPU, riser or retimer."),
        _alert("NodewardenGpuResetRequired",
               _recovery(cfg, f'action!~"none|{REBOOT_ACTIONS}"'),
               f"{LOG_GPU_SHORT} of [[node]] needs a reset ([[action]])",
               f"{LOG_GPU} needs a reset: NVML's recovery action is [[action]], or the driver said so in the "
               f"last {w} (`NV_ERR_RESET_REQUIRED`, Xid 154). Jobs on it fail or run at reduced capacity until "
               "it is reset. Drain the node{{ if eq $labels.action \"drain_p2p\" }} and stop its peer-to-peer "
               "(NVLink) traffic, then read the action again: it turns into the one to take"
               "{{ else if eq $labels.action \"drain_and_reset\" }}, let the running jobs finish (it runs with "
               "memory or engines offlined){{ end }}; with no process left on it, reset it (`nvidia-smi -r -i "
               "<bus id>`; on an NVSwitch board stop nvidia-fabricmanager first, or reboot) and run `nodewarden "
               f"validate --checks gpu_memory,links`. The alert clears {cfg.keep_firing_for} after NVML reports "
               "none again.", cfg.for_short),
        _alert("NodewardenNodeRebootRequired",
               _recovery(cfg, f'action=~"{REBOOT_ACTIONS}"'),
               "[[node]] must be rebooted to recover {{ if $labels.gpu }}GPU [[gpu]]{{ else }}a GPU{{ end }}",
               f"{LOG_GPU} needs the whole node rebooted (recovery action [[action]], from NVML or an Xid 154 in "
               f"the last {w}): the driver cannot recover it with a GPU reset. Drain the node, reboot it, and run "
               "`nodewarden validate --checks links,gpu_memory` before it takes jobs again; a GPU that asks "
               f"again goes for repair. The alert clears {cfg.keep_firing_for} after NVML reports none again.",
               cfg.for_short),
    ]


def _nvswitch(cfg: Config) -> list[dict]:
    w = cfg.fault_window
    fatal = promql.increase_with_first(cfg, sel(cfg, SXID, 'severity="fatal"'), w)
    n, win = cfg.sxid_storm_count, cfg.sxid_storm_window
    other = promql.increase_with_first(cfg, sel(cfg, SXID, 'severity!="fatal"'), win)
    return [
        _alert("NodewardenNvswitchFatalSxid",
               # without the series' severity ("fatal"): the alert's own severity label replaces it
               f"sum without (severity) ({fatal}) > 0",
               "Fatal SXid [[sxid]] on NVSwitch [[switch]] of [[node]]",
               f"NVSwitch [[switch]] ([[pci_bus_id]]) on [[node]] logged fatal SXid [[sxid]] [[count]] time(s) in "
               f"the last {w}: NVLink traffic through it stopped, and the jobs spanning its GPUs failed (Xid "
               "74/145 on them). Drain the node. Read Fabric Manager's log (`journalctl -u nvidia-fabricmanager`, "
               "`/var/log/fabricmanager.log`) for the port and GPU, then reset the GPUs and NVSwitches (stop "
               "nvidia-fabricmanager, `nvidia-smi -r`, start it) or reboot, and run `nodewarden validate "
               "--checks links,allreduce`. A repeat on the same switch: the baseboard needs service."),
        _alert("NodewardenNvswitchSxidStorm",
               f"sum without (sxid, severity) ({other}) >= {n}",
               "SXid storm on NVSwitch [[switch]] of [[node]]",
               f"NVSwitch [[switch]] ([[pci_bus_id]]) on [[node]] logged [[count]] non-fatal SXids in the last "
               f"{win} (storm: {n} or more). Each is corrected, but a switch or link at this rate slows the "
               "collectives crossing it and tends to go on to a fatal SXid. Find the codes and links in the "
               "node dashboard or `journalctl -k | grep SXid`, check Fabric Manager's log, and plan a reset or "
               "service of the baseboard at the next drain."),
    ]


def _ib(cfg: Config) -> list[dict]:
    ib = cfg.ib_port_selector
    cuts = sel(cfg, "nodewarden_ib_flash_cuts_total", ib)
    state = sel(cfg, "nodewarden_ib_port_state", ib)
    phys = sel(cfg, "nodewarden_ib_port_phys_state", ib)
    rate = sel(cfg, "nodewarden_ib_port_rate_bytes_per_second", ib)
    info = f'topk by (job, instance, device, port) (1, {sel(cfg, "nodewarden_ib_port_info", ib)})'
    port = "on(job, instance, device, port)"
    # an ACTIVE port's rate, with its link layer and board (a DOWN port's rate is stale)
    active = f"({rate} * {port} group_left(link_layer, board_id) {info} and {port} {state} == 4)"
    n, win = cfg.flash_cut_storm_count, cfg.flash_cut_storm_window
    return [
        _alert("NodewardenIbFlashCutStorm",
               f"({promql.increase_with_first(cfg, cuts, win)}) >= {n}",
               "Flash-cut storm on [[device]] port [[port]] of [[node]]",
               f"IB port [[device]]/[[port]] on [[node]] dropped and came back [[count]] times in the last "
               f"{win} (storm: {n} or more). Each cut stalls the collectives crossing it. Check the cable "
               "and transceiver (`mlxlink -d [[device]] -m`), the switch port's error counters, and reseat "
               "or replace the cable."),
        _alert("NodewardenIbPortDown",
               f"{state} != 4 unless {port} {phys} == 3",
               "IB port [[device]]/[[port]] on [[node]] is not ACTIVE",
               f"IB port [[device]]/[[port]] on [[node]] has been in state [[value]] (4 = ACTIVE) for "
               f"{cfg.for_long}: jobs that need it fail or run without it. Check `ibstat [[device]] [[port]]` "
               "(phys_state Polling: no link, LinkErrorRecovery: a bad link), the cable and the subnet manager, "
               "then run `nodewarden validate --checks links`. A port whose phys_state is Disabled (3) was "
               "switched off on purpose and does not alert.", cfg.for_long),
        _alert("NodewardenIbPortDegraded",
               f"{active} < on(job, instance, link_layer, board_id) group_left() "
               f"max by (job, instance, link_layer, board_id) {active}",
               "IB port [[device]]/[[port]] on [[node]] runs below its peers' rate",
               f"IB port [[device]]/[[port]] ([[link_layer]]) on [[node]] is ACTIVE at [[value]]B/s, below "
               "the fastest port of the same board on that node: it trained at a lower speed or width. "
               "Check `ibstat [[device]] [[port]]` (Rate) and `mlxlink -d [[device]] -m`, reseat or replace "
               "the cable, then run `nodewarden validate --checks links`.", cfg.for_long),
    ]


def _host(cfg: Config) -> list[dict]:
    w = cfg.fault_window
    logged = "nodewarden_edac_logged_errors_total"

    def edac(sysfs: str, typ: str, window: str) -> str:
        # sysfs is authoritative; the kernel log covers hosts without EDAC sysfs counters (and is
        # rate-limited, so it may count fewer). One alert per DIMM: the larger of the two.
        log = promql.increase_with_first(cfg, sel(cfg, logged, f'type="{typ}"'), window)
        return f"max without (type) ({promql.window_increase(sel(cfg, sysfs), window)} or ({log}))"

    mce = sel(cfg, "nodewarden_mce_events_total", 'type="uncorrected"')
    width = "nodewarden_pcie_link_width"
    gen = "nodewarden_pcie_link_generation"
    gpu_width = "nodewarden_gpu_pcie_link_width"

    def below(metric: str) -> str:
        return f"{sel(cfg, metric, CURRENT)} < ignoring(which) {sel(cfg, metric, MAX)}"

    nvidia = sel(cfg, "nodewarden_pcie_device_info", f'vendor="{NVIDIA_VENDOR}"')
    gpu_info = sel(cfg, "nodewarden_gpu_info")
    downtrained = (
        f'label_replace({below(width)}, "dimension", "width", "", "")'
        # NVIDIA GPUs lower their PCIe generation when idle (power saving): only other functions'
        f' or label_replace(({below(gen)}) unless on(job, instance, pci_bus_id) {nvidia},'
        ' "dimension", "generation", "", "")'
        # a GPU the sysfs collector does not see (no /sys access, collector off): NVML's width
        f' or label_replace(({below(gpu_width)}) * on(job, instance, gpu) group_left(pci_bus_id)'
        f' topk by (job, instance, gpu) (1, {gpu_info})'
        f' unless on(job, instance, pci_bus_id) {sel(cfg, width)}, "dimension", "width", "", "")'
    )
    # PCIe AER: the kernel log's records (one per error) and the sysfs aer_dev_* totals (the sum of
    # a file's error-bit counts, every function from the agent's first poll), the larger of the two
    # per function and severity, in the kernel log's words (fatal, non_fatal, corrected), as
    # `aer_severity`: the alert's own `severity` label (warning) would replace the series' one.
    def aer(log_sev: str, sysfs_sev: str, window: str) -> str:
        log = promql.increase_with_first(cfg, sel(cfg, AER_LOGGED, f'severity=~"{log_sev}"'), window)
        sysfs = promql.window_increase(sel(cfg, AER_SYSFS, f'severity=~"{sysfs_sev}"'), window)
        sysfs = (f'label_replace(label_replace({sysfs}, "severity", "non_fatal", "severity", "nonfatal"),'
                 ' "severity", "corrected", "severity", "correctable")')
        both = (f'label_replace({log}, "source", "kernel_log", "", "")'
                f' or label_replace({sysfs}, "source", "sysfs", "", "")')
        return f'max without (source, severity) (label_replace({both}, "aer_severity", "$1", "severity", "(.*)"))'
    # a function whose error is a GPU-lost precursor pages as NodewardenGpuLostPrecursor instead.
    # The precursor is looked for over the fault window and over two: the agent polls the sysfs
    # counters, so the same error may rise there a poll (and a scrape) after the log's record,
    # and its window then ends that much later than the precursor's (the fault window alone
    # holds while the node has been scraped for less than two); and also once the agent is no
    # longer scraped (a drained node rebooting), as the sysfs rise still counts then.
    precursor = " or ".join(f"({promql.rose_within(cfg, sel(cfg, PRECURSOR), win)})"
                            for win in (w, promql.times(w, 2)))
    uncorrected = (f"({aer('fatal|non_fatal', 'fatal|nonfatal', w)}) > 0"
                   f" unless on(job, instance, pci_bus_id) ({precursor})")
    corrected = f"max without (aer_severity) ({aer('corrected', 'correctable', cfg.aer_corrected_storm_window)})"
    return [
        _alert("NodewardenEdacUncorrectable",
               f"{edac('nodewarden_edac_uncorrectable_errors_total', 'uncorrected', w)} > 0",
               "Uncorrectable memory error on DIMM [[dimm]] of [[node]]",
               f"EDAC counted [[count]] uncorrectable error(s) on DIMM [[dimm]] ([[controller]]) of [[node]] in "
               f"the last {w}. Processes that touched it were killed, or the kernel panics next time. "
               "Drain the node, check `ras-mc-ctl --errors` and the BMC's SEL, and replace the DIMM."),
        _alert("NodewardenEdacCorrectableRate",
               f"{edac('nodewarden_edac_correctable_errors_total', 'corrected', cfg.edac_ce_window)}"
               f" >= {cfg.edac_ce_threshold}",
               "DIMM [[dimm]] of [[node]] is failing: [[count]] corrected errors",
               f"EDAC counted [[count]] corrected errors on DIMM [[dimm]] ([[controller]]) of [[node]] in the "
               f"last {cfg.edac_ce_window} (limit {cfg.edac_ce_threshold}, mcelog's page-offlining "
               "threshold): a DIMM at this rate tends to fail uncorrectably. Plan its replacement at the "
               "next drain; check `ras-mc-ctl --error-count`."),
        _alert("NodewardenMachineCheck",
               f"({promql.increase_with_first(cfg, mce, w)}) > 0",
               "Uncorrected machine check on [[node]]",
               f"The kernel of [[node]] logged [[count]] uncorrected machine-check record(s) in the last {w} "
               "(CPU, cache, memory controller or bus). Drain the node, read the record (`journalctl -k "
               "| grep -i 'machine check'`, `ras-mc-ctl --errors`, the BMC's SEL) and send it for repair."),
        _alert("NodewardenPcieAerUncorrected",
               uncorrected,
               "Uncorrected PCIe AER error on [[pci_bus_id]] of [[node]] ([[aer_severity]])",
               f"PCI function [[pci_bus_id]] on [[node]] reported [[count]] uncorrected ([[aer_severity]]) AER "
               f"error(s) in the last {w} (the kernel log's records, or the sysfs counters where more): a fatal "
               "one resets the link, and the device's driver recovers it or the device is gone. `lspci -vvv -s "
               "[[pci_bus_id]]` names the device (UESta: the error bits); `journalctl -k | grep -i -A8 'pcie bus "
               "error'` has the record and its recovery. A NIC or NVSwitch whose jobs failed: drain the node; a "
               "repeat: reseat or replace the device, riser or cable at the next drain."),
        _alert("NodewardenPcieAerCorrectedStorm",
               f"{corrected} >= {cfg.aer_corrected_storm_count}",
               "Corrected PCIe AER error storm on [[pci_bus_id]] of [[node]]",
               f"PCI function [[pci_bus_id]] on [[node]] reported [[count]] corrected AER errors in the last "
               f"{cfg.aer_corrected_storm_window} (limit {cfg.aer_corrected_storm_count}, DCGM's PCIe replay "
               "limit of 8 a minute): each one is a replayed transfer, and the link is marginal. Check `lspci "
               "-vvv -s [[pci_bus_id]]` (CESta, LnkSta against LnkCap) and the node dashboard for the error "
               "kinds; reseat the card, riser or cable at the next drain."),
        _alert("NodewardenPcieLinkDowntrained",
               downtrained,
               "PCIe link of [[pci_bus_id]] on [[node]] is downtrained ([[dimension]])",
               f"The PCIe link of [[pci_bus_id]] on [[node]] has run below its maximum [[dimension]] "
               f"(now [[value]]) for {cfg.for_long}: the GPU or NIC behind it gets a fraction of its "
               "bandwidth. Check `lspci -vv -s [[pci_bus_id]]` (LnkSta against LnkCap), reseat the card "
               "or riser at the next drain, and run `nodewarden validate --checks links`.", cfg.for_long),
    ]


def _validator(cfg: Config) -> list[dict]:
    last = sel(cfg, "nodewarden_validator_last_run_timestamp_seconds")
    build = sel(cfg, "nodewarden_build_info")
    s = cfg.validator_stale_seconds
    days = f"{s / 86400:g} days" if s % 3600 == 0 else f"{s}s"
    # A report exists but is old; or the agent has been up for the whole stale period (its
    # build_info was scraped then) and never exported a report. next_run_timestamp is no help:
    # while the GPUs are busy the agent keeps moving it 30 minutes ahead.
    stale = (f'label_replace(time() - {last} > {s}, "reason", "old_report", "", "")'
             f' or label_replace((max without (version) ({build}) unless on(job, instance) {last})'
             f' and on(job, instance) max without (version) ({build} offset {s}s),'
             ' "reason", "no_report", "", "")')
    return [
        _alert("NodewardenValidatorFailed",
               sel(cfg, "nodewarden_validator_check_status", 'status="fail"') + " == 1",
               "Validator check [[check]] failed on [[node]]",
               "The last validator report on [[node]] failed its [[check]] check: the node is not fit for "
               "jobs. Drain it, read the report (`/var/lib/nodewarden/validate.json`), and after the repair "
               "rerun the suite into the agent's report (`nodewarden validate --json "
               "/var/lib/nodewarden/validate.json`): the agent exports the new report within a poll and the "
               f"alert clears {cfg.keep_firing_for} after it passes (keep_firing_for).", cfg.for_short),
        _alert("NodewardenValidatorIncomplete",
               sel(cfg, "nodewarden_validator_check_status", 'status="error"') + " == 1",
               "Validator check [[check]] could not run on [[node]]",
               "The last validator report on [[node]] has its [[check]] check in error: it could not run "
               "(for the GPU checks: no CUDA device, PyTorch missing or CPU-only, a CUDA error), so the "
               "node's health is unknown (`nodewarden validate` exited 3). Read the check's reason in "
               "`/var/lib/nodewarden/validate.json`; `nvidia-smi` failing or GPUs missing means a "
               "driver or hardware fault: drain the node. Rerun with `nodewarden validate --checks "
               "[[check]] --json /var/lib/nodewarden/validate.json` once fixed.", cfg.for_short),
        _alert("NodewardenValidatorStale",
               stale,
               "No recent validator run on [[node]]",
               '{{ if eq $labels.reason "no_report" }}'
               f"The agent on [[node]] has run for {days} without exporting a validator report."
               "{{ else }}"
               "The last validator report on [[node]] finished {{ $value | humanizeDuration }} ago "
               f"(limit {days})."
               "{{ end }} The node's hardware is not being re-checked: see the agent's log "
               "(`journalctl -u nodewarden-agent`, the GPUs may never be idle) and "
               "`/var/lib/nodewarden/validate.log`, or run `nodewarden validate` in a drain window.",
               cfg.for_short),
    ]


def _agent(cfg: Config) -> list[dict]:
    w = cfg.fault_window
    lost = sel(cfg, "nodewarden_collector_kmsg_lost_records_total")
    overruns = sel(cfg, "nodewarden_collector_kmsg_overruns_total")
    return [
        _alert("NodewardenAgentDown",
               f"{sel(cfg, 'up')} == 0",
               "nodewarden agent on [[node]] is down",
               f"Prometheus has not scraped the agent at [[instance]] ([[node]]) for {cfg.for_short}: the "
               "node is down, or the agent, or the network between. Faults on it go unseen. Check the "
               "node, then `systemctl status nodewarden-agent` and `curl -s http://[[instance]]/healthz`.",
               cfg.for_short),
        _alert("NodewardenCollectorFailing",
               f"{sel(cfg, 'nodewarden_collector_success')} == 0",
               "Collector [[collector]] of the agent on [[node]] is failing",
               f"The [[collector]] collector on [[node]] has failed or hung for {cfg.for_long}: its series "
               "are missing or stale and its faults are not counted. Read `journalctl -u nodewarden-agent` "
               "and `curl -s http://[[instance]]/healthz`; a hung NVML call often means a GPU in trouble.",
               cfg.for_long),
        _alert("NodewardenKmsgRecordsLost",
               f"({promql.window_increase(lost, w)}) > 0 or ({promql.window_increase(overruns, w)}) > 0",
               "The agent on [[node]] lost kernel-log records",
               f"The kernel-log reader on [[node]] lost records or overran the ring buffer in the last {w}: "
               "Xid, ECC, MCE and link events in them are not counted. Either the agent was stopped while "
               "the kernel logged past its ring buffer (`journalctl -u nodewarden-agent`), or something "
               "flooded the log (`dmesg`): stop the flood, or give the kernel a larger ring buffer "
               "(`log_buf_len=`)."),
    ]


# Alerts on a state that an agent restart or a scrape gap would resolve and then page again:
# they keep firing for ``cfg.keep_firing_for`` after their condition last held.
KEEP_FIRING = frozenset({
    "NodewardenGpuLost", "NodewardenGpuMissing", "NodewardenGpuRowRemapFailure", "NodewardenGpuRowRemapPending",
    "NodewardenGpuResetRequired", "NodewardenNodeRebootRequired",
    "NodewardenIbPortDown", "NodewardenIbPortDegraded", "NodewardenPcieLinkDowntrained",
    "NodewardenValidatorFailed", "NodewardenValidatorIncomplete", "NodewardenCollectorFailing",
})


def _finish(cfg: Config, rule: dict) -> dict:
    """``cfg``'s keep_firing_for and runbook base applied to one alert rule."""
    out = {"alert": rule["alert"], "expr": rule["expr"]}
    if "for" in rule:
        out["for"] = rule["for"]
    if rule["alert"] in KEEP_FIRING and cfg.keep_firing_for not in ("0", "0s", ""):
        out["keep_firing_for"] = cfg.keep_firing_for
    out["labels"] = rule["labels"]
    out["annotations"] = {**rule["annotations"],
                          "runbook_url": cfg.runbook_url_base + rule["alert"].lower()}
    return out


def alert_groups(cfg: Config) -> list[dict]:
    """The alerting-rule groups (one per subsystem), every rule of :data:`ALERTS` exactly once,
    in that order; each with ``labels.severity`` and the ``summary``, ``description`` and
    ``runbook_url`` annotations."""
    rules = [_finish(cfg, r) for r in (*_gpu(cfg), *_gpu_recovery(cfg), *_nvswitch(cfg), *_ib(cfg), *_host(cfg),
                                       *_validator(cfg), *_agent(cfg))]
    by_group: dict[str, list[dict]] = {}
    for rule in rules:
        by_group.setdefault(BY_NAME[rule["alert"]].group, []).append(rule)
    return [{"name": name, "interval": cfg.interval, "rules": rs} for name, rs in by_group.items()]
