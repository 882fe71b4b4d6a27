"""nodewarden.nvmllib against nvidia-ml-py (pynvml), the reference binding of nvml.h: the same
structure layouts, constants and C symbols, and, on the NVML simulator, the same answers for every
call nodewarden makes (values, errors, the symbols the simulator logs being called); the errors a
missing library or symbol gives."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nodewarden import nvmllib  # noqa: E402
from tests import nvmlsim  # noqa: E402

pynvml = envneeds.module("pynvml", "nvidia-ml-py, the reference binding (the [test] extra)")

STRUCTS = {"nvmlPciInfo_t": "nvmlPciInfo_t", "c_nvmlFieldValue_t": "c_nvmlFieldValue_t",
           "c_nvmlValue_t": "c_nvmlValue_t", "c_nvmlProcessInfo_v2_t": "c_nvmlProcessInfo_v3_t"}


def layout(cls: type) -> tuple[int, list[tuple[str, int, int]]]:
    return ctypes.sizeof(cls), [(name, getattr(cls, name).offset, getattr(cls, name).size)
                                for name, *_ in cls._fields_]


@pytest.mark.parametrize("ours, theirs", STRUCTS.items())
def test_structures_are_laid_out_as_pynvml_lays_them_out(ours: str, theirs: str) -> None:
    assert layout(getattr(nvmllib, ours)) == layout(getattr(pynvml, theirs))


def test_constants_are_pynvml_s() -> None:
    ours = {k: v for k, v in vars(nvmllib).items() if k.startswith("NVML_") and isinstance(v, int)}
    alias = {"NVML_VALUE_NOT_AVAILABLE_ULONGLONG": None}
    assert len(ours) > 25
    for name, value in ours.items():
        if name in alias:
            assert value == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        else:
            assert getattr(pynvml, name) == value, name


# One child process per binding (each loads the simulator; NVMLSIM_CALL_LOG logs the device
# calls): every call nodewarden makes, on two GPUs, answers or errors as JSON.
CALLS = r"""
import json, sys
nv = __import__(sys.argv[1], fromlist=["x"])
def show(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)) or type(v).__name__.endswith("_Array_13"):
        return [show(x) for x in v]
    if hasattr(v, "busId"):
        return [show(v.busId), v.domain, v.bus, v.device, v.pciDeviceId, v.pciSubSystemId]
    if hasattr(v, "pid"):
        return [v.pid, v.usedGpuMemory, v.gpuInstanceId, v.computeInstanceId]
    if hasattr(v, "fieldId"):
        return [v.fieldId, v.scopeId, v.valueType, v.nvmlReturn, v.value.ullVal]
    return v
out = []
def call(fn, *args):
    try:
        out.append([fn, "ok", show(getattr(nv, fn)(*args))])
    except nv.NVMLError as e:
        out.append([fn, "error", e.value])
