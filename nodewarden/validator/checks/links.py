"""links: are the node's fabric and bus links up, at the rate and width they should have?

Five parts, each judging the records of :mod:`nodewarden.sysfs` read under ``ctx.sysfs`` (a
parameter: tests point it at the fixture trees under tests/fixtures/) — the records the
agent's collectors export, so that the check and the metrics cannot disagree — and reporting
``skip`` inside ``details`` when its hardware is absent. The check is ``skip`` only when no part
could run: never ``pass`` with nothing checked.

``infiniband``
    ``class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}``
    (Documentation/ABI/stable/sysfs-class-infiniband). A port must be active
    (:func:`nodewarden.sysfs.infiniband.port_active`: ``4: ACTIVE`` and ``5: LinkUp``; an ACTIVE
    port whose ``phys_state`` cannot be read is active, with a warning naming the file); an
    active InfiniBand port's rate (``400 Gb/sec (4X NDR)``) must reach the profile's
    ``ib_rate_gbit_per_second``; at least ``ib_ports_min`` InfiniBand ports active. A DOWN
    port's rate is stale (ibstat shows 40 or 10 there) and is not judged. A port without a
    ``link_layer`` file is InfiniBand. Ethernet link-layer ports (RoCE) are held to
    ACTIVE/LinkUp and their netdevs go to ``ethernet``.
``ethernet``
    ``class/net/<if>/{operstate,speed,carrier}`` of physical interfaces
    (:func:`nodewarden.sysfs.net.is_physical`: a ``device`` link, not a bridge, not an SR-IOV
    VF; lo, docker0, veth* and bonds have no ``device`` link) and of the RDMA netdevs:
    up (:func:`nodewarden.sysfs.net.is_up`: operstate ``up``, or carrier 1 where the driver
    leaves operstate ``unknown``) and ``speed`` (Mb/s) at least ``eth_speed_mbit_per_second``.
    IPoIB netdevs (type 32) are left to ``infiniband``: their operstate says whether IPoIB is
    configured, not whether the IB link is up.
``pcie``
    ``bus/pci/devices/<bdf>/{current,max}_link_{speed,width}`` (Documentation/ABI/testing/
    sysfs-bus-pci) of the NVIDIA (vendor 0x10de: GPUs, class 0x03xx, and NVSwitches) and Mellanox
    (0x15b3) functions, the ones the agent's pcie collector exports: a link below what both ends
    can do is downtrained. On a real
    /sys the device is a symlink into /sys/devices and the port above it is its parent directory:
    the expected maximum is the lower of the two ends' ``max_link_*``. GPUs are also held to the
    profile's ``gpu_pcie_generation``/``gpu_pcie_width``, and their number to the profile's
    top-level ``gpus``: a GPU fallen off the bus is missing here. A
    width of 0 lanes (:func:`nodewarden.sysfs.pci.pcie_width`: the link is down) is judged as
    any other width (``x0 < x16``), never as unknown.
``nvlink``
    NVML ``nvmlDeviceGetNvLinkState`` for each link of each GPU: links 0..``nvlink_links_per_gpu``-1
    must be active. Skipped without NVML.
``frequency``
    cpufreq governor and caps (``devices/system/cpu/cpu*/cpufreq``; warnings only) and the CPU
    frequency (:func:`nodewarden.sysfs.cpufreq.mean_frequency_hz`: cpufreq, or without it the
    ``cpu MHz`` of ``ctx.procfs``/cpuinfo); with NVML, GPU SM clocks and the active
    clocks-event (throttle) reasons: HW slowdown, thermal slowdown and power brake fail, the
    others (idle, power cap, application clocks, sync boost) are informational.

NVML describes the machine this process runs on, not a fixture tree: it is queried when
``ctx.sysfs`` is ``/sys`` (param ``nvml`` = ``"auto"``) or when ``nvml`` is true, first of all:
a GPU whose NVML recovery action (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, see
:mod:`nodewarden.nvml`) is not ``none`` fails the check before any part runs, the reason naming
the GPU and the action (``GPU 1 (0000:2a:00.0) must be recovered first: NVML recovery action
gpu_reset``), ``details["reset_required"]`` listing them. A driver without that field (before
r570) is not a failure. A driver that is there and shows a fault -- NVML not answering within
``nvml_timeout_seconds``, a GPU answering NVML_ERROR_GPU_IS_LOST, nvmlInit failing other than for
a missing driver, a GPU's handle refused -- fails the ``nvlink`` part, never skips it
(:func:`nodewarden.validator.base.nvml_with_timeout`); only a node without NVML skips it.

The NVIDIA driver lowers a GPU's PCIe speed when the GPU is not in use (nvidia-smi(1), "PCIe
Generation ... may be reduced when the GPU is not in use"): when NVML reports a GPU in a power
saving performance state (P3 and deeper), a speed below its maximum is a warning, not a drain.
The width is always held.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodewarden.nvml import decode_clock_event_reasons
from nodewarden.sysfs import cpufreq, infiniband, net, pci
from nodewarden.sysfs.attrs import AttrReader, natural_key
from nodewarden.sysfs.infiniband import parse_ib_rate
from nodewarden.sysfs.net import ARPHRD_ETHER
from nodewarden.validator.base import (RunContext, check_nvml_params, nvml_enabled, nvml_with_timeout,
                                       reset_required, reset_required_action, reset_required_reason)
from nodewarden.validator.result import FAIL, PASS, SKIP, WARN, CheckResult

NAME = "links"
NEEDS: tuple[str, ...] = ()
DEFAULTS: dict[str, Any] = {
    "ib_rate_gbit_per_second": 0,      # 0: any ACTIVE rate
    "ib_ports_min": 0,                 # InfiniBand link-layer ports that must be ACTIVE
    "ib_ignore_ports": [],             # "mlx5_4/1" or "mlx5_4": ports left uncabled by design
    "net_interfaces": [],              # empty: physical Ethernet interfaces that are up + RDMA netdevs
    "eth_speed_mbit_per_second": 0,    # 0: any speed
    "gpu_pcie_generation": 0,          # 0: held to the link's own maximum only
    "gpu_pcie_width": 0,
    "nvlink_links_per_gpu": 0,         # 0: NVLink state reported, not held
    "cpu_governors": ["performance"],  # other governors warn
    "nvml": "auto",                    # "auto": query NVML when sysfs is /sys; true/false to force
    "nvml_timeout_seconds": 30,        # an NVML query that hangs this long is itself a fault
}
QUICK: dict[str, Any] = {}

# Why a port is not up, for the operator (ibstat semantics, I-016; IBTA phys states).
PHYS_HINTS = {
    "Polling": "no peer: cable, transceiver or switch port",
    "Disabled": "port disabled (administratively, or by the SM/firmware)",
    "Sleep": "port asleep",
    "LinkErrorRecovery": "link retraining after errors",
    "PortConfigurationTraining": "link training",
}


# ---- small pure helpers ----------------------------------------------------------------------

def _ignored(port: str, ignore: list[str]) -> bool:
    dev = port.split("/", 1)[0]
    return port in ignore or dev in ignore


@dataclass
class Part:
    """One part's outcome: problems fail the check, warnings warn it, ``summary`` says what passed."""

    name: str
    status: str = PASS
    reason: str = ""
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def skip(self, why: str) -> "Part":
        self.status, self.reason = SKIP, why
        return self

    def finish(self, summary: str) -> "Part":
        if self.status == SKIP:
            return self
        if self.problems:
            self.status, self.reason = FAIL, "; ".join(self.problems)
        elif self.warnings:
            self.status, self.reason = WARN, "; ".join(self.warnings)
        else:
            self.status, self.reason = PASS, summary
        return self

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"status": self.status, "reason": self.reason}
        if self.problems:
            d["problems"] = self.problems
        if self.warnings:
            d["warnings"] = self.warnings
        d.update(self.info)
        return d


