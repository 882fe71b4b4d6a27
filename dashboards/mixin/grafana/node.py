"""Node detail: the faults of one node (``$node``) per GPU, IB port, DIMM and PCI device, the
last validator run's measurements, and the agent's own health."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat, statetimeline, table, timeseries

from .. import promql
from ..config import Config
from ..rules import (AER_BITS, AER_LOGGED, AER_RECOVERY, AER_SYSFS, PRECURSOR, RECOVERY_ACTION, RECOVERY_ACTIONS,
                     RESET_EVENTS, SXID)
from . import common
from .common import XID, by, s, target
from .common import panel as P
from .fleet import PER_WINDOW, W

IB_STATES = {1: ("DOWN", "red"), 2: ("INIT", "orange"), 3: ("ARMED", "yellow"), 4: ("ACTIVE", "green"),
             5: ("ACTIVE_DEFER", "yellow")}
OK_FAILING = {0: ("failing", "red"), 1: ("ok", "green")}
# NVML's recovery action as one number per GPU (the nvmlDeviceGpuRecoveryAction_t values), 9 for
# an action this mixin does not know
OTHER_ACTION = 9
RECOVERY_STATES = {0: ("none", "green"), 1: ("GPU reset", "red"), 2: ("node reboot", "dark-red"),
                   3: ("drain P2P", "orange"), 4: ("drain and reset", "red"), OTHER_ACTION: ("other", "purple")}


def recovery_action_value(cfg: Config, labels: str) -> str:
    """Each GPU's current NVML recovery action (``nodewarden_gpu_recovery_action == 1``) as the
    number of :data:`RECOVERY_STATES`, by ``labels``."""
    known = "|".join(RECOVERY_ACTIONS)
    def current(op: str, value: str) -> str:
        return s(cfg, RECOVERY_ACTION, 'action' + op + '"' + value + '"') + " == 1"
    terms = [f"({current('=', name)}) * {value}" for name, value in RECOVERY_ACTIONS.items()]
    terms.append(f"({current('!~', known)}) * {OTHER_ACTION}")
    return f"max by ({labels}) ({' or '.join(terms)})"


def aer_sysfs_severity(expr: str) -> str:
    """The sysfs AER counters' severities in the kernel log's words (correctable -> corrected,
    nonfatal -> non_fatal), so that the two sources line up in one table."""
    return (f'label_replace(label_replace({expr}, "severity", "corrected", "severity", "correctable"), '
            '"severity", "non_fatal", "severity", "nonfatal")')


def _iwf(cfg: Config, series: str, window: str = W) -> str:
    return promql.increase_with_first(cfg, series, window)


def summary_panels(cfg: Config) -> list:
    hw = common.policy_increase(cfg, "$__range", 'hardware="true"')
    not_none = s(cfg, RECOVERY_ACTION, 'action!="none"')
    fatal_sxid = s(cfg, SXID, 'severity="fatal"')
    uncorrected_aer = s(cfg, AER_LOGGED, 'severity=~"fatal|non_fatal"')
    return [
        P(stat.Panel, "Validator state", unit="none", size=(6, 4),
          targets=[target(common.validator_state(cfg, by(cfg)), "{{node}}", instant=True)],
          extra=lambda p: p.mappings(common.mappings(common.STATE_TEXT)),
          description="The node's validator state: fail (drain it, read `nodewarden validate` output), stale "
          f"(no finished run for more than {cfg.validator_stale_seconds // 86400} days), warn, pass, or no "
          "report yet. The last run's checks and measurements are in the Validator row."),
        P(stat.Panel, "GPUs lost", unit="short", size=(6, 4),
          targets=[target(f"sum by ({by(cfg)}) ({s(cfg, 'nodewarden_gpu_lost')})", "{{node}}", instant=True)],
          extra=lambda p: p.thresholds(common.thresholds((None, "green"), (1, "red"))),
          description="GPUs NVML reports lost (fallen off the bus). Any: drain and reboot the node; replace the "
          "GPU if it is lost again."),
        P(stat.Panel, "Hardware Xids (selected range)", unit="short", size=(6, 4), targets=[
            target(f"sum by ({by(cfg)}) ({hw})",
                   "{{node}}", instant=True)],
          extra=lambda p: p.thresholds(common.thresholds((None, "green"), (1, "red"))),
          description="Xids that the policy marks hardware over the time range. Any: see 'Xid errors in the "
          "selected range' for the code, GPU and action."),
        P(stat.Panel, "Agent up", unit="none", size=(6, 4),
          targets=[target(f"max by ({by(cfg)}) ({s(cfg, 'up')})", "{{node}}", instant=True)],
          extra=lambda p: p.mappings(common.mappings({0: ("down", "red"), 1: ("up", "green")})),
          description="Whether Prometheus scrapes the node's agent. Down: every other panel is stale; check "
          "`systemctl status nodewarden-agent` and the agent's listen address (loopback by default)."),
        P(stat.Panel, "GPUs needing a reset or reboot", unit="short", size=(12, 4), targets=[
            target(f"sum by ({by(cfg)}) ({not_none})", "{{node}}", instant=True)],
          extra=lambda p: p.thresholds(common.thresholds((None, "green"), (1, "red"))),
          description="GPUs whose NVML recovery action is not none (GPU reset, node reboot, drain P2P, drain and "
          "reset): the driver says they need it before they are fit again. Any: drain the node; the 'GPU "
          "recovery action' panel names the GPU and the action. No data: the driver does not report the field."),
        P(stat.Panel, "Fatal SXids and uncorrected PCIe AER (selected range)", unit="short", size=(12, 4), targets=[
            target(f"sum by ({by(cfg)}) ({_iwf(cfg, fatal_sxid, '$__range')})", "fatal SXid", instant=True),
            target(f"sum by ({by(cfg)}) ({_iwf(cfg, uncorrected_aer, '$__range')})", "uncorrected AER",
                   instant=True)],
          extra=lambda p: p.thresholds(common.thresholds((None, "green"), (1, "red"))),
          description="Kernel-log events over the time range: fatal NVSwitch SXids, and uncorrected (fatal or "
          "non-fatal) PCIe AER records. Any: the NVSwitch and PCIe rows below name the switch, the code and "
          "the device. No data: the node logged none since the agent started."),
    ]


def xid_panels(cfg: Config) -> list:
    return [
        P(timeseries.Panel, "Xid errors per GPU", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'xid')}) ({_iwf(cfg, s(cfg, XID))})", "GPU {{gpu}} Xid {{xid}}")],
          description=PER_WINDOW + "Xid errors of this node by GPU and code. `nodewarden xid <code>` says what "
          "a code means and what to do."),
        P(table.Panel, "Xid errors in the selected range", unit="short", targets=[
            target(f"sort_desc(sum by ({by(cfg, 'gpu', 'pci_bus_id', 'xid', 'category', 'action', 'hardware')}) "
                   f"({common.policy_increase(cfg, '$__range')}) > 0)", instant=True)],
          description="Each GPU and Xid code seen in the time range, with its group and the policy's action "
          "(drain, reset_gpu, restart_app, investigate, ignore) and whether it is hardware. Follow the action "
          "of the worst row."),
    ]


def gpu_panels(cfg: Config) -> list:
    ecc = s(cfg, "nodewarden_gpu_ecc_errors_total", 'scope="aggregate"')
    gpu = by(cfg, "gpu")
    return [
        P(timeseries.Panel, "GPU ECC errors per GPU", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'type')}) (increase({ecc}[{W}]))",
                   "GPU {{gpu}} {{type}}")],
          description=PER_WINDOW + "Corrected and uncorrected GPU memory ECC errors per GPU (NVML aggregate "
          "counters). Uncorrected: the job on that GPU likely crashed; reset the GPU so that the row is "
          "remapped. Corrected errors that keep rising precede row remapping."),
        P(timeseries.Panel, "Row remapping and retired pages per GPU", unit="short", targets=[
            target(f"max by ({gpu}) ({s(cfg, 'nodewarden_gpu_row_remap_pending')})", "GPU {{gpu}} remap pending"),
            target(f"max by ({gpu}) ({s(cfg, 'nodewarden_gpu_row_remap_failure')})", "GPU {{gpu}} remap FAILED"),
            target(f"sum by ({by(cfg, 'gpu', 'cause')}) ({s(cfg, 'nodewarden_gpu_remapped_rows')})",
                   "GPU {{gpu}} remapped rows {{cause}}"),
            target(f"sum by ({by(cfg, 'gpu', 'cause')}) ({s(cfg, 'nodewarden_gpu_retired_pages')})",
                   "GPU {{gpu}} retired pages {{cause}}"),
            target(f"max by ({gpu}) ({s(cfg, 'nodewarden_gpu_retired_pages_pending')})",
                   "GPU {{gpu}} retirement pending")],
          description="Remap pending (1: reset the GPU when idle), remap failure (1: no spare rows, replace the "
          "GPU), rows remapped and pages retired by cause (accumulated damage), page retirement pending (1: "
          "reload the driver). Retired pages exist on GPUs before Ampere only."),
        P(timeseries.Panel, "NVLink errors per GPU and link", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'link', 'type')}) (increase("
                   f"{s(cfg, 'nodewarden_gpu_nvlink_errors_total')}[{W}])) > 0", "GPU {{gpu}} link {{link}} {{type}}")],
          description=PER_WINDOW + "NVLink CRC, replay and recovery errors per link; links without errors are "
          "not drawn. One link with a steady rate: reset the GPU; if it persists, the GPU or the baseboard "
          "needs service."),
        P(timeseries.Panel, "NVLink links inactive", unit="short", targets=[
            target(f"count by ({gpu}) ({s(cfg, 'nodewarden_gpu_nvlink_state')} == 0)", "GPU {{gpu}}")],
          description="NVLink links per GPU that NVML reports inactive. An HGX GPU should have all its links "
          "active; any inactive link halves collective bandwidth: reset the GPU or reboot, then service."),
        P(timeseries.Panel, "GPU PCIe replays", unit="short", targets=[
            target(f"sum by ({gpu}) (increase({s(cfg, 'nodewarden_gpu_pcie_replays_total')}[{W}]))",
                   "GPU {{gpu}}")],
          description=PER_WINDOW + "PCIe replays per GPU (link-level retransmissions). A steady rise is a "
          "marginal link: reseat the GPU or its riser."),
    ]


def pcie_panels(cfg: Config) -> list:
    dev = by(cfg, "pci_bus_id")
    dev_sev = by(cfg, "pci_bus_id", "severity")
    def below_max(metric: str) -> str:
        cur, mx = s(cfg, metric, 'which="current"'), s(cfg, metric, 'which="max"')
        return f"max by ({dev}) ({cur}) < max by ({dev}) ({mx})"
    nvidia = s(cfg, "nodewarden_pcie_device_info", 'vendor="0x10de"')
    return [
        P(timeseries.Panel, "Downtrained PCIe links per device", unit="short", targets=[
            target(below_max("nodewarden_pcie_link_width"), "{{pci_bus_id}} width"),
            target(f"{below_max('nodewarden_pcie_link_generation')} unless on({dev}) {nvidia}",
                   "{{pci_bus_id}} generation")],
          description="PCI functions whose link runs below its maximum: the value is the current width in lanes "
          "(0 = link down) or the current generation. Generation only for non-NVIDIA devices: NVIDIA GPUs drop "
          "their generation when idle, which is not a fault. Reseat the device or riser named by the address."),
        P(timeseries.Panel, "PCIe AER errors per device", unit="short", targets=[
            target(f"sum by ({by(cfg, 'pci_bus_id', 'severity', 'error')}) ({_iwf(cfg, s(cfg, AER_BITS))}) > 0",
                   "{{pci_bus_id}} {{severity}} {{error}}")],
          description=PER_WINDOW + "PCIe Advanced Error Reporting errors per function, severity and error bit "
          "(the sysfs `aer_dev_*` counters; a bit's series starts at its first error, which counts). "
          "`lspci -s <address>` names the device. Fatal or non-fatal errors: service the device or slot; "
          "correctable bursts: a marginal link."),
        P(timeseries.Panel, "PCIe AER errors per device (kernel log)", unit="short", targets=[
            target(f"sum by ({by(cfg, 'pci_bus_id', 'severity')}) ({_iwf(cfg, s(cfg, AER_LOGGED))}) > 0",
                   "{{pci_bus_id}} {{severity}}")],
          description=PER_WINDOW + "AER error records the kernel logged (`AER: ... error received`, `PCIe Bus "
          "Error: severity=...`), one per error, by the function the error is about and severity (corrected, "
          "non_fatal, fatal); the sysfs counters beside it count error bits. An uncorrected error on a GPU "
          "usually comes before Xid 79: see the GPU reset and recovery row."),
        P(timeseries.Panel, "PCIe AER recovery outcomes per device", unit="short", targets=[
            target(f"sum by ({by(cfg, 'pci_bus_id', 'outcome')}) ({_iwf(cfg, s(cfg, AER_RECOVERY))}) > 0",
                   "{{pci_bus_id}} {{outcome}}")],
          description=PER_WINDOW + "What the kernel's AER recovery did after an uncorrected error: recovered, "
          "link_reset (the port's link was reset), no_error_detected_callback (the device's driver cannot "
          "recover: `can't recover`), recovery_failed. The last two on an NVIDIA function: the GPU is lost "
          "until a reboot."),
        P(table.Panel, "PCIe AER per device: kernel log and sysfs (selected range)", unit="short", size=(24, 8),
          targets=[
            target(f"sum by ({dev_sev}) ({_iwf(cfg, s(cfg, AER_LOGGED), '$__range')}) > 0", instant=True),
            target(f"sum by ({dev_sev}) ({aer_sysfs_severity(_iwf(cfg, s(cfg, AER_SYSFS), '$__range'))}) > 0",
                   instant=True)],
          extra=lambda p: p.with_transformation(common.model.DataTransformerConfig(id_val="merge", options={}))
          .with_transformation(common.model.DataTransformerConfig(id_val="organize", options={
              "renameByName": {"Value #A": "kernel log records", "Value #B": "sysfs error bits"}})),
          description="Each PCI function with AER errors in the time range, by severity (corrected, non_fatal, "
          "fatal): the kernel log's records beside the sysfs `aer_dev_*` totals (the sum of the error bits' "
          "counts, so one record with two bits counts two). Only sysfs: the kernel rate-limited or lost the lines; "
          "only the log: a device without AER statistics. `lspci -vvv -s <address>` names the device."),
    ]


def nvswitch_panels(cfg: Config) -> list:
    sw = by(cfg, "switch", "pci_bus_id", "sxid", "severity")
    return [
        P(timeseries.Panel, "NVSwitch SXid errors by switch and code", unit="short", targets=[
            target(f"sum by ({sw}) ({_iwf(cfg, s(cfg, SXID))}) > 0", "{{switch}} SXid {{sxid}} {{severity}}")],
          description=PER_WINDOW + "NVSwitch SXid errors from the kernel log (`nvidia-nvswitchN: SXid (PCI:...): "
          "CODE`), by switch, code and severity (fatal, non_fatal, unknown: a code the SXid catalog does not "
          "list, printed without its severity line). Fatal: NVLink traffic through the switch stopped; drain the "
          "node and reset the GPUs and NVSwitches (Fabric Manager's log names the port). Non-fatal ones at a "
          f"rate ({cfg.sxid_storm_count} in {cfg.sxid_storm_window}) raise NodewardenNvswitchSxidStorm."),
        P(table.Panel, "NVSwitch SXid errors in the selected range", unit="short", targets=[
            target(f"sort_desc(sum by ({sw}) ({_iwf(cfg, s(cfg, SXID), '$__range')}) > 0)", instant=True)],
          description="Each switch and SXid code logged in the time range, with its severity and count. "
          "`journalctl -k | grep SXid` has the lines (the Data words, link and engine instance); NVIDIA's "
          "SXid catalog and Fabric Manager's log tell what the code means for that port."),
    ]


def recovery_panels(cfg: Config) -> list:
    gpu = by(cfg, "gpu")
    return [
        P(statetimeline.Panel, "GPU recovery action (NVML)", unit="none", size=(24, 6), targets=[
            target(recovery_action_value(cfg, gpu), "GPU {{gpu}}")],
          extra=lambda p: p.mappings(common.mappings(RECOVERY_STATES)).show_value("never"),
          description="Each GPU's recovery action as NVML reports it (nvmlDeviceGpuRecoveryAction_t): none, GPU "
          "reset (reset it when idle), node reboot (a GPU reset is not enough), drain P2P (stop peer-to-peer "
          "traffic, then read it again), drain and reset (it runs at reduced capacity: drain, then reset). "
          "Anything but none pages (NodewardenGpuResetRequired, NodewardenNodeRebootRequired). No data: "
          "the driver does not report the field."),
        P(timeseries.Panel, "GPU reset-required and GPU-lost precursor events", unit="short", targets=[
            target(f"sum by ({by(cfg, 'gpu', 'pci_bus_id', 'action')}) ({_iwf(cfg, s(cfg, RESET_EVENTS))}) > 0",
                   "GPU {{gpu}} {{pci_bus_id}} needs {{action}}"),
            target(f"sum by ({by(cfg, 'gpu', 'pci_bus_id', 'reason')}) ({_iwf(cfg, s(cfg, PRECURSOR))}) > 0",
                   "GPU {{gpu}} {{pci_bus_id}} precursor {{reason}}")],
          description=PER_WINDOW + "Kernel-log events per GPU: the driver saying it must be reset or the node "
          "rebooted (`NV_ERR_RESET_REQUIRED` assertions, Xid 154 with its new action), and GPU-lost precursors "
          "(an uncorrected AER error on the GPU's function, or AER recovery that failed for it: Xid 79 "
          "usually follows). An empty GPU: the line named no GPU the agent could map."),
        P(table.Panel, "GPU reset-required and precursor events in the selected range", unit="short", targets=[
            target(f"sort_desc(sum by ({by(cfg, 'gpu', 'pci_bus_id', 'action')}) "
                   f"({_iwf(cfg, s(cfg, RESET_EVENTS), '$__range')}) > 0)", instant=True),
            target(f"sort_desc(sum by ({by(cfg, 'gpu', 'pci_bus_id', 'reason')}) "
                   f"({_iwf(cfg, s(cfg, PRECURSOR), '$__range')}) > 0)", instant=True)],
          extra=lambda p: p.with_transformation(common.model.DataTransformerConfig(id_val="merge", options={}))
          .with_transformation(common.model.DataTransformerConfig(id_val="organize", options={
              "renameByName": {"Value #A": "reset-required events", "Value #B": "precursor events"}})),
          description="Each GPU's reset-required events (by the action the driver asked for) and GPU-lost "
          "precursors (by reason: fatal_aer, non_fatal_aer, aer_no_error_detected_callback, aer_recovery_failed) "
          "over the time range. A GPU here: drain the node, reset or reboot as the action says, then run `nodewarden "
          "validate --checks links,gpu_memory`."),
    ]


def ib_panels(cfg: Config) -> list:
    port = by(cfg, "device", "port")
    return [
        P(statetimeline.Panel, "IB port state", unit="none", size=(24, 6), targets=[
            target(f"max by ({port}) ({s(cfg, 'nodewarden_ib_port_state', cfg.ib_port_selector)})",
                   "{{device}}/{{port}}")],
          extra=lambda p: p.mappings(common.mappings(IB_STATES)).show_value("never"),
          description="Logical state of each InfiniBand port (sysfs `state`). Anything but ACTIVE on a port that "
          "should be cabled: check the cable, the switch port and the subnet manager."),
        P(timeseries.Panel, "IB flash cuts and outages per port", unit="short", targets=[
            target(f"sum by ({port}) ({_iwf(cfg, s(cfg, 'nodewarden_ib_flash_cuts_total'))})",
                   "{{device}}/{{port}} flash cut"),
            target(f"sum by ({port}) ({_iwf(cfg, s(cfg, 'nodewarden_ib_link_outages_total'))})",
                   "{{device}}/{{port}} outage")],
          description=PER_WINDOW + "Flash cuts (down and back within seconds) and longer outages per port. "
          f"{cfg.flash_cut_storm_count} or more flash cuts in {cfg.flash_cut_storm_window}: reseat or replace "
          "the cable or transceiver."),
        P(timeseries.Panel, "IB port error counters", unit="short", targets=[
            target(f"sum by ({by(cfg, 'device', 'port', 'counter')}) (increase("
                   f"{s(cfg, 'nodewarden_ib_port_errors_total')}[{W}])) > 0", "{{device}}/{{port}} {{counter}}"),
            target(f"sum by ({port}) (increase({s(cfg, 'nodewarden_ib_link_downed_total')}[{W}])) > 0",
                   "{{device}}/{{port}} link_downed")],
          description=PER_WINDOW + "Port error counters that rose (symbol errors, link recovery, receive "
          "errors...) and `link_downed`. Rising symbol errors on one port predict flash cuts: clean or replace "
          "the optics."),
        P(timeseries.Panel, "IB port rate", unit="Bps", targets=[
            target(f"max by ({port}) ({s(cfg, 'nodewarden_ib_port_rate_bytes_per_second')})", "{{device}}/{{port}}")],
          description="Negotiated data rate of each port (sysfs `rate`), bytes per second. A port below its "
          "siblings trained at a lower speed or width: reseat or replace the cable."),
    ]


def memory_panels(cfg: Config) -> list:
    dimm = by(cfg, "controller", "dimm")
    return [
        P(timeseries.Panel, "CPU memory errors per DIMM (EDAC)", unit="short", targets=[
            target(f"sum by ({dimm}) (increase({s(cfg, 'nodewarden_edac_correctable_errors_total')}[{W}]))",
                   "{{controller}} {{dimm}} corrected"),
            target(f"sum by ({dimm}) (increase({s(cfg, 'nodewarden_edac_uncorrectable_errors_total')}[{W}]))",
                   "{{controller}} {{dimm}} uncorrected")],
          description=PER_WINDOW + "Corrected and uncorrected memory errors per DIMM from the EDAC sysfs counters. "
          f"More than {cfg.edac_ce_threshold} corrected in {cfg.edac_ce_window}: replace the DIMM soon; any "
          "uncorrected: drain the node and replace it."),
        P(timeseries.Panel, "Kernel-log EDAC errors and machine checks", unit="short", targets=[
            target(f"sum by ({by(cfg, 'controller', 'dimm', 'type')}) "
                   f"({_iwf(cfg, s(cfg, 'nodewarden_edac_logged_errors_total'))})", "{{dimm}} {{type}} (log)"),
            target(f"sum by ({by(cfg, 'type')}) ({_iwf(cfg, s(cfg, 'nodewarden_mce_events_total'))})",
                   "MCE {{type}}")],
          description=PER_WINDOW + "EDAC errors as the kernel log reported them (rate-limited by the kernel: the "
          "sysfs counters above are authoritative) and machine-check records. Uncorrected machine checks: drain "
          "the node and read `mcelog`/`rasdaemon` for the bank."),
    ]


def validator_panels(cfg: Config) -> list:
    return [
        P(table.Panel, "Last validator run: check results", unit="none", targets=[
            target(f"max by ({by(cfg, 'check', 'status')}) ({s(cfg, 'nodewarden_validator_check_status')} == 1)",
                   instant=True)],
          description="Every check of the node's last scheduled validator run and its status (pass, warn, fail, "
          "skip, error). A failed check: `nodewarden validate --checks <check>` reruns it with its details."),
        P(table.Panel, "Last validator run: measured values and thresholds", unit="none", targets=[
            target(f"max by ({by(cfg, 'check', 'metric', 'device', 'unit')}) "
                   f"({s(cfg, 'nodewarden_validator_check_value')})", instant=True),
            target(f"max by ({by(cfg, 'check', 'metric', 'device', 'unit', 'bound')}) "
                   f"({s(cfg, 'nodewarden_validator_check_threshold')})", instant=True)],
          extra=lambda p: p.with_transformation(common.model.DataTransformerConfig(id_val="merge", options={}))
          .with_transformation(common.model.DataTransformerConfig(id_val="organize", options={
              "renameByName": {"Value #A": "value", "Value #B": "threshold"}})),
          description="The numeric measurements of the last run (bandwidths, FLOP/s, error counts...), one row "
          "per check, metric and device, beside the threshold it was held to (`bound` min: the value must be at "
          "least the threshold; max: at most). The `unit` column gives both their unit. A row outside its "
          "bound is why a check failed: rerun it with `nodewarden validate --checks <check>`; the full report "
          "is `validate.json` in the agent's state directory."),
        P(table.Panel, "Validator schedule", unit="dateTimeAsIso", targets=[
            target(f"max by ({by(cfg)}) ({s(cfg, 'nodewarden_validator_last_run_timestamp_seconds')}) * 1000",
                   instant=True),
            target(f"max by ({by(cfg)}) ({s(cfg, 'nodewarden_validator_next_run_timestamp_seconds')}) * 1000",
                   instant=True)],
          extra=lambda p: p.with_transformation(common.model.DataTransformerConfig(
              id_val="merge", options={})),
          description="When the last exported run finished (A) and when the next is due (B). A last run older "
          f"than {cfg.validator_stale_seconds // 86400} days is stale: check the agent's log for why runs do not "
          "happen (GPUs always busy, the run failing to start)."),
        P(stat.Panel, "Validator last exit code", unit="none", size=(12, 4), targets=[
            target(f"max by ({by(cfg)}) ({s(cfg, 'nodewarden_validator_last_exit_code')})", "{{node}}",
                   instant=True)],
          extra=lambda p: p.mappings(common.mappings({0: ("0 healthy", "green"), 1: ("1 unhealthy", "red"),
                                                      2: ("2 usage", "orange"), 3: ("3 incomplete", "orange"),
                                                      127: ("127 could not start", "red")})),
          description="Exit code of the last validator run: 0 healthy, 1 unhealthy, 2 usage error, 3 incomplete, "
          "127 could not start, negative = killed by that signal (-15/-9 after its timeout). Not 0: read the "
          "agent's log and the JSON report."),
    ]


def agent_panels(cfg: Config) -> list:
    coll = by(cfg, "collector")
    return [
        P(statetimeline.Panel, "Collector success", unit="none", size=(24, 6), targets=[
            target(f"min by ({coll}) ({s(cfg, 'nodewarden_collector_success')})", "{{collector}}")],
          extra=lambda p: p.mappings(common.mappings(OK_FAILING)).show_value("never"),
          description="Whether each collector's last run worked (kernel_log: /dev/kmsg readable; a polled "
          "collector: its last collect() returned in time). Failing: the agent's log names the error; the "
          "faults that collector watches are not seen meanwhile."),
        P(timeseries.Panel, "Collector duration", unit="s", targets=[
            target(f"max by ({coll}) ({s(cfg, 'nodewarden_collector_duration_seconds')})", "{{collector}}")],
          description="Seconds each collector's last completed run took. A collector near its timeout (NVML "
          "calls on a GPU about to fall off the bus) will start failing."),
        P(timeseries.Panel, "Kernel log records lost", unit="short", targets=[
            target(f"sum by ({by(cfg)}) (increase({s(cfg, 'nodewarden_collector_kmsg_overruns_total')}[{W}]))",
                   "overruns"),
            target(f"sum by ({by(cfg)}) (increase({s(cfg, 'nodewarden_collector_kmsg_lost_records_total')}[{W}]))",
                   "lost records"),
            target(f"sum by ({coll}) (increase({s(cfg, 'nodewarden_collector_unparsed_lines_total')}[{W}]))",
                   "unparsed {{collector}}")],
          description=PER_WINDOW + "Kernel-log reader overruns (it fell behind the ring buffer), records known "
          "lost (faults may be missing from the counters), and fault-looking lines no parser could read (kept in "
          "the journal: report them). Losses: raise the kernel's log buffer (log_buf_len) or find the log flood."),
        P(timeseries.Panel, "State and journal write problems", unit="short", targets=[
            target(f"sum by ({by(cfg)}) (increase({s(cfg, 'nodewarden_collector_state_write_errors_total')}[{W}]))",
                   "state write errors"),
            target(f"sum by ({by(cfg, 'reason')}) (increase("
                   f"{s(cfg, 'nodewarden_collector_journal_dropped_records_total')}[{W}]))", "journal drops {{reason}}")],
          description=PER_WINDOW + "Failed writes of state.json or the event journal (read-only or full state "
          "directory: counters will reset at the next restart) and events counted but not journaled (journal "
          "size limits or a flooding source)."),
        P(timeseries.Panel, "Event journal size", unit="bytes", targets=[
            target(f"max by ({by(cfg)}) ({s(cfg, 'nodewarden_collector_journal_bytes')})", "{{node}}")],
          description="Bytes in the agent's event journal files, bounded by `[journal] max_bytes` (and per day by "
          "`max_day_bytes`). Past a bound, new events are still counted in the fault series but not journaled "
          "(the journal drops panel); only age (`max_age_days`) deletes journal files."),
    ]


def dashboard(cfg: Config) -> dash.Dashboard:
    sections = [
        ("Summary", summary_panels(cfg)),
        ("GPU Xid errors", xid_panels(cfg)),
        ("GPUs: memory, NVLink, PCIe", gpu_panels(cfg)),
        ("GPU reset and recovery", recovery_panels(cfg)),
        ("PCIe devices", pcie_panels(cfg)),
        ("NVSwitch", nvswitch_panels(cfg)),
        ("InfiniBand ports", ib_panels(cfg)),
        ("CPU memory and machine checks", memory_panels(cfg)),
        ("Validator", validator_panels(cfg)),
        ("Agent health", agent_panels(cfg)),
    ]
    d = common.build("nodewarden / Node detail", common.UIDS["node"],
                     "One node's faults per GPU, IB port, DIMM, PCI device and NVSwitch, its last validator run "
                     "and the agent's own health.", cfg, sections, one_node=True)
    return d.link(common.dashboard_link("Fleet faults", "fleet"))