nv.nvmlInit()
call("nvmlDeviceGetCount")
for i in range(nv.nvmlDeviceGetCount()):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    for fn in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMinorNumber",
               "nvmlDeviceGetPowerUsage", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetCurrPcieLinkGeneration",
               "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
               "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetRetiredPagesPendingStatus",
               "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
               "nvmlDeviceGetRemappedRows", "nvmlDeviceGetComputeRunningProcesses"):
        call(fn, h)
    call("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
    for clock in (nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM):
        call("nvmlDeviceGetClockInfo", h, clock)
        call("nvmlDeviceGetMaxClockInfo", h, clock)
    for et in (0, 1):
        for ct in (0, 1):
            call("nvmlDeviceGetTotalEccErrors", h, et, ct)
    for cause in (0, 1):
        call("nvmlDeviceGetRetiredPages", h, cause)
    for link in (0, 1, 17, 18, 35):
        call("nvmlDeviceGetNvLinkState", h, link)
        for counter in range(4):
            call("nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
    call("nvmlDeviceGetFieldValues", h, [3, 4, 5, 6, 29, 30, 31, 94, 142, 230, (165, 0), (165, 17), 9999])
nv.nvmlShutdown()
print(json.dumps(out))
"""


def run_calls(module: str, tmp_path: Path, libdir: Path, state: Path) -> tuple[list, list[str]]:
    log = tmp_path / f"{module}.log"
    env = nvmlsim.env(libdir, state)
    env["NVMLSIM_CALL_LOG"] = str(log)
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", CALLS, module], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), log.read_text().splitlines()


def test_every_call_answers_as_pynvml_answers_on_the_simulator(tmp_path: Path) -> None:
    libdir = nvmlsim.build(tmp_path)
    gpus = nvmlsim.default_gpus(2)
    gpus[1]["ecc"]["corrected"] = {"volatile": 7, "aggregate": 11}
    gpus[1]["retired_pages"] = {"single_bit_ecc": 2, "double_bit_ecc": 1, "pending": 1}
    gpus[1]["not_supported"] = []  # page retirement answers (an A100's driver), on GPU 1 only
    gpus[1]["processes"] = [{"pid": 4242, "used_memory": 2 ** 33}]
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus=gpus)
    theirs, their_log = run_calls("pynvml", tmp_path, libdir, state)
    ours, our_log = run_calls("nodewarden.nvmllib", tmp_path, libdir, state)
    assert ours == theirs
    assert our_log == their_log and len(our_log) > 100  # the same C symbols, called as often
    answered = {fn for fn, how, _ in ours if how == "ok"}
    errors = {(fn, v) for fn, how, v in ours if how == "error"}
    # values were compared for each of these, and errors for those (H100: no page retirement;
    # links past the GPU's 18: INVALID_ARGUMENT)
    assert errors == {("nvmlDeviceGetRetiredPages", 3), ("nvmlDeviceGetRetiredPagesPendingStatus", 3),
                      ("nvmlDeviceGetNvLinkState", 2), ("nvmlDeviceGetNvLinkErrorCounter", 2)}
    assert {"nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
            "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetFieldValues",
            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetClockInfo"} <= answered
    by = {(fn, json.dumps(v)) for fn, how, v in ours if how == "ok"}
    assert ("nvmlDeviceGetTotalEccErrors", "7") in by and ("nvmlDeviceGetTotalEccErrors", "11") in by
    assert ("nvmlDeviceGetRetiredPages", json.dumps([4096, 8192])) in by
    assert ("nvmlDeviceGetComputeRunningProcesses", json.dumps([[4242, 2 ** 33, 0xFFFFFFFF, 0xFFFFFFFF]])) in by


def test_an_older_driver_lacks_the_same_functions_for_both(tmp_path: Path) -> None:
    libdir = nvmlsim.build(tmp_path, old_driver=True)
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus=nvmlsim.default_gpus(1))
    theirs, their_log = run_calls("pynvml", tmp_path, libdir, state)
    ours, our_log = run_calls("nodewarden.nvmllib", tmp_path, libdir, state)
    assert ours == theirs and our_log == their_log
    absent = {fn for fn, how, v in ours if how == "error" and v == nvmllib.NVML_ERROR_FUNCTION_NOT_FOUND}
    assert absent == {"nvmlDeviceGetCurrentClocksEventReasons"}  # before r535: NVML_ERROR_FUNCTION_NOT_FOUND from both


def test_without_the_library_init_says_library_not_found(tmp_path: Path) -> None:
    code = ("import json, sys\nfrom nodewarden import nvmllib, nvml\n"
            "try:\n    nvmllib.nvmlInit()\nexcept nvmllib.NVMLError as e:\n    print(json.dumps([e.value, str(e)]))\n"
            "print(json.dumps(list(nvml.init())))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LD_LIBRARY_PATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0] == [nvmllib.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"]
    assert lines[1][0] is None and "NVML_ERROR_LIBRARY_NOT_FOUND" in lines[1][1]


def test_a_call_before_init_is_uninitialized() -> None:
    if nvmllib._lib is not None:
        pytest.skip("the library is loaded in this process")
    with pytest.raises(nvmllib.NVMLError) as e:
        nvmllib.nvmlDeviceGetCount()
    assert e.value.value == nvmllib.NVML_ERROR_UNINITIALIZED


# The simulator answers from its last parse while the state file is the version it read (a
# stat, no read), and sees every change: a file replaced, and one rewritten in place with the
# same length, at once and after its times settled.
CHANGES = r"""
import json, os, sys, time
from nodewarden import nvmllib as nv
path = os.environ["NVMLSIM_STATE"]
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
def ecc():
    return nv.nvmlDeviceGetTotalEccErrors(h, 0, 0)
def in_place(old, new):
    text = open(path).read()
    assert len(old) == len(new) and text.count(old) == 1, (old, new)
    with open(path, "r+") as f:  # same inode, same size
        f.write(text.replace(old, new))
seen = [ecc()]
in_place('"volatile": 7', '"volatile": 8'); seen.append(ecc())
time.sleep(0.12); seen.append(ecc()); seen.append(ecc())
in_place('"volatile": 8', '"volatile": 9'); seen.append(ecc())
time.sleep(0.12); seen.append(ecc())
print(json.dumps(seen))
"""


def test_the_simulator_sees_every_change_of_its_state_file(tmp_path: Path) -> None:
    libdir = nvmlsim.build(tmp_path)
    gpus = nvmlsim.default_gpus(1)
    gpus[0]["ecc"]["corrected"] = {"volatile": 7, "aggregate": 7}
    state = nvmlsim.write_state(tmp_path / "nvml.json", gpus=gpus)
    env = {**nvmlsim.env(libdir, state), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHANGES], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [7, 8, 8, 8, 9, 9]
