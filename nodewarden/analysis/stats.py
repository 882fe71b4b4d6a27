"""Failure statistics beyond the paper's tables: repeat offenders, MTBF, faults that come together.

Pure functions over the event frame of :func:`nodewarden.analysis.tables.events_frame` (and the
flash-cut frame of :func:`nodewarden.analysis.tables.flash_cuts`).

Definitions
-----------
Hardware fault
    an Xid event whose code the catalog policy marks as hardware (``Policy.is_hardware``), a
    ``cpu_ecc`` or ``mce`` event, an IB flash cut, an uncorrected PCIe AER record (``pcie_aer``
    of severity ``fatal`` or ``non_fatal``, whether or not the parser calls it a GPU-lost
    precursor), a lost AER record (below), or a fatal NVSwitch SXid. Each event counts once (a
    cpu_ecc line reporting ``3 CE`` is one fault here; Table VII sums the counts instead). Not
    hardware faults, though counted in their own tables: corrected AER records (the link layer
    retried and nothing was lost; a bad link prints thousands, which would drown every MTBF),
    non-fatal and unknown SXids (the fabric carries on: the Fabric Manager guide keeps the switch
    and its links in service for a non-fatal SXid, and an SXid of unknown severity cannot be
    called a failure), ``gpu_reset_required`` reports and Xid 154 (the driver's demand for a
    reset after another fault, counted with that fault: the catalog marks 154 informational),
    ``driver_assertion`` (a driver bug's trace), and ``gpu_recovery_action`` (NVML's state, not
    an event).
AER recovery lines
    ``pcie_aer_recovery`` events (``can't recover (no error_detected callback)``, ``device
    recovery failed``, ``Root Port link has been reset``, ``device recovery successful``) are the
    kernel's recovery of an AER record (drivers/pci/pcie/err.c ``pcie_do_recovery`` runs for an
    uncorrected error and prints them right after it), consequences of a fault already counted,
    so they are not in the fault frame: not in the MTBF, repeat offenders or co-occurrence. One
    exception, a *lost AER record*: an NVIDIA function's ``no_error_detected_callback`` or
    ``recovery_failed`` line (category ``gpu_lost_precursor``) with no AER record other than a
    corrected one (a corrected error starts no recovery) on its host within
    :data:`tables.PRECURSOR_SAME_RECORD_S` (5 s) stands for the record the log lacks: a hardware
    fault labelled ``pcie_aer_recovery:gpu_lost_precursor`` (:func:`tables.lost_aer_records`,
    the selector of the precursor tables too; a line that joined its record has its outcome as
    category and is that record's).
MTBF
    mean time between failures of one category. Observation window W = ``until - since`` when
    both are given, else first..last time of any event in the frame, link up/down lines included
    (each bound replaced by ``since``/``until`` when given). Fleet MTBF = W x N / F, with N the
    nodes (the hosts seen in the frame and the hosts whose logs were read though they hold no
    event, or ``nodes`` when the fleet size is known: a node whose logs were not given is
    otherwise not counted) and F the failures of the category in the window; per node
    MTBF = W / F_node. Reported in hours; empty (NaN) when F is 0.
Co-occurrence
    for each fault (the anchor) on a host, every *other* fault label seen on the same host within
    ``window`` seconds after it (ties in time count in the order the log printed them: see
    :func:`tables.events_frame`). Labels: ``Xid N`` for Xids; ``sxid:SEVERITY`` (``sxid:fatal``,
    ``sxid:non_fatal``, ``sxid:unknown``) and ``pcie_aer:SEVERITY`` (``pcie_aer:fatal``,
    ``pcie_aer:non_fatal``, ``pcie_aer:corrected``: by the record's severity, so a fatal AER on a
    GPU is ``pcie_aer:fatal`` too; how many of them were GPU-lost precursors is in the AER
    tables and the beyond-the-paper table); ``pcie_aer_recovery:gpu_lost_precursor`` for a lost
    AER record; the event kind otherwise (``cpu_ecc``, ``mce``, ``ib_flash_cut``, ``gpu_lost``,
    ``gpu_reset_required``, ...). So PCIe AER -> Xid 79 and SXid -> Xid 74/145 come out as
    pairs such as (``pcie_aer:fatal``, ``Xid 79``) and (``sxid:fatal``, ``Xid 74``).
    A pair (first, then) counts once per anchor, however often ``then`` recurs in its window, so
    a chain Xid 48 -> 63 -> 94 within the window gives 48->63, 48->94 and 63->94 once each.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable

import numpy as np
import pandas as pd

from nodewarden import catalog
from nodewarden import events as ev
from nodewarden.analysis import tables

# Kinds that are state changes or bookkeeping rather than faults.
# Informational kinds (a port coming up, a cable plugged at probe) and link-down lines, which are
# replaced by the flash cuts they make, are not failures.
NOT_FAULTS = frozenset({ev.IB_LINK_UP, ev.NET_LINK_UP, ev.IB_PORT_STATE, ev.UNPARSED, ev.IB_LINK_DOWN,
                        ev.IB_FLASH_CUT, ev.NIC_MODULE, ev.GPU_RECOVERY_ACTION})
HARDWARE_KINDS = frozenset({ev.CPU_ECC, ev.MCE, ev.IB_FLASH_CUT})
# Kinds labelled KIND:SEVERITY (module docstring), and the labels that are hardware faults.
LABELLED_KINDS = frozenset({ev.SXID, ev.PCIE_AER, ev.PCIE_AER_RECOVERY})
LOST_RECORD = f"{ev.PCIE_AER_RECOVERY}:{tables.GPU_LOST_PRECURSOR}"  # the label of a lost AER record
HARDWARE_LABELS = frozenset({"pcie_aer:fatal", "pcie_aer:non_fatal", "sxid:fatal", LOST_RECORD})


def label_of(kind: str, xid, category, severity=None) -> str:
    """The fault label (module docstring): ``Xid 79``, ``pcie_aer:fatal``, ``sxid:fatal``,
    ``cpu_ecc``... ``severity``: the frame's ``severity`` column (an SXid's or AER record's
    attrs ``severity``); when it is missing (a journal of another version) a category that is a
    severity stands for it, else the severity is ``unknown``."""
    if kind == ev.XID and not pd.isna(xid):
        return f"Xid {int(xid)}"
    if kind in (ev.SXID, ev.PCIE_AER):
        for v in (severity, category):
            if isinstance(v, str) and v and v != tables.GPU_LOST_PRECURSOR:
                return f"{kind}:{v}"
        return f"{kind}:unknown"
    if kind in LABELLED_KINDS:
        return f"{kind}:{category}" if isinstance(category, str) and category else f"{kind}:unknown"
    return kind


def fault_frame(df: pd.DataFrame, cuts: pd.DataFrame | None = None) -> pd.DataFrame:
    """The frame's faults with IB link down/up pairs replaced by the flash cuts they make (and
    journal cuts counted once) and AER recovery lines left out but for lost records (module
    docstring); adds ``label`` (``Xid 79``, ``pcie_aer:fatal``, ``cpu_ecc``, ...). In time order,
    equal times in the frame's order (the order the logs printed them)."""
    if cuts is None:
        cuts = tables.flash_cuts(df)
    if not df.index.is_unique:  # lost_aer_records names rows by index label
        df = df.reset_index(drop=True)
    lost = df.index.isin(tables.lost_aer_records(df))
    f = df[~df["kind"].isin(NOT_FAULTS) & ((df["kind"] != ev.PCIE_AER_RECOVERY) | lost)].copy()
    if len(cuts):
        c = pd.DataFrame({"time": cuts["time"], "host": cuts["host"], "kind": ev.IB_FLASH_CUT,
                          "device": cuts["device"], "source": cuts["source"]})
        f = pd.concat([f, c.reindex(columns=f.columns)], ignore_index=True)
        f["time"] = pd.to_datetime(f["time"], utc=True)
        f["xid"] = f["xid"].astype("Int64")
    f["label"] = [label_of(k, x, c, s) for k, x, c, s in zip(f["kind"], f["xid"], f["category"], f["severity"])]
    return f.sort_values("time", kind="stable").reset_index(drop=True)


