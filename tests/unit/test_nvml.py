"""The one NVML session (nodewarden.nvml): the clock-event-reason table against nvml.h's names,
the one call-with-timeout, the call wrapper's three outcomes, and every caller through it --
the collector, the validator's snapshot, profile auto-detection (``nodewarden validate --profile
auto`` on a hung driver) and the agent's GPU-busy probe -- against the NVML simulator
(tests/nvmlsim, loaded by nvidia-ml-py as the driver's libnvidia-ml.so.1 in a child process)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` run as a script does not put the checkout on sys.path
    sys.path.insert(0, str(ROOT))

from nodewarden import exitcodes, nvml  # noqa: E402
from nodewarden.collectors import nvml as collector  # noqa: E402
from nodewarden.collectors.base import Snapshot  # noqa: E402
from tests import nvmlsim  # noqa: E402

H100 = ROOT / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
GPU_BUSES = ("18", "2a", "3a", "5d", "9b", "ab", "ba", "db")  # the fixture tree's GPUs, NVML order


# ---- clock-event reasons: one table, nvml.h's names ---------------------------------------------

def test_clock_event_reason_table_is_nvml_h_s() -> None:
    """Every nvmlClocksEventReason<Name> bit of nvml.h (as NVIDIA's pynvml mirrors it) is in the
    table under <name> in snake case; the faults are the slowdowns."""
    pynvml = envneeds.module("pynvml", "nvidia-ml-py, the [test] extra")
    header = {}
    for const in dir(pynvml):
        m = re.fullmatch(r"nvmlClocksEventReason(\w+)", const)
        if m and m.group(1) not in ("All", "None", "UserDefinedClocks"):  # a mask, 0, an alias of 0x2
            header[getattr(pynvml, const)] = re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()
    assert {bit: r.name for bit, r in nvml.CLOCK_EVENT_REASONS.items()} == header
    assert [r.name for r in nvml.CLOCK_EVENT_REASONS.values() if r.fault] == [
        "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]


@pytest.mark.parametrize("mask, faults, info", [
    (0x0, [], []),
    (0x1 | 0x4, [], ["gpu_idle", "sw_power_cap"]),
    (0x8 | 0x40 | 0x80, ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"], []),
    (0x20, ["sw_thermal_slowdown"], []),  # the bit the report and /metrics used to name apart
    (0x100 | 0x2, [], ["applications_clocks_setting", "display_clock_setting"]),
    (0x1 | 0x600, [], ["gpu_idle", "0x600"]),  # bits a newer driver sets: kept, as one hex entry
])
def test_decode_clock_event_reasons(mask: int, faults: list[str], info: list[str]) -> None:
    assert nvml.decode_clock_event_reasons(mask) == (faults, info)


@pytest.mark.parametrize("bit", sorted(nvml.CLOCK_EVENT_REASONS))
def test_report_and_metrics_name_each_bit_alike(bit: int) -> None:
    """One bit set: the ``reason`` label at 1 on /metrics is the name the links check reports."""
    snap = Snapshot()
    collector.samples(collector.GpuReading(0, uuid="GPU-0", clocks_event_reasons=bit), snap)
    on = [dict(s.labels)["reason"] for s in snap.samples if s.name == "nodewarden_gpu_clocks_event_reasons" and s.value]
    faults, info = nvml.decode_clock_event_reasons(bit)
    assert on == faults + info == [nvml.CLOCK_EVENT_REASONS[bit].name]


# ---- the one timeout ------------------------------------------------------------------------------

def test_call_with_timeout_returns_the_value_or_the_error() -> None:
    assert nvml.call_with_timeout(lambda a, b: a + b, 5, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        nvml.call_with_timeout(lambda: 1 / 0, 5)
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="timeout_s"):
            nvml.call_with_timeout(lambda: None, bad)


def test_a_hung_call_times_out_and_no_thread_starts_while_it_hangs() -> None:
    release = threading.Event()
    calls: list[str] = []

    def hang() -> str:
        calls.append("hang")
        release.wait(30)
        return "late"

    t0 = time.monotonic()
    with pytest.raises(nvml.NvmlTimeout, match=r"^NVML did not answer within 0.3 s \(probe\)$") as e:
        nvml.call_with_timeout(hang, 0.3, what="probe")
    assert 0.29 <= time.monotonic() - t0 < 2 and e.value.blocked is None
    assert set(nvml.blocked_calls()) == {"probe"}
    try:
        t0 = time.monotonic()
        with pytest.raises(nvml.NvmlTimeout, match="probe has been blocked in the driver") as e:
            nvml.call_with_timeout(calls.append, 10, "second", what="snapshot")
        assert time.monotonic() - t0 < 0.1 and e.value.blocked == "probe"
        assert calls == ["hang"]  # the second call was never started
    finally:
        release.set()
    end = time.monotonic() + 5
    while nvml.blocked_calls() and time.monotonic() < end:
        time.sleep(0.01)
    assert nvml.blocked_calls() == {}  # forgotten once it returned
    assert nvml.call_with_timeout(lambda: "answers again", 1) == "answers again"


def test_calls_reuse_a_worker_thread_and_run_side_by_side_from_several_threads() -> None:
    """A poll every few seconds starts no thread each time: the same worker answers again; two
    callers at once each get a worker (a barrier both must reach), and at most MAX_IDLE_WORKERS
    workers stay waiting afterwards."""
    first = nvml.call_with_timeout(threading.get_ident, 5)
    assert all(nvml.call_with_timeout(threading.get_ident, 5) == first for _ in range(20))
    assert first != threading.get_ident()
    barrier = threading.Barrier(3, timeout=5)
    seen: list[int] = []

    def meet() -> int:
        barrier.wait()
        return threading.get_ident()

    callers = [threading.Thread(target=lambda: seen.append(nvml.call_with_timeout(meet, 5))) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(10)
    assert len(set(seen)) == 3  # three workers ran at once (a shared one would break the barrier)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        workers = [t for t in threading.enumerate() if t.name == "nvml worker"]
        if len(workers) <= nvml.MAX_IDLE_WORKERS:
            break
        time.sleep(0.01)
    assert len(workers) <= nvml.MAX_IDLE_WORKERS


# ---- the call wrapper ------------------------------------------------------------------------------

class _Binding:
    """A stand-in binding object (not pynvml): functions that answer with an nvmlReturn_t."""

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self, answers: dict[str, Any]) -> None:
        for fn, answer in answers.items():
            setattr(self, fn, self._fn(answer))

    def _fn(self, answer: Any) -> Any:
        def f(*args: Any) -> Any:
            if isinstance(answer, int) and not isinstance(answer, bool) and answer > 0:
                raise self.NVMLError(answer)
            return answer
        return f


@pytest.mark.parametrize("answer, want", [
    ("ok", "ok"),
    (nvml.NVML_ERROR_NOT_SUPPORTED, None),
    (nvml.NVML_ERROR_FUNCTION_NOT_FOUND, None),
    (nvml.NVML_ERROR_GPU_IS_LOST, nvml.GpuLost),
    (999, nvml.NvmlCallError),
    (4, nvml.NvmlCallError),  # NVML_ERROR_NO_PERMISSION
])
def test_call_wrapper(answer: Any, want: Any) -> None:
    s = nvml.Session(_Binding({"nvmlDeviceGetThing": answer}))
    if isinstance(want, type):
        with pytest.raises(want) as e:
            s.call("nvmlDeviceGetThing", object())
        assert e.value.call == "nvmlDeviceGetThing"
        if want is nvml.NvmlCallError:  # value(): an error is no reading, a lost GPU still raises
            assert e.value.ret == answer and s.value("nvmlDeviceGetThing", object()) is None
        else:
            with pytest.raises(nvml.GpuLost):
                s.value("nvmlDeviceGetThing", object())
    else:
        assert s.call("nvmlDeviceGetThing", object()) == want
        assert s.value("nvmlDeviceGetThing", object()) == want
    assert s.call("nvmlDeviceGetAbsent") is None  # a binding without the function


def test_a_lost_gpu_in_a_field_value_is_lost() -> None:
    """The call answers NVML_SUCCESS but the value's own nvmlReturn is NVML_ERROR_GPU_IS_LOST:
    lost, by the same rule as a call that answers it."""
    class Value:
        nvmlReturn = nvml.NVML_ERROR_GPU_IS_LOST
        valueType = 1

    s = nvml.Session(_Binding({"nvmlDeviceGetFieldValues": [Value()]}))
    with pytest.raises(nvml.GpuLost, match="nvmlDeviceGetFieldValues"):
        nvml.read_recovery_action(s, object())
    got = nvml.read_recovery_action(nvml.Session(_Binding({})), object())
    assert got == (None, nvml.NVML_ERROR_FUNCTION_NOT_FOUND) and nvml.driver_lacks_field(got.ret)
    assert [r for r in range(20) if nvml.driver_lacks_field(r)] == [2, 3, 13]


# ---- through the simulator --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nvmlsim.build(tmp_path_factory.mktemp("nvmlsim"))


def gpus_on_fixture(patches: dict[int, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Eight idle H100s on the buses of the h100-hgx-ndr fixture, GPU i changed by patches[i]."""
    gpus = [nvmlsim.h100_gpu(i, f"00000000:{b.upper()}:00.0") for i, b in enumerate(GPU_BUSES)]
    for i, patch in (patches or {}).items():
        gpus[i].update(patch)
    return gpus


def child(libdir: Path, state: Path | None, code: str, timeout: float = 120) -> Any:
    """Run ``code`` in a Python child that loads the simulator (``state``: its state file; None:
    none, a node without the driver); returns the JSON its last stdout line holds."""
    env = nvmlsim.env(libdir, state if state is not None else libdir / "absent.json")
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_init_without_a_driver_or_a_library_is_none_and_a_reason(libdir: Path, tmp_path: Path) -> None:
    code = "import json; from nodewarden import nvml; s, why = nvml.init(); print(json.dumps([s is None, why]))"
    assert child(libdir, None, code) == [True, "nvmlInit: NVML_ERROR_DRIVER_NOT_LOADED (Driver Not Loaded)"]
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture())
    assert child(libdir, state, code) == [False, ""]
    no_lib = nvmlsim.env(tmp_path, state)  # a directory without libnvidia-ml.so.1
    no_lib["LD_LIBRARY_PATH"] = str(tmp_path)
    no_lib["PYTHONPATH"] = str(ROOT)
    if any(Path(d, nvmlsim.LIBNAME).exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        pytest.skip("this machine has the NVIDIA driver's NVML")
    p = subprocess.run([sys.executable, "-c", code], env=no_lib, capture_output=True, text=True, timeout=60)
    got = json.loads(p.stdout)
    assert got[0] is True and got[1].startswith("nvmlInit: NVML_ERROR_LIBRARY_NOT_FOUND")


@pytest.mark.parametrize("ret", [18, 999])  # NVML_ERROR_LIB_RM_VERSION_MISMATCH, NVML_ERROR_UNKNOWN
def test_a_broken_driver_is_no_missing_driver(libdir: Path, tmp_path: Path, ret: int) -> None:
    """nvmlInit failing with anything but "no library"/"no driver" (an RM version mismatch after
    a driver upgrade without a reload): init raises, the NVML collector's poll fails (never an
    empty snapshot, as on a node without GPUs), the check's snapshot is a fault."""
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture(), init_error=ret)
    code = """import json
from nodewarden import nvml
from nodewarden.collectors.nvml import NvmlCollector
from nodewarden.validator.base import nvml_with_timeout
try:
    nvml.init(); raised = None
except nvml.NvmlCallError as e:
    raised = [e.call, e.ret]
try:
    NvmlCollector("n", timeout_s=30).collect(); polled = "ok"
except nvml.NvmlCallError as e:
    polled = str(e)
gpus, why, faulted = nvml_with_timeout(30)
print(json.dumps([raised, polled, gpus, why, faulted]))"""
    raised, polled, gpus, why, faulted = child(libdir, state, code)
    assert raised == ["nvmlInit", ret]
    assert polled.startswith("nvmlInit: ")
    assert gpus is None and faulted is True and why.startswith("NVML query failed: nvmlInit: ")


