"""The ``GpuHardwareHealthy`` node condition: what the agent knows about the GPUs, published on
the Kubernetes Node object for schedulers and operators that read node conditions (NVSentinel,
node-problem-detector's consumers, ``kubectl describe node``), without Prometheus.

Enabled by ``[kubernetes] node_condition = true`` (:mod:`nodewarden.agent.config`). The
condition (``core/v1 NodeCondition``)::

    type: GpuHardwareHealthy
    status: "True" | "False" | "Unknown"
    reason: CamelCase (:data:`REASONS`), the most severe finding's
    message: every finding, "GPU 3 (0000:3b:00.0): NVML recovery action gpu_reset; ..."
    lastHeartbeatTime: refreshed at most every heartbeat_seconds (and with every change)
    lastTransitionTime: changes only when status changes (kept from the node at start)

What makes it ``False`` (:func:`findings`), level state from the NVML collector's last good
snapshot, so that it clears by itself when the GPU does:

==========================  ===================================================================
``GpuLost``                 ``nodewarden_gpu_lost 1`` (NVML_ERROR_GPU_IS_LOST)
``NodeRebootRequired``,     ``nodewarden_gpu_recovery_action{action}`` 1 for an action other
``GpuResetRequired``,       than ``none`` (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, r570+)
``GpuDrainAndResetRequired``,
``GpuDrainP2PRequired``
``RowRemapFailure``         ``nodewarden_gpu_row_remap_failure 1`` (no spare rows: RMA)
``RowRemapPending``         ``nodewarden_gpu_row_remap_pending 1`` (a GPU reset applies it)
``DoubleBitEcc``            volatile uncorrected ECC errors > 0 (since the driver loaded / GPU reset)
``RetiredPagesPending``     ``nodewarden_gpu_retired_pages_pending 1`` (before Ampere)
``NVLinkDown``              ``nodewarden_gpu_nvlink_state 0`` for a link the GPU has
==========================  ===================================================================

and, latched from the kernel log (:meth:`NodeConditionPublisher.observe`), an Xid whose policy
action (``nodewarden/catalog/policy.toml``) takes the node out of scheduling: ``XidRequiresReset``
(``reset_gpu``), ``XidRequiresDrain`` (``drain``), and an NVRM ``NV_ERR_RESET_REQUIRED`` report
(``GpuResetRequired``). A latched finding clears when a validator report finished after the
event (its kernel time) passes (no check ``fail`` or ``error``: ``nodewarden validate`` is how
the policy puts a node back); nothing else clears it, a restart or a reboot included.

The latch across a restart (:func:`journal_latches`, :meth:`NodeConditionPublisher.relatch`):
at start the agent latches again the kernel-log events of the event journal
(``events-YYYY-MM-DD.jsonl``, :mod:`nodewarden.agent.state`) that are newer than the exported
validator report when it passed (all of the journal's retention when there is none, or it
failed). Only the files dated from that report's UTC day on are read (an event is journaled
under its own date), never more than ``journal_max_age_days``; only the lines naming a latching
kind are parsed, and one that is not a journal record is skipped and counted
(``journal_lines_skipped`` in ``/healthz``). Why the journal and not ``state.json``: the
journal is written (and fsynced) before ``state.json`` for every batch, so a crash between the
two cannot lose a latch, and re-latching by the event's identity is idempotent (a finding is
keyed by reason, GPU and Xid), so an event latched from the journal and seen again in the ring
buffer is one finding; ``state.json`` would need a new format for what the journal already holds.

``Unknown`` (reason ``NvmlUnavailable``): no finding and the NVML collector off, not yet
answered, or failing (``nodewarden_collector_success{collector="nvml"} 0``).

Publishing (:class:`NodeConditionPublisher`, its own thread): one ``GET /api/v1/nodes/{name}``
at start (to keep the condition's ``lastTransitionTime`` when its status is unchanged), then a
``PATCH /api/v1/nodes/{name}/status`` with ``Content-Type: application/strategic-merge-patch+json``
and body ``{"status":{"conditions":[<the condition>]}}`` when the condition changes or its
heartbeat is due: the API server merges ``conditions`` by ``type`` (its patchMergeKey), so
the kubelet's conditions stay as they are. node-problem-detector's Kubernetes exporter patches
the same way (``problemclient.SetConditions``: ``Nodes().PatchStatus``). Each request has a
timeout (``request_timeout_seconds``: connect and every read); a failure is retried with
exponential backoff (up to :data:`BACKOFF_MAX_S`), counted in
``nodewarden_kubernetes_condition_updates_total{result="error"}`` and logged once per failing
spell. Nothing waits on it: the poll and the scrape read their own state.

Credentials (:func:`load_credentials`): the pod's service account (``token``, ``ca.crt`` under
``service_account_dir``; the API server at ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT``;
the token is read again for every request, since projected tokens rotate), or a kubeconfig file
(``kubeconfig``: its current context's server, certificate-authority(-data),
insecure-skip-tls-verify, and the user's token, tokenFile or client-certificate/client-key
(-data)). RBAC: ``get`` on ``nodes`` and ``patch`` on ``nodes/status``
(``deploy/kubernetes/12-agent-rbac.yaml``). ``http.client``, ``ssl`` and (for a kubeconfig)
``yaml`` are imported only when the feature is on.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from nodewarden.agent.state import journal_files
from nodewarden.collectors.base import COUNTER, GAUGE, Sample
from nodewarden.events import GPU_RESET_REQUIRED, XID, FaultEvent

log = logging.getLogger(__name__)

CONDITION_TYPE = "GpuHardwareHealthy"
PATCH_CONTENT_TYPE = "application/strategic-merge-patch+json"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
BACKOFF_MAX_S = 300.0  # longest wait between two failed attempts
MESSAGE_MAX = 1024  # characters of the condition's message (the findings past it are counted)
COLLECTOR = "kubernetes"  # the collector label of this module's samples

P = "nodewarden_"
UPDATES = P + "kubernetes_condition_updates_total"
LAST_UPDATE = P + "kubernetes_condition_last_update_timestamp_seconds"
HEALTHY = P + "kubernetes_condition_healthy"

# Reasons, most severe first: the condition's reason is the first finding's.
RECOVERY_REASONS = {"node_reboot": "NodeRebootRequired", "system_reboot": "NodeRebootRequired",
                    "gpu_reset": "GpuResetRequired", "bus_reset": "GpuResetRequired",
                    "drain_and_reset": "GpuDrainAndResetRequired", "drain_p2p": "GpuDrainP2PRequired"}
REASONS: tuple[str, ...] = ("GpuLost", "NodeRebootRequired", "GpuDrainAndResetRequired", "GpuResetRequired",
                            "GpuDrainP2PRequired", "RecoveryActionRequired", "RowRemapFailure", "RowRemapPending",
                            "DoubleBitEcc", "RetiredPagesPending", "XidRequiresDrain", "XidRequiresReset",
                            "NVLinkDown")
SEVERITY = {r: i for i, r in enumerate(REASONS)}
XID_REASONS = {"drain": "XidRequiresDrain", "reset_gpu": "XidRequiresReset"}
HEALTHY_REASON, UNKNOWN_REASON = "GpuHardwareHealthy", "NvmlUnavailable"
BAD_CHECK_STATUSES = ("fail", "error")
LATCH_KINDS = (XID, GPU_RESET_REQUIRED)  # the kinds event_finding may latch
# The journal's lines are FaultEvent.to_json's (compact separators, "kind" first): only those
# holding one of these are parsed at start.
LATCH_NEEDLES = tuple(f'"kind":"{k}"'.encode() for k in LATCH_KINDS)
KERNEL_SOURCE = "kmsg"  # FaultEvent.source of the kernel-log follower's events


# ---------------------------------------------------------------------------------------------
# The verdict (pure)

@dataclasses.dataclass(frozen=True, order=True)
class Finding:
    """One reason for ``False``: ``reason`` (:data:`REASONS`), the NVML ``gpu`` index (or ""),
    its ``pci_bus_id`` (or ""), ``what`` (human text)."""

    reason: str
    gpu: str
    pci_bus_id: str
    what: str

    def text(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu else "GPU"
        if self.pci_bus_id:
            where += f" ({self.pci_bus_id})"
        return f"{where}: {self.what}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """``status`` "True"/"False"/"Unknown", ``reason`` CamelCase, ``message`` human text."""

    status: str
    reason: str
    message: str


def findings(samples: Iterable[Sample]) -> list[Finding]:
    """The level-state findings of the NVML collector's samples (see the module table), sorted by
    severity then GPU. ``samples``: :class:`~nodewarden.collectors.base.Sample` of
    ``nodewarden_gpu_*`` series; others are ignored."""
    pci: dict[str, str] = {}
    out: list[Finding] = []
    rows = []
    for s in samples:
        labels = dict(s.labels)
        if s.name == P + "gpu_info":
            pci[labels.get("gpu", "")] = labels.get("pci_bus_id", "")
        else:
            rows.append((s.name[len(P + "gpu_"):] if s.name.startswith(P + "gpu_") else None, labels, s.value))
    for name, labels, value in rows:
        gpu = labels.get("gpu", "")

        def add(reason: str, what: str) -> None:
            out.append(Finding(reason, gpu, pci.get(gpu, ""), what))

        if name == "lost" and value == 1:
            add("GpuLost", "lost: NVML_ERROR_GPU_IS_LOST")
        elif name == "recovery_action" and value == 1 and labels.get("action") not in ("none", None):
            action = labels["action"]
            add(RECOVERY_REASONS.get(action, "RecoveryActionRequired"), f"NVML recovery action {action}")
        elif name == "row_remap_failure" and value == 1:
            add("RowRemapFailure", "row remapping failed: no spare rows left")
        elif name == "row_remap_pending" and value == 1:
            add("RowRemapPending", "row remap pending: a GPU reset applies it")
        elif (name == "ecc_errors_total" and value > 0 and labels.get("type") == "uncorrected"
              and labels.get("scope") == "volatile"):
            add("DoubleBitEcc", f"{value:g} uncorrectable (double-bit) ECC error(s) since the driver loaded")
        elif name == "retired_pages_pending" and value == 1:
            add("RetiredPagesPending", "page retirement pending: the next driver load applies it")
        elif name == "nvlink_state" and value == 0:
            add("NVLinkDown", f"NVLink {labels.get('link', '?')} down")
    return sorted(out, key=lambda f: (SEVERITY.get(f.reason, len(REASONS)), _gpu_order(f.gpu), f.what))


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def event_finding(event: FaultEvent, policy_action: Callable[[int], str],
                  gpu_of: Callable[[str], str] = lambda pci: "") -> Finding | None:
    """The latched finding of one kernel-log event, or None: an Xid whose policy action
    (``policy_action(code)``, :meth:`nodewarden.catalog.policy.Policy.action`) is ``drain`` or
    ``reset_gpu``, or a ``gpu_reset_required`` event."""
    pci = event.device or ""
    if event.kind == XID and isinstance(event.code, int) and not isinstance(event.code, bool):
        reason = XID_REASONS.get(policy_action(event.code))
        if reason is None:
            return None
        name = event.attrs.get("mnemonic") or ""
        return Finding(reason, gpu_of(pci), pci, f"Xid {event.code}{f' ({name})' if name else ''}: "
                                                 f"{(event.message or '')[:160]}")
    if event.kind == GPU_RESET_REQUIRED and event.source != "nvml":  # NVML's is level state above
        return Finding("GpuResetRequired", gpu_of(pci), pci, f"driver reports reset required: "
                                                            f"{(event.message or '')[:160]}")
    return None


def verdict(found: list[Finding], nvml_ok: bool | None) -> Verdict:
    """The condition of the findings: ``False`` with the most severe reason when there is one
    (message: every finding, :data:`MESSAGE_MAX` characters at most), else ``True`` when the NVML
    collector answered its last poll (``nvml_ok`` True), else ``Unknown``."""
    if found:
        found = sorted(set(found), key=lambda f: (SEVERITY.get(f.reason, len(REASONS)), _gpu_order(f.gpu), f.what))
        parts: list[str] = []
        for i, f in enumerate(found):
            t = f.text()
            rest = len(found) - i - 1
            tail = f"; and {rest} more" if rest else ""
            if parts and len("; ".join(parts + [t])) + len(tail) > MESSAGE_MAX:
                parts.append(f"and {len(found) - i} more")
                break
            parts.append(t)
        return Verdict("False", found[0].reason, "; ".join(parts)[:MESSAGE_MAX])
    if nvml_ok:
        return Verdict("True", HEALTHY_REASON, "no GPU hardware fault known to nodewarden")
    return Verdict("Unknown", UNKNOWN_REASON, "NVML is not answering (or the nvml collector is off): "
                                              "the GPUs' state is not known")


def rfc3339(t: float) -> str:
    """Unix time -> ``2026-12-01T10:00:00Z`` (metav1.Time: seconds, UTC)."""
    return dt.datetime.fromtimestamp(int(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_condition(last: Mapping[str, str] | None, v: Verdict, now: float, heartbeat_s: float,
                   last_heartbeat: float | None) -> tuple[dict[str, str], bool]:
    """The condition to publish at ``now`` (Unix time) after ``last`` (the one published, or the
    node's at start; None: none), and whether to send it: on a change of status, reason or
    message, or when ``heartbeat_s`` passed since ``last_heartbeat``. ``lastTransitionTime`` is
    ``last``'s when the status is unchanged."""
    same_status = last is not None and last.get("status") == v.status
    changed = last is None or (last.get("status"), last.get("reason"), last.get("message")) != (
        v.status, v.reason, v.message)
    due = changed or last_heartbeat is None or now - last_heartbeat >= heartbeat_s
    transition = last["lastTransitionTime"] if same_status and last and last.get("lastTransitionTime") else rfc3339(now)
    beat = rfc3339(now) if due or last is None else last.get("lastHeartbeatTime", rfc3339(now))
    return ({"type": CONDITION_TYPE, "status": v.status, "reason": v.reason, "message": v.message,
             "lastHeartbeatTime": beat, "lastTransitionTime": transition}, due)


def patch_body(condition: Mapping[str, str]) -> bytes:
    """The strategic merge patch of ``nodes/status`` that sets one condition (merged by type)."""
    return json.dumps({"status": {"conditions": [dict(condition)]}}, separators=(",", ":")).encode()


CONDITION_STATUSES = ("True", "False", "Unknown")


def condition_of(node: Any) -> dict[str, str] | None:
    """The :data:`CONDITION_TYPE` condition of a Node object (a GET's JSON), or None: also when
    the object is not of the Node's shape, or the condition has no ``status`` of the API's three
    (an answer of another shape is no condition we published)."""
    status = node.get("status") if isinstance(node, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == CONDITION_TYPE:
            if c.get("status") not in CONDITION_STATUSES:
                return None
            out = {k: str(v) for k, v in c.items() if isinstance(v, (str, int, float))}
            out.setdefault("reason", "")
            return out
    return None


def validator_passed_since(counters: Mapping[tuple[str, tuple[str, ...]], float], since: float) -> bool:
    """True when the exported validator report finished after ``since`` (Unix time) and no check
    in it is ``fail`` or ``error`` (``nodewarden_validator_check_status``,
    ``nodewarden_validator_last_run_timestamp_seconds`` in a counters snapshot)."""
    finished = passed_report_time(counters)
    return finished is not None and finished > since


def passed_report_time(counters: Mapping[tuple[str, tuple[str, ...]], float]) -> float | None:
    """When the exported validator report finished (Unix time) if it passed (no check ``fail``
    or ``error``), else None (no report, or a failing one). ``counters``: as for
    :func:`validator_passed_since`."""
    finished = counters.get((P + "validator_last_run_timestamp_seconds", ()))
    if finished is None or any(name == P + "validator_check_status" and labels[1:] and labels[1] in BAD_CHECK_STATUSES
                               and value == 1 for (name, labels), value in counters.items()):
        return None
    return finished


def event_time(e: FaultEvent, default: float) -> float:
    """The event's time (Unix time), or ``default`` for an undated one."""
    return e.time.timestamp() if e.time is not None else default


@dataclasses.dataclass
class JournalLatches:
    """What :func:`journal_latches` found: ``events`` as (event, Unix time of the latch), oldest
    first, the newest of each (kind, device, code) only (what a latch keeps: a storm of one
    GPU's Xid is one entry); ``matched``: the journal's events that passed, before that;
    ``files``: the journal files read; ``skipped``: lines naming a latching kind that are not a
    journal record (cut by a crash, edited), skipped; ``unreadable``: files that could not be
    read (logged)."""

    events: list[tuple[FaultEvent, float]] = dataclasses.field(default_factory=list)
    matched: int = 0
    files: list[Path] = dataclasses.field(default_factory=list)
    skipped: int = 0
    unreadable: int = 0


def journal_latches(state_dir: Path, since: float | None, max_age_days: float, now: float) -> JournalLatches:
    """The kernel-log events (``source`` kmsg) of the latching kinds (:data:`LATCH_KINDS`) in the
    event journal of ``state_dir`` that are newer than ``since`` (Unix time of the last passing
    validator report; None: none known), each with the time to latch it at: its own, or for an
    undated one the end of its file's UTC day (at most ``now``).

    Bounded: reads only the files ``events-YYYY-MM-DD.jsonl`` dated from ``since``'s UTC day on
    and no older than ``max_age_days`` before ``now``'s (the journal's retention), and parses only
    lines holding :data:`LATCH_NEEDLES`. A line that is not a journal record is counted in
    ``skipped``; a file that cannot be read is logged and counted in ``unreadable``. Never raises
    for the journal's content or I/O."""
    today = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    try:
        first = today - dt.timedelta(days=max_age_days)
    except OverflowError:  # a retention past year 1: every file
        first = dt.date.min
    if since is not None:
        first = max(first, dt.datetime.fromtimestamp(since, dt.timezone.utc).date())
    out = JournalLatches()
    newest: dict[tuple[Any, ...], tuple[FaultEvent, float]] = {}
    for day, path, _ in journal_files(state_dir):
        if day < first:
            continue
        try:
            day_end = min(now, dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.timezone.utc).timestamp())
        except OverflowError:  # dated 9999-12-31
            day_end = now
        out.files.append(path)
        try:
            with open(path, "rb") as f:
                for line in f:
                    if not any(n in line for n in LATCH_NEEDLES):
                        continue
                    try:
                        d = json.loads(line)
                        e = FaultEvent.from_dict(d)
                        at = event_time(e, day_end)
                    except (ValueError, TypeError, AttributeError, KeyError, OverflowError):
                        out.skipped += 1
                        continue
                    if e.kind in LATCH_KINDS and e.source == KERNEL_SOURCE and (since is None or at > since):
                        out.matched += 1
                        key = (e.kind, str(e.device), repr(e.code))
                        if key not in newest or newest[key][1] <= at:
                            newest[key] = (e, at)
        except OSError as err:
            out.unreadable += 1
            log.warning("node condition: cannot read journal file %s at start: %s; its kernel-log faults are "
                        "not latched again", path, err.strerror or err)
    out.events = sorted(newest.values(), key=lambda ea: ea[1])
    return out


# ---------------------------------------------------------------------------------------------
# Credentials and the HTTPS client (thin I/O; http.client and ssl imported here only)

class CredentialsError(ValueError):
    """Credentials that cannot be used; the message names the file or variable."""


@dataclasses.dataclass
class Credentials:
    """Where the API server is and how to authenticate: ``host``, ``port``, an ``ssl`` context,
    a bearer ``token`` or a ``token_file`` read per request (or neither: a client certificate
    in the context), ``source`` (for messages)."""

    host: str
    port: int
    context: Any
    token: str | None = None
    token_file: str | None = None
    source: str = ""

    def bearer(self) -> str | None:
        if self.token_file:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as e:
                raise CredentialsError(f"{self.token_file}: cannot read the token: {e.strerror or e}") from None
        return self.token


def _ssl_context(ca_file: str | None = None, ca_data: str | None = None, insecure: bool = False) -> Any:
    import ssl
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif ca_file or ca_data:
        ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    return ctx


def in_cluster(sa_dir: str = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] = os.environ) -> Credentials:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and ``sa_dir``'s
    ``token`` and ``ca.crt``. Raises CredentialsError naming what is missing."""
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise CredentialsError("KUBERNETES_SERVICE_HOST is not set (not in a pod? set [kubernetes] kubeconfig)")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise CredentialsError(f"KUBERNETES_SERVICE_PORT: not a port: {port!r}")
    token, ca = Path(sa_dir) / "token", Path(sa_dir) / "ca.crt"
    for p in (token, ca):
        if not os.access(p, os.R_OK):
            raise CredentialsError(f"{p}: not readable (is the service account token mounted? "
                                   "automountServiceAccountToken: true)")
    try:
        ctx = _ssl_context(ca_file=str(ca))
    except (OSError, ValueError) as e:
        raise CredentialsError(f"{ca}: not a CA certificate: {e}") from None
    return Credentials(host.strip("[]"), int(port), ctx, token_file=str(token), source=str(sa_dir))


def _split_server(server: str, where: str) -> tuple[str, int]:
    from urllib.parse import urlsplit
    u = urlsplit(server)
    if u.scheme != "https" or not u.hostname:
        raise CredentialsError(f"{where}: server {server!r}: expected https://HOST[:PORT]")
    try:
        port = u.port
    except ValueError as e:
        raise CredentialsError(f"{where}: server {server!r}: {e}") from None
    if port == 0:
        raise CredentialsError(f"{where}: server {server!r}: port 0")
    return u.hostname, port or 443


def from_kubeconfig(path: str) -> Credentials:
    """A kubeconfig file's current context. Raises CredentialsError naming the file and field."""
    import yaml
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise CredentialsError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CredentialsError(f"{path}: not UTF-8 text: {e}") from None
    except yaml.YAMLError as e:
        raise CredentialsError(f"{path}: not YAML: {e}") from None
    try:
        return _kubeconfig_credentials(path, doc)
    except (TypeError, AttributeError) as e:  # a field of another type than the kubeconfig's
        raise CredentialsError(f"{path}: not a kubeconfig of the usual shape: {e}") from None