def category_of(kind: str, xid, label: str) -> str:
    """The MTBF category: the Xid's Table V group for Xids, the label (the fault frame's
    ``label`` column, :func:`label_of`) for the labelled kinds (``sxid:fatal``,
    ``pcie_aer:corrected``, ``pcie_aer_recovery:gpu_lost_precursor``), the kind otherwise."""
    if kind == ev.XID and not pd.isna(xid):
        return catalog.group_of(int(xid))
    if kind in LABELLED_KINDS:
        return label
    return kind


def hardware_mask(f: pd.DataFrame, policy: catalog.Policy | None = None) -> pd.Series:
    """Which rows of the fault frame ``f`` (:func:`fault_frame`, with its ``label`` column) are
    hardware faults (module docstring): a bool Series on ``f``'s index."""
    pol = policy or catalog.load_policy()
    hw = {}

    def is_hw(k: str, x, label: str) -> bool:
        if k == ev.XID:
            if pd.isna(x):
                return False
            x = int(x)
            if x not in hw:
                hw[x] = pol.is_hardware(x)
            return hw[x]
        if k in LABELLED_KINDS:
            return label in HARDWARE_LABELS
        return k in HARDWARE_KINDS

    return pd.Series([is_hw(k, x, lab) for k, x, lab in zip(f["kind"], f["xid"], f["label"])],
                     index=f.index, dtype=bool)


