"""nvmlsim: an NVML simulator for tests, at the C API boundary.

``nvmlsim.c`` implements the NVML functions nodewarden calls with the symbols, signatures and
return codes of ``nvml.h``. Built as ``libnvidia-ml.so.1`` and found through ``LD_LIBRARY_PATH``,
nvidia-ml-py loads it as it would load the driver's library; pynvml itself is never patched.
The dynamic loader reads ``LD_LIBRARY_PATH`` only when a process starts, so code that uses NVML
runs in a child process started with :func:`env`.

Functions (nvml.h names; ``_v2``/``_v3`` are the versions pynvml resolves)::

    nvmlInit_v2 nvmlInit nvmlInitWithFlags nvmlShutdown nvmlErrorString
    nvmlSystemGetDriverVersion nvmlSystemGetNVMLVersion
    nvmlDeviceGetCount_v2 nvmlDeviceGetCount nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByIndex
    nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetPciInfo_v3 nvmlDeviceGetPciInfo_v2
    nvmlDeviceGetMinorNumber nvmlDeviceGetTotalEccErrors
    nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPages_v2 nvmlDeviceGetRetiredPagesPendingStatus
    nvmlDeviceGetRemappedRows nvmlDeviceGetNvLinkState nvmlDeviceGetNvLinkErrorCounter
    nvmlDeviceGetCurrPcieLinkGeneration nvmlDeviceGetMaxPcieLinkGeneration
    nvmlDeviceGetGpuMaxPcieLinkGeneration nvmlDeviceGetCurrPcieLinkWidth nvmlDeviceGetMaxPcieLinkWidth
    nvmlDeviceGetPcieReplayCounter nvmlDeviceGetCurrentClocksEventReasons (not in the old_driver
    build) nvmlDeviceGetCurrentClocksThrottleReasons nvmlDeviceGetTemperature
    nvmlDeviceGetPowerUsage nvmlDeviceGetClockInfo nvmlDeviceGetMaxClockInfo
    nvmlDeviceGetPerformanceState nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2
    nvmlDeviceGetFieldValues (field 230 NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, not in the old_driver
    build, whose value answers NVML_ERROR_NOT_SUPPORTED; the counter fields of ECC, retired pages,
    remapped rows, PCIe replays and NVLink links 0-11, and 165 NVML_FI_DEV_NVLINK_GET_STATE with the
    link in scopeId, each answering what its per-counter call answers, "not_supported" words included)

State file (JSON, path in ``NVMLSIM_STATE``, read again on every call and parsed again only when its
bytes changed; :func:`write_state` replaces it atomically so that a call never reads half a file)::

    {
      "driver_version": "550.90.07",        # nvmlSystemGetDriverVersion
      "init_error": 0,                      # non-zero: nvmlInit returns it (9: driver not loaded)
      "hang_seconds": 0,                    # every call (init included) sleeps this long first
      "gpus": [                             # nvmlDeviceGetCount; the handle of gpus[i] is index i
        {
          "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "minor_number": 0,
          "pci_bus_id": "00000000:18:00.0",  # nvmlPciInfo_t.busId; domain/bus/device from it
          "pci_device_id": 590352606,        # 0x233010de (H100 SXM5)
          "ecc": {"corrected": {"volatile": 0, "aggregate": 0},
                  "uncorrected": {"volatile": 0, "aggregate": 0}},     # nvmlDeviceGetTotalEccErrors
          "retired_pages": {"single_bit_ecc": 0, "double_bit_ecc": 0, "pending": 0},
          "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
          "nvlink_links": 18, "nvlink_down": [5, 17],
          "nvlink_errors": {"5": {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}},
          "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "replays": 0},
          "clocks_event_reasons": 1,         # nvmlClocksEventReason* bit mask (1: GpuIdle)
          "temperature_c": 33, "power_mw": 71000, "pstate": 0,
          "clocks_mhz": {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545},
          "max_clocks_mhz": {...}, "memory": {"total": 85520809984, "used": 0, "reserved": 0},
          "processes": [{"pid": 4242, "used_memory": 1073741824}],
          "recovery_action": 1,   # nvmlDeviceGpuRecoveryAction_t of field 230 (0 none, 1 gpu_reset,
                                  # 2 node_reboot, 3 drain_p2p, 4 drain_and_reset, ...); absent: the
                                  # value's nvmlReturn is NVML_ERROR_NOT_SUPPORTED (a driver before r570)
          "field_returns": {"230": 2},   # force a field value's own nvmlReturn (the call answers 0)
          "lost": false,          # true: every call for this GPU returns NVML_ERROR_GPU_IS_LOST (15)
          "hang_seconds": 0,      # every call for this GPU sleeps this long (a hung driver)
          "hang_in": {"nvmlDeviceGetFieldValues": 60},  # only this call (function or feature word) hangs
          "not_supported": ["remapped_rows"],  # NVML_ERROR_NOT_SUPPORTED (3) for these queries
          "call_returns": {"nvmlDeviceGetFieldValues": 999}  # this call (function or feature word) fails so
        }
      ]
    }

A missing counter reads 0. ``not_supported`` names a query either by the nvml.h function name
(``"nvmlDeviceGetRemappedRows"``) or by its feature word: ``handle name uuid pci_info
minor_number ecc retired_pages retired_pages_pending remapped_rows nvlink nvlink_errors pcie_link
pcie_replay clocks_event_reasons temperature power clocks pstate processes memory field_values``
(``field_values``: the whole nvmlDeviceGetFieldValues call answers NOT_SUPPORTED). :func:`h100_gpu`
has no ``recovery_action``: like the default ``driver_version`` (r550), it lacks the field. A missing
or unset ``NVMLSIM_STATE`` file makes nvmlInit return NVML_ERROR_DRIVER_NOT_LOADED (9), as on a
node without the driver; a file that does not parse makes every call NVML_ERROR_UNKNOWN.
"""

