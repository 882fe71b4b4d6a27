"""`nodewarden simulate` with the kinds beyond the paper ([beyond_paper], Xid 154, cross-kind
[chains]): the default fleet is unchanged, the ground truth holds the rates exactly, and every
line has the shape of the real case it copies.

The real lines below are copied from tests/fixtures/reference/real_log_cases.md (S-001, S-101, P-101,
W-101, X-040, E-101), timestamps removed. A simulated line and a real line have the same shape
when they are equal once PCI ids, hexadecimal and decimal numbers are replaced by placeholders.
"""

from __future__ import annotations

import collections
import csv
import datetime as dt
import gzip
import hashlib
import re
from pathlib import Path

import pytest

from nodewarden.analysis import simulate as sim

BEYOND_RATES = """
[fleet]
nodes = 6
gpus_per_node = 8
ib_devices_per_node = 4
start = "2023-10-20"
end = "2023-11-18"
noise_per_node_day = 3
reboots_per_node_year = 20
rotation_days = 4
formats = { syslog3164 = 1, rfc3339 = 1, journal = 1, dmesg_t = 1 }

[chains]
"pcie_aer_fatal_gpu>79" = 2
"sxid_fatal>74" = 2

[xid_year]
"74" = 5
"79" = 3
"154" = 6
"43" = 4

[beyond_paper]
sxid_non_fatal = 5
sxid_fatal = 4
sxid_data_only = 3
pcie_aer_corrected = 6
pcie_aer_non_fatal = 3
pcie_aer_fatal_gpu = 4
gpu_reset_required = 3
amd_mca_edac = 3
ghes_memory = 3
"""

# Real lines (message part), real_log_cases.md
REAL = {
    "S-001": ["nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000, "
              "0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
              "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
              "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00"],
    "S-101": ["nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, 0x00000500, "
              "0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}"],
    "P-101": ["nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
              "snd_hda_intel 0000:03:00.1: AER: can't recover (no error_detected callback)",
              "pcieport 0000:00:03.0: AER: device recovery failed",
              "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
              "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
              "(Requester ID)",
              "pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000",
              "pcieport 0000:00:03.0:    [ 5] SDES                  ",
              "pcieport 0000:00:03.0:    [14] CmpltTO                (First)",
              "pcieport 0000:00:03.0: AER: Root Port link has been reset (0)"],
    "W-101": ["NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
              "returned from status @ kernel_channel.c:2827"],
    "X-040": ["NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
              "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 "
              "(GPU Reset Required)"],
    "E-101": ["[Hardware Error]: Corrected error, no action required.",
              "[Hardware Error]: CPU:1 (17:31:0) MC18_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: "
              "0xdc2040000000011b",
              "[Hardware Error]: Error Addr: 0x0000000313c7a020",
              "[Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x9fec08000a800a01",
              "[Hardware Error]: Unified Memory Controller Ext. Error Code: 0",
              "EDAC MC0: 1 CE Cannot decode normalized address on mc#0csrow#1channel#3 (csrow:1 channel:3 page:0x0 "
              "offset:0x0 grain:64 syndrome:0x800)"],
}
# Words the real cases happen not to show, but the driver's format strings give in the same place.
SAME_PLACE = (
    (r"AER: Uncorrected \(Fatal\) error received", "AER: Multiple Uncorrected (Fatal) error received"),
    (r"MC\d+_STATUS\[-\|", "MC18_STATUS[Over|"),
    (r"\): \d+, (Non-fatal|Fatal), Link \d+ .*", "): N, Non-fatal, Link N TEXT"),
    (r"kernel_channel\.c:2874", "kernel_channel.c:2827"),
    (r"\(Drain P2P\)|\(Node Reboot Required\)|\(GPU Reset Required\)|\(Drain and Reset\)|\(None\)", "(ACTION)"),
)


