"""`nodewarden analyze`: Table VI from a directory of many nodes' logs."""

from __future__ import annotations

import csv
import gzip
import random
from pathlib import Path

import pytest

from nodewarden.cli import main

REFERENCE = (Path(__file__).resolve().parents[2] / "nodewarden" / "analysis" / "reference" / "fireflyer"
             / "table6_xid_counts.csv")

XID_LINE = {
    13: "NVRM: Xid (PCI:0000:{b}:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e",
    31: "NVRM: Xid (PCI:0000:{b}:00): 31, pid={p}, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    43: "NVRM: Xid (PCI:0000:{b}:00): 43, pid={p}, name=pt_main_thread, Ch 00000008",
    45: "NVRM: Xid (PCI:0000:{b}:00): 45, pid={p}, name=pt_main_thread, Ch 00000010",
    74: "NVRM: Xid (PCI:0000:{b}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 6(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    63: "NVRM: Xid (PCI:0000:{b}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    64: "NVRM: Xid (PCI:0000:{b}:00): 64, pid='<unknown>', name=<unknown>, Dynamic Page Retirement: Blacklisting failed.  Page should have been blacklisted on boot(0x00000000007fffa8).",
    94: "NVRM: Xid (PCI:0000:{b}:00): 94, pid={p}, Contained: SM (0x1). RST: No, D-RST: No",
    95: "NVRM: Xid (PCI:0000:{b}:00): 95, pid={p}, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",
    44: "NVRM: Xid (PCI:0000:{b}:00): 44, pid='<unknown>', name=<unknown>, Ch 0000000a, intr 00000000",
    48: "NVRM: Xid (PCI:0000:{b}:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
    61: "NVRM: Xid (PCI:0000:{b}:00): 61, pid='<unknown>', name=<unknown>, Internal micro-controller breakpoint/warning (0x0000)",
    62: "NVRM: Xid (PCI:0000:{b}:00): 62, pid='<unknown>', name=<unknown>, Internal micro-controller halt",
    69: "NVRM: Xid (PCI:0000:{b}:00): 69, pid={p}, name=python, Class Error: ChId 0008, Class 0000c6c0, Offset 00000000, Data 00000000, ErrorCode 000000a4",
    79: "NVRM: Xid (PCI:0000:{b}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    119: "NVRM: Xid (PCI:0000:{b}:00): 119, pid={p}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x410).",
}
NOISE = ["systemd[1]: Started Session 3 of user root.", "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
         "nvme nvme0: 32/0/0 default/read/poll queues"]


TABLE6_TO_TABLE5 = {"GPU ECC Error": "Memory ECC Error", "Uncorrectable Failures": "Uncorrectable GPU Failures",
                    "GPU GSP ERROR": "Other Failures"}


def _paper_counts() -> dict[int, int]:
    with open(REFERENCE) as f:
        return {int(r["xid"]): int(r["count"]) for r in csv.DictReader(f) if r["xid"]}


def _write_fleet(root: Path, counts: dict[int, int], nodes: int = 25, seed: int = 1) -> None:
    """Spread the Xids over `nodes` nodes' kern.log files (dmesg format, one fault per distinct
    microsecond), half of them rotated and gzipped, with noise between them."""
    rng = random.Random(seed)
    lines: dict[int, list[str]] = {n: [] for n in range(nodes)}
    items = [code for code, n in counts.items() for _ in range(n)]
    rng.shuffle(items)
    clocks = [100.0] * nodes
    for code in items:
        node = rng.randrange(nodes)
        for _ in range(rng.randrange(0, 3)):
            clocks[node] += 0.25
            lines[node].append(f"[{clocks[node]:12.6f}] {rng.choice(NOISE)}")
        clocks[node] += 1.0
        msg = XID_LINE[code].format(b=rng.choice(["07", "0a", "44", "4a"]), p=rng.randrange(1000, 99999))
        lines[node].append(f"[{clocks[node]:12.6f}] {msg}")
    for node, ls in lines.items():
        d = root / f"node{node:03d}"
        d.mkdir(parents=True)
        half = len(ls) // 2
        with gzip.open(d / "kern.log.1.gz", "wt") as f:
            f.write("\n".join(ls[:half]) + "\n")
        (d / "kern.log").write_text("\n".join(ls[half:]) + "\n")


def test_table6_reproduces_the_paper_from_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = _paper_counts()
    _write_fleet(tmp_path / "logs", counts)
    rc = main(["analyze", str(tmp_path / "logs"), "--out", str(tmp_path / "out")])
    assert rc == 0
    with open(tmp_path / "out" / "table6_xid_counts.csv") as f:
        rows = list(csv.DictReader(f))
    got = {int(r["xid"]): int(r["count"]) for r in rows if r["xid"]}
    assert got == counts
    total = [r for r in rows if r["group"] == "Total"][0]
    assert int(total["count"]) == 12970
    with open(REFERENCE) as f:
        ref = {int(r["xid"]): r for r in csv.DictReader(f) if r["xid"]}
    for r in rows:
        if r["xid"]:
            xid = int(r["xid"])
            assert f"{float(r['percentage']):.2f}%" == ref[xid]["percentage_as_printed"], xid
            # the report names groups as Table V does; the paper's Table VI labels three otherwise
            assert r["group"] == TABLE6_TO_TABLE5.get(ref[xid]["gpu_error_type"], ref[xid]["gpu_error_type"]), xid
    md = (tmp_path / "out" / "table6_xid_counts.md").read_text()
    assert "| NVLink Error" in md and "42.57%" in md
    out = capsys.readouterr().out
    assert "12970" in out and "33.48%" in out