def repeat_offenders(df: pd.DataFrame, cuts: pd.DataFrame | None = None, top: int = 10,
                     policy: catalog.Policy | None = None) -> dict[str, pd.DataFrame]:
    """Top nodes, GPUs and IB ports by hardware-fault count.

    Returns ``{"nodes": ..., "gpus": ..., "ib_ports": ...}``; columns ``host`` (and ``pci_bus_id``
    for GPUs, ``device`` for IB ports), ``faults``, ``share`` (percent of all hardware faults in
    the frame), ``cumulative_share``. GPU faults are hardware Xids with a PCI bus id; port faults
    are flash cuts. Ties broken by name."""
    f = fault_frame(df, cuts)
    hw = f[hardware_mask(f, policy)]
    total = len(hw)

    def rank(g: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        g = g.dropna(subset=keys)
        c = g.groupby(keys).size().reset_index(name="faults")
        c = c.sort_values(["faults", *keys], ascending=[False] + [True] * len(keys)).head(top).reset_index(drop=True)
        c["faults"] = c["faults"].astype(int)
        c["share"] = 100.0 * c["faults"] / total if total else 0.0
        c["cumulative_share"] = c["share"].cumsum()
        return c[[*keys, "faults", "share", "cumulative_share"]]

    return {"nodes": rank(hw, ["host"]),
            "gpus": rank(hw[hw["kind"] == ev.XID], ["host", "pci_bus_id"]),
            "ib_ports": rank(hw[hw["kind"] == ev.IB_FLASH_CUT], ["host", "device"])}


def observation_window(df: pd.DataFrame, since: dt.datetime | None = None,
                       until: dt.datetime | None = None) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    t = df["time"].dropna()
    lo = pd.Timestamp(since) if since is not None else (t.min() if len(t) else None)
    hi = pd.Timestamp(until) if until is not None else (t.max() if len(t) else None)
    return lo, hi


def fleet_hosts(df: pd.DataFrame, hosts: Iterable[str] = ()) -> list[str]:
    """The fleet's nodes, sorted: the hosts of the frame's events and ``hosts`` (those whose logs
    were read though they logged no event: ``IngestStats.hosts()``)."""
    return sorted(set(df["host"].dropna()) | set(hosts))


def mtbf(df: pd.DataFrame, cuts: pd.DataFrame | None = None, since: dt.datetime | None = None,
         until: dt.datetime | None = None, nodes: int | None = None,
         policy: catalog.Policy | None = None, hosts: Iterable[str] = ()) -> pd.DataFrame:
    """Fleet MTBF per category (module docstring). Columns: ``category`` (Xid groups, then other
    kinds, then ``hardware`` = all hardware faults), ``failures``, ``window_hours``, ``nodes``,
    ``mtbf_hours``. Events without a time are not counted. N is ``nodes`` when given, else the
    count of :func:`fleet_hosts` (``hosts``: the hosts read that may have logged nothing)."""
    f = fault_frame(df, cuts)
    f = f[f["time"].notna()]
    lo, hi = observation_window(df, since, until)
    hours = (hi - lo).total_seconds() / 3600.0 if lo is not None and hi is not None else 0.0
    n = nodes if nodes is not None else len(fleet_hosts(df, hosts))
    cats = pd.Series([category_of(k, x, lab) for k, x, lab in zip(f["kind"], f["xid"], f["label"])],
                     index=f.index, dtype=object)
    counts = cats.value_counts()
    order = [g for g in catalog.GROUPS if g in counts] + sorted(c for c in counts.index if c not in catalog.GROUPS)
    rows = [(c, int(counts[c])) for c in order] + [("hardware", int(hardware_mask(f, policy).sum()))]
    out = pd.DataFrame(rows, columns=["category", "failures"])
    out["window_hours"] = hours
    out["nodes"] = n
    # No span (one event, or none): nothing to divide; MTBF unknown rather than 0.
    out["mtbf_hours"] = [hours * n / k if k and hours > 0 else np.nan for k in out["failures"]]
    return out


def mtbf_per_node(df: pd.DataFrame, cuts: pd.DataFrame | None = None, since: dt.datetime | None = None,
                  until: dt.datetime | None = None, policy: catalog.Policy | None = None,
                  hosts: Iterable[str] = ()) -> pd.DataFrame:
    """Per node: ``host``, ``hardware_faults``, ``mtbf_hours`` (window / faults; NaN when none),
    worst (shortest MTBF) first. Nodes seen only with non-hardware events, and ``hosts`` whose
    logs held no event (:func:`fleet_hosts`), are listed with 0."""
    f = fault_frame(df, cuts)
    f = f[f["time"].notna()]
    lo, hi = observation_window(df, since, until)
    hours = (hi - lo).total_seconds() / 3600.0 if lo is not None and hi is not None else 0.0
    hw = f[hardware_mask(f, policy)]
    c = hw.groupby("host").size()
    hosts = fleet_hosts(df, hosts)
    out = pd.DataFrame({"host": hosts, "hardware_faults": [int(c.get(h, 0)) for h in hosts]})
    out["mtbf_hours"] = [hours / k if k and hours > 0 else np.nan for k in out["hardware_faults"]]
    return out.sort_values(["hardware_faults", "host"], ascending=[False, True], kind="stable").reset_index(drop=True)


def co_occurrence(df: pd.DataFrame, cuts: pd.DataFrame | None = None, window: float = 60.0) -> pd.DataFrame:
    """Pairs of fault labels on one host within ``window`` seconds (module docstring). Columns:
    ``first``, ``then``, ``count`` (anchors), ``hosts`` (distinct hosts), most frequent first."""
    f = fault_frame(df, cuts)
    f = f[f["time"].notna() & f["host"].notna()]
    pairs: dict[tuple[str, str], list] = {}
    w = np.int64(int(window * 1e9))
    t_all = f["time"].dt.tz_convert(None).astype("datetime64[ns]").astype("int64").to_numpy()
    codes, hosts = pd.factorize(f["host"], sort=True)
    order = np.argsort(codes, kind="stable")  # by host, each host's faults still in time order
    t_all, codes, labels_all = t_all[order], codes[order], f["label"].to_numpy()[order]
    bounds = np.flatnonzero(np.diff(codes)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)]):
        if hi - lo < 2:
            continue
        host = hosts[codes[lo]]
        t, labels = t_all[lo:hi], labels_all[lo:hi]
        ends = np.searchsorted(t, t + w, side="right")
        for i in np.flatnonzero(ends > np.arange(1, len(t) + 1)):
            a = labels[i]
            for b in set(labels[i + 1:ends[i]]):
                if b != a:
                    entry = pairs.setdefault((a, b), [0, set()])
                    entry[0] += 1
                    entry[1].add(host)
    rows = [(a, b, n, len(h)) for (a, b), (n, h) in pairs.items()]
    out = pd.DataFrame(rows, columns=["first", "then", "count", "hosts"])
    return out.sort_values(["count", "first", "then"], ascending=[False, True, True]).reset_index(drop=True)