# ---- (a) InfiniBand / RDMA ports -------------------------------------------------------------

def ib_port_reports(devices: list[infiniband.Device], netdev_types: dict[str, int | None]) -> list[dict[str, Any]]:
    """One report dict per port of every RDMA device record (``port``, ``state``/``state_code``,
    ``phys_state``/``phys_state_code``, ``rate``/``rate_gbit``/``width``/``speed``,
    ``link_layer``, ``active`` by :func:`~nodewarden.sysfs.infiniband.port_active`, ``netdevs``:
    a RoCE port's netdevs). ``netdev_types``: ``class/net/<name>/type`` by name."""
    ports = []
    for dev in devices:
        for p in dev.ports:
            gbit, width, speed = parse_ib_rate(p.rate)
            netdevs: list[str] = []
            layer = infiniband.link_layer(p)
            if layer == infiniband.ETHERNET:
                # The GID table's netdev (a bond for a LAG device), else the PCI function's Ethernet netdevs.
                netdevs = [p.netdev] if p.netdev else [n for n in dev.netdevs
                                                       if netdev_types.get(n) in (None, ARPHRD_ETHER)]
            ports.append({"port": p.key, "device": dev.name, "pci": dev.pci_bus_id, "hca_type": dev.hca_type,
                          "fw_ver": dev.fw_ver, "state": p.state_name, "state_code": p.state,
                          "phys_state": p.phys_state_name, "phys_state_code": p.phys_state, "rate": p.rate,
                          "rate_gbit": gbit, "width": width, "speed": speed, "link_layer": layer,
                          "link_layer_read": p.link_layer, "netdevs": netdevs,
                          "active": bool(p.active)})
    return ports