def test_a_gpu_without_a_handle_fails_the_links_check(libdir: Path, tmp_path: Path) -> None:
    """GPU 3 enumerates but its handle is refused (not lost): the driver is faulty; the check's
    nvlink part fails naming the call, it is not skipped."""
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture({3: {"not_supported": ["handle"]}}))
    code = """import json
from nodewarden.validator.base import nvml_with_timeout
print(json.dumps(nvml_with_timeout(30)))"""
    gpus, why, faulted = child(libdir, state, code)
    assert gpus is None and faulted is True and "nvmlDeviceGetHandleByIndex" in why


def test_the_check_and_the_metrics_read_the_same_gpu_state(libdir: Path, tmp_path: Path) -> None:
    """The validator's snapshot and the collector's poll, on the same simulated GPUs: the same
    NVLink states, clock-event masks and their names, and bus ids, on a current and an old
    driver (ThrottleReasons only)."""
    patches = {1: {"clocks_event_reasons": 0x48}, 2: {"nvlink_down": [5, 17]}, 5: {"clocks_event_reasons": 0x25},
               7: {"not_supported": ["nvlink"]}}
    code = r"""
import json
from nodewarden.collectors.nvml import NvmlCollector
from nodewarden.nvml import decode_clock_event_reasons
from nodewarden.validator.base import nvml_snapshot
gpus, why = nvml_snapshot(30)
snap = NvmlCollector("n", timeout_s=30).collect()
metrics = {}
for s in snap.samples:
    lab = dict(s.labels)
    m = metrics.setdefault(lab["gpu"], {"nvlink": {}, "reasons": []})
    if s.name == "nodewarden_gpu_nvlink_state":
        m["nvlink"][lab["link"]] = bool(s.value)
    elif s.name == "nodewarden_gpu_clocks_event_reasons" and s.value:
        m["reasons"].append(lab["reason"])
    elif s.name == "nodewarden_gpu_info":
        m["pci"] = lab["pci_bus_id"]
check = {str(g["index"]): {"nvlink": {str(k): v for k, v in g["nvlink"].items()},
                           "reasons": sorted(sum(decode_clock_event_reasons(g["clock_reasons"]), [])), "pci": g["pci"]}
         for g in gpus}
for m in metrics.values():
    m["reasons"].sort()
print(json.dumps([check, metrics]))
"""
    for build in (libdir, nvmlsim.build(tmp_path, old_driver=True)):
        state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture(patches))
        check, metrics = child(build, state, code)
        assert check == metrics
        assert check["1"]["reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
        assert check["5"]["reasons"] == ["gpu_idle", "sw_power_cap", "sw_thermal_slowdown"]
        assert [k for k, up in check["2"]["nvlink"].items() if not up] == ["5", "17"]
        assert check["7"]["nvlink"] == {} and check["0"]["pci"] == "0000:18:00.0"


PROFILE = r"""
import json, sys, time
from nodewarden.validator import profiles
t0 = time.monotonic()
name = profiles.resolve("auto", timeout_s=float(sys.argv[1]))["name"]
print(json.dumps([name, time.monotonic() - t0]))
"""


def test_profile_auto_reads_the_product_name(libdir: Path, tmp_path: Path) -> None:
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture())
    name, _ = child(libdir, state, PROFILE.replace("sys.argv[1]", "'5'"))
    assert name == "h100_sxm5_80gb"
    name, _ = child(libdir, None, PROFILE.replace("sys.argv[1]", "'5'"))  # no driver
    assert name == "generic"


