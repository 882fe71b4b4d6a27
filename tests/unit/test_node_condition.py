"""The node condition's pure part (nodewarden.agent.nodecondition): findings from the NVML
collector's samples, the verdict, lastTransitionTime and heartbeat rules, the patch body, the
kernel-log latch and its clearing by a passing validator report, a kubeconfig's credentials."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest

from nodewarden import kmsg
from nodewarden.agent import nodecondition as nc
from nodewarden.agent import state as st
from nodewarden.agent.schedule import STATUSES
from nodewarden.catalog.policy import default_policy
from nodewarden.collectors.base import Sample
from nodewarden.events import FaultEvent
from nodewarden.parsing.envelope import TimeContext
from nodewarden.parsing.stream import KernelLogParser
from tests import envneeds, tlscerts

INFO = [Sample("nodewarden_gpu_info", (("gpu", str(i)), ("pci_bus_id", f"0000:{0x18 + i:02x}:00.0")), 1.0)
        for i in range(2)]


def s(name: str, value: float, **labels: str) -> Sample:
    return Sample("nodewarden_gpu_" + name, tuple(labels.items()), value)


@pytest.mark.parametrize("sample, reason", [
    (s("lost", 1, gpu="1"), "GpuLost"),
    (s("recovery_action", 1, gpu="1", action="node_reboot"), "NodeRebootRequired"),
    (s("recovery_action", 1, gpu="1", action="drain_p2p"), "GpuDrainP2PRequired"),
    (s("row_remap_failure", 1, gpu="1"), "RowRemapFailure"),
    (s("row_remap_pending", 1, gpu="1"), "RowRemapPending"),
    (s("ecc_errors_total", 2, gpu="1", type="uncorrected", scope="volatile"), "DoubleBitEcc"),
    (s("nvlink_state", 0, gpu="1", link="5"), "NVLinkDown"),
])
def test_each_fault_gives_its_reason_and_names_the_gpu(sample: Sample, reason: str) -> None:
    v = nc.verdict(nc.findings([*INFO, sample]), nvml_ok=True)
    assert (v.status, v.reason) == ("False", reason)
    assert v.message.startswith("GPU 1 (0000:19:00.0): ")


@pytest.mark.parametrize("sample", [
    s("recovery_action", 1, gpu="0", action="none"), s("recovery_action", 0, gpu="0", action="gpu_reset"),
    s("ecc_errors_total", 5, gpu="0", type="uncorrected", scope="aggregate"),
    s("ecc_errors_total", 5, gpu="0", type="corrected", scope="volatile"), s("nvlink_state", 1, gpu="0", link="0"),
])
def test_healthy_values_are_no_finding(sample: Sample) -> None:
    assert nc.findings([*INFO, sample]) == []
    assert nc.verdict([], nvml_ok=True).status == "True"
    assert nc.verdict([], nvml_ok=False).status == nc.verdict([], nvml_ok=None).status == "Unknown"


def test_the_most_severe_finding_gives_the_reason_and_the_message_is_bounded() -> None:
    samples = [*INFO, s("nvlink_state", 0, gpu="0", link="3"), s("lost", 1, gpu="1")]
    samples += [s("nvlink_state", 0, gpu="0", link=str(k)) for k in range(100, 200)]
    v = nc.verdict(nc.findings(samples), nvml_ok=True)
    assert v.reason == "GpuLost" and v.message.startswith("GPU 1 (0000:19:00.0): lost")
    assert len(v.message) <= nc.MESSAGE_MAX and v.message.endswith("more")


def test_transition_time_changes_with_the_status_only_and_the_heartbeat_is_bounded() -> None:
    ok = nc.verdict([], nvml_ok=True)
    c1, send = nc.next_condition(None, ok, 1000.0, 60, None)
    assert send and c1["lastTransitionTime"] == c1["lastHeartbeatTime"] == "1970-01-01T00:16:40Z"
    c2, send = nc.next_condition(c1, ok, 1030.0, 60, 1000.0)
    assert not send and c2 == c1
    c3, send = nc.next_condition(c1, ok, 1060.0, 60, 1000.0)
    assert send and c3["lastTransitionTime"] == c1["lastTransitionTime"] and c3["lastHeartbeatTime"] != c1["lastHeartbeatTime"]
    bad = nc.verdict([nc.Finding("GpuLost", "0", "", "lost")], nvml_ok=True)
    c4, send = nc.next_condition(c3, bad, 1061.0, 60, 1060.0)
    assert send and c4["status"] == "False" and c4["lastTransitionTime"] == "1970-01-01T00:17:41Z"
    assert json.loads(nc.patch_body(c4)) == {"status": {"conditions": [c4]}}
    assert nc.condition_of({"status": {"conditions": [{"type": "Ready"}, c4]}}) == c4


def test_a_draining_xid_latches_until_a_passing_validator_report(tmp_path: Path) -> None:
    from nodewarden.events import FaultEvent, XID
    policy = default_policy()
    drains = next(c for c in (79, 48, 74) if policy.drains(c))
    e = FaultEvent(kind=XID, message="NVRM: Xid 79", raw="NVRM: Xid 79", code=drains, device="0000:19:00.0")
    f = nc.event_finding(e, policy.action, lambda pci: "1")
    assert f is not None and f.reason == nc.XID_REASONS[policy.action(drains)] and f.gpu == "1"
    assert nc.event_finding(FaultEvent(kind=XID, message="m", raw="m", code=13), policy.action) is None  # restart_app
    counters = {("nodewarden_validator_last_run_timestamp_seconds", ()): 2000.0,
                ("nodewarden_validator_check_status", ("gemm", "pass")): 1.0}
    assert nc.validator_passed_since(counters, 1000.0)
    assert not nc.validator_passed_since(counters, 2000.0)  # the report is older than the fault
    failing = {**counters, ("nodewarden_validator_check_status", ("links", "fail")): 1.0}
    assert not nc.validator_passed_since(failing, 1000.0)


def test_a_kubeconfig_gives_server_token_and_ca(tmp_path: Path) -> None:
    if tlscerts.OPENSSL is None:
        envneeds.need("openssl", "makes the test certificates")
    certs = tlscerts.make(tmp_path / "certs")
    ca = base64.b64encode(certs.ca.read_bytes()).decode()
    (tmp_path / "token").write_text("t0k\n")
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"""apiVersion: v1
kind: Config
current-context: c
contexts: [{{name: c, context: {{cluster: k, user: u}}}}]
clusters: [{{name: k, cluster: {{server: "https://127.0.0.1:6443", certificate-authority-data: {ca}}}}}]
users: [{{name: u, user: {{tokenFile: token}}}}]
""")
    creds = nc.load_credentials(str(kc), "/nonexistent")
    assert (creds.host, creds.port, creds.bearer()) == ("127.0.0.1", 6443, "t0k")
    kc.write_text(kc.read_text().replace("https://", "http://"))
    with pytest.raises(nc.CredentialsError, match="kubeconfig: clusters.k: server 'http://127.0.0.1:6443'"):
        nc.load_credentials(str(kc), "/nonexistent")


def test_in_cluster_credentials_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(nc.CredentialsError, match="KUBERNETES_SERVICE_HOST is not set"):
        nc.in_cluster(str(tmp_path), {})
    with pytest.raises(nc.CredentialsError, match=f"{tmp_path}/token: not readable"):
        nc.in_cluster(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})


# ---------------------------------------------------------------------------------------------
# The latch across a restart: re-latched from the event journal the agent's writer wrote

NOW = 1_796_000_000.0  # 2026-11-30T...Z
BOOT = dt.datetime.fromtimestamp(NOW - 20 * 86400, dt.timezone.utc)  # the node booted 20 days ago
PASSED = NOW - 5 * 86400  # the last passing validator report finished then
XID79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID13 = ("NVRM: Xid (PCI:0000:{bus}:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on "
         "(GPC 0, TPC 1, SM 0): Illegal Instruction Encoding")
RESET = ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
         "returned from status @ kernel_channel.c:2827")


def kernel_events(lines: list[tuple[float, str]]) -> list[FaultEvent]:
    """The follower's events of /dev/kmsg records printed at the given Unix times."""
    records = [f"3,{100 + i},{int((t - BOOT.timestamp()) * 1e6)},-;{text}\n" for i, (t, text) in enumerate(lines)]
    parser = KernelLogParser(host="gpu-node-001", source="kmsg")
    events = list(kmsg.kmsg_events(records, parser, TimeContext.make(boot_time=BOOT), "boot-1"))
    return events + parser.flush()