def check_infiniband(ports: list[dict[str, Any]] | None, params: dict[str, Any], res: CheckResult) -> Part:
    """The ``infiniband`` part over :func:`ib_port_reports` (None: no ``class/infiniband``):
    every port not ignored must be active; ACTIVE InfiniBand ports' rates (Gbit/s) at least
    ``ib_rate_gbit_per_second``; at least ``ib_ports_min`` of them. Measures ``ib_ports_active``,
    ``roce_ports_active`` and ``ib_rate`` (bit/s) per port into ``res``."""
    part = Part("infiniband")
    want_rate = float(params.get("ib_rate_gbit_per_second") or 0)
    want_ports = int(params.get("ib_ports_min") or 0)
    ignore = list(params.get("ib_ignore_ports") or [])
    if not ports:
        why = "no RDMA devices (no class/infiniband)" if ports is None else "no RDMA ports under class/infiniband"
        if want_ports > 0:
            part.problems.append(f"{why}; profile expects >= {want_ports} InfiniBand ports ACTIVE")
            res.measure("ib_ports_active", 0, "", threshold=want_ports)
            return part.finish("")
        return part.skip(why)
    ib_active = roce_active = 0
    rates = CheckResult(NAME, PASS)  # per-port rates, listed after the port count
    for p in ports:
        name = p["port"]
        if _ignored(name, ignore):
            p["ignored"] = True
            continue
        if not p["active"]:
            p["hint"] = PHYS_HINTS.get(p["phys_state"] or "", "")
            if p["phys_state"] == "LinkUp":
                p["hint"] = "physical link up but port not ACTIVE: no subnet manager, or still initialising"
            part.problems.append(f"{name} state {p['state']} phys_state {p['phys_state']}")
            continue
        if p["phys_state"] is None and p["phys_state_code"] is None:
            dev, _, num = name.partition("/")
            part.warnings.append(f"{name} phys_state unreadable (class/infiniband/{dev}/ports/{num}/phys_state): "
                                 "ACTIVE counted as up")
        if p["link_layer_read"] not in (infiniband.INFINIBAND, infiniband.ETHERNET):
            dev, _, num = name.partition("/")
            what = "unreadable" if p["link_layer_read"] is None else f"unknown ({p['link_layer_read']!r})"
            part.warnings.append(f"{name} link_layer {what} (class/infiniband/{dev}/ports/{num}/link_layer): "
                                 "held to the InfiniBand rules")
        is_ib = p["link_layer"] == infiniband.INFINIBAND
        ib_active += is_ib
        roce_active += not is_ib
        gbit = p["rate_gbit"]
        threshold = want_rate * 1e9 if is_ib and want_rate > 0 else None
        rates.measure("ib_rate", gbit * 1e9 if gbit is not None else None, "bit/s", threshold=threshold, device=name)
        if threshold is None:
            continue
        if gbit is None:
            part.problems.append(f"{name} rate unreadable ({p['rate']!r})")
        elif gbit < want_rate:
            part.problems.append(f"{name} rate {gbit:g} Gb/s < {want_rate:g} Gb/s ({p['rate']})")
        elif gbit > want_rate:
            part.warnings.append(f"{name} rate {gbit:g} Gb/s > profile's {want_rate:g} Gb/s: check the profile")
    res.measure("ib_ports_active", ib_active, "", threshold=want_ports if want_ports > 0 else None)
    if want_ports > 0 and ib_active < want_ports:
        part.problems.append(f"{ib_active} InfiniBand ports ACTIVE < {want_ports}")
    if roce_active:
        res.measure("roce_ports_active", roce_active, "")
    res.measurements.extend(rates.measurements)
    part.info["ports"] = ports
    rate = f" at >= {want_rate:g} Gb/s" if want_rate > 0 else ""
    return part.finish(f"{ib_active} InfiniBand ports ACTIVE{rate}, {roce_active} RoCE ports ACTIVE")


