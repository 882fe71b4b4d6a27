"""The agent's /metrics text for a known set of kernel-log lines, read back with
prometheus_client's own parser: exact values, label sets, order, and the gpu label from a
procfs tree laid out as the NVIDIA driver lays out ``/proc/driver/nvidia/gpus``."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import envneeds

from nodewarden import __version__
from nodewarden.agent import exporter as ex
from nodewarden.agent.exporter import Counters, increments, make_registry
from nodewarden.nvml import GpuMinors
from nodewarden.parsing.stream import KernelLogParser

# dmesg lines, one per fault family the agent counts (formats as in tests/fixtures/reference/real_log_cases.md)
LINES = [
    "[ 1001.000001] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
    "error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
    "[ 1001.500000] NVRM: Xid (PCI:0000:07:00): 48, pid=1234, name=python3, An uncorrectable double bit error",
    "[ 1002.000000] NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen "
    "off the bus and is not responding to commands.",
    "[ 1003.000000] EDAC MC0: 3 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 "
    "page:0x849923 offset:0x380 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0092 socket:0 ha:0 "
    "channel_mask:4 rank:0)",
    "[ 1003.100000] EDAC MC1: 1 UE memory read error on CPU_SrcID#1_Ha#0_Chan#0_DIMM#1 (channel:0 slot:1 "
    "page:0x1 offset:0x0 grain:32 syndrome:0x0 -  area:DRAM err_code:0001:0090 socket:1 ha:0 channel_mask:1 rank:0)",
    "[ 1004.000000] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: 9c00004000010091",
    "[ 1004.000001] mce: [Hardware Error]: TSC 12ab ADDR 2ffd4a3c0 MISC 140401086",
    "[ 1004.000002] mce: [Hardware Error]: PROCESSOR 0:806f8 TIME 1732700000 SOCKET 0 APIC 0 microcode 2b000571",
    "[ 1005.000000] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN",
    "[ 1005.900000] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
    "[ 1006.000000] mlx5_core 0000:53:00.0 enp83s0f0np0: Link down",
]


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    """``<tmp>/driver/nvidia/gpus/0000:07:00.0/information`` as the 5xx drivers write it."""
    d = tmp_path / "driver" / "nvidia" / "gpus" / "0000:07:00.0"
    d.mkdir(parents=True)
    (d / "information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 218\nGPU UUID: \t GPU-1c8b8a3e-0000-0000-0000-000000000000\n"
        "Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
        "Bus Location: \t 0000:07:00.0\nDevice Minor: \t 3\nGPU Firmware: \t 535.129.03\nGPU Excluded:\t No\n")
    return tmp_path


def scrape(counters: Counters) -> dict[tuple[str, frozenset], float]:
    text = generate_latest(make_registry(counters.snapshot)).decode()
    out: dict[tuple[str, frozenset], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def key(name: str, **labels: str) -> tuple[str, frozenset]:
    return (name, frozenset(labels.items()))


def count(lines: list[str], gpu_of: GpuMinors) -> Counters:
    c = Counters()
    parser = KernelLogParser(host="node01", source="file")
    for e in parser.feed_lines(lines):
        c.add_all(increments(e, gpu_of))
    return c


def test_known_events_give_exact_series(procfs: Path) -> None:
    s = scrape(count(LINES, GpuMinors(procfs)))
    expected = {
        key("nodewarden_gpu_xid_errors_total", gpu="3", pci_bus_id="0000:07:00.0", xid="48", category="uncorrectable"): 2,
        key("nodewarden_gpu_xid_errors_total", gpu="", pci_bus_id="0000:b3:00.0", xid="79", category="uncorrectable"): 1,
        key("nodewarden_edac_logged_errors_total", controller="mc0", dimm="CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
            type="corrected"): 3,
        key("nodewarden_edac_logged_errors_total", controller="mc1", dimm="CPU_SrcID#1_Ha#0_Chan#0_DIMM#1",
            type="uncorrected"): 1,
        key("nodewarden_mce_events_total", type="corrected"): 1,
        key("nodewarden_ib_link_events_total", device="mlx5_3", port="1", state="DOWN"): 1,
        key("nodewarden_ib_link_events_total", device="mlx5_3", port="1", state="ACTIVE"): 1,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="xid"): 3,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="cpu_ecc"): 2,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="mce"): 1,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="ib_link_down"): 1,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="ib_link_up"): 1,
        key("nodewarden_collector_events_total", collector="kernel_log", kind="net_link_down"): 1,
        key("nodewarden_build_info", version=__version__): 1,
        # counters without labels are there from the start, at 0 (their first rise is seen)
        key("nodewarden_collector_kmsg_overruns_total"): 0,
        key("nodewarden_collector_kmsg_lost_records_total"): 0,
        key("nodewarden_collector_state_write_errors_total"): 0,
    }
    assert s == expected


def test_unparsed_lines_are_counted() -> None:
    lines = ["[ 1.0] NVRM: Xid (PCI:0000:07:00): banana, something the parser cannot read"]
    s = scrape(count(lines, GpuMinors("/nonexistent")))
    assert s[key("nodewarden_collector_unparsed_lines_total", collector="kernel_log")] == 1
    assert s[key("nodewarden_collector_events_total", collector="kernel_log", kind="unparsed")] == 1


def test_every_family_is_described_and_typed() -> None:
    text = generate_latest(make_registry(Counters().snapshot)).decode()
    for fam in ex.FAMILIES:
        # prometheus_client writes a counter's TYPE/HELP with or without `_total` by version
        names = (fam.name, fam.name[: -len("_total")]) if fam.type == "counter" else (fam.name,)
        assert any(f"# TYPE {n} {fam.type}\n" in text for n in names), fam.name
        assert any(f"# HELP {n} " in text for n in names), fam.name
    for fam in ex.FAMILIES:
        assert fam.name.startswith("nodewarden_")
        assert fam.name.endswith("_total") == (fam.type == "counter"), fam.name


def test_samples_are_sorted_by_labels(procfs: Path) -> None:
    c = Counters()
    for bus in ("0000:b3:00.0", "0000:07:00.0", "0000:41:00.0"):
        for code in ("79", "13", "48"):
            c.add(ex.XID, ("", bus, code, "x"))
    text = generate_latest(make_registry(c.snapshot)).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("nodewarden_gpu_xid_errors_total{")]
    assert lines == sorted(lines) and len(lines) == 9


def test_gpu_minor_from_procfs(procfs: Path) -> None:
    g = GpuMinors(procfs)
    assert g("0000:07:00.0") == "3"
    assert g("0000:08:00.0") == ""  # no such GPU directory
    assert g(None) == "" and g("") == "" and g("../../etc") == ""
    bad = procfs / "driver" / "nvidia" / "gpus" / "0000:09:00.0"
    bad.mkdir()
    (bad / "information").write_text("Model: \t\t NVIDIA H100\n")  # no Device Minor line
    assert g("0000:09:00.0") == ""


def test_counters_json_round_trip_keeps_only_persisted_series() -> None:
    c = Counters()
    c.add(ex.EDAC_LOGGED, ("mc0", "DIMM_A1", "corrected"), 3)
    c.add(ex.OVERRUNS, (), 2)
    c.set(ex.SUCCESS, ("kernel_log",), 1)
    c.set(ex.STATE_ERRORS, (), 5)
    items = c.to_json()
    assert {i["name"] for i in items} == {ex.EDAC_LOGGED.name, ex.OVERRUNS.name}
    d = Counters()
    assert d.load_json(items + [{"name": "nodewarden_gone_total", "labels": {}, "value": 1},
                                {"name": ex.MCE.name, "labels": {"kind": "x"}, "value": 1}]) == 2
    assert d.get(ex.EDAC_LOGGED, ("mc0", "DIMM_A1", "corrected")) == 3 and d.get(ex.OVERRUNS) == 2


def test_label_count_mismatch_is_refused() -> None:
    with pytest.raises(ValueError):
        Counters().add(ex.MCE, ("corrected", "extra"))


def test_a_failing_snapshot_serves_the_previous_one() -> None:
    c = Counters()
    c.add(ex.MCE, ("corrected",), 4)
    calls = {"n": 0}

    def snap():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("boom")
        return c.snapshot()

    reg = make_registry(snap)
    first = generate_latest(reg)
    assert generate_latest(reg) == first
    assert b'nodewarden_mce_events_total{type="corrected"} 4.0' in first


def test_promtool_accepts_the_output(procfs: Path, tmp_path: Path) -> None:
    promtool = envneeds.command("promtool", "lints the /metrics text (Debian: apt-get install prometheus)")
    c = count(LINES, GpuMinors(procfs))
    c.set(ex.SUCCESS, ("kernel_log",), 1)
    c.set(ex.DURATION, ("kernel_log",), 0.0012)
    text = generate_latest(make_registry(c.snapshot))
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


# ---------------------------------------------------------------------------------------------
# The polled collectors' samples merged with the agent's series

from nodewarden.collectors.base import COUNTER, GAUGE, Sample  # noqa: E402


def polled_text(polled: list[tuple[str, Sample]], c: Counters | None = None) -> str:
    return generate_latest(make_registry((c or Counters()).snapshot, lambda: polled)).decode()


def test_polled_samples_are_merged_typed_and_sorted() -> None:
    polled = [
        ("infiniband", Sample("nodewarden_ib_port_state", (("device", "mlx5_1"), ("port", "1")), 4, GAUGE, "IB state")),
        ("infiniband", Sample("nodewarden_ib_port_state", (("device", "mlx5_0"), ("port", "1")), 1, GAUGE, "IB state")),
        ("infiniband", Sample("nodewarden_ib_link_downed_total", (("device", "mlx5_0"), ("port", "1")), 3, COUNTER)),
        ("edac", Sample("nodewarden_collector_unreadable_files", (("collector", "edac"),), 0, GAUGE, "unreadable")),
        ("infiniband", Sample("nodewarden_collector_unreadable_files", (("collector", "infiniband"),), 2, GAUGE)),
    ]
    c = Counters()
    c.add(ex.MCE, ("corrected",), 1)
    text = polled_text(polled, c)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["nodewarden_ib_port_state"].type == "gauge"
    assert fams["nodewarden_ib_port_state"].documentation == "IB state"
    assert fams["nodewarden_ib_link_downed"].type == "counter"
    assert [s.value for s in fams["nodewarden_ib_link_downed"].samples] == [3]
    lines = [ln for ln in text.splitlines() if ln.startswith("nodewarden_ib_port_state{")]
    assert lines == ['nodewarden_ib_port_state{device="mlx5_0",port="1"} 1.0',
                     'nodewarden_ib_port_state{device="mlx5_1",port="1"} 4.0']
    # one family for a name two collectors share, one series each
    assert [s.labels["collector"] for s in fams["nodewarden_collector_unreadable_files"].samples] == ["edac", "infiniband"]
    # the agent's own series first, then the polled families by name
    names = [f.name for f in text_string_to_metric_families(text)]
    assert names.index("nodewarden_mce_events") < names.index("nodewarden_collector_unreadable_files")
    polled_names = names[len(ex.FAMILIES):]
    assert polled_names == sorted(polled_names)


@pytest.mark.parametrize("bad, why", [
    (Sample("nodewarden_gpu_xid_errors_total", (("gpu", "0"),), 1, COUNTER), "exports this name itself"),
    (Sample("nodewarden_collector_success", (("collector", "nvml"),), 1, GAUGE), "exports this name itself"),
    (Sample("nodewarden_mce_events", (), 1, GAUGE), "exports this name itself"),  # its counter's base name
    (Sample("node_ib_port_state", (), 1, GAUGE), "not a metric name starting with"),
    (Sample("nodewarden_bad-name", (), 1, GAUGE), "not a metric name"),
    (Sample("nodewarden_ib_link_downed", (), 1, COUNTER), "must end in _total"),
    (Sample("nodewarden_ib_port_state_total", (), 1, GAUGE), "must not end in _total"),
    (Sample("nodewarden_x", (("__name__", "y"),), 1, GAUGE), "bad or repeated label"),
    (Sample("nodewarden_x", (("a", "1"), ("a", "2")), 1, GAUGE), "bad or repeated label"),
    (Sample("nodewarden_x", (("a-b", "1"),), 1, GAUGE), "bad or repeated label"),
    (Sample("nodewarden_x", (), "3", GAUGE), "not a number"),  # type: ignore[arg-type]
    (Sample("nodewarden_x", (), 1, "histogram"), "unknown type"),
])
def test_the_contract_check_drops_what_would_break_the_output(bad: Sample, why: str) -> None:
    fams, problems = ex.check_samples([("pcie", bad)])
    assert fams == {} and len(problems) == 1 and why in problems[0] and problems[0].endswith("; dropped")


def test_the_same_series_is_never_emitted_twice(caplog) -> None:
    labels = (("device", "mlx5_0"), ("port", "1"))
    polled = [
        ("infiniband", Sample("nodewarden_ib_port_state", labels, 4, GAUGE)),
        ("netclass", Sample("nodewarden_ib_port_state", labels[::-1], 1, GAUGE)),  # same series, other label order
        ("pcie", Sample("nodewarden_ib_port_state_total", labels, 1, COUNTER)),  # same base name, other type
        ("pcie", Sample("nodewarden_ib_rate", labels, 1, GAUGE)),
        ("nvml", Sample("nodewarden_ib_rate_total", labels, 5, COUNTER)),  # would write TYPE nodewarden_ib_rate twice
        ("nvml", Sample("nodewarden_ib_port_state", (("device", "mlx5_0"), ("port", "2")), 4, GAUGE)),  # a new series
    ]
    fams, problems = ex.check_samples(polled)
    assert set(fams) == {"nodewarden_ib_port_state", "nodewarden_ib_rate"}
    assert fams["nodewarden_ib_port_state"].samples == {labels: 4.0, (("device", "mlx5_0"), ("port", "2")): 4.0}
    assert fams["nodewarden_ib_port_state"].collector == "infiniband"
    assert problems == [
        "netclass: nodewarden_ib_port_state{port='1',device='mlx5_0'} given twice; dropped",
        "pcie: nodewarden_ib_port_state_total clashes with nodewarden_ib_port_state of infiniband; dropped",
        "nvml: nodewarden_ib_rate_total clashes with nodewarden_ib_rate of pcie; dropped",
    ]
    with caplog.at_level(logging.WARNING, logger="nodewarden.agent.exporter"):
        reg = make_registry(Counters().snapshot, lambda: polled)
        text = generate_latest(reg).decode()
        generate_latest(reg)
    assert text.count("# TYPE nodewarden_ib_port_state ") == 1 and text.count("# TYPE nodewarden_ib_rate ") == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3  # logged once, not on every scrape
    assert len(list(text_string_to_metric_families(text))) == len(ex.FAMILIES) + 2


def test_a_failing_polled_source_serves_the_previous_samples() -> None:
    calls = {"n": 0}

    def polled():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("boom")
        return [("edac", Sample("nodewarden_edac_correctable_errors_total", (("controller", "mc0"),), 2, COUNTER))]

    reg = make_registry(Counters().snapshot, polled)
    first = generate_latest(reg)
    assert generate_latest(reg) == first
    assert b'nodewarden_edac_correctable_errors_total{controller="mc0"} 2.0' in first


def test_kernel_log_edac_counts_are_not_the_sysfs_edac_counters() -> None:
    names = {f.name for f in ex.FAMILIES}
    assert "nodewarden_edac_correctable_errors_total" not in names
    assert "nodewarden_edac_uncorrectable_errors_total" not in names
    # so the sysfs EDAC collector's authoritative counters pass the contract check
    fams, problems = ex.check_samples([("edac", Sample("nodewarden_edac_correctable_errors_total",
                                                       (("controller", "mc0"), ("dimm", "DIMM_A1")), 7, COUNTER))])
    assert problems == [] and fams["nodewarden_edac_correctable_errors_total"].samples


def test_edac_counts_of_a_0_1_0_state_file_move_to_the_renamed_series() -> None:
    c = Counters()
    assert c.load_json([
        {"name": "nodewarden_edac_correctable_errors_total", "labels": {"controller": "mc0", "dimm": "A1"}, "value": 5},
        {"name": "nodewarden_edac_uncorrectable_errors_total", "labels": {"controller": "mc0", "dimm": "A1"}, "value": 1},
    ]) == 2
    assert c.get(ex.EDAC_LOGGED, ("mc0", "A1", "corrected")) == 5
    assert c.get(ex.EDAC_LOGGED, ("mc0", "A1", "uncorrected")) == 1


def test_replace_swaps_a_whole_family() -> None:
    c = Counters()
    c.replace(ex.VAL_STATUS, {("gemm", "pass"): 1, ("gemm", "fail"): 0, ("storage", "pass"): 1})
    c.replace(ex.VAL_STATUS, {("gemm", "fail"): 1})
    assert [k for k in c.snapshot() if k[0] == ex.VAL_STATUS.name] == [(ex.VAL_STATUS.name, ("gemm", "fail"))]
    with pytest.raises(ValueError):
        c.replace(ex.VAL_STATUS, {("gemm",): 1})


def test_promtool_accepts_the_merged_output() -> None:
    promtool = envneeds.command("promtool", "lints the /metrics text (Debian: apt-get install prometheus)")
    polled = [("infiniband", Sample("nodewarden_ib_port_state", (("device", "mlx5_0"), ("port", "1")), 4, GAUGE, "s")),
              ("infiniband", Sample("nodewarden_ib_link_downed_total", (("device", "mlx5_0"), ("port", "1")), 3,
                                    COUNTER, "Link downed.")),
              ("nvml", Sample("nodewarden_gpu_temperature_celsius", (("gpu", "0"),), 41, GAUGE))]
    c = Counters()
    c.set(ex.SUCCESS, ("nvml",), 1)
    c.replace(ex.VAL_VALUE, {("gemm", "tflops", "FLOP/s", "0"): 4.1e14})
    text = polled_text(polled, c).encode()
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()


# ---------------------------------------------------------------------------------------------
# The exposition kept between changes

def test_exposition_is_generate_latest_byte_for_byte_and_renders_only_what_changed(monkeypatch) -> None:
    """prometheus_client stays the format's authority: the kept body equals a fresh
    generate_latest of the same state after every change; an unchanged state formats nothing
    and runs no contract check; one changed family is the one formatted again."""
    c = Counters()
    polled = [
        ("infiniband", Sample("nodewarden_ib_port_state", (("device", "mlx5_0"), ("port", "1")), 4, GAUGE, "IB state")),
        ("edac", Sample("nodewarden_collector_unreadable_files", (("collector", "edac"),), 0, GAUGE, "unreadable")),
    ]
    checks = []
    real_check = ex.check_samples
    monkeypatch.setattr(ex, "check_samples", lambda p, *a: checks.append(1) or real_check(p, *a))
    expo = ex.Exposition(ex.AgentCollector(c.snapshot, lambda: list(polled)))

    def fresh() -> bytes:  # a registry of its own: its contract checks are not counted
        n = len(checks)
        out = generate_latest(make_registry(c.snapshot, lambda: list(polled)))
        del checks[n:]
        return out

    body = expo.render()
    assert body == fresh()
    n, n_checks = expo.families_rendered, len(checks)
    assert expo.render() is body and expo.families_rendered == n and len(checks) == n_checks
    c.add(ex.OVERRUNS)                                        # one agent family changes
    assert expo.render() == fresh() and expo.families_rendered == n + 1 and len(checks) == n_checks
    polled[0] = (polled[0][0], Sample("nodewarden_ib_port_state", (("device", "mlx5_0"), ("port", "1")), 1, GAUGE,
                                      "IB state"))           # one polled family changes
    assert expo.render() == fresh() and expo.families_rendered == n + 2 and len(checks) == n_checks + 1
    del polled[1]                                             # a family goes away
    assert expo.render() == fresh() and b"nodewarden_collector_unreadable_files" not in expo.render()
