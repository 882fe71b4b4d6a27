"""`nodewarden simulate`: the logs it writes parse back to exactly its ground truth."""

from __future__ import annotations

import collections
import csv
import datetime as dt
import gzip
import hashlib
import random
import re
from pathlib import Path

import pytest

from nodewarden.analysis import simulate as sim
from nodewarden.analysis.ingest import ingest
from nodewarden.cli import main

SMALL_RATES = """
[fleet]
nodes = 6
gpus_per_node = 8
ib_devices_per_node = 4
start = "2023-10-20"
end = "2023-11-18"
noise_per_node_day = 15
reboots_per_node_year = 40
rotation_days = 3
cpu_ecc_other_months = 0
formats = { syslog3164 = 1, rfc3339 = 1, journal = 1, dmesg_t = 1 }

[xid_year]
"13" = 7
"31" = 5
"43" = 6
"74" = 8
"63" = 5
"79" = 1
"119" = 1

[xid_monthly."2023-10"]
"63" = 2
"79" = 1

[xid_monthly."2023-11"]
"63" = 3

[cpu_ecc_monthly]
"2023-10" = 3
"2023-11" = 4

[ib_monthly]
"2023-10" = 9
"2023-11" = 5

[ib_month_source]
default = "VIII"
"2023-11" = "VII"

[ib_daily]
"2023-10-25" = 2
"2023-11-02" = 3
"""

XIDS = {13: 7, 31: 5, 43: 6, 74: 8, 63: 5, 79: 1, 119: 1}
CPU_BY_MONTH = {"2023-10": 3, "2023-11": 4}
IB_BY_MONTH = {"2023-10": 2, "2023-11": 5}  # October from Table "VIII" (per day), November "VII"


@pytest.fixture(scope="module")
def rates_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("rates") / "small.toml"
    p.write_text(SMALL_RATES)
    return p


@pytest.fixture(scope="module", params=[1, 2])
def fleet(request: pytest.FixtureRequest, rates_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(f"fleet{request.param}")
    sim.simulate(out, seed=request.param, rates=rates_file)
    return out


def _truth(root: Path) -> list[dict[str, str]]:
    with open(root / "ground_truth.csv") as f:
        return list(csv.DictReader(f))


def _sec(iso: str) -> str:
    return iso[:19]


def _printed(row: dict[str, str], iso: str) -> str:
    """The truth time as a line of the row's format shows it (rfc3339 keeps microseconds)."""
    return iso[:26] if row["line_format"] == "rfc3339" else _sec(iso)


def _event_time(e) -> str:
    t = e.time.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "")


def test_truth_holds_the_rates_exactly(fleet: Path) -> None:
    truth = _truth(fleet)
    assert collections.Counter(int(r["xid"]) for r in truth if r["kind"] == "xid") == XIDS
    assert collections.Counter(r["time"][:7] for r in truth if r["kind"] == "cpu_ecc") == CPU_BY_MONTH
    cuts = [r for r in truth if r["kind"] == "ib_flash_cut"]
    assert collections.Counter(r["time"][:7] for r in cuts) == IB_BY_MONTH
    assert {r["time"][:7]: r["table_source"] for r in cuts} == {"2023-10": "VIII", "2023-11": "VII"}
    assert sorted(r["time"][:10] for r in cuts if r["table_source"] == "VIII") == ["2023-10-25", "2023-10-25"]
    for r in cuts:
        down = dt.datetime.fromisoformat(r["down_time"])
        up = dt.datetime.fromisoformat(r["up_time"])
        assert 1 <= (up - down).total_seconds() <= 30
    # Xid 13 prints bursts: several lines (rows) share a fault id, and the count is of lines.
    per_fault = collections.Counter(r["fault_id"] for r in truth if r["xid"] == "13")
    assert sum(per_fault.values()) == 7 and max(per_fault.values()) <= 3