# ---- (b) Ethernet / RoCE netdevs ---------------------------------------------------------------

def _netdev_report(d: net.Netdev) -> dict[str, Any]:
    return {"name": d.name, "operstate": d.operstate, "carrier": str(d.carrier) if d.carrier is not None else None,
            "speed_mbit": d.speed_mbit, "type": d.type, "physical": d.device, "vf": d.physfn, "bridge": d.bridge,
            "bond_slaves": list(d.bond_slaves), "up": net.is_up(d)}


def check_ethernet(netdevs: list[net.Netdev] | None, rdma_netdevs: list[str], params: dict[str, Any],
                   res: CheckResult) -> Part:
    """The ``ethernet`` part over the ``class/net`` records (None: no ``class/net``): the
    ``net_interfaces`` named, else the physical Ethernet interfaces that are up plus the RoCE
    ports' netdevs (and a RoCE bond's slaves), must be up (:func:`nodewarden.sysfs.net.is_up`) at
    ``eth_speed_mbit_per_second`` (Mb/s) or more. Measures ``eth_speed`` (bit/s) per interface."""
    part = Part("ethernet")
    if netdevs is None:
        return part.skip("no class/net")
    info = {d.name: _netdev_report(d) for d in netdevs}
    physical = {d.name for d in netdevs if net.is_physical(d)}
    part.info["physical"] = sorted(physical, key=natural_key)
    wanted = list(params.get("net_interfaces") or [])
    want_mbit = int(params.get("eth_speed_mbit_per_second") or 0)
    rdma = set(rdma_netdevs)
    if wanted:
        selected = wanted
    else:
        selected = []
        for n, d in info.items():
            ethernet = d["type"] in (None, ARPHRD_ETHER)
            if n in rdma or (n in physical and ethernet and d["up"]):
                selected.append(n)
        for n in list(selected):  # a RoCE bond: its slaves carry the traffic
            for s in info[n]["bond_slaves"]:
                if s not in selected:
                    selected.append(s)
        selected.sort(key=natural_key)
    if not selected:
        return part.skip("no physical Ethernet interface up and no RoCE netdev")
    checked = []
    for n in selected:
        d = info.get(n)
        if d is None:
            part.problems.append(f"{n} absent")
            continue
        d["rdma"] = n in rdma
        checked.append(d)
        if not d["up"]:
            carrier = " (no carrier)" if d["carrier"] == "0" else ""
            part.problems.append(f"{n} operstate {d['operstate']}{carrier}")
            continue
        held = want_mbit > 0 and d["physical"] and d["type"] in (None, ARPHRD_ETHER)
        if d["speed_mbit"] is not None or held:
            res.measure("eth_speed", d["speed_mbit"] * 1e6 if d["speed_mbit"] else None, "bit/s",
                        threshold=want_mbit * 1e6 if held else None, device=n)
        if not held:
            continue
        if d["speed_mbit"] is None:
            part.warnings.append(f"{n} speed unknown (expected >= {want_mbit} Mb/s)")
        elif d["speed_mbit"] < want_mbit:
            part.problems.append(f"{n} speed {d['speed_mbit']} Mb/s < {want_mbit} Mb/s")
    part.info["interfaces"] = checked
    return part.finish(f"up: {', '.join(d['name'] for d in checked)}")