@pytest.mark.parametrize("hang", [
    {"gpus": {0: {"hang_in": {"nvmlDeviceGetName": 60}}}},  # the product-name call
    {"top": {"hang_seconds": 60}},                            # every call, nvmlInit first
])
def test_profile_auto_on_a_hung_driver_returns_within_its_timeout(libdir: Path, tmp_path: Path, hang) -> None:
    gpus = gpus_on_fixture(hang.get("gpus"))
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus, **hang.get("top", {}))
    name, seconds = child(libdir, state, PROFILE.replace("sys.argv[1]", "'1.5'"), timeout=30)
    assert name == "generic" and 1.5 <= seconds < 3


def test_validate_profile_auto_on_a_hung_driver(libdir: Path, tmp_path: Path) -> None:
    """``nodewarden validate --profile auto`` where nvmlDeviceGetName hangs (60 s in the
    simulator): profile auto-detection gives up after its ``--nvml-timeout`` (3 s here; 30 s,
    nodewarden.nvml.DEFAULT_TIMEOUT_S, by default) and takes the generic profile, warning on
    stderr; the links check's NVML query then fails at once on the same blocked driver -- no
    second wait of its own 30 s -- and the node is unhealthy (drain)."""
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture({0: {"hang_in": {"nvmlDeviceGetName": 60}}}))
    env = nvmlsim.env(libdir, state)
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "nodewarden", "validate", "--profile", "auto", "--nvml-timeout", "3",
           "--checks", "links", "--sysfs", str(H100), "--set", "links.nvml=true", "--no-progress",
           "--json", str(out)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    wall = time.monotonic() - t0
    assert 3 <= wall < 15, p.stderr  # not the check's 30 s: the blocked call fails it at once
    assert p.returncode == exitcodes.UNHEALTHY, p.stderr
    assert "--profile auto: NVML did not answer within 3 s" in p.stderr and "using the generic profile" in p.stderr
    doc = json.loads(out.read_text())
    (links,) = doc["checks"]
    assert doc["profile"] == "generic" and links["status"] == "fail"
    assert ("NVML did not answer: profile auto-detection (nvmlDeviceGetName) has been blocked in the driver for "
            in links["reason"])
    assert "(driver hung? nvidia-smi would hang too)" in links["reason"]