def publisher(counters: dict, clock: float = NOW) -> nc.NodeConditionPublisher:
    return nc.NodeConditionPublisher(nc.Credentials("127.0.0.1", 6443, None, token="t"), "gpu-node-001",
                                     lambda: [], lambda: counters, nvml_enabled=True, interval_s=1, heartbeat_s=60,
                                     timeout_s=1, policy_action=default_policy().action,
                                     gpu_of=lambda pci: {"0000:19:00.0": "1"}.get(pci, ""), clock=lambda: clock)


def report(finished: float, status: str = "pass") -> dict:
    """The counters of an exported report of one check (every status 1 or 0, as exported)."""
    return {("nodewarden_collector_success", ("nvml",)): 1.0,
            ("nodewarden_validator_last_run_timestamp_seconds", ()): finished,
            **{("nodewarden_validator_check_status", ("gemm", s)): float(s == status) for s in STATUSES}}


def write_journal(state_dir: Path) -> list[FaultEvent]:
    """Seven days of journal by the agent's writer: faults before and after PASSED, a fault no
    policy latches, NVML's own reset-required event, and two lines a crash or an edit spoiled."""
    store = st.StateStore(state_dir, today=lambda: dt.datetime.fromtimestamp(NOW, dt.timezone.utc).date())
    before = kernel_events([(PASSED - 2 * 86400, XID79.format(bus="1a"))])  # cleared by the report
    after = kernel_events([(PASSED + 3600, XID79.format(bus="19")), (PASSED + 7200, XID13.format(bus="19")),
                           (NOW - 600, RESET)])
    assert [e.kind for e in before + after] == ["xid", "xid", "xid", "gpu_reset_required"]
    nvml = FaultEvent(kind="gpu_reset_required", message="NVML recovery action gpu_reset", raw="", source="nvml",
                      device="0000:1b:00.0", time=after[0].time)
    assert store.journal(before) and store.journal(after[:2]) and store.journal([nvml])
    today = st.journal_path(state_dir, after[2].time)
    with open(today, "ab") as f:  # a torn write of an Xid line, a line that is not JSON, unrelated junk
        f.write(b'{"kind":"xid","time":"2026-11-3\n{"kind":"gpu_reset_required" oops\nnot an event\n')
    assert store.journal(after[2:])
    return before + after