from __future__ import annotations

import copy
import json
import os
import select
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("nvmlsim.c")
LIBNAME = "libnvidia-ml.so.1"

# Return codes (nvml.h) the simulator produces on purpose.
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15

# An HGX H100 board: the GPUs' bus ids in NVML's form (8-digit domain, upper-case hex), in the
# order NVML enumerates them (PCI bus order). Same board as tests/fixtures/sysfs/h100-hgx-ndr.
# nvmlDeviceGpuRecoveryAction_t (nvml.h), the values of field 230 NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.
RECOVERY_NONE, RECOVERY_GPU_RESET, RECOVERY_NODE_REBOOT, RECOVERY_DRAIN_P2P, RECOVERY_DRAIN_AND_RESET = range(5)
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230

HGX_H100_BUS_IDS = tuple(f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9B", "AB", "BA", "DB"))

_built: dict[bool, Path] = {}


def build(tmpdir: str | os.PathLike[str], *, old_driver: bool = False) -> Path:
    """Compile the simulator into ``tmpdir/<variant>/libnvidia-ml.so.1`` and return that directory
    (for ``LD_LIBRARY_PATH``). Built once per process and variant. ``old_driver``: a driver
    before r535, without ``nvmlDeviceGetCurrentClocksEventReasons``. Skips the calling test (fails
    it under CI=true: tests/envneeds.py; raises RuntimeError outside pytest) when there is no C
    compiler."""
    cached = _built.get(old_driver)
    if cached is not None and (cached / LIBNAME).is_file():
        return cached
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        _unavailable("gcc", "the C compiler that builds the NVML simulator")
    out = Path(tmpdir) / ("nvmlsim-old" if old_driver else "nvmlsim")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-shared", "-fPIC", "-O2", "-pthread", *(["-DNVMLSIM_OLD_DRIVER"] if old_driver else []),
           "-Wl,-soname," + LIBNAME, "-o", str(out / LIBNAME), str(SOURCE)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"building the NVML simulator failed: {' '.join(cmd)}\n{p.stderr}")
    _built[old_driver] = out
    return out


def _unavailable(piece: str, why: str) -> None:
    try:
        from tests import envneeds
    except ImportError:  # pragma: no cover - used outside the test suite
        raise RuntimeError(f"{piece} missing: {why}") from None
    envneeds.need(piece, why)


def env(libdir: Path, state: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that loads the simulator through nvidia-ml-py."""
    e = dict(os.environ if base is None else base)
    e["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libdir), e.get("LD_LIBRARY_PATH", "")) if p)
    e["NVMLSIM_STATE"] = str(state)
    return e


def h100_gpu(index: int, bus_id: str | None = None) -> dict[str, Any]:
    """One healthy, idle H100 SXM5 80GB. Hopper remaps rows instead of retiring pages: like the
    driver (``nvidia-smi -q`` prints ``Retired Pages: N/A``), page retirement is not supported."""
    clocks = {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545}
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"nvmlsim/h100/{index}")),
        "pci_bus_id": bus_id or HGX_H100_BUS_IDS[index % len(HGX_H100_BUS_IDS)],
        "pci_device_id": 0x233010DE,
        "minor_number": index,
        "ecc": {"corrected": {"volatile": 0, "aggregate": 0}, "uncorrected": {"volatile": 0, "aggregate": 0}},
        "retired_pages": {"single_bit_ecc": 0, "double_bit_ecc": 0, "pending": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
        "nvlink_links": 18,
        "nvlink_down": [],
        "nvlink_errors": {},
        "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "replays": 0},
        "clocks_event_reasons": 0x1,
        "temperature_c": 33,
        "power_mw": 71_000,
        "pstate": 0,
        "clocks_mhz": dict(clocks),
        "max_clocks_mhz": dict(clocks),
        "memory": {"total": 85_520_809_984, "used": 0, "reserved": 0},
        "processes": [],
        "lost": False,
        "hang_seconds": 0,
        "not_supported": ["retired_pages", "retired_pages_pending"],
    }


def default_gpus(n: int = 8) -> list[dict[str, Any]]:
    """``n`` H100s on an HGX board (8 by default)."""
    return [h100_gpu(i) for i in range(n)]


def write_state(path: str | os.PathLike[str], gpus: list[dict[str, Any]] | None = None,
                **top: Any) -> Path:
    """Write a state file (``gpus`` default: :func:`default_gpus`; ``top``: top-level keys such
    as ``driver_version``, ``init_error``, ``hang_seconds``), atomically."""
    state = {"driver_version": "550.90.07", "nvml_version": "12.550.90.07",
             "gpus": default_gpus() if gpus is None else gpus, **top}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def update_gpu(path: str | os.PathLike[str], index: int, patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``patch`` into GPU ``index`` of the state file (atomically); returns the GPU."""
    state = read_state(path)
    state["gpus"][index] = _merge(state["gpus"][index], patch)
    top = {k: v for k, v in state.items() if k != "gpus"}
    write_state(path, state["gpus"], **top)
    return state["gpus"][index]


class Child:
    """A Python child process that loads the simulator (``libdir``, ``state``) and runs ``code``,
    a driver reading one command per stdin line and answering one JSON line per command."""

    def __init__(self, libdir: Path, state: Path, code: str) -> None:
        e = env(libdir, state)
        e["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=e, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float) -> dict[str, Any] | None:
        """The next JSON line, or None when none came within ``timeout`` seconds."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        assert line, f"child process died: {self.proc.stderr.read() if self.proc.stderr else ''}"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=10)
        except ValueError:  # its pipes were already read to the end (and closed)
            pass