def test_ingest_returns_exactly_the_ground_truth(fleet: Path) -> None:
    truth = _truth(fleet)
    events, stats = ingest([str(fleet)])
    events = list(events)
    assert not stats.errors and stats.copies_dropped == 0
    got = collections.Counter()
    for e in events:
        if e.kind == "xid":
            got[("xid", e.host, e.code, e.device, _event_time(e))] += 1
        elif e.kind == "cpu_ecc":
            got[("cpu_ecc", e.host, None, e.device, _event_time(e))] += 1
        elif e.kind in ("ib_link_down", "ib_link_up"):
            got[(e.kind, e.host, None, e.device, _event_time(e))] += 1
    want = collections.Counter()
    for r in truth:
        if r["kind"] == "xid":
            want[("xid", r["host"], int(r["xid"]), r["device"], _printed(r, r["time"]))] += 1
        elif r["kind"] == "cpu_ecc":
            want[("cpu_ecc", r["host"], None, r["device"], _printed(r, r["time"]))] += 1
        else:
            want[("ib_link_down", r["host"], None, r["device"], _printed(r, r["down_time"]))] += 1
            want[("ib_link_up", r["host"], None, r["device"], _printed(r, r["up_time"]))] += 1
    strip = lambda c: collections.Counter({(k[0], k[1], k[2], k[3], k[4].rstrip("0").rstrip(".")): v for k, v in c.items()})
    assert strip(got) == strip(want)
    # The summary counts the way an analysis would: per Xid code, CPU ECC per month, IB per port.
    assert collections.Counter(e.code for e in events if e.kind == "xid") == XIDS
    assert collections.Counter(e.time.strftime("%Y-%m") for e in events if e.kind == "cpu_ecc") == CPU_BY_MONTH
    downs = collections.Counter(e.device for e in events if e.kind == "ib_link_down")
    ups = collections.Counter(e.device for e in events if e.kind == "ib_link_up")
    assert downs == ups == collections.Counter(r["device"] for r in truth if r["kind"] == "ib_flash_cut")