# ---- (c) PCIe links ------------------------------------------------------------------------------

def _link_report(link: pci.Link) -> dict[str, Any]:
    return {"current_speed": link.current_speed, "max_speed": link.max_speed, "current_width": link.current_width,
            "max_width": link.max_width, "generation": link.generation, "max_generation": link.max_generation,
            "lanes": link.lanes, "max_lanes": link.max_lanes}


def pci_link_reports(functions: list[pci.Function]) -> list[dict[str, Any]]:
    """One report dict per function record -- the NVIDIA and Mellanox functions, those the pcie
    collector exports -- ``kind`` gpu (NVIDIA display class), nic (Mellanox network class),
    other (an NVSwitch, a bridge) or unknown (``class`` unreadable: warned), with its link and,
    on a real /sys, the port above it. Only GPUs are held to the profile's generation and width;
    every link to the lower of both ends' maximum."""
    out = []
    for f in functions:
        if pci.is_gpu(f):
            kind = "gpu"
        elif f.vendor == pci.MELLANOX and pci.is_network(f):
            kind = "nic"
        elif f.class_code is None:
            kind = "unknown"  # a GPU or a NIC whose class cannot be read: its link is still judged
        else:
            kind = "other"  # an NVSwitch (0x0680), a Mellanox bridge: held to its own maximum
        rec = {"pci": f.pci_bus_id, "kind": kind, "device_id": f.device, **_link_report(f.link)}
        if f.upstream is not None and f.upstream_link is not None:
            rec["upstream"] = f.upstream
            rec["upstream_max_generation"] = f.upstream_link.max_generation
            rec["upstream_max_lanes"] = f.upstream_link.max_lanes
        out.append(rec)
    return out


def _min(*values: int | None) -> int | None:
    known = [v for v in values if v]
    return min(known) if known else None


def check_pcie(devices: list[dict[str, Any]] | None, params: dict[str, Any], gpus_expected: int,
               idle_gpus: dict[str, int], res: CheckResult) -> Part:
    """The ``pcie`` part over :func:`pci_link_reports` (None: no ``bus/pci/devices``): at least
    ``gpus_expected`` GPUs; each link at the lower of both ends' maximum generation and width
    (GPUs also at ``gpu_pcie_generation``/``gpu_pcie_width``); a GPU in ``idle_gpus`` (PCI bus id
    -> its P-state, P3 and deeper) below its speed only warns. Measures ``gpus_on_pci_bus``,
    ``pcie_generation`` and ``pcie_width`` (lanes) per function."""
    part = Part("pcie")
    if devices is None:
        return part.skip("no bus/pci/devices")
    gpus = [d for d in devices if d["kind"] == "gpu"]
    if gpus_expected > 0:
        res.measure("gpus_on_pci_bus", len(gpus), "", threshold=gpus_expected)
        if len(gpus) < gpus_expected:
            part.problems.append(f"{len(gpus)} NVIDIA GPUs on the PCI bus < {gpus_expected}")
    if not devices:
        if not part.problems:
            return part.skip("no NVIDIA or Mellanox function on the PCI bus")
        return part.finish("")
    want_gen = int(params.get("gpu_pcie_generation") or 0)
    want_lanes = int(params.get("gpu_pcie_width") or 0)
    at_max = 0
    for d in devices:
        bdf, is_gpu = d["pci"], d["kind"] == "gpu"
        if d["kind"] == "unknown":
            part.warnings.append(f"{bdf} class unreadable (bus/pci/devices/{bdf}/class): not counted as a GPU "
                                 "or NIC, its link held to its own maximum")
        # 0 lanes is a link that is down: judged below (x0 < x16), never "unknown".
        if d["lanes"] != 0 and (d["generation"] is None or d["lanes"] is None):
            if d["current_speed"] is None and d["current_width"] is None:
                d["note"] = "no link attributes"
            else:
                part.warnings.append(f"{bdf} PCIe link status unknown ({d['current_speed']}, x{d['current_width']})")
            continue
        max_gen = _min(d["max_generation"], d.get("upstream_max_generation"))
        max_lanes = _min(d["max_lanes"], d.get("upstream_max_lanes"))
        gen_floor = max(max_gen or 0, want_gen if is_gpu else 0) or None
        lanes_floor = max(max_lanes or 0, want_lanes if is_gpu else 0) or None
        if d["generation"] is not None:
            res.measure("pcie_generation", d["generation"], "", threshold=gen_floor, device=bdf)
        res.measure("pcie_width", d["lanes"], "", threshold=lanes_floor, device=bdf)
        ok = True
        if d["lanes"] == 0 and not lanes_floor:
            ok = False
            part.problems.append(f"{bdf} PCIe x0: link down")
        if gen_floor and d["generation"] is not None and d["generation"] < gen_floor:
            ok = False
            what = "" if max_gen and d["generation"] < max_gen else " (profile)"
            text = f"{bdf} PCIe Gen{d['generation']} < Gen{gen_floor}{what}"
            pstate = idle_gpus.get(bdf) if is_gpu else None
            if pstate is not None:
                part.warnings.append(f"{text}: GPU idle in P{pstate}, the driver lowers PCIe speed when unused")
            else:
                part.problems.append(text)
        if lanes_floor and d["lanes"] < lanes_floor:
            ok = False
            what = "" if max_lanes and d["lanes"] < max_lanes else " (profile)"
            part.problems.append(f"{bdf} PCIe x{d['lanes']} < x{lanes_floor}{what}")
        at_max += ok
    part.info["devices"] = devices
    n_gpu, n_nic = len(gpus), sum(d["kind"] == "nic" for d in devices)
    n_other = len(devices) - n_gpu - n_nic
    others = f", {n_other} other NVIDIA/Mellanox functions" if n_other else ""
    return part.finish(f"{at_max}/{len(devices)} links at full speed and width ({n_gpu} GPUs, {n_nic} NIC functions"
                       f"{others})")