def _kubeconfig_credentials(path: str, doc: Any) -> Credentials:
    if not isinstance(doc, dict):
        raise CredentialsError(f"{path}: not a kubeconfig (expected a mapping)")
    base = Path(path).parent

    def named(kind: str, name: Any) -> dict[str, Any]:
        for item in doc.get(kind + "s") or []:
            if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(kind), dict):
                return item[kind]
        raise CredentialsError(f"{path}: {kind}s: no {kind} named {name!r}")

    def rel(p: str) -> str:
        return str(base / p) if not os.path.isabs(p) else p

    ctx_name = doc.get("current-context")
    if not ctx_name:
        raise CredentialsError(f"{path}: current-context: not set")
    context = named("context", ctx_name)
    cluster, user = named("cluster", context.get("cluster")), named("user", context.get("user"))
    host, port = _split_server(str(cluster.get("server", "")), f"{path}: clusters.{context.get('cluster')}")
    try:
        ca_data = cluster.get("certificate-authority-data")
        ctx = _ssl_context(ca_file=rel(cluster["certificate-authority"]) if cluster.get("certificate-authority") else None,
                           ca_data=base64.b64decode(ca_data, validate=True).decode() if ca_data else None,
                           insecure=bool(cluster.get("insecure-skip-tls-verify")))
        cert, key = user.get("client-certificate"), user.get("client-key")
        cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
        if cert and key:
            ctx.load_cert_chain(rel(cert), rel(key))
        elif cert_data and key_data:
            _load_chain_data(ctx, base64.b64decode(cert_data, validate=True), base64.b64decode(key_data, validate=True))
        elif cert or key or cert_data or key_data:
            raise ValueError("a client certificate needs its key (client-certificate and client-key, "
                             "or both -data fields)")
    except (OSError, ValueError) as e:
        raise CredentialsError(f"{path}: TLS settings of context {ctx_name!r}: {e}") from None
    token_file = user.get("tokenFile")
    return Credentials(host, port, ctx, token=user.get("token"), token_file=rel(token_file) if token_file else None,
                       source=path)