_LAST_TIME = (
    (re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(?:\+00:00|\+0000) "), None),
    (re.compile(r"^\[\w{3} (\w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\] "), "%b %d %H:%M:%S %Y"),
    (re.compile(r"^(\w{3} [ \d]\d \d\d:\d\d:\d\d) "), "3164"),
)


def _line_time(line: str, mtime: float) -> dt.datetime:
    for rx, fmt in _LAST_TIME:
        m = rx.match(line)
        if not m:
            continue
        text = m.group(1)
        if fmt is None:
            return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
        if fmt == "3164":
            year = dt.datetime.fromtimestamp(mtime, dt.timezone.utc).year
            return dt.datetime.strptime(f"{year} {' '.join(text.split())}", "%Y %b %d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
        return dt.datetime.strptime(" ".join(text.split()), "%b %d %H:%M:%S %Y").replace(tzinfo=dt.timezone.utc)
    raise AssertionError(f"no time in {line!r}")


def test_rotation_gzip_and_mtimes(fleet: Path) -> None:
    hosts = [d for d in fleet.iterdir() if d.is_dir()]
    assert len(hosts) == 6
    seen_formats = set()
    for hdir in hosts:
        names = sorted(p.name for p in hdir.iterdir())
        base = names[0].split(".")[0] + ".log"
        assert base in names and f"{base}.1" in names and f"{base}.2.gz" in names, names
        assert not any(n.endswith(".1.gz") or (n.count(".") > 2 and not n.endswith(".gz")) for n in names)
        for p in hdir.iterdir():
            data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
            last = data.decode().rstrip("\n").rsplit("\n", 1)[-1]
            mtime = p.stat().st_mtime
            assert _line_time(last, mtime).timestamp() == pytest.approx(mtime, abs=1e-6), (p, last)
        seen_formats.add(base)
    assert {"kern.log", "journal.log"} <= seen_formats or len(seen_formats) >= 2
    lines = "".join(p.read_text() for h in hosts for p in h.iterdir() if not p.name.endswith(".gz"))
    assert "Linux version" in lines  # reboots print the banner


def test_noise_alone_gives_no_fault_events(rates_file: Path, tmp_path: Path) -> None:
    text = rates_file.read_text()
    empty = re.sub(r'^"[\d-]+" = \d+$', lambda m: m.group(0).rsplit("=", 1)[0] + "= 0", text, flags=re.M)
    p = tmp_path / "none.toml"
    p.write_text(empty)
    sim.simulate(tmp_path / "logs", seed=3, rates=p, noise_per_node_day=60)
    events, stats = ingest([str(tmp_path / "logs")])
    kinds = collections.Counter(e.kind for e in events)
    assert stats.records > 0 and not stats.errors
    assert not {"xid", "cpu_ecc", "mce", "ib_link_down", "ib_link_up"} & set(kinds), kinds


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
            h.update(str(int(p.stat().st_mtime)).encode())
    return h.hexdigest()


def test_same_seed_same_files(rates_file: Path, tmp_path: Path) -> None:
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        sim.simulate(tmp_path / name, seed=seed, rates=rates_file, days=10)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_cli_window_cuts_the_schedule(rates_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--nodes", "3", "--days", "12", "--out", str(tmp_path / "w"), "--seed", "1",
               "--rates", str(rates_file), "--start", "2023-10-20"])
    assert rc == 0
    assert '"nodes": 3' in capsys.readouterr().out
    truth = _truth(tmp_path / "w")
    assert truth and all("2023-10-20" <= r["time"][:10] < "2023-11-01" for r in truth)
    assert {r["host"] for r in truth} <= {"node0001", "node0002", "node0003"}
    # Only Table "VIII" days inside the window: the two cuts of 2023-10-25, for 6 nodes; 3 nodes get half.
    assert [r["time"][:10] for r in truth if r["kind"] == "ib_flash_cut"] == ["2023-10-25"]
    assert main(["simulate", "--out", str(tmp_path / "x"), "--rates", str(tmp_path / "missing.toml")]) == 2


def test_default_rates_follow_the_paper() -> None:
    """The shipped schedule (drawn, not written) holds Tables VI, VII and VIII exactly."""
    rates = sim.load_rates()
    faults, a, b = sim._schedule(rates, random.Random(0))
    assert (b - a) // sim.DAY_US == 348
    xids = collections.Counter()
    for f in faults:
        if f.kind == "xid":
            xids[f.xid] += f.burst
    assert sum(xids.values()) == 12970
    assert xids[74] == 5521 and xids[43] == 4342 and xids[13] == 45 and xids[119] == 1

    def month(f) -> str:
        return dt.datetime.fromtimestamp(f.t // sim.US, dt.timezone.utc).strftime("%Y-%m")

    cpu = collections.Counter(month(f) for f in faults if f.kind == "cpu_ecc")
    assert cpu == {"2023-10": 4, "2023-11": 14, "2023-12": 8, "2024-01": 11, "2024-02": 8, "2024-03": 9}
    x63 = collections.Counter(month(f) for f in faults if f.xid == 63)
    assert [x63[m] for m in ("2023-10", "2023-11", "2023-12", "2024-01", "2024-02", "2024-03")] == [21, 22, 21, 16, 18, 22]
    ib = collections.Counter(month(f) for f in faults if f.kind == "ib_flash_cut")
    assert sum(ib.values()) == 213
    assert ib["2023-10"] == 13  # Table VIII's October (Table VII says 29; the default keeps VIII)
    assert [ib[m] for m in ("2023-11", "2023-12", "2024-01", "2024-02", "2024-03")] == [8, 17, 9, 12, 14]
    assert {f.source for f in faults if f.kind == "ib_flash_cut"} == {"VIII"}
    # the default chains: each Xid 48 leads a 63 or a 64 on its GPU by 5-60 ms
    chains = sorted((f.xid, f.lead.xid, f.lead.t - f.t) for f in faults if f.lead is not None)
    assert [c[:2] for c in chains] == [(48, 63), (48, 64)]
    assert all(5_000 <= c[2] < 60_000 for c in chains)


@pytest.mark.parametrize("chains, message", [
    ('"63>74" = 1', "Xid 63 is pinned to months"),
    ('"13>74" = 99', "there are"),
    ('"48-63" = 1', "is not"),
])
def test_bad_chains_are_refused(rates_file: Path, tmp_path: Path, chains: str, message: str) -> None:
    p = tmp_path / "chains.toml"
    p.write_text(f"[chains]\n{chains}\n" + rates_file.read_text())
    with pytest.raises(ValueError, match=message):
        sim.simulate(tmp_path / "logs", rates=p)
    assert main(["simulate", "--out", str(tmp_path / "cli"), "--rates", str(p)]) == 2


@pytest.mark.parametrize("edit, message", [
    (lambda t: "[chains]\n\"48>48\" = 1\n" + t, "cannot lead itself"),
    (lambda t: t.replace("formats = { syslog3164 = 1, rfc3339 = 1, journal = 1, dmesg_t = 1 }", "formats = {}"),
     "formats must name"),
    (lambda t: t.replace("noise_per_node_day = 15", "noise_per_node_day = nan"), "noise_per_node_day"),
    (lambda t: t.replace("reboots_per_node_year = 40", "reboots_per_node_year = nan"), "reboots_per_node_year"),
    (lambda t: t.replace('[xid_monthly."2023-10"]', '[xid_monthly]\n"2023-09" = 5\n[xid_monthly."2023-10"]'),
     "must be a table of Xid counts"),
    (lambda t: "fleet = 5\n" + t.replace("[fleet]", "[fleet_old]"), r"\[fleet\] must be a table"),
    (lambda t: t.replace('"74" = 8', '"74" = -5'), "not a whole number"),
])
def test_bad_rates_are_refused(rates_file: Path, tmp_path: Path, edit, message: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(edit(rates_file.read_text()))
    with pytest.raises(ValueError, match=message):
        sim.simulate(tmp_path / "logs", rates=p)
    assert not (tmp_path / "logs").exists()


def test_noise_nan_and_a_non_empty_directory_are_refused(rates_file: Path, tmp_path: Path) -> None:
    assert main(["simulate", "--out", str(tmp_path / "a"), "--rates", str(rates_file), "--noise", "nan"]) == 2
    assert main(["simulate", "--out", str(tmp_path / "b"), "--rates", str(rates_file), "--days", "3"]) == 0
    before = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert main(["simulate", "--out", str(tmp_path / "b"), "--rates", str(rates_file), "--days", "2"]) == 2
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == before
