"""What the agent loads and keeps: the modules of ``python -m nodewarden agent`` (its import path
and a running agent, each in a fresh interpreter so that other tests' imports hide nothing),
the command line's lazily declared ``validate`` options, and the kernel-log parser of the
follower, which remembers no record to tell a re-print through another envelope.

Every module loaded costs resident memory for the agent's lifetime (code objects, classes,
and for C extensions their libraries). :data:`NOT_LOADED` lists what the agent never needs,
with why; what it measured in a fresh CPython 3.11 interpreter (``VmRSS`` after
``import nodewarden.agent.daemon`` behind the ``agent`` command line) is in the comments.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import events as ev
from nodewarden.parsing.envelope import TimeContext, parse_kmsg_record
from nodewarden.parsing.stream import KernelLogParser
from tests import nvmlsim

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"

# Modules the agent never loads, by package name (a module or any module below it).
NOT_LOADED = {
    # The optional extras: [validate] (torch, numpy, rich), [analysis] (pandas, pyarrow,
    # matplotlib, tabulate, hyperscan), [dask]. The agent runs the validator as a child process.
    "torch": "[validate] extra", "numpy": "[validate] extra", "rich": "[validate] extra",
    "pandas": "[analysis] extra", "pyarrow": "[analysis] extra", "matplotlib": "[analysis] extra",
    "tabulate": "[analysis] extra", "hyperscan": "[analysis] extra", "dask": "[dask] extra",
    "distributed": "[dask] extra",
    # The validator runs in `python -m nodewarden validate`, a child of the agent's scheduler;
    # the agent reads its report file only. Its options were declared with every command line
    # and loaded it with its checks, profiles, multiprocessing and ctypes: 3.2 MB.
    "nodewarden.validator": "the validator runs in a child process",
    # Offline log reading and statistics (`events`, `analyze`): worker processes, the cache.
    "nodewarden.analysis": "offline analysis", "nodewarden.logfiles": "offline log reading",
    "nodewarden.workers": "offline worker processes", "nodewarden.parsing.scan": "offline log reading",
    "nodewarden.parsing.dedupe": "offline log reading",
    "multiprocessing": "no worker process", "concurrent.futures.process": "no worker process",
    "pickle": "nothing is sent to another process",
    "decimal": "validator arithmetic", "fractions": "validator arithmetic", "statistics": "validator arithmetic",
    # Named time zones are for log files printed in local time; /dev/kmsg stamps are kernel time.
    "zoneinfo": "kernel time only (TimeContext.make imports it for a named zone)",
    # Only with --web.config.file (YAML) and its bcrypt password hashes.
    "yaml": "web config file only", "bcrypt": "web config file only",
    # The exposition bytes are written by nodewarden.agent.textformat (prometheus_client's bytes,
    # compared in tests): importing the library runs its HTTP server, WSGI and push modules,
    # which load http.server, urllib.request, wsgiref and ssl (2.5 MB without ssl's share).
    "prometheus_client": "textformat writes its bytes", "http.server": "asyncio + h11 serve",
    "http.client": "no HTTP client", "urllib.request": "no HTTP client", "wsgiref": "no WSGI",
    "email": "no MIME", "socketserver": "asyncio + h11 serve", "mimetypes": "one content type",
    # OpenSSL (libssl, libcrypto: 4.5 MB): TLS only when the web config file asks for it
    # (asyncio imported without ssl otherwise, nodewarden.agent.daemon.import_server), SHA-256
    # from CPython's built-in implementation (nodewarden.digests; hashlib loads libcrypto).
    "ssl": "TLS only with a web config file that asks for it", "_ssl": "TLS only",
    "_hashlib": "nodewarden.digests", "hashlib": "nodewarden.digests",
    # NVML through nodewarden.nvmllib (its ~30 calls); pynvml builds its whole API: 1.9 MB.
    "pynvml": "nodewarden.nvmllib",
}
# orjson renders an event's JSON line, loaded by the first one (a quiet node renders none).
NOT_LOADED_AT_START = {**NOT_LOADED, "orjson": "loaded by the first event's journal line"}


def loaded(modules: list[str], names: dict[str, str]) -> list[str]:
    """The modules of ``modules`` that are, or are below, a name of ``names``."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def child_modules(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> list[str]:
    """``sys.modules`` of a fresh interpreter that ran ``code`` (which prints them as JSON last).
    Not measured by coverage (``tests/run.sh --cov``): its tracer would load modules of its own."""
    env = {k: v for k, v in (os.environ if env is None else env).items()
           if k not in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")}
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                       env=env, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


IMPORT_PATH = """
import json, sys
from nodewarden.cli import build_parser
args = build_parser().parse_args(["agent", "--config", "agent.toml", "--no-validator"])
assert args.func.__name__ == "cmd_agent"
import nodewarden.agent.daemon
print(json.dumps(sorted(sys.modules)))
"""


def test_the_agent_import_path_loads_nothing_it_does_not_need() -> None:
    mods = child_modules(IMPORT_PATH)
    assert "nodewarden.agent.daemon" in mods and "nodewarden.collectors.pcie" in mods
    assert loaded(mods, NOT_LOADED_AT_START) == []


# A running agent: `nodewarden.cli.main(["agent", ...])` in the main thread as `python -m
# nodewarden` runs it; a thread waits for the first poll on /metrics (plain sockets: no HTTP
# client module of its own), records sys.modules and stops the agent with SIGTERM.
RUNNING = r"""
import json, os, signal, socket, sys, threading, time
port, out = int(sys.argv[1]), sys.argv[2]

def metrics():
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk

def watch():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            body = metrics()
            if b"nodewarden_ib_port_state{" in body and b"nodewarden_gpu_info{" in body:
                break
        except OSError:
            pass
        time.sleep(0.1)
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
from nodewarden.cli import main
rc = main(sys.argv[3:])
with open(out) as f:
    print(f.read())
sys.exit(rc)
"""


def test_a_running_agent_loads_nothing_it_does_not_need(tmp_path: Path) -> None:
    """After its first poll of NVML (the simulator) and the sysfs fixture, following a kernel
    log (a FIFO: nothing written into this machine's /dev/kmsg), validator off."""
    libdir = nvmlsim.build(tmp_path)
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus=nvmlsim.default_gpus(2))
    kmsg = tmp_path / "kmsg"
    os.mkfifo(kmsg)
    writer = os.open(kmsg, os.O_RDWR | os.O_NONBLOCK)  # held open: the agent never reads an end of file
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        (tmp_path / "proc").mkdir()
        config = tmp_path / "agent.toml"
        config.write_text(f'listen = "127.0.0.1:{port}"\nstate_dir = "{tmp_path / "state"}"\n'
                          f'hostname = "test-node"\nsysfs = "{FIXTURE}"\nprocfs = "{tmp_path / "proc"}"\n'
                          'poll_interval_seconds = 10\nlog_level = "warning"\n[validator]\nenabled = false\n')
        env = nvmlsim.env(libdir, state)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        mods = child_modules(RUNNING, str(port), str(tmp_path / "modules.json"), "agent", "--config", str(config),
                             "--kmsg", str(kmsg), env=env)
    finally:
        os.close(writer)
    assert {"nodewarden.agent.daemon", "nodewarden.collectors.nvml", "nodewarden.nvmllib"} <= set(mods)
    assert loaded(mods, NOT_LOADED_AT_START) == []


