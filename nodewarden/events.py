"""FaultEvent: the one record that flows from every collector to the agent and the analysis.

A FaultEvent is built by the pure parsers in :mod:`nodewarden.parsing` (kernel log) and,
later, by the NVML and sysfs collectors. It is immutable in spirit: parsers create it,
nobody edits it afterwards except to add attributes while a multi-line record is assembled.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

# orjson (optional: about ten times faster JSON rendering for `nodewarden events` on large logs),
# imported by the first FaultEvent.to_json, so that a process rendering no event (an agent on a
# quiet node) never loads it: None until then, False when it is not installed.
_orjson: Any = None


def _orjson_module() -> Any:
    """The ``orjson`` module, or None when it is not installed; imported once, at first use."""
    global _orjson
    if _orjson is None:
        try:
            import orjson
        except ImportError:  # pragma: no cover - depends on the installation
            _orjson = False
        else:
            _orjson = orjson
    return _orjson or None


# Event kinds. Parsers only emit these; the JSON output and the metrics key on them.
XID = "xid"  # NVIDIA Xid (kernel NVRM line, or the text-only "fallen off the bus" form as Xid 79)
GPU_LOST = "gpu_lost"  # NVML reports GPU_IS_LOST
GPU_ECC = "gpu_ecc"
ROW_REMAP = "row_remap"
CPU_ECC = "cpu_ecc"  # EDAC "N CE/UE ... error on <label>"
MCE = "mce"  # one "mce: [Hardware Error]: CPU N: Machine Check" record
IB_LINK_DOWN = "ib_link_down"  # "mlx5_N: Port: P Link DOWN" (IB core), port left ACTIVE
IB_LINK_UP = "ib_link_up"  # "mlx5_N: Port: P Link ACTIVE"
IB_PORT_STATE = "ib_port_state"  # other IB core port states (INIT, ARMED)
IB_FLASH_CUT = "ib_flash_cut"  # a port left ACTIVE and came back within flash_cut_max_seconds
IB_LINK_OUTAGE = "ib_link_outage"  # a port left ACTIVE for longer than that
NET_LINK_DOWN = "net_link_down"  # "mlx5_core <bdf> <netdev>: Link down" (Ethernet/RoCE netdev)
NET_LINK_UP = "net_link_up"
NIC_MODULE = "nic_module_event"  # "Port module event: module N, Cable plugged/unplugged"
SXID = "sxid"  # NVSwitch "nvidia-nvswitchN: SXid (PCI:...): CODE, ..." (its Data/description/Severity lines folded)
PCIE_AER = "pcie_aer"  # one PCIe AER error record (kernel AER driver, or a GHES "PCIe error" section)
PCIE_AER_RECOVERY = "pcie_aer_recovery"  # AER recovery outcome: can't recover, recovery failed, link reset
GPU_RESET_REQUIRED = "gpu_reset_required"  # the driver says a GPU needs a reset or the node a reboot
GPU_RECOVERY_ACTION = "gpu_recovery_action"  # NVML's GPU recovery action changed (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
DRIVER_ASSERTION = "driver_assertion"  # "NVRM: nvAssert...Failed...: Assertion failed: ... @ file.c:N" (no reset token)
UNPARSED = "unparsed"  # looked like a fault line, could not be parsed: kept raw, counted

KINDS = (
    XID, GPU_LOST, GPU_ECC, ROW_REMAP, CPU_ECC, MCE, IB_LINK_DOWN, IB_LINK_UP, IB_PORT_STATE,
    IB_FLASH_CUT, IB_LINK_OUTAGE, NET_LINK_DOWN, NET_LINK_UP, NIC_MODULE, SXID, PCIE_AER, PCIE_AER_RECOVERY,
    GPU_RESET_REQUIRED, GPU_RECOVERY_ACTION, DRIVER_ASSERTION, UNPARSED,
)

# Timestamp kinds: how `time` was obtained.
TIME_WALL = "wall"  # a wall-clock stamp in the line (converted to UTC)
TIME_MONO = "mono"  # seconds since boot only; `time` is set only when the boot time is known
TIME_NONE = "none"  # the line carried no timestamp


@dataclasses.dataclass(slots=True)
class FaultEvent:
    """One hardware-fault event.

    Fields:
      kind: one of :data:`KINDS`.
      time: timezone-aware UTC datetime, or None when the input does not allow one.
      time_kind: ``wall``, ``mono`` or ``none`` (see module constants).
      raw_time: the timestamp text as printed (``"93297.027938"``, ``"Fri Aug 30 11:43:09 2024"``).
      monotonic: seconds since boot when the line had a monotonic stamp, else None.
      host: node name from the line, the path, or the agent; None when unknown.
      source: ``kmsg``, ``file``, ``journal``, ``stdin``, ``nvml``, ``sysfs``, ``journal_json``.
      device: the faulty part: PCI bus id ``DDDD:BB:DD.F`` for GPUs and NICs, ``mlx5_0/1`` for an
        IB port, ``mc0/CPU_SrcID#0_Ha#0_Chan#2_DIMM#0`` for a DIMM, ``cpu0/bank9`` for an MCE.
      code: the Xid number for ``xid`` events, the SXid number for ``sxid`` events, else None.
      category: the Xid group (Fire-Flyer Table V) or another short class; filled by the catalog.
      message: the message text after the timestamp/host envelope.
      raw: the original line(s), verbatim.
      attrs: parser-specific fields (pid, process, channel, registers, counts, labels, ...).
    """

    kind: str
    message: str
    raw: str
    time: dt.datetime | None = None
    time_kind: str = TIME_NONE
    raw_time: str | None = None
    monotonic: float | None = None
    host: str | None = None
    source: str = "file"
    device: str | None = None
    code: int | None = None
    category: str | None = None
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Byte offset of the first record of the event in its input (parallel readers keep the
    # events that start in their own range), and the JSON form once computed. Not serialized.
    origin: int | None = dataclasses.field(default=None, repr=False, compare=False)
    json_cache: str | None = dataclasses.field(default=None, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickle as a plain tuple: parallel readers send tens of thousands of events back to
        # the parent, and the default dataclass pickling is three times slower.
        return _restore, tuple(getattr(self, f) for f in _FIELDS)

    # --- convenience accessors used by the JSON form and the metrics -------------------
    @property
    def pci_bus_id(self) -> str | None:
        return self.attrs.get("pci_bus_id")

    @property
    def pid(self) -> int | None:
        return self.attrs.get("pid")

    @property
    def process(self) -> str | None:
        return self.attrs.get("process")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-lines form printed by ``nodewarden events`` (stable keys, JSON types only)."""
        return {
            "kind": self.kind,
            "time": iso_utc(self.time),
            "time_kind": self.time_kind,
            "raw_time": self.raw_time,
            "monotonic": self.monotonic,
            "host": self.host,
            "source": self.source,
            "device": self.device,
            "xid": self.code if self.kind == XID else None,
            # The code of the other numbered kinds (an NVSwitch SXid); None for Xids (see ``xid``).
            "code": self.code if self.kind != XID else None,
            "category": self.category,
            "pci_bus_id": self.pci_bus_id,
            "pid": self.pid,
            "process": self.process,
            "message": self.message,
            "attrs": {k: v for k, v in self.attrs.items() if k not in ("pci_bus_id", "pid", "process")},
            "raw": self.raw,
        }

    def to_json(self) -> str:
        """One line of JSON (UTF-8 text, compact separators); orjson renders it when installed."""
        if self.json_cache is not None:
            return self.json_cache
        fast = _orjson_module()
        if fast is not None:
            try:
                return fast.dumps(self.to_dict(), default=str).decode()
            except TypeError:  # an integer wider than 64 bits: the standard library copes
                pass
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FaultEvent:
        """Inverse of :meth:`to_dict` (used to read agent journals and JSON-lines output)."""
        attrs = dict(d.get("attrs") or {})
        for key in ("pci_bus_id", "pid", "process"):
            if d.get(key) is not None:
                attrs[key] = d[key]
        t = d.get("time")
        return cls(
            kind=d["kind"],
            message=d.get("message", ""),
            raw=d.get("raw", ""),
            time=parse_iso_utc(t) if t else None,
            time_kind=d.get("time_kind", TIME_NONE),
            raw_time=d.get("raw_time"),
            monotonic=d.get("monotonic"),
            host=d.get("host"),
            source=d.get("source", "file"),
            device=d.get("device"),
            code=d.get("xid") if d.get("xid") is not None else d.get("code"),
            category=d.get("category"),
            attrs=attrs,
        )


_FIELDS = tuple(f.name for f in dataclasses.fields(FaultEvent))


def _restore(*values: Any) -> FaultEvent:
    return FaultEvent(*values)


def iso_utc(t: dt.datetime | None) -> str | None:
    """``2024-11-15T12:02:03.470068Z`` (microseconds only when non-zero), or None."""
    if t is None:
        return None
    t = t.astimezone(dt.timezone.utc)
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if t.microsecond else "%Y-%m-%dT%H:%M:%SZ"
    return t.strftime(fmt)


def parse_iso_utc(text: str) -> dt.datetime:
    """Parse an ISO 8601 time (``Z`` or offset; naive means UTC) to an aware UTC datetime.

    Raises ValueError on malformed text.
    """
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc)