BUSY = r"""
import json, logging, time
logging.basicConfig(level=logging.WARNING)
from nodewarden.agent.schedule import nvml_gpus_busy
out = []
for _ in range(2):
    t0 = time.monotonic()
    out.append([nvml_gpus_busy(1.0), time.monotonic() - t0])
print(json.dumps(out))
"""


def test_busy_probe_through_the_session(libdir: Path, tmp_path: Path) -> None:
    """The agent's GPU-busy probe: a compute process on one GPU is busy, none is idle, no driver
    is idle, and a hung nvmlDeviceGetComputeRunningProcesses is busy after its timeout -- the next
    probe busy at once, while the first call is still blocked in the driver."""
    procs = {5: {"processes": [{"pid": 4242, "used_memory": 1 << 30}]}}
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture(procs))
    assert [b for b, _ in child(libdir, state, BUSY)] == [True, True]
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture())
    assert [b for b, _ in child(libdir, state, BUSY)] == [False, False]
    assert [b for b, _ in child(libdir, None, BUSY)] == [False, False]
    hung = {3: {"hang_in": {"processes": 60}}}  # nvmlDeviceGetComputeRunningProcesses_v3, by its feature word
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus_on_fixture(hung))
    (first, t1), (second, t2) = child(libdir, state, BUSY)
    assert first is True and 1.0 <= t1 < 2.5
    assert second is True and t2 < 0.2