def shape(msg: str) -> str:
    for rx, repl in SAME_PLACE:
        msg = re.sub(rx, repl, msg)
    msg = re.sub(r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?\b", "BDF", msg)
    msg = re.sub(r"\b[0-9a-f]{4}:[0-9a-f]{4}\b", "VID:DID", msg)
    msg = re.sub(r"\b0x[0-9a-f]+\b", "0xH", msg)
    msg = re.sub(r"\b[0-9a-f]{8}\b", "W", msg)
    return re.sub(r"\d+", "N", msg)


REAL_SHAPES = {shape(m) for lines in REAL.values() for m in lines}

_PREFIX = (re.compile(r"^\S+ \S+ kernel: (?:\[\s*\d+\.\d+\] )?"),
           re.compile(r"^\[\w{3} \w{3} [ \d]\d [\d:]{8} \d{4}\] "),
           re.compile(r"^\w{3} [ \d]\d [\d:]{8} \S+ kernel: \[\s*\d+\.\d+\] "))


def messages(root: Path) -> list[str]:
    out = []
    for p in sorted(root.glob("node*/*")):
        data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
        for line in data.decode().splitlines():
            for rx in _PREFIX:
                m = rx.match(line)
                if m:
                    out.append(line[m.end():])
                    break
            else:
                raise AssertionError(f"no envelope: {line!r}")
    return out


def _truth(root: Path) -> list[dict[str, str]]:
    with open(root / "ground_truth.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("beyond")
    rates = base / "rates.toml"
    rates.write_text(BEYOND_RATES)
    sim.simulate(base / "logs", seed=1, rates=rates)
    return base / "logs"


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
            h.update(str(int(p.stat().st_mtime)).encode())
    return h.hexdigest()


def test_default_fleet_is_unchanged_by_the_beyond_paper_table(tmp_path: Path) -> None:
    """The shipped rates name every [beyond_paper] kind with 0: the same files as without it."""
    rates = sim.load_rates()
    assert rates["beyond_paper"] == {k: 0 for k in sim.BEYOND_KINDS}
    without = {k: v for k, v in rates.items() if k != "beyond_paper"}
    for name, r in (("with", rates), ("without", without)):
        sim.simulate(tmp_path / name, nodes=40, days=4, seed=3, rates=r, start="2023-12-01")
    assert _digest(tmp_path / "with") == _digest(tmp_path / "without")
    with open(tmp_path / "with" / "ground_truth.csv") as f:
        assert f.readline().rstrip("\n").split(",") == list(sim.TRUTH_FIELDS)  # no extra columns


def test_truth_holds_the_rates(fleet: Path) -> None:
    truth = _truth(fleet)
    assert list(truth[0]) == [*sim.TRUTH_FIELDS, *sim.EXTRA_TRUTH_FIELDS]
    kinds = collections.Counter(r["kind"] for r in truth)
    audio = sum(1 for r in truth if r["kind"] == "pcie_aer_recovery" and r["device"].endswith(".1"))
    assert kinds == {"sxid": 12, "pcie_aer": 13, "pcie_aer_recovery": 3 + 4 * 3 + audio, "gpu_reset_required": 3,
                     "cpu_ecc": 6, "xid": 5 + 3 + 6 + 4}
    sx = collections.Counter((r["severity"], r["category"]) for r in truth if r["kind"] == "sxid")
    assert sx == {("non_fatal", "non_fatal"): 5 + 3, ("fatal", "fatal"): 4}
    aer = collections.Counter((r["severity"], r["category"], r["first_error"])
                              for r in truth if r["kind"] == "pcie_aer")
    assert aer == {("corrected", "corrected", ""): 6, ("non_fatal", "non_fatal", "UnsupReq"): 3,
                   ("fatal", "gpu_lost_precursor", "CmpltTO"): 4}
    rec = collections.Counter(r["category"] for r in truth if r["kind"] == "pcie_aer_recovery")
    # each nvidia "can't recover" follows its fatal record: its category is its outcome (the
    # record is the precursor), as the audio function's
    assert rec == {"recovered": 3, "link_reset": 4, "recovery_failed": 4, "no_error_detected_callback": 4 + audio}
    actions = [r["action"] for r in truth if r["xid"] == "154"]
    assert len(actions) == 6 and set(actions) <= {"none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset"}
    assert all(r["action"] == "gpu_reset" for r in truth if r["kind"] == "gpu_reset_required")
    assert {r["switch"] for r in truth if r["kind"] == "sxid"} <= {f"nvidia-nvswitch{i}" for i in range(4)}
    assert {r["table_source"] for r in truth if r["kind"] not in ("xid",)} == {"beyond"}


def test_lines_have_the_real_shapes(fleet: Path) -> None:
    msgs = messages(fleet)
    new = [m for m in msgs if re.search(r"SXid|AER|PCIe Bus Error|\] \w+ +\(First\)|^\S+ \S+:    \[|NV_ERR_RESET|"
                                        r": 154, |\[Hardware Error\]: (?!.*APEI|.*\}|\{)|Cannot decode", m)
           and not m.startswith("{")]
    shapes = collections.Counter(shape(m) for m in new)
    # the corrected and non-fatal AER records have no real case here: their shapes are the
    # kernel's format strings (drivers/pci/pcie/aer.c), written out
    by_format = {
        "pcieport BDF: AER: Corrected error received: BDF",
        "pcieport BDF: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "pcieport BDF:    [ N] RxErr                 ",
        "pcieport BDF:   device [VID:DID] error status/mask=W/W",
        "pcieport BDF: AER: Uncorrected (Non-Fatal) error received: BDF",
        "mlx5_core BDF: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
        "mlx5_core BDF:   device [VID:DID] error status/mask=W/W",
        "mlx5_core BDF:    [N] UnsupReq               (First)",
        "mlx5_core BDF: AER:   TLP Header: W W W W",
        "pcieport BDF: AER: device recovery successful",
    }
    unknown = set(shapes) - REAL_SHAPES - {shape(m) for m in by_format}
    assert not unknown, unknown
    assert len(set(shapes) & REAL_SHAPES) >= 15


def test_ghes_records_are_whole_and_tagged(fleet: Path) -> None:
    msgs = messages(fleet)
    tags = collections.Counter(m.split("}")[0] for m in msgs if m.startswith("{"))
    assert sum(tags.values()) == 3 * 11 and all(n % 11 == 0 for n in tags.values())  # 11 lines a record
    edac = [m for m in msgs if "on unknown memory" in m]
    addrs = [m for m in msgs if "physical_address:" in m]
    assert len(edac) == len(addrs) == 3
    for e in edac:  # the EDAC page/offset is the CPER physical address
        page, off = (int(x, 16) for x in re.search(r"page:0x([0-9a-f]+) offset:0x([0-9a-f]+)", e).groups())
        assert any(int(a.split("0x")[-1], 16) == (page << 12) | off for a in addrs)


def test_chained_groups_lead_their_xid(fleet: Path) -> None:
    truth = _truth(fleet)
    by_id = collections.defaultdict(list)
    for r in truth:
        by_id[r["fault_id"]].append(r)
    pairs = collections.Counter()
    for r in truth:
        if not r["after_fault_id"]:
            continue
        head = by_id[r["after_fault_id"]]
        first = dt.datetime.fromisoformat(head[0]["time"])
        last = max(dt.datetime.fromisoformat(h["time"]) for h in head)
        lead = dt.datetime.fromisoformat(r["time"]) - last
        assert head[0]["host"] == r["host"] and dt.timedelta(milliseconds=4) < lead < dt.timedelta(seconds=1.2)
        assert dt.datetime.fromisoformat(r["time"]) - first < dt.timedelta(seconds=60)
        pairs[(head[0]["kind"], head[0]["category"], r["xid"])] += 1
        if head[0]["kind"] == "pcie_aer":  # the AER's GPU is the Xid's GPU
            gpu = next(h["device"] for h in head if h["kind"] == "pcie_aer_recovery"
                       and h["category"] == "no_error_detected_callback" and h["device"].endswith(".0"))
            assert gpu == r["device"]
    assert pairs == {("pcie_aer", "gpu_lost_precursor", "79"): 2, ("sxid", "fatal", "74"): 2}


@pytest.mark.parametrize("kind", sim.BEYOND_KINDS)
def test_a_chained_xid_comes_after_all_of_its_heads_lines(kind: str) -> None:
    """Any kind beyond the paper may lead a chain: the Xid is printed BEYOND_SPAN_US + 5-60 ms
    after the head's first line, so every line of the head must be within BEYOND_SPAN_US of it
    (an SXid's Severity line 5.1 ms on, an AER record's "device recovery failed" 1.05 s on)."""
    import random
    for seed in range(40):
        fault = sim._Fault(10 * sim.US, kind, None, "beyond")
        sim._beyond_group(fault, random.Random(seed), {}, 8)
        assert max(t for t, _ in fault.lines) - fault.t <= sim.BEYOND_SPAN_US[kind]


def test_no_xid_between_an_sxids_lines(fleet: Path) -> None:
    """In the files, each SXid error's Data .. Severity lines come with no Xid line among them
    (the chained Xid 74s come after their SXid's last line, as the driver prints them)."""
    last_data: dict[str, int] = {}
    last_xid = -1
    checked = 0
    for i, m in enumerate(messages(fleet)):
        if m.startswith("NVRM: Xid "):
            last_xid = i
        head = re.match(r"(nvidia-nvswitch\d+: SXid \(PCI:[^)]+\): \d+), (Data|Severity)", m)
        if head and head.group(2) == "Data":
            last_data[head.group(1)] = i
        elif head:
            assert last_xid < last_data[head.group(1)], m
            checked += 1
    assert checked == 5 + 4  # the errors printed with their Severity line: sxid_non_fatal, sxid_fatal


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("sxid_fatal = 4", "sxid_fatal = 4\nsxid_fatl = 1"), "sxid_fatl"),
    (lambda t: t.replace("ghes_memory = 3", "ghes_memory = -1"), "not a whole number"),
    (lambda t: t.replace('"sxid_fatal>74" = 2', '"sxid_fatal>74" = 9'), "there are 4 sxid_fatal"),
    (lambda t: t.replace('"sxid_fatal>74" = 2', '"sxid_fatl>74" = 1'), "is not"),
])
def test_bad_beyond_rates_are_refused(tmp_path: Path, edit, message: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(edit(BEYOND_RATES))
    with pytest.raises(ValueError, match=message):
        sim.simulate(tmp_path / "logs", rates=p)


def test_same_seed_same_files(tmp_path: Path) -> None:
    p = tmp_path / "r.toml"
    p.write_text(BEYOND_RATES)
    for name in ("a", "b"):
        sim.simulate(tmp_path / name, seed=4, rates=p, days=12)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