# ---- NVML (d, e) -------------------------------------------------------------------------------------

def check_nvlink(gpus: list[dict[str, Any]] | None, why: str, faulted: bool, params: dict[str, Any],
                 res: CheckResult) -> Part:
    """The ``nvlink`` part over the NVML snapshot's GPUs (None: not queried or no NVML, ``why``
    says which; ``faulted``: the driver showed a fault, which fails the part): links
    0..``nvlink_links_per_gpu``-1 of each GPU active. Measures ``nvlink_links_active`` per GPU."""
    part = Part("nvlink")
    if faulted:
        part.problems.append(why)
        return part.finish("")
    if gpus is None:
        return part.skip(why)
    if not gpus:
        return part.skip("NVML sees no GPU")
    want = int(params.get("nvlink_links_per_gpu") or 0)
    total = 0
    for g in gpus:
        dev = g["pci"] or f"GPU{g['index']}"
        links = g["nvlink"]
        active = sum(links.values())
        total += active
        res.measure("nvlink_links_active", active, "", threshold=want if want > 0 else None, device=dev)
        if want > 0:
            down = [k for k in range(want) if not links.get(k)]
            if down:
                part.problems.append(f"GPU {dev} NVLink {','.join(map(str, down))} down ({active}/{want} active)")
        elif 0 < active < len(links):
            part.warnings.append(f"GPU {dev} {active} of {len(links)} NVLinks active")
    if want == 0 and total == 0:
        return part.skip("no active NVLink (none expected by the profile)")
    return part.finish(f"{total} NVLinks active on {len(gpus)} GPUs" + (f" ({want} per GPU)" if want else ""))