def test_the_journal_gives_back_the_faults_after_the_last_passing_report(tmp_path: Path) -> None:
    events = write_journal(tmp_path)
    days = [d for d, _, _ in st.journal_files(tmp_path)]
    found = nc.journal_latches(tmp_path, PASSED, 400, NOW)
    passed_day = dt.datetime.fromtimestamp(PASSED, dt.timezone.utc).date()
    assert [p.name for p in found.files] == [f"events-{d}.jsonl" for d in days if d >= passed_day]
    assert len(found.files) < len(days)  # the file of the fault before the report is not read
    assert [(e.kind, e.code, e.device, e.attrs["seq"]) for e, _ in found.events] == [
        (x.kind, x.code, x.device, x.attrs["seq"]) for x in events[1:]]  # kernel-log ones only, journal order
    assert [at for _, at in found.events] == [e.time.timestamp() for e in events[1:]]
    assert (found.skipped, found.unreadable, found.matched) == (2, 0, 3)
    everything = nc.journal_latches(tmp_path, None, 400, NOW)  # no passing report: the retention
    assert len(everything.events) == 4 and everything.skipped == 2
    assert nc.journal_latches(tmp_path, None, 1, NOW).events == found.events[-1:]  # retention of one day
    storm = kernel_events([(NOW - 300 + i, XID79.format(bus="19")) for i in range(50)])
    st.StateStore(tmp_path, today=lambda: dt.date(2026, 11, 30)).journal(storm)
    stormy = nc.journal_latches(tmp_path, PASSED, 400, NOW)
    assert stormy.matched == 53 and len(stormy.events) == 3  # one GPU's Xid storm: its newest only
    (e, at), = [ea for ea in stormy.events if ea[0].code == 79]
    assert (e.attrs["seq"], at) == (storm[-1].attrs["seq"], storm[-1].time.timestamp())


def test_a_restart_relatches_what_the_running_agent_had_latched_and_a_passing_report_clears_it(
        tmp_path: Path) -> None:
    events = write_journal(tmp_path)
    counters = report(PASSED)
    running = publisher(counters)
    running.observe(events)  # the agent before its restart saw each event live
    live = running.current()
    assert (live.status, live.reason) == ("False", "GpuResetRequired")
    assert "GPU 1 (0000:19:00.0): Xid 79" in live.message and "0000:1a:00.0" not in live.message

    restarted = publisher(counters)
    assert restarted.current().status == "True"  # nothing latched before the journal is read
    assert restarted.relatch(tmp_path, 400) == 2
    assert restarted.current() == live
    assert restarted.health()["journal_lines_skipped"] == 2
    restarted.observe(events[1:])  # the same events again (the ring buffer's replay): one finding each
    assert restarted.relatch(tmp_path, 400) == 2 and restarted.current() == live

    counters.update(report(NOW - 1800))  # after the Xid, before the reset-required report
    assert restarted.current().reason == "GpuResetRequired" and "Xid" not in restarted.current().message
    counters.update(report(NOW + 60, status="fail"))  # a failing report clears nothing
    assert restarted.current().status == "False"
    counters.update(report(NOW + 120))
    assert restarted.current().status == "True"
    counters.update(report(NOW + 120, status="fail"))
    # the last report failed: when one last passed is not known, so the whole retention, the
    # fault of before PASSED included
    assert publisher(counters).relatch(tmp_path, 400) == 3
    assert publisher(report(NOW + 120)).relatch(tmp_path, 400) == 0