def test_copies_across_files_are_counted_once(tmp_path: Path) -> None:
    """kern.log and a journalctl export of one host hold the same records: counted once; the
    same line printed twice by the kernel (two stamps) is two events."""
    node = tmp_path / "logs" / "node01"
    node.mkdir(parents=True)
    x1 = "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1."
    x2 = "NVRM: Xid (PCI:0000:07:00): 32, Channel ID 00000000 intr 00004000"
    (node / "kern.log").write_text(
        f"Dec  2 11:38:47 node01 kernel: [  219.470994] {x1}\n"
        f"Dec  2 11:38:48 node01 kernel: [  220.000001] {x2}\n"
        f"Dec  2 11:38:48 node01 kernel: [  220.000302] {x2}\n")
    (node / "journal.txt").write_text(
        f"Dec 02 11:38:47 node01 kernel: {x1}\n"
        f"Dec 02 11:38:48 node01 kernel: {x2}\n"
        f"Dec 02 11:38:48 node01 kernel: {x2}\n")
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "logs"), "--out", str(out)]) == 0
    with open(out / "table6_xid_counts.csv") as f:
        got = {int(r["xid"]): int(r["count"]) for r in csv.DictReader(f) if r["xid"]}
    assert got == {48: 1, 32: 2}


def test_empty_input_gives_a_zero_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.log").write_text("")
    assert main(["analyze", str(tmp_path / "empty.log"), "--out", str(tmp_path / "o")]) == 0
    with open(tmp_path / "o" / "table6_xid_counts.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["group"], r["count"]) for r in rows] == [("Total", "0")]


def test_a_flash_cut_across_until_counts_in_the_window_it_began(tmp_path: Path) -> None:
    """A cut whose link goes down before --until and comes back after it belongs to the first
    window; windows side by side add up to the whole."""
    port = "mlx5_core 0000:1a:00.0 mlx5_0: Port: 1 Link"
    lines = [("2024-03-01T23:59:50", "DOWN"), ("2024-03-02T00:00:10", "ACTIVE"),
             ("2024-03-05T08:00:00", "DOWN"), ("2024-03-05T08:00:05", "ACTIVE")]
    p = tmp_path / "node01.log"
    p.write_text("".join(f"{t}+00:00 node01 kernel: {port} {s}\n" for t, s in lines))

    def days(*window: str) -> dict[str, int]:
        out = tmp_path / ("r" + "".join(w.replace("-", "") for w in window))
        assert main(["analyze", str(p), "--no-cache", "--out", str(out), *window]) == 0
        with open(out / "table8_ib_flash_cuts_daily.csv") as f:
            return {r["date"]: int(r["failure_count"]) for r in csv.DictReader(f)}

    whole = days()
    assert whole == {"2024-03-01": 1, "2024-03-05": 1}
    first = days("--until", "2024-03-02")
    second = days("--since", "2024-03-02")
    assert first == {"2024-03-01": 1} and second == {"2024-03-05": 1}


def test_a_report_inside_the_logs_directory_is_not_read_back(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "node01").mkdir(parents=True)
    (logs / "node01" / "kern.log").write_text(
        "2024-03-01T10:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    for _ in range(2):
        assert main(["analyze", str(logs), "--no-cache", "--out", str(logs / "report")]) == 0
    assert (f"- inputs read: 1 (left out, nodewarden's own outputs: {logs / 'report'}: the report's output "
            "directory (--out), not read)\n") in (logs / "report" / "report.md").read_text()


def test_kind_ib_flash_cut_keeps_the_cuts_of_the_logs(tmp_path: Path) -> None:
    port = "mlx5_core 0000:1a:00.0 mlx5_0: Port: 1 Link"
    p = tmp_path / "node01.log"
    p.write_text(f"2024-03-01T10:00:00+00:00 node01 kernel: {port} DOWN\n"
                 f"2024-03-01T10:00:05+00:00 node01 kernel: {port} ACTIVE\n")
    assert main(["analyze", str(p), "--no-cache", "--kind", "ib_flash_cut", "--out", str(tmp_path / "r")]) == 0
    with open(tmp_path / "r" / "table8_ib_flash_cuts_daily.csv") as f:
        assert [(r["date"], r["failure_count"]) for r in csv.DictReader(f)] == [("2024-03-01", "1")]
