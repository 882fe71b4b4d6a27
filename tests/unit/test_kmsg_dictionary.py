"""``/dev/kmsg`` records with dictionary lines (Documentation/ABI/testing/dev-kmsg): a record
printed through ``dev_printk()`` (``dev_info``, ``netdev_info``, ``mlx5_core_*``, ``pci_*``)
is handed out by one ``read()`` as ``prio,seq,usec,flags;message\\n`` followed by
`` SUBSYSTEM=<bus>\\n`` and `` DEVICE=<id>\\n`` lines (one blank first). The dictionary belongs
to the record: it is neither part of the message nor a record or an unparsed line of its own.

VIRTIO_PROMISC is recorded from a real kernel (6.18, ``ip link set eth0 promisc on``/``off`` on
a virtio NIC: ``netdev_info()`` on a device with a parent). The mlx5 and AER records are the
same form with the SUBSYSTEM/DEVICE pairs ``dev_printk()`` gives a PCI device
(``DEVICE=+pci:<bdf>``, drivers/base/core.c dev_printk_emit/create_syslog_header).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from nodewarden import kmsg
from nodewarden.agent import exporter as ex
from nodewarden.agent import state as st
from nodewarden.agent.exporter import Counters
from nodewarden.agent.follower import KmsgFollower, record_head
from nodewarden.logfiles.paths import LogFile
from nodewarden.logfiles.read import read_file
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser
from test_poller import Records  # tests/unit is on the path, as for test_real_cases

BOOT = "42bbb864-594f-407a-ba94-6e4d111f7732"
BOOT_TIME = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc)

VIRTIO_PROMISC = [
    b"6,2262473,48493657771,-;virtio_net virtio2 eth0: entered promiscuous mode\n"
    b" SUBSYSTEM=virtio\n DEVICE=+virtio:virtio2\n",
    b"6,2262474,48493659767,-;virtio_net virtio2 eth0: left promiscuous mode\n"
    b" SUBSYSTEM=virtio\n DEVICE=+virtio:virtio2\n",
]
MLX5_DOWN = (b"6,2262475,48500000000,-;mlx5_core 0000:3b:00.0 mlx5_0: Port: 1 Link DOWN\n"
             b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")
AER = (b"3,2262476,48500000100,-;pcieport 0000:00:03.1: AER: Uncorrectable (Fatal) error message "
       b"received from 0000:3b:00.0\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:03.1\n")
XID = (b"4,2262477,48500000200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n")
RECORDS = [*VIRTIO_PROMISC, MLX5_DOWN, AER, XID]


def ctx() -> TimeContext:
    return TimeContext.make(boot_time=BOOT_TIME)


def test_dictionary_lines_become_properties_of_their_record() -> None:
    rec = parse_kmsg_record(MLX5_DOWN.decode(), ctx(), BOOT)
    assert rec is not None
    assert rec.message == "mlx5_core 0000:3b:00.0 mlx5_0: Port: 1 Link DOWN"
    assert rec.extra == {"flags": "-", "SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}
    assert rec.seq == 2262475 and rec.kernel and rec.level == "info"
    assert rec.time == BOOT_TIME + dt.timedelta(microseconds=48500000000)
    plain = parse_kmsg_record(XID.decode(), ctx(), BOOT)
    assert plain is not None and plain.extra == {"flags": "-"}
    assert record_head(MLX5_DOWN.decode()) == (2262475, 48500000000)


def test_the_reader_returns_a_record_with_its_dictionary_whole(tmp_path: Path) -> None:
    """One read() is one record, dictionary included (a file holding one record stands in for
    the device: its one read returns it all, the next none)."""
    dev = tmp_path / "kmsg"
    dev.write_bytes(MLX5_DOWN)
    (tmp_path / "boot_id").write_text(BOOT + "\n")
    with kmsg.KmsgReader(str(dev), str(tmp_path / "boot_id")) as r:
        got = r.read_available()
    assert got == [MLX5_DOWN.decode()]
    assert r.records == 1 and r.overruns == 0 and r.boot_id == BOOT
    parser = KernelLogParser(host="n1", source="kmsg", single_envelope=True)
    events = list(kmsg.kmsg_events(got, parser, ctx(), r.boot_id)) + parser.flush()
    assert [(e.kind, e.attrs["rdma_device"], e.attrs["seq"]) for e in events] == [("ib_link_down", "mlx5_0", 2262475)]
    assert "SUBSYSTEM" not in events[0].message and parser.stats.unparsed == 0


def test_the_agent_counts_dev_printk_records_once_and_no_dictionary_line_as_unparsed(tmp_path: Path) -> None:
    class Source(Records):  # the poller tests' /dev/kmsg stand-in, on this machine's boot
        boot_id = BOOT

    counters = Counters()
    f = KmsgFollower(Source([r.decode() for r in RECORDS]), counters, st.StateStore(tmp_path), host="n1",
                     gpu_of=lambda _p: "", boot_time=BOOT_TIME, position=None, clock=lambda: 1e6)
    f.catch_up()
    assert counters.get(ex.IB_LINK, ("mlx5_0", "1", "DOWN")) == 1
    assert counters.get(ex.XID, ("", "0000:3b:00.0", "79", "uncorrectable")) == 1
    assert counters.get(ex.AER_LOGGED, ("0000:3b:00.0", "fatal")) == 1  # the source, not the port of DEVICE=
    assert counters.get(ex.LOST) == 0  # seqs follow on: no gap
    journal = [json.loads(line) for p in tmp_path.glob("events-*.jsonl") for line in p.read_text().splitlines()]
    kinds = sorted(e["kind"] for e in journal)
    assert kinds == ["ib_link_down", "pcie_aer", "xid"]
    assert counters.get(ex.UNPARSED, ("kernel_log",)) == 0
    assert st.load_state(tmp_path).kmsg == st.KmsgPosition(BOOT, 2262477)


def test_a_raw_dump_with_dictionary_lines_reads_as_the_device_does(tmp_path: Path) -> None:
    """``cat /dev/kmsg > dump`` writes the dictionary lines under their record: read as a file,
    the same events, and no dictionary line counted as a record or an unparsed line."""
    dump = tmp_path / "kmsg.dump"
    dump.write_bytes(b"".join(RECORDS))
    events, parser = read_file(LogFile(dump, "n1"), boot_time=BOOT_TIME)
    assert sorted(e.kind for e in events) == ["ib_link_down", "pcie_aer", "xid"]
    down = next(e for e in events if e.kind == "ib_link_down")
    assert down.message == "mlx5_core 0000:3b:00.0 mlx5_0: Port: 1 Link DOWN"
    assert down.attrs["seq"] == 2262475 and down.time == BOOT_TIME + dt.timedelta(microseconds=48500000000)
    assert parser.stats.unparsed == 0