def _cpu_frequency(sysfs: Path, procfs: Path, params: dict[str, Any], part: Part, res: CheckResult) -> bool:
    """cpufreq governors and caps (warnings) and the CPU frequency of every CPU of the node
    (:func:`~nodewarden.sysfs.cpufreq.cpu_frequency`; the cpu check measures the CPUs it ran on).
    True when anything was read."""
    records = cpufreq.read_cpus(sysfs)
    hz, source = cpufreq.cpu_frequency(sysfs, procfs, records)
    if hz is not None:
        res.measure("cpu_frequency", round(hz), "Hz")
    if not records:
        if source is None:
            return False
        part.info["cpu_source"] = "cpuinfo (no cpufreq: governor not checked)"
        return True
    governors: dict[str, int] = {}
    for gov in cpufreq.governors(records).values():
        governors[gov] = governors.get(gov, 0) + 1
    part.info["cpu_governors"] = governors
    allowed = list(params.get("cpu_governors") or [])
    for gov, n in governors.items():
        if allowed and gov not in allowed:
            part.warnings.append(f"CPU governor {gov} on {n} CPUs (expected {'/'.join(allowed)})")
    capped = [r for r in records if r.capped]
    if capped:
        c = capped[0]
        part.warnings.append(f"CPU frequency capped on {len(capped)} CPUs "
                             f"(cpu{c.cpu}: {c.max_khz / 1e6:.2f} of {c.hw_max_khz / 1e6:.2f} GHz)")
    part.info["cpu_source"] = source or "cpufreq (no frequency readable)"
    return True


def check_frequency(sysfs: Path, procfs: Path, gpus: list[dict[str, Any]] | None, params: dict[str, Any],
                    res: CheckResult) -> Part:
    """The ``frequency`` part: CPU governor, caps and frequency (Hz) read under ``sysfs``/``procfs``
    (:func:`_cpu_frequency`), the GPUs' SM clocks (Hz) and clock-event reasons
    (:func:`nodewarden.nvml.decode_clock_event_reasons`: a fault reason fails the part)."""
    part = Part("frequency")
    cpu = _cpu_frequency(sysfs, procfs, params, part, res)
    for g in gpus or []:
        dev = g["pci"] or f"GPU{g['index']}"
        if g.get("sm_clock_mhz") is not None:
            res.measure("gpu_sm_clock", g["sm_clock_mhz"] * 1e6, "Hz", device=dev)
        mask = g.get("clock_reasons")
        if mask is None:
            continue
        res.measure("gpu_clocks_event_reasons", mask, "", device=dev)
        faults, info = decode_clock_event_reasons(mask)
        g["clock_reason_names"] = faults + info
        if faults:
            part.problems.append(f"GPU {dev} clocks held down: {', '.join(faults)}")
    if not cpu and not gpus:
        return part.skip("no cpufreq, no cpu MHz in cpuinfo, no NVML")
    what = ["CPU" if cpu else "", f"{len(gpus)} GPUs" if gpus else ""]
    return part.finish("clocks read for " + " and ".join(w for w in what if w))


# ---- the check -----------------------------------------------------------------------------------------

ACTIONS = {
    "infiniband": "check the cable/transceiver and the switch port of the named IB ports (ibstat, mlxlink); "
                  "Polling = no peer, Disabled = port disabled",
    "ethernet": "check the NIC's cable and switch port (ethtool, ip link)",
    "pcie": "reseat the device or its riser/cable, check BIOS PCIe settings and lspci -vv LnkSta; RMA if it persists",
    "nvlink": "nvidia-smi nvlink -s; reset the GPUs / restart fabric manager; RMA the board if links stay down",
    "frequency": "check cooling and power delivery (nvidia-smi -q -d PERFORMANCE, BMC sensors)",
}


def _use_nvml(ctx: RunContext, params: dict[str, Any]) -> bool:
    """Param ``nvml``: ``auto`` queries NVML when ``ctx.sysfs`` is this machine's ``/sys``."""
    try:
        here = os.path.realpath(ctx.sysfs) == "/sys"
    except OSError:
        here = False
    return nvml_enabled(params.get("nvml", "auto"), here)


_COUNTS = ("ib_ports_min", "gpu_pcie_generation", "gpu_pcie_width", "nvlink_links_per_gpu")
_RATES = ("ib_rate_gbit_per_second", "eth_speed_mbit_per_second")
_NAME_LISTS = ("ib_ignore_ports", "net_interfaces", "cpu_governors")


def checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` merged over DEFAULTS and validated: the counts whole numbers >= 0, the rates
    finite numbers >= 0, the name lists lists of strings (``net_interfaces = "eno1"`` is refused,
    not read letter by letter), ``nvml`` auto/true/false. Raises ValueError naming the key."""
    p = {**DEFAULTS, **params}
    for key in _COUNTS:
        v = p[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key} must be a whole number >= 0 (got {v!r})")
    for key in _RATES:
        v = p[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise ValueError(f"{key} must be a finite number >= 0 (got {v!r})")
    for key in _NAME_LISTS:
        v = p[key]
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise ValueError(f"{key} must be a list of names (got {v!r})")
    check_nvml_params(p)
    return p


def run(ctx: RunContext, params: dict[str, Any]) -> CheckResult:
    """The five parts (module docstring). With NVML, a GPU that says it must be recovered first
    (its NVML recovery action is not ``none``: :func:`nodewarden.validator.base.reset_required`)
    fails the check at once, before any part runs: its links say nothing until it is reset.
    A GPU whose driver lacks the recovery-action field is not failed for that."""
    params = checked_params(params)
    res = CheckResult(NAME, PASS)
    sysfs = Path(ctx.sysfs)
    parts: list[Part] = []

    gpus, why, faulted = None, "NVML not queried: sysfs is not this machine's /sys (set links.nvml=true)", False
    if _use_nvml(ctx, params):
        ctx.progress(NAME, 0.02, "nvml")
        gpus, why, faulted = nvml_with_timeout(float(params.get("nvml_timeout_seconds") or 30))
        bad = reset_required(gpus or [])
        if bad:  # fail fast: the driver itself says this GPU cannot be trusted until recovered
            res.status, res.reason, res.action = FAIL, reset_required_reason(bad), reset_required_action(bad)
            res.details["reset_required"] = bad
            res.details["gpus"] = gpus
            return res

    ctx.progress(NAME, 0.05, "infiniband")
    reader = AttrReader()
    netdevs = net.read_netdevs(sysfs, reader) if net.present(sysfs) else None
    types = {d.name: d.type for d in netdevs or []}
    ports = ib_port_reports(infiniband.read_devices(sysfs, reader), types) if infiniband.present(sysfs) else None
    parts.append(check_infiniband(ports, params, res))
    rdma_netdevs = [n for p in ports or [] if not p.get("ignored") for n in p["netdevs"]]

    ctx.progress(NAME, 0.2, "ethernet")
    parts.append(check_ethernet(netdevs, rdma_netdevs, params, res))

    idle = {g["pci"]: g["pstate"] for g in gpus or []
            if g.get("pci") and isinstance(g.get("pstate"), int) and 3 <= g["pstate"] <= 15}

    ctx.progress(NAME, 0.6, "pcie")
    gpus_expected = int(ctx.profile.get("gpus", 0) or 0)
    devices = pci_link_reports(pci.read_functions(sysfs, reader)) if pci.present(sysfs) else None
    parts.append(check_pcie(devices, params, gpus_expected, idle, res))
    parts.append(check_nvlink(gpus, why, faulted, params, res))
    ctx.progress(NAME, 0.8, "frequency")
    parts.append(check_frequency(sysfs, Path(ctx.procfs), gpus, params, res))

    res.details["parts"] = {p.name: p.to_dict() for p in parts}
    if gpus:
        res.details["gpus"] = gpus
    ran = [p for p in parts if p.status != SKIP]
    skipped = [p for p in parts if p.status == SKIP]
    problems = [x for p in parts for x in p.problems]
    warnings = [x for p in parts for x in p.warnings]
    if not ran:
        res.status = SKIP
        res.reason = "nothing to check: " + "; ".join(f"{p.name}: {p.reason}" for p in parts)
    elif problems:
        res.status = FAIL
        more = f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
        res.reason = "; ".join(problems[:4]) + more
        res.action = "; ".join(ACTIONS[p.name] for p in parts if p.status == FAIL)
    elif warnings:
        res.status = WARN
        res.reason = "; ".join(warnings[:4]) + (f" (+{len(warnings) - 4} more)" if len(warnings) > 4 else "")
    else:
        res.status = PASS
        res.reason = "; ".join(f"{p.name}: {p.reason}" for p in ran)
        if skipped:
            res.reason += "; skipped " + ", ".join(f"{p.name} ({p.reason})" for p in skipped)
    return res
