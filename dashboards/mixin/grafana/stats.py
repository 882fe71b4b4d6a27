"""Failure statistics: the Fire-Flyer paper's Table VI (Xid count and share per code and per
group) and Table VII (CPU memory ECC, IB flash cuts and GPU memory Xids per 30-day bucket),
computed live over the selected time range from the recording rules
``cluster_xid:nodewarden_gpu_xid_errors:interval_increase``,
``cluster:nodewarden_edac_errors:interval_increase`` and
``cluster:nodewarden_ib_flash_cuts:interval_increase`` (exact counts per rule evaluation, one
series per cluster and code): ``sum_over_time()`` of them over months reads one sample a minute
per code, where the raw counters would read one per scrape per GPU (past Prometheus's
``--query.max-samples`` for a year of a large fleet). Per cluster, so no node variable; the
node dashboard has a node's own Xids.

Source of the tables' layout: Fire-Flyer AI-HPC (SC24), Table VI "GPU Xid errors" and Table VII
"memory and network faults per month"; the paper counts calendar months, these panels count
30-day buckets (PromQL has no calendar windows).

"Beyond the paper": the kernel-log faults the paper's tables do not count (NVSwitch SXids, PCIe
AER records, GPU reset-required events and GPU-lost precursors), from
``cluster_kind:nodewarden_beyond_paper_events:interval_increase``, one series per ``kind``: the
columns of ``nodewarden analyze``'s beyond_paper_monthly table, kept apart so that the paper's
tables stay as the paper printed them."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import table, timeseries
from grafana_foundation_sdk.models import common as cm

from .. import promql
from ..config import Config
from . import common
from ..rules import CLUSTER_BEYOND, CLUSTER_EDAC, CLUSTER_FLASH_CUTS, CLUSTER_XID
from .common import target
from .common import panel as P

BUCKET = "30d"
GPU_MEMORY_XIDS = (63, 64, 79, 94, 95)  # Table VII's GPU memory columns
BUCKET_NOTE = ("Each bar counts {what} in the 30 days before its timestamp: the buckets are 30-day windows "
               "ending at the bar, not calendar months as in the paper's table. Pick a time range of several "
               "months; Prometheus must keep that much history. ")


def _bars(p: timeseries.Panel) -> None:
    p.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80).stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))


def c(cfg: Config, record: str, *matchers: str) -> str:
    """A per-cluster recording rule, selected by job and the cluster variable."""
    return promql.sel(cfg, record, f'{cfg.cluster_label}=~"$cluster"', *matchers)


def table6_panels(cfg: Config) -> list:
    count = f"sum_over_time({c(cfg, CLUSTER_XID)}[$__range])"
    def share(labels: str) -> str:
        return f"100 * (sum by ({labels}) ({count}) > 0) / on() group_left() sum({count})"
    return [
        P(table.Panel, "Xid errors per code (Table VI)", unit="short", targets=[
            target(f"sort_desc(sum by (xid, category) ({count}) > 0)", instant=True)],
          description="Xid errors of the selected clusters over the dashboard's time range (codes seen "
          "in it; counted since the recording rules were loaded), per code and group, as in the Fire-Flyer paper's Table VI (which counted 12970 Xids: 43% NVLink Xid 74, "
          "55% software Xids 13/31/43/45). Many software Xids are the jobs' fault; compare the hardware "
          "codes against the paper's shares to spot a bad batch."),
        P(table.Panel, "Xid share per code (Table VI)", unit="percent", targets=[
            target(f"sort_desc({share('xid, category')})", instant=True)],
          description="Each Xid code's share of all Xids over the time range, in percent (the 'Percentage' column "
          "of Table VI). A hardware code with a share well above the paper's points at a fleet-wide cause "
          "(firmware, driver, cooling)."),
        P(table.Panel, "Xid errors per group (Table VI)", unit="short", targets=[
            target(f"sort_desc(sum by (category) ({count}) > 0)", instant=True)],
          description="Xid errors over the time range per catalog group (memory_ecc, nvlink, software, "
          "uncorrectable, other): Table VI's 'GPU error type' rows."),
        P(table.Panel, "Xid share per group (Table VI)", unit="percent", targets=[
            target(f"sort_desc({share('category')})", instant=True)],
          description="Each group's share of all Xids over the time range, in percent. A rising nvlink or "
          "memory_ecc share is hardware wearing out; a software share that dominates is normal."),
    ]


def table7_panels(cfg: Config) -> list:
    def per_bucket(series: str) -> str:
        return f"sum_over_time({series}[{BUCKET}])"
    xids = c(cfg, CLUSTER_XID, f'xid=~"{promql.regex(GPU_MEMORY_XIDS)}"')
    return [
        P(timeseries.Panel, "CPU memory ECC errors per 30 days (Table VII)", unit="short", size=(8, 9), targets=[
            target(f"sum by (type) ({per_bucket(c(cfg, CLUSTER_EDAC))})", "{{type}}", interval=BUCKET)],
          extra=_bars,
          description=BUCKET_NOTE.format(what="CPU memory errors (EDAC sysfs counters; corrected and uncorrected "
          "stacked)") + "Table VII's 'main memory CPU ECC' column: the paper saw 4 to 14 a month."
          " A jump: find the DIMMs in the fleet dashboard."),
        P(timeseries.Panel, "IB flash cuts per 30 days (Table VII)", unit="short", size=(8, 9), targets=[
            target(f"sum({per_bucket(c(cfg, CLUSTER_FLASH_CUTS))})", "flash cuts", interval=BUCKET)],
          extra=_bars,
          description=BUCKET_NOTE.format(what="the InfiniBand flash cuts of all ports") + "Table VII's 'network "
          "flash cut' column (8 to 29 a month in the paper). A rise: the fleet dashboard's 'IB flash cuts by "
          "port' names the ports; replace their cables or transceivers."),
        P(timeseries.Panel, "GPU memory Xids per 30 days (Table VII)", unit="short", size=(8, 9), targets=[
            target(f"sum by (xid) ({per_bucket(xids)})", "Xid {{xid}}", interval=BUCKET)],
          extra=_bars,
          description=BUCKET_NOTE.format(what="GPU memory Xids 63, 64, 79, 94 and 95 (stacked by code)") +
          "Table VII's GPU columns. 63/64: a page retirement or row remap was recorded / failed; 94/95: contained/uncontained ECC "
          "errors; 79: GPU fallen off the bus. Rising 95 or 64: GPUs to replace."),
    ]


def beyond_panels(cfg: Config) -> list:
    rec = c(cfg, CLUSTER_BEYOND)
    kinds = ("sxid_fatal, sxid_non_fatal, sxid_unknown (NVSwitch SXids by severity), pcie_aer_fatal, "
             "pcie_aer_non_fatal, pcie_aer_corrected (kernel-log AER records), gpu_reset_required (the driver "
             "asked for a GPU reset or node reboot), gpu_lost_precursor (uncorrected AER or failed recovery on "
             "an NVIDIA function)")
    return [
        P(table.Panel, "Beyond the paper: events per kind (selected range)", unit="short", size=(8, 9), targets=[
            target(f"sort_desc(sum by (kind) (sum_over_time({rec}[$__range])) > 0)", instant=True)],
          description="Kernel-log faults the paper's tables do not count, over the dashboard's time range "
          f"(counted since the recording rules were loaded), per kind: {kinds}. The same columns as "
          "`nodewarden analyze`'s beyond_paper_monthly table. Fatal SXids, fatal AER and precursors are node "
          "drains: find the nodes in the fleet dashboard."),
        P(timeseries.Panel, "Beyond the paper: events per 30 days", unit="short", size=(16, 9), targets=[
            target(f"sum by (kind) (sum_over_time({rec}[{BUCKET}]))", "{{kind}}", interval=BUCKET)],
          extra=_bars,
          description=BUCKET_NOTE.format(what="the kernel-log faults beyond the paper's tables (stacked by kind)")
          + f"Kinds: {kinds}. A rising pcie_aer_corrected is links wearing; rising fatal kinds, parts to "
          "replace."),
    ]


def dashboard(cfg: Config) -> dash.Dashboard:
    sections = [
        ("Table VI: Xid errors per code and group (selected range)", table6_panels(cfg)),
        ("Table VII: memory and network faults per 30 days", table7_panels(cfg)),
        ("Beyond the paper: NVSwitch SXid, PCIe AER, GPU reset", beyond_panels(cfg)),
    ]
    d = common.build("nodewarden / Failure statistics", common.UIDS["stats"],
                     "Fire-Flyer Table VI and VII computed live from nodewarden's counters, and the faults beyond "
                     "them.", cfg, sections,
                     node=False)
    return d.time("now-180d", "now").refresh("1h")