def _load_chain_data(ctx: Any, cert: bytes, key: bytes) -> None:
    """ssl loads a certificate chain from files only: a private temporary file, deleted at once."""
    fd, name = tempfile.mkstemp(prefix="nodewarden-kube-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert + b"\n" + key)
        ctx.load_cert_chain(name)
    finally:
        os.unlink(name)


def load_credentials(kubeconfig: str | None, sa_dir: str, env: Mapping[str, str] = os.environ) -> Credentials:
    """:func:`from_kubeconfig` when ``kubeconfig`` is set, else :func:`in_cluster`."""
    return from_kubeconfig(kubeconfig) if kubeconfig else in_cluster(sa_dir, env)


class ApiError(Exception):
    """A request that failed: transport error, timeout, or an HTTP status other than 2xx."""


def request(creds: Credentials, method: str, path: str, timeout_s: float, body: bytes | None = None,
            content_type: str | None = None) -> Any:
    """One HTTPS request to the API server (a new connection: one a heartbeat is cheap), its JSON
    answer. ``timeout_s`` bounds the connection, the handshake and every read. Raises ApiError."""
    import http.client
    headers = {"Accept": "application/json", "User-Agent": "nodewarden-agent"}
    try:
        token = creds.bearer()
    except CredentialsError as e:
        raise ApiError(str(e)) from None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if content_type:
        headers["Content-Type"] = content_type
    conn = http.client.HTTPSConnection(creds.host, creds.port, context=creds.context, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read(4 << 20)
    except (OSError, http.client.HTTPException) as e:
        raise ApiError(f"{method} {path}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        detail = data[:300].decode("utf-8", "replace").strip()
        raise ApiError(f"{method} {path}: HTTP {resp.status} {resp.reason}: {detail}")
    try:
        return json.loads(data) if data else None
    except ValueError:
        raise ApiError(f"{method} {path}: the answer is not JSON") from None


# ---------------------------------------------------------------------------------------------
# The publisher thread

class NodeConditionPublisher:
    """Publishes the condition of ``node`` every ``interval_s`` (when changed) and every
    ``heartbeat_s``. ``samples()``: the polled collectors' ``(collector, Sample)`` pairs;
    ``counters()``: a :meth:`~nodewarden.agent.exporter.Counters.snapshot` (collector success,
    validator report); ``policy_action``: Xid code -> policy action; ``clock``: Unix time.
    :meth:`start` runs it in a daemon thread; :meth:`stop` ends it (waits ``timeout_s`` at most)."""

    def __init__(self, creds: Credentials, node: str, samples: Callable[[], Iterable[tuple[str, Sample]]],
                 counters: Callable[[], Mapping[tuple[str, tuple[str, ...]], float]], *, nvml_enabled: bool,
                 interval_s: float, heartbeat_s: float, timeout_s: float,
                 policy_action: Callable[[int], str], gpu_of: Callable[[str], str] = lambda pci: "",
                 clock: Callable[[], float] = time.time) -> None:
        from urllib.parse import quote
        self.creds, self.node = creds, node
        self.path = f"/api/v1/nodes/{quote(node, safe='')}"
        self._samples, self._counters = samples, counters
        self.nvml_enabled = nvml_enabled
        self.interval_s, self.heartbeat_s, self.timeout_s = interval_s, heartbeat_s, timeout_s
        self._policy_action, self._gpu_of, self._clock = policy_action, gpu_of, clock
        self._lock = threading.Lock()
        self._latched: dict[tuple[str, str, str], tuple[Finding, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: dict[str, str] | None = None  # the condition published (or the node's at start)
        self._fetched = False
        self._last_heartbeat: float | None = None
        self.updates = {"ok": 0, "error": 0}
        self.last_update: float | None = None
        self.failing: str | None = None
        self.journal_skipped = 0  # journal lines not a record, skipped by relatch

    # -- input
    def observe(self, events: list[FaultEvent]) -> None:
        """Kernel-log events counted: latch those that make the GPUs unhealthy, at the event's
        own time (the clock's for an undated one), which a passing validator report must follow
        (cheap; called under the agent's lock)."""
        now = self._clock()
        self._latch((e, event_time(e, now)) for e in events)

    def relatch(self, state_dir: Path, max_age_days: float) -> int:
        """At start, before the kernel log is followed: latch again the journal's kernel-log
        faults newer than the exported validator report when it passed (:func:`journal_latches`;
        call after the report is exported). Returns the findings latched now. Never raises."""
        since = passed_report_time(dict(self._counters()))
        try:
            found = journal_latches(state_dir, since, max_age_days, self._clock())
        except Exception:  # the journal costs the latch, never the agent's start
            log.exception("node condition: cannot read the event journal in %s", state_dir)
            return 0
        self._latch(found.events)
        self.journal_skipped += found.skipped
        with self._lock:
            n = len(self._latched)
        if found.skipped:
            log.warning("node condition: %d journal line(s) naming an Xid or a reset-required report are not "
                        "journal records: skipped", found.skipped)
        log.info("node condition: %d finding(s) latched from %d kernel-log event(s) of %d journal file(s) "
                 "newer than %s", n, found.matched, len(found.files),
                 f"the validator report passed at {rfc3339(since)}" if since is not None
                 else "the journal's retention (no passing validator report)")
        return n

    def _latch(self, timed: Iterable[tuple[FaultEvent, float]]) -> None:
        for e, at in timed:
            try:
                f = event_finding(e, self._policy_action, self._gpu_of)
            except Exception:  # a broken policy costs the latch, never the follower
                log.debug("node condition: cannot judge %s", e.kind, exc_info=True)
                continue
            if f is None:
                continue
            key = (f.reason, f.pci_bus_id, f.what.split(":")[0])
            with self._lock:
                old = self._latched.get(key)
                if old is None or old[1] <= at:  # the newest occurrence: a validator run must follow it
                    self._latched[key] = (f, at)

    def current(self) -> Verdict:
        """The verdict now (latched findings cleared by a passing validator run first)."""
        counters = dict(self._counters())
        with self._lock:
            for key, (_, at) in list(self._latched.items()):
                if validator_passed_since(counters, at):
                    del self._latched[key]
            latched = [f for f, _ in self._latched.values()]
        nvml = [s for c, s in self._samples() if c == "nvml"]
        ok = counters.get((P + "collector_success", ("nvml",)))
        return verdict(findings(nvml) + latched, bool(ok) if self.nvml_enabled and ok is not None else None)

    # -- output
    def samples(self) -> list[tuple[str, Sample]]:
        """This module's series, as polled samples: updates by result, the last success time,
        and 1/0 for the condition published (absent until one is)."""
        out = [(COLLECTOR, Sample(UPDATES, (("result", r),), float(n), COUNTER,
                                  "Node condition updates sent to the Kubernetes API server, by result."))
               for r, n in sorted(self.updates.items())]
        if self.last_update is not None:
            out.append((COLLECTOR, Sample(LAST_UPDATE, (), self.last_update, GAUGE,
                                          "When the node condition was last accepted by the API server (Unix time).")))
        last = self.last
        if last is not None and self._fetched:
            out.append((COLLECTOR, Sample(HEALTHY, (("status", last["status"]),), 1.0 if last["status"] == "True" else 0.0,
                                          GAUGE, "1 when the GpuHardwareHealthy condition published is True.")))
        return out

    def step(self) -> bool:
        """One round: fetch the node's condition at first, then patch when due. True when it
        succeeded (or had nothing to send). Raises nothing."""
        try:
            if not self._fetched:
                node = request(self.creds, "GET", self.path, self.timeout_s)
                self.last = condition_of(node or {})
                self._fetched = True
            now = self._clock()
            cond, due = next_condition(self.last, self.current(), now, self.heartbeat_s, self._last_heartbeat)
            if due:
                request(self.creds, "PATCH", self.path + "/status", self.timeout_s, patch_body(cond), PATCH_CONTENT_TYPE)
                changed = self.last is None or self.last.get("status") != cond["status"] or \
                    self.last.get("reason") != cond["reason"]
                self.last, self._last_heartbeat, self.last_update = cond, now, now
                self.updates["ok"] += 1
                if changed:
                    log.info("node %s: condition %s=%s (%s): %s", self.node, CONDITION_TYPE, cond["status"],
                             cond["reason"], cond["message"])
            if self.failing is not None:
                log.info("node %s: the Kubernetes API server answers again", self.node)
                self.failing = None
            return True
        except Exception as e:  # ApiError, and anything unforeseen: counted, never raised
            self.updates["error"] += 1
            if self.failing is None:
                log.warning("node %s: cannot update the %s condition: %s (retrying with backoff, up to %gs)",
                            self.node, CONDITION_TYPE, e, BACKOFF_MAX_S)
            else:
                log.debug("node condition: %s", e)
            self.failing = str(e)
            return False

    def run(self) -> None:
        errors = 0
        delay = 0.0
        while not self._stop.wait(delay):
            errors = 0 if self.step() else errors + 1
            delay = self.interval_s if not errors else min(self.interval_s * 2 ** errors, BACKOFF_MAX_S)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="node-condition", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1.0)

    def health(self) -> dict[str, Any]:
        """The /healthz part: ``node``, the condition published (``status``, ``reason``; null
        before the first), ``error`` (the last failed request's, null once one succeeds),
        ``updates`` (by result), ``latched`` (kernel-log findings latched now) and
        ``journal_lines_skipped`` (by :meth:`relatch`)."""
        last = self.last if self._fetched else None
        with self._lock:
            latched = len(self._latched)
        return {"node": self.node, "status": last and last["status"], "reason": last and last["reason"],
                "error": self.failing, "updates": dict(self.updates), "latched": latched,
                "journal_lines_skipped": self.journal_skipped}
