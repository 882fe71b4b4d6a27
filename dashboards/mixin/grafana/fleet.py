"""Fleet faults: every fault kind across the selected clusters and nodes, worst first, with a
link from each node to the node dashboard."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import statetimeline, table, timeseries

from .. import promql
from ..config import Config
from ..rules import AER_LOGGED, AER_SYSFS, PRECURSOR, RECOVERY_ACTION, RESET_EVENTS, SXID
from . import common
from .common import by, s, target
from .common import panel as P

XID, XID_POLICY = common.XID, common.XID_POLICY
W = "$__rate_interval"
PER_WINDOW = ("Each point counts the events in the preceding $__rate_interval (at least four scrape "
              "intervals), so a single event shows as a short plateau. ")


def _iwf(cfg: Config, series: str, window: str = W) -> str:
    return promql.increase_with_first(cfg, series, window)


def _linked(cfg: Config):
    return lambda p: p.data_links([common.node_link(cfg)])


def xid_panels(cfg: Config) -> list:
    def hw(window: str) -> str:
        return common.policy_increase(cfg, window, 'hardware="true"')
    return [
        P(timeseries.Panel, "Xid errors by group", unit="short", targets=[
            target(f"sum by (category) ({_iwf(cfg, s(cfg, XID))})", "{{category}}")],
          description=PER_WINDOW + "NVIDIA Xid errors from the kernel log, by the catalog's group (memory_ecc, "
          "nvlink, software, uncorrectable, other). Software Xids are usually the application's fault; a rise in "
          "memory_ecc, nvlink or uncorrectable points at hardware: open 'Top nodes by hardware Xids' below."),
        P(timeseries.Panel, "Xid errors by code", unit="short", targets=[
            target(f"sum by (xid) ({_iwf(cfg, s(cfg, XID))})", "Xid {{xid}}")],
          description=PER_WINDOW + "The same Xids by code. `nodewarden xid <code>` on any host prints what the "
          "code means and the action the policy gives it."),
        P(timeseries.Panel, "Hardware vs application Xids", unit="short", targets=[
            target(f"sum by (hardware) ({common.policy_increase(cfg, W)})", "hardware={{hardware}}")],
          description=PER_WINDOW + "Xids split by the shipped policy (recording rule " + XID_POLICY + "): "
          "hardware=true codes take a node out of scheduling and page; hardware=false codes (13, 31, 43, 45...) "
          "are the application's and never page. Hardware Xids: drain the node and follow the runbook."),
        P(timeseries.Panel, "Xid errors by policy action", unit="short", targets=[
            target(f"sum by (action) ({common.policy_increase(cfg, W)})", "{{action}}")],
          description=PER_WINDOW + "Xids by the action the policy gives their code: drain (take the node out "
          "and run the validator), reset_gpu (reset the GPU when idle), restart_app (the job's fault), "
          "investigate (not catalogued or unclear: read the kernel log), ignore."),
        P(table.Panel, "Top nodes by hardware Xids (selected range)", unit="short", size=(12, 8), targets=[
            target(f"topk(10, sum by ({by(cfg)}) ({hw('$__range')}) > 0)", instant=True)],
          extra=_linked(cfg),
          description="The ten nodes with the most hardware Xids (per the policy) over the dashboard's time range. "
          "Click a node for its detail. A node here needs draining and the validator "
          "(`nodewarden validate`) before it takes jobs again."),
        P(table.Panel, "Top GPUs by hardware Xids (selected range)", unit="short", size=(12, 8), targets=[
            target(f"topk(10, sum by ({by(cfg, 'gpu', 'pci_bus_id')}) ({hw('$__range')}) > 0)",
                   instant=True)],
          extra=_linked(cfg),
          description="The ten GPUs with the most hardware Xids over the time range. The same GPU again and again "
          "after a reset means a replacement (RMA); many GPUs of one node at once point at the node "
          "(power, baseboard, PCIe switch)."),
    ]


def gpu_memory_panels(cfg: Config) -> list:
    ecc = "nodewarden_gpu_ecc_errors_total"
    ce = s(cfg, ecc, 'type="corrected"', 'scope="aggregate"')
    ue = s(cfg, ecc, 'type="uncorrected"', 'scope="aggregate"')
    gpu = by(cfg, "gpu")
    return [
        P(timeseries.Panel, "GPU corrected ECC rate", unit="cps", targets=[
            target(f"sum by ({gpu}) (rate({ce}[{W}])) > 0",
                   "{{node}} GPU {{gpu}}")],
          description="Corrected (single-bit) GPU memory ECC errors per second, per GPU, from NVML's aggregate "
          "counter; GPUs without any are not drawn. Corrected errors are repaired in place; a GPU whose rate keeps "
          "rising will remap rows: watch 'Row remapping' and plan a reset or replacement."),
        P(timeseries.Panel, "GPU uncorrected ECC errors", unit="short", targets=[
            target(f"sum by ({gpu}) (increase({ue}[{W}]))"
                   " > 0", "{{node}} GPU {{gpu}}")],
          description=PER_WINDOW + "Uncorrected (double-bit) GPU memory ECC errors per GPU. The job on that "
          "GPU has likely crashed (Xid 48/63/94/95); the GPU needs a reset so that the row is remapped. Repeated "
          "ones: drain and replace."),
        P(timeseries.Panel, "Row remapping pending / failed", unit="none", targets=[
            target(f"max by ({gpu}) ({s(cfg, 'nodewarden_gpu_row_remap_pending')}) > 0", "pending {{node}} GPU {{gpu}}"),
            target(f"max by ({gpu}) ({s(cfg, 'nodewarden_gpu_row_remap_failure')}) > 0", "FAILED {{node}} GPU {{gpu}}")],
          description="GPUs with a row remap waiting for a GPU reset (pending: reset the GPU when it is idle, "
          "`nvidia-smi -r`) or a remap that failed (no spare rows left: the GPU must be replaced). A line is 1 "
          "while the condition holds; healthy GPUs are not drawn."),
        P(timeseries.Panel, "Retired pages and remapped rows", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'cause')}) ({s(cfg, 'nodewarden_gpu_retired_pages')}) > 0",
                   "retired {{cause}} {{node}} GPU {{gpu}}"),
            target(f"sum by ({by(cfg, 'gpu', 'cause')}) ({s(cfg, 'nodewarden_gpu_remapped_rows')}) > 0",
                   "remapped {{cause}} {{node}} GPU {{gpu}}")],
          description="GPU memory pages retired (Volta and older: dynamic page retirement) and rows remapped "
          "(Ampere and newer), by cause, per GPU: the damage a GPU has accumulated. A GPU near its spare-row "
          "limit, or with many uncorrectable causes, is a candidate for replacement."),
    ]


def cpu_memory_panels(cfg: Config) -> list:
    dimm = by(cfg, "controller", "dimm")
    return [
        P(timeseries.Panel, "CPU memory corrected errors (EDAC) per DIMM", unit="short", targets=[
            target(f"sum by ({dimm}) (increase({s(cfg, 'nodewarden_edac_correctable_errors_total')}[{W}])) > 0",
                   "{{node}} {{controller}} {{dimm}}")],
          description=PER_WINDOW + "Corrected CPU memory errors per DIMM from the kernel's EDAC counters "
          f"(sysfs). More than {cfg.edac_ce_threshold} in {cfg.edac_ce_window} on one DIMM predicts an "
          "uncorrectable error: schedule the DIMM's replacement."),
        P(timeseries.Panel, "CPU memory uncorrected errors (EDAC) per DIMM", unit="short", targets=[
            target(f"sum by ({dimm}) (increase({s(cfg, 'nodewarden_edac_uncorrectable_errors_total')}[{W}])) > 0",
                   "{{node}} {{controller}} {{dimm}}")],
          description=PER_WINDOW + "Uncorrected CPU memory errors per DIMM (EDAC sysfs counters). The kernel "
          "may have killed a process or panicked: drain the node and replace the DIMM."),
        P(timeseries.Panel, "Machine checks (MCE)", unit="short", targets=[
            target(f"sum by ({by(cfg, 'type')}) ({_iwf(cfg, s(cfg, 'nodewarden_mce_events_total'))})",
                   "{{node}} {{type}}")],
          description=PER_WINDOW + "Machine-check records in the kernel log, corrected and uncorrected. "
          "Uncorrected ones are CPU, cache or memory faults: drain the node and read `mcelog`/`rasdaemon` output "
          "for the bank and address."),
    ]


def ib_panels(cfg: Config) -> list:
    port = by(cfg, "device", "port")
    return [
        P(timeseries.Panel, "IB flash cuts by port", unit="short", targets=[
            target(f"sum by ({port}) ({_iwf(cfg, s(cfg, 'nodewarden_ib_flash_cuts_total'))})",
                   "{{node}} {{device}}/{{port}}")],
          description=PER_WINDOW + "InfiniBand flash cuts: a port that went down and came back within seconds. "
          "Jobs using the port may have failed. "
          f"{cfg.flash_cut_storm_count} or more in {cfg.flash_cut_storm_window} on one port: reseat or replace "
          "the cable or transceiver."),
        P(timeseries.Panel, "IB link outages by port", unit="short", targets=[
            target(f"sum by ({port}) ({_iwf(cfg, s(cfg, 'nodewarden_ib_link_outages_total'))})",
                   "{{node}} {{device}}/{{port}}")],
          description=PER_WINDOW + "InfiniBand links that went down and stayed down longer than a flash cut. "
          "Check the cable, the switch port and the subnet manager's log."),
        P(timeseries.Panel, "IB ports not ACTIVE", unit="short", targets=[
            target(f"count by ({by(cfg)}) ({s(cfg, 'nodewarden_ib_port_state', cfg.ib_port_selector)} != 4)",
                   "{{node}}")],
          description="Number of InfiniBand ports per node whose logical state is not ACTIVE (4). A port down on "
          "a node that should have all ports up takes its rail out: see the node dashboard for which port."),
    ]


def device_panels(cfg: Config) -> list:
    bdf = "pci_bus_id"
    def below_max(metric: str) -> str:
        cur, mx = s(cfg, metric, 'which="current"'), s(cfg, metric, 'which="max"')
        return f"max without (which) ({cur}) < max without (which) ({mx})"
    nvidia = s(cfg, "nodewarden_pcie_device_info", 'vendor="0x10de"')
    return [
        P(timeseries.Panel, "Lost GPUs", unit="short", targets=[
            target(f"sum by ({by(cfg)}) ({s(cfg, 'nodewarden_gpu_lost')}) > 0", "{{node}}")],
          description="GPUs per node that NVML reports lost (fallen off the bus, Xid 79). The node cannot use "
          "them until a reboot or a reset; drain it, reboot, and replace the GPU if it happens again."),
        P(timeseries.Panel, "NVLink errors", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'type')}) (increase({s(cfg, 'nodewarden_gpu_nvlink_errors_total')}"
                   f"[{W}])) > 0", "{{node}} GPU {{gpu}} {{type}}")],
          description=PER_WINDOW + "NVLink data-link errors per GPU (CRC, replay, recovery). A steady rate on one "
          "GPU slows collective operations and precedes Xid 74: reset the GPU, then replace it or the "
          "baseboard if it persists."),
        P(timeseries.Panel, "PCIe AER errors by severity", unit="short", targets=[
            target(f"sum by ({by(cfg, 'severity')}) ({_iwf(cfg, s(cfg, AER_SYSFS))}) > 0", "{{node}} {{severity}}")],
          description=PER_WINDOW + "PCIe Advanced Error Reporting errors per node by severity (correctable, "
          "nonfatal, fatal), from the sysfs `aer_dev_*` totals of each function (the sum of its error bits). "
          "Correctable ones in bursts point at a marginal link; fatal ones at a device or slot "
          "that needs service. The node dashboard shows the device."),
        P(timeseries.Panel, "Downtrained PCIe links", unit="short", targets=[
            target(f"count by ({by(cfg)}) ({below_max('nodewarden_pcie_link_width')})", "width {{node}}"),
            target(f"count by ({by(cfg)}) ({below_max('nodewarden_pcie_link_generation')} unless on(job, instance, "
                   f"{bdf}) {nvidia})", "generation {{node}}")],
          description="PCIe links per node running narrower than their maximum width (any device; width 0 is a "
          "link down), or at a lower generation than their maximum (non-NVIDIA devices only: NVIDIA GPUs lower "
          "their generation when idle to save power, which is not a fault). Reseat the device or riser; the node "
          "dashboard names the PCI address."),
    ]


def fabric_panels(cfg: Config) -> list:
    """NVSwitch SXids, kernel-log PCIe AER, GPU-lost precursors and GPUs that need a reset."""
    node = by(cfg)
    fatal_sxid = s(cfg, SXID, 'severity="fatal"')
    uncorrected = s(cfg, AER_LOGGED, 'severity=~"fatal|non_fatal"')
    not_none = s(cfg, RECOVERY_ACTION, 'action!="none"')
    names = {"Value #A": "fatal SXids", "Value #B": "uncorrected AER", "Value #C": "GPU-lost precursors",
             "Value #D": "reset-required events", "Value #E": "GPUs needing reset now"}
    return [
        P(table.Panel, "Nodes with fatal SXids, uncorrected AER or GPUs needing a reset (selected range)",
          unit="short", size=(24, 8), targets=[
            target(f"sum by ({node}) ({_iwf(cfg, fatal_sxid, '$__range')}) > 0", instant=True),
            target(f"sum by ({node}) ({_iwf(cfg, uncorrected, '$__range')}) > 0", instant=True),
            target(f"sum by ({node}) ({_iwf(cfg, s(cfg, PRECURSOR), '$__range')}) > 0", instant=True),
            target(f"sum by ({node}) ({_iwf(cfg, s(cfg, RESET_EVENTS), '$__range')}) > 0", instant=True),
            target(f"sum by ({node}) ({not_none}) > 0", instant=True)],
          extra=lambda p: p.with_transformation(common.model.DataTransformerConfig(id_val="merge", options={}))
          .with_transformation(common.model.DataTransformerConfig(id_val="organize", options={
              "renameByName": names})).data_links([common.node_link(cfg)]),
          description="Every node with, over the time range, a fatal NVSwitch SXid, an uncorrected (fatal or "
          "non-fatal) PCIe AER record, a GPU-lost precursor (uncorrected AER or failed recovery on an NVIDIA "
          "function), a kernel-log reset-required event, or (now) a GPU whose NVML recovery action is not none. "
          "Any of these takes the node out of scheduling: click it for the switch, device or GPU."),
        P(timeseries.Panel, "NVSwitch SXid errors by severity", unit="short", targets=[
            target(f"sum by ({by(cfg, 'severity')}) ({_iwf(cfg, s(cfg, SXID))}) > 0", "{{node}} {{severity}}")],
          description=PER_WINDOW + "NVSwitch SXid errors per node from the kernel log, by severity (fatal, "
          "non_fatal, unknown). Fatal: the node's NVLink fabric stopped, drain it; non-fatal in bursts: a link "
          "or switch port going bad. The node dashboard names the switch and code."),
        P(timeseries.Panel, "PCIe AER errors from the kernel log by severity", unit="short", targets=[
            target(f"sum by ({by(cfg, 'severity')}) ({_iwf(cfg, s(cfg, AER_LOGGED))}) > 0", "{{node}} {{severity}}")],
          description=PER_WINDOW + "PCIe AER error records in each node's kernel log, by severity (corrected, "
          "non_fatal, fatal): one per error, where the sysfs panel above counts error bits. Uncorrected ones "
          "on a GPU come before it falls off the bus; the node dashboard shows the device."),
        P(timeseries.Panel, "GPUs needing a reset or reboot", unit="short", targets=[
            target(f"sum by ({by(cfg, 'action')}) ({not_none}) > 0", "{{node}} {{action}}")],
          description="GPUs per node whose NVML recovery action is not none, by action (gpu_reset, node_reboot, "
          "drain_p2p, drain_and_reset). Drain such a node and reset its GPU or reboot it, as the action says."),
        P(timeseries.Panel, "GPU-lost precursors and reset-required events", unit="short", targets=[
            target(f"sum by ({by(cfg, 'reason')}) ({_iwf(cfg, s(cfg, PRECURSOR))}) > 0",
                   "{{node}} precursor {{reason}}"),
            target(f"sum by ({by(cfg, 'action')}) ({_iwf(cfg, s(cfg, RESET_EVENTS))}) > 0",
                   "{{node}} needs {{action}}")],
          description=PER_WINDOW + "Kernel-log events per node: GPU-lost precursors by reason (fatal_aer, "
          "non_fatal_aer, aer_no_error_detected_callback, aer_recovery_failed: Xid 79 usually follows) and the "
          "driver asking for a GPU reset or a node reboot (NV_ERR_RESET_REQUIRED, Xid 154), by action."),
    ]


def validator_panels(cfg: Config) -> list:
    state_desc = ("Validator state of each node over time: fail (a check failed or errored: drain the node and "
                  "read `nodewarden validate` output), stale (no finished run for more than "
                  f"{cfg.validator_stale_seconds // 86400} days: the schedule is broken or the node was busy), "
                  "warn (a check warned: plan maintenance), pass, no report (the agent exports no validator run yet).")
    last_run = s(cfg, "nodewarden_validator_last_run_timestamp_seconds")
    bad = s(cfg, "nodewarden_validator_check_status", 'status=~"fail|error|warn"')
    return [
        P(statetimeline.Panel, "Validator state per node", unit="none", size=(24, 8),
          targets=[target(common.validator_state(cfg, by(cfg)), "{{node}}")], description=state_desc,
          extra=lambda p: p.mappings(common.mappings(common.STATE_TEXT)).show_value("never")),
        P(table.Panel, "Failing and warning validator checks", unit="none", targets=[
            target(f"max by ({by(cfg, 'check', 'status')}) ({bad} == 1)",
                   instant=True)],
          extra=_linked(cfg),
          description="Each check whose last result on a node is fail, error or warn (value 1). "
          "`nodewarden validate --checks <check>` on the node reruns it and prints what it measured."),
        P(table.Panel, "Time since the last validator run", unit="s", targets=[
            target(f"sort_desc(time() - max by ({by(cfg)}) ({last_run}))", instant=True)],
          extra=lambda p: p.thresholds(common.thresholds((None, "green"), (cfg.validator_stale_seconds, "red")))
          .data_links([common.node_link(cfg)]),
          description="Age of each node's last finished validator report. Red past "
          f"{cfg.validator_stale_seconds // 86400} days (stale): check that the agent's schedule runs "
          "(`nodewarden_validator_next_run_timestamp_seconds`) and that the GPUs were not always busy."),
    ]


def dashboard(cfg: Config) -> dash.Dashboard:
    sections = [
        ("GPU Xid errors", xid_panels(cfg)),
        ("GPU memory: ECC, row remapping, retired pages", gpu_memory_panels(cfg)),
        ("CPU memory: EDAC and machine checks", cpu_memory_panels(cfg)),
        ("InfiniBand", ib_panels(cfg)),
        ("GPUs lost, NVLink, PCIe", device_panels(cfg)),
        ("NVSwitch, PCIe AER, GPU reset", fabric_panels(cfg)),
        ("Validator", validator_panels(cfg)),
    ]
    d = common.build("nodewarden / Fleet faults", common.UIDS["fleet"],
                     "Hardware faults of every GPU node: Xids, ECC, EDAC, MCE, InfiniBand, PCIe, NVSwitch, GPU "
                     "reset, validator.",
                     cfg, sections)
    return d.link(common.dashboard_link("Node detail", "node", "The node dashboard for the selected $node"))
