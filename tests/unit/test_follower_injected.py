"""Only the kernel makes a fault: records that user space wrote into /dev/kmsg (facility not
``kern``) are counted apart by the agent's follower, never in the fault series nor the journal,
unless the agent is told to accept them (the end-to-end tests' switch)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent.exporter import Counters
from nodewarden.agent.follower import KmsgFollower

from test_poller import Records  # a /dev/kmsg stand-in

BOOT = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.timezone.utc)
XID = "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"
EDAC = ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2 slot:0 page:0x1 "
        "offset:0x0 grain:32 syndrome:0x0)")
IB = "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN"


def records(prio: int) -> list[str]:
    """The same three fault lines as raw kmsg records of syslog priority ``prio`` (facility*8+level)."""
    return [f"{prio},{seq},{1_000_000 + seq},-;{msg}\n" for seq, msg in enumerate((XID, EDAC, IB), start=1)]


def follow(tmp_path: Path, recs: list[str], accept: bool) -> tuple[KmsgFollower, Counters, list[dict]]:
    counters = Counters()
    f = KmsgFollower(Records(recs), counters, st.StateStore(tmp_path), host="n1", gpu_of=lambda _p: "",
                     boot_time=BOOT, position=None, clock=lambda: 100.0, accept_injected=accept)
    f.catch_up()
    journal = [json.loads(line) for p in sorted(tmp_path.glob("events-*.jsonl"))
               for line in p.read_text().splitlines() if line.strip()]
    return f, counters, journal


FAULTS = [(ex.XID, ("", "0000:07:00.0", "48", "uncorrectable")),
          (ex.EDAC_LOGGED, ("mc0", "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0", "uncorrected")),
          (ex.IB_LINK, ("mlx5_3", "1", "DOWN"))]


@pytest.mark.parametrize("prio", [8 + 3, 8 * 3 + 4, 8 * 16 + 3])  # user.err, daemon.warn, local0.err
def test_user_space_records_are_counted_apart_and_not_journaled(tmp_path: Path, prio: int) -> None:
    f, counters, journal = follow(tmp_path, records(prio), accept=False)
    assert [counters.get(fam, labels) for fam, labels in FAULTS] == [0, 0, 0]
    assert {k: counters.get(ex.INJECTED, (k,)) for k in ("xid", "cpu_ecc", "ib_link_down")} == \
        {"xid": 1, "cpu_ecc": 1, "ib_link_down": 1}
    assert journal == [] and f.events_counted == 0
    saved = {(c["name"], tuple(c["labels"].values())): c["value"] for c in st.load_state(tmp_path).counters}
    assert saved[(ex.INJECTED.name, ("xid",))] == 1  # persisted with the cursor


def test_kernel_records_count_as_faults(tmp_path: Path) -> None:
    f, counters, journal = follow(tmp_path, records(3), accept=False)  # kern.err
    assert [counters.get(fam, labels) for fam, labels in FAULTS] == [1, 1, 1]
    assert counters.get(ex.INJECTED, ("xid",)) == 0
    assert sorted(e["kind"] for e in journal) == ["cpu_ecc", "ib_link_down", "xid"]


def test_accept_injected_counts_user_records_as_faults_flagged(tmp_path: Path) -> None:
    f, counters, journal = follow(tmp_path, records(8 + 3), accept=True)
    assert [counters.get(fam, labels) for fam, labels in FAULTS] == [1, 1, 1]
    assert counters.get(ex.INJECTED, ("xid",)) == 0
    assert len(journal) == 3 and all(e["attrs"]["injected"] for e in journal)


def test_config_key_and_flag(tmp_path: Path) -> None:
    from nodewarden.agent import config as cf
    assert cf.AgentConfig().accept_injected is False
    p = tmp_path / "a.toml"
    p.write_text("[kernel_log]\naccept_injected = true\n")
    assert cf.load(p).accept_injected is True
    p.write_text("[kernel_log]\naccept_injected = 1\n")
    with pytest.raises(cf.ConfigError, match="kernel_log.accept_injected"):
        cf.load(p)


def test_a_record_head_with_absurd_numbers_is_no_crash(tmp_path: Path) -> None:
    """A 400-digit usec or a 5,000-digit seq in a kmsg record: the record is read without them,
    the follower goes on (it once raised OverflowError turning the usec into seconds)."""
    from nodewarden.agent.follower import record_head
    assert record_head("3,12,34,-;x") == (12, 34)
    assert record_head("3," + "9" * 5000 + "," + "9" * 400 + ",-;x") == (None, None)
    assert record_head("3,١٢,34,-;x") == (None, 34)  # Arabic-Indic digits are no kernel seq
    recs = ["3," + "9" * 20 + "," + "9" * 400 + f",-;{XID}\n", f"3,5,2000000,-;{XID}\n"]
    f, counters, journal = follow(tmp_path, recs, accept=False)
    assert counters.get(*FAULTS[0]) == 2 and len(journal) == 2 and f.seq == 5  # both Xids kept