def test_validate_options_are_declared_when_validate_is_parsed() -> None:
    """The command line loads the validator for `validate` only; its options and help are
    those of nodewarden.validator.main.add_arguments."""
    code = """
import json, sys
from nodewarden.cli import build_parser
p = build_parser()
before = "nodewarden.validator.main" in sys.modules
args = p.parse_args(["validate", "--checks", "links", "--tolerance", "0.2", "--no-progress"])
print(json.dumps([before, "nodewarden.validator.main" in sys.modules, args.checks, args.tolerance,
                  args.device, args.func.__name__]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(r.stdout) == [False, True, "links", 0.2, "auto", "cmd_validate"]
    r = subprocess.run([sys.executable, "-m", "nodewarden", "validate", "--help"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0 and "--checks CHECKS" in r.stdout and "--storage-path" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "nodewarden", "validate", "--tolerance", "2"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2 and "argument --tolerance: not a fraction from 0 to below 1: '2'" in r.stderr, r.stderr


XID48 = ("NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
         "error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860.")
AER = ("pcieport 0000:00:01.0: AER: Corrected error message received from 0000:07:00.0",
       "nvidia 0000:07:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
       "nvidia 0000:07:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
       "nvidia 0000:07:00.0:    [ 0] RxErr                  (First)")


def kmsg_records(n: int) -> list[str]:
    """``n`` rounds of an Xid 48 line and a PCIe AER record (4 lines), as /dev/kmsg hands them out."""
    out = []
    seq = 0
    for i in range(n):
        for msg in (XID48, *AER):
            out.append(f"3,{seq},{(i * 5 + seq) * 1000 + 1_000_000},-;{msg}\n")
            seq += 1
    return out


def feed_all(parser: KernelLogParser, records: list[str]) -> list[dict]:
    ctx = TimeContext.make()
    events: list[ev.FaultEvent] = []
    for text in records:
        rec = parse_kmsg_record(text, ctx, boot_id="b")
        assert rec is not None
        events.extend(parser.feed(rec))
    events.extend(parser.flush())
    return [e.to_dict() for e in events]


def test_the_followers_parser_remembers_no_record_and_gives_the_same_events() -> None:
    records = kmsg_records(300)
    remembering = KernelLogParser(host="n", source="kmsg")
    single = KernelLogParser(host="n", source="kmsg", single_envelope=True)
    want = feed_all(remembering, records)
    got = feed_all(single, records)
    assert got == want
    assert [e["kind"] for e in got].count("xid") == 300 and [e["kind"] for e in got].count("pcie_aer") == 300
    assert len(remembering._envelopes) == 1500  # one key per kernel record with a fault trigger
    assert single._envelopes == {}
    assert single.stats.duplicates_suppressed == remembering.stats.duplicates_suppressed == 0


def test_the_follower_builds_a_single_envelope_parser(tmp_path: Path) -> None:
    from nodewarden.agent import state as st
    from nodewarden.agent.exporter import Counters
    from nodewarden.agent.follower import KmsgFollower

    from nodewarden.kmsg import KmsgReader

    f = KmsgFollower(KmsgReader(str(tmp_path / "kmsg"), str(tmp_path / "boot_id")), Counters(), st.StateStore(tmp_path), host="n", gpu_of=lambda pci: None,
                     boot_time=None, position=None, journaled=frozenset())
    assert f.parser.single_envelope is True and f.parser.source == "kmsg"


def test_event_json_is_the_same_with_orjson_loaded_at_first_use() -> None:
    """FaultEvent.to_json imports orjson on its first call (when installed): the line is the
    standard library's compact JSON either way."""
    e = ev.FaultEvent(kind=ev.XID, message="NVRM: Xid 48 \u00e9", raw="NVRM: Xid 48 \u00e9", host="n",
                      source="kmsg", code=48, attrs={"seq": 7})
    line = e.to_json()
    assert json.loads(line) == e.to_dict()
    assert line == json.dumps(e.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)
    code = ("import sys; from nodewarden import events as ev; a = 'orjson' in sys.modules; "
            "ev.FaultEvent(kind=ev.XID, message='m', raw='m').to_json(); "
            "print(a, 'orjson' in sys.modules, ev._orjson_module() is not None)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    try:
        import orjson  # noqa: F401
        have = True
    except ImportError:
        have = False
    assert r.stdout.split() == ["False", str(have), str(have)]


@pytest.mark.parametrize("tz", ["UTC", "utc", "Europe/Berlin"])
def test_time_context_of_a_named_zone_imports_zoneinfo_at_use(tz: str) -> None:
    import datetime as dt
    import zoneinfo

    if tz == "Europe/Berlin" and tz not in zoneinfo.available_timezones():
        envneeds.need("tzdata", "the IANA time zone database (Europe/Berlin)")
    ctx = TimeContext.make(tz)
    assert ctx.tz == (dt.timezone.utc if tz.upper() == "UTC" else zoneinfo.ZoneInfo(tz))
    with pytest.raises(zoneinfo.ZoneInfoNotFoundError):
        TimeContext.make("No/Such_Zone")