def test_a_journal_that_cannot_be_read_is_no_failure(tmp_path: Path) -> None:
    write_journal(tmp_path)
    tomorrow = dt.datetime.fromtimestamp(NOW + 86400, dt.timezone.utc)
    st.journal_path(tmp_path, tomorrow).mkdir()  # listed as a journal file; reading it fails, root or not
    found = nc.journal_latches(tmp_path, PASSED, 400, NOW)
    assert found.unreadable == 1 and len(found.events) == 3
    assert publisher(report(PASSED)).relatch(tmp_path, 400) == 2
    assert nc.journal_latches(tmp_path / "absent", None, 400, NOW).files == []


# ---------------------------------------------------------------------------------------------
# /healthz's "kubernetes" entry

def test_the_healthz_entry_before_publishing_when_healthy_and_when_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    node = "/api/v1/nodes/gpu-node-001"
    sent: list[tuple[str, str]] = []
    fail: list[str] = []

    def fake_request(creds, method, path, timeout_s, body=None, content_type=None):  # noqa: ANN001, ANN202
        if fail:
            raise nc.ApiError(fail[0])
        sent.append((method, path))
        return {"status": {"conditions": []}} if method == "GET" else {}

    monkeypatch.setattr(nc, "request", fake_request)
    counters = {("nodewarden_collector_success", ("nvml",)): 1.0}
    p = publisher(counters)
    base = {"node": "gpu-node-001", "error": None, "latched": 0, "journal_lines_skipped": 0}
    assert p.health() == {**base, "status": None, "reason": None, "updates": {"ok": 0, "error": 0}}
    assert p.step()
    assert sent == [("GET", node), ("PATCH", node + "/status")]
    assert p.health() == {**base, "status": "True", "reason": "GpuHardwareHealthy", "updates": {"ok": 1, "error": 0}}

    p.observe(kernel_events([(NOW - 60, XID79.format(bus="19"))]))
    why = f"PATCH {node}/status: HTTP 500 Internal Server Error: etcdserver: request timed out"
    fail.append(why)
    assert not p.step()
    assert p.health() == {**base, "status": "True", "reason": "GpuHardwareHealthy", "error": why, "latched": 1,
                          "updates": {"ok": 1, "error": 1}}  # what the node still shows, and why
    fail.clear()
    assert p.step()
    assert p.health() == {**base, "status": "False", "reason": nc.XID_REASONS[default_policy().action(79)],
                          "latched": 1, "updates": {"ok": 2, "error": 1}}


@pytest.mark.parametrize("node", [
    {"status": {"conditions": [{"type": "GpuHardwareHealthy"}]}},            # no status
    {"status": {"conditions": [{"type": "GpuHardwareHealthy", "status": {"x": 1}}]}},
    {"status": {"conditions": [{"type": "GpuHardwareHealthy", "status": "Maybe"}]}},
    {"status": {"conditions": 5}}, {"status": [1]}, [1], "node", None,
])
def test_an_answer_of_another_shape_holds_no_condition(node) -> None:
    """A GET answered with a node of another shape: no condition (so /metrics and /healthz,
    which read the last one, never index a missing field)."""
    assert nc.condition_of(node) is None


def test_a_condition_without_reason_reads_with_an_empty_one() -> None:
    got = nc.condition_of({"status": {"conditions": [{"type": "GpuHardwareHealthy", "status": "True"}]}})
    assert got == {"type": "GpuHardwareHealthy", "status": "True", "reason": ""}


@pytest.mark.parametrize("body, says", [
    (b"\xff\xfe not text", "not UTF-8 text"),
    (b"current-context: c\ncontexts: 5\n", "not a kubeconfig of the usual shape"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h:6443', certificate-authority: [1]}}]\n"
     b"users: [{name: u, user: {}}]\n", "not a kubeconfig of the usual shape"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h:6443', certificate-authority-data: '!!!'}}]\n"
     b"users: [{name: u, user: {}}]\n", "TLS settings"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h:0'}}]\nusers: [{name: u, user: {}}]\n", "port 0"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h:6443'}}]\n"
     b"users: [{name: u, user: {client-certificate: c.pem}}]\n", "needs its key"),
])
def test_a_broken_kubeconfig_is_a_credentials_error_naming_the_file(tmp_path, body: bytes, says: str) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_bytes(body)
    with pytest.raises(nc.CredentialsError, match=says) as e:
        nc.from_kubeconfig(str(kc))
    assert str(kc) in str(e.value)
