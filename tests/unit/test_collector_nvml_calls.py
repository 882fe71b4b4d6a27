"""How many NVML calls a poll of the NVML collector makes, against the NVML simulator (which
logs each device call when ``NVMLSIM_CALL_LOG`` is set): the counters that have a field id come
in one ``nvmlDeviceGetFieldValues`` call per GPU, what does not change while the driver is
loaded is read once, a query that answered NOT_SUPPORTED is not asked again until its re-probe,
and the values through the field path are those of the per-counter calls."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nodewarden import nvml  # noqa: E402
from nodewarden.collectors import nvml as collector  # noqa: E402
from tests import nvmlsim  # noqa: E402

# The child: one NvmlCollector on a clock the test moves ("advance S"); "poll" answers the
# snapshot's samples.
DRIVER = r"""
import json, sys
from nodewarden.collectors.nvml import NvmlCollector
now = [1_800_000_000.0]
c = NvmlCollector(hostname="node07", clock=lambda: now[0], timeout_s=10.0)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "poll":
        s = c.collect()
        print(json.dumps({"samples": sorted([x.name, sorted(x.labels), x.value] for x in s.samples),
                          "events": [e.kind for e in s.events]}), flush=True)
    elif cmd == "advance":
        now[0] += float(arg)
        print("{}", flush=True)
"""

IDENTITY_CALLS = {"nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetName", "nvmlDeviceGetMinorNumber",
                  "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"}


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nvmlsim.build(tmp_path_factory.mktemp("nvmlsim"))


class Run:
    """A child polling the simulator, and the calls it made since the last :meth:`calls`."""

    def __init__(self, libdir: Path, tmp: Path, gpus: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
        self.state = nvmlsim.write_state(tmp / "nvml.json", gpus)
        self.log = tmp / "calls.log"
        monkeypatch.setenv("NVMLSIM_CALL_LOG", str(self.log))
        self.child = nvmlsim.Child(libdir, self.state, DRIVER)
        self._seen = 0

    def poll(self) -> dict[str, Any]:
        self.child.send("poll")
        got = self.child.answer(60)
        assert got is not None, "poll did not answer"
        return got

    def advance(self, seconds: float) -> None:
        self.child.send(f"advance {seconds}")
        assert self.child.answer(10) == {}

    def calls(self) -> collections.Counter[tuple[str, int]]:
        """(function, gpu index) -> calls since the last call of this method."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        new, self._seen = lines[self._seen:], len(lines)
        out: collections.Counter[tuple[str, int]] = collections.Counter()
        for line in new:
            fn, gpu = line.rsplit(" ", 1)
            out[(fn, int(gpu))] += 1
        return out


@pytest.fixture
def run(libdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    runs: list[Run] = []

    def start(gpus: list[dict[str, Any]], name: str = "a") -> Run:
        d = tmp_path / name
        d.mkdir()
        r = Run(libdir, d, gpus, monkeypatch)
        runs.append(r)
        return r

    yield start
    for r in runs:
        r.child.close()


def by_function(calls: collections.Counter[tuple[str, int]], gpu: int) -> dict[str, int]:
    return {fn: n for (fn, g), n in calls.items() if g == gpu}


def faulty_gpus() -> list[dict[str, Any]]:
    """8 H100s with non-zero counters everywhere the field path reads, on links below and above 11."""
    gpus = nvmlsim.default_gpus(8)
    gpus[1]["ecc"] = {"corrected": {"volatile": 7, "aggregate": 11}, "uncorrected": {"volatile": 1, "aggregate": 2}}
    gpus[2]["nvlink_errors"] = {"3": {"crc_flit": 5, "crc_data": 6, "replay": 7, "recovery": 8},
                                "11": {"replay": 9}, "15": {"crc_flit": 4, "recovery": 2}}
    gpus[2]["nvlink_down"] = [3, 15]
    gpus[3]["remapped_rows"] = {"correctable": 3, "uncorrectable": 1, "pending": 1, "failure": 0}
    gpus[4]["pcie"]["replays"] = 12
    gpus[5]["not_supported"] = []  # a GPU that retires pages (an A100-like answer)
    gpus[5]["retired_pages"] = {"single_bit_ecc": 2, "double_bit_ecc": 1, "pending": 1}
    gpus[6]["nvlink_links"] = 12
    gpus[7]["recovery_action"] = 1
    return gpus


def test_field_ids_are_nvml_h_s() -> None:
    """The field ids nodewarden sends are nvml.h's (as nvidia-ml-py carries them)."""
    pynvml = envneeds.module("pynvml", "nvidia-ml-py, the [test] extra")
    assert nvml.ECC_FIELDS == {("corrected", "volatile"): pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
                               ("uncorrected", "volatile"): pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
                               ("corrected", "aggregate"): pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
                               ("uncorrected", "aggregate"): pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL}
    assert nvml.RETIRED_FIELDS == {"single_bit_ecc": pynvml.NVML_FI_DEV_RETIRED_SBE,
                                   "double_bit_ecc": pynvml.NVML_FI_DEV_RETIRED_DBE}
    assert nvml.RETIRED_PENDING_FIELD == pynvml.NVML_FI_DEV_RETIRED_PENDING
    assert nvml.PCIE_REPLAY_FIELD == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
    assert nvml.REMAPPED_FIELDS == {"correctable": pynvml.NVML_FI_DEV_REMAPPED_COR,
                                    "uncorrectable": pynvml.NVML_FI_DEV_REMAPPED_UNC,
                                    "pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
                                    "failure": pynvml.NVML_FI_DEV_REMAPPED_FAILURE}
    names = {"crc_flit": "CRC_FLIT", "crc_data": "CRC_DATA", "replay": "REPLAY", "recovery": "RECOVERY"}
    assert set(nvml.NVLINK_ERROR_FIELDS) == set(collector.NVLINK_COUNTERS)
    for typ, ids in nvml.NVLINK_ERROR_FIELDS.items():
        assert ids == tuple(getattr(pynvml, f"NVML_FI_DEV_NVLINK_{names[typ]}_ERROR_COUNT_L{link}")
                            for link in range(nvml.NVLINK_FIELD_LINKS))


def test_a_poll_makes_31_calls_per_h100_and_7_between_nvlink_counter_reads(run) -> None:
    """The NVLink error counters at every NVLINK_ERRORS_EVERY-th poll (3): polls 1 and 2 after
    the first keep them, poll 3 reads them again."""
    assert collector.NVLINK_ERRORS_EVERY == 3
    r = run(faulty_gpus())
    r.poll()
    first = r.calls()
    assert all(by_function(first, g).get(fn) == 1 for g in range(8) for fn in IDENTITY_CALLS)
    between = {"nvmlDeviceGetHandleByIndex_v2": 1, "nvmlDeviceGetFieldValues": 1,  # link states are fields too
               "nvmlDeviceGetCurrPcieLinkGeneration": 1, "nvmlDeviceGetCurrPcieLinkWidth": 1,
               "nvmlDeviceGetCurrentClocksEventReasons": 1, "nvmlDeviceGetTemperature": 1,
               "nvmlDeviceGetPowerUsage": 1}
    for _ in range(2):
        r.poll()
        calls = r.calls()
        assert all(by_function(calls, g) == between for g in range(8)), calls
        assert sum(calls.values()) == 8 * 7
    r.poll()
    third = r.calls()
    for g in range(8):
        calls = by_function(third, g)
        links = 12 if g == 6 else 18
        assert calls.pop("nvmlDeviceGetNvLinkErrorCounter", 0) == 4 * (links - 12)  # links 12+ have no field id
        assert calls == between, (g, calls)
    assert sum(third.values()) == 7 * 31 + (31 - 24)  # GPU 6: 12 links, no per-link counter call


def test_nvlink_counters_are_kept_between_their_reads_and_a_rise_shows_at_the_next(run) -> None:
    r = run(faulty_gpus())

    def errors(poll: dict) -> dict[tuple[str, str], float]:
        return {(dict(map(tuple, s[1]))["link"], dict(map(tuple, s[1]))["type"]): s[2] for s in poll["samples"]
                if s[0] == "nodewarden_gpu_nvlink_errors_total" and ("gpu", "2") in map(tuple, s[1])}

    first = errors(r.poll())
    assert first[("3", "recovery")] == 8 and first[("15", "crc_flit")] == 4 and len(first) == 18 * 4
    nvmlsim.update_gpu(r.state, 2, {"nvlink_errors": {"3": {"recovery": 9}, "15": {"crc_flit": 6}}})
    assert errors(r.poll()) == first and errors(r.poll()) == first  # kept: the same series and values
    third = errors(r.poll())
    assert (third[("3", "recovery")], third[("15", "crc_flit")]) == (9, 6)
    assert {k: v for k, v in third.items() if k not in {("3", "recovery"), ("15", "crc_flit")}} == \
        {k: v for k, v in first.items() if k not in {("3", "recovery"), ("15", "crc_flit")}}


def test_a_gpu_back_from_lost_has_its_nvlink_counters_read_at_once(run) -> None:
    r = run(faulty_gpus())
    r.poll()
    nvmlsim.update_gpu(r.state, 2, {"lost": True})
    assert "gpu_lost" in r.poll()["events"]
    nvmlsim.update_gpu(r.state, 2, {"lost": False, "nvlink_errors": {"3": {"recovery": 20}}})
    r.calls()
    got = r.poll()  # the third poll: not one that reads the counters, but GPU 2 has no reading to keep
    assert by_function(r.calls(), 2).get("nvmlDeviceGetNvLinkErrorCounter") == 24
    assert [s[2] for s in got["samples"] if s[0] == "nodewarden_gpu_nvlink_errors_total"
            and dict(map(tuple, s[1])) == {"gpu": "2", "link": "3", "type": "recovery"}] == [20]


def test_a_gpu_at_an_index_that_came_back_is_read_as_a_new_gpu(run) -> None:
    """The driver's count drops from 4 to 2 and comes back with another GPU at index 3 (the
    NVML simulator allows what a driver does only across a reload): its NVLink counters, its
    identity and its baseline are its own at once, not the old GPU's, and no event compares
    the two."""
    gpus = nvmlsim.default_gpus(4)
    gpus[3]["nvlink_errors"] = {"0": {"crc_flit": 40000}}
    gpus[3]["ecc"]["corrected"] = {"volatile": 9, "aggregate": 9}
    r = run(gpus)
    r.poll()
    nvmlsim.write_state(r.state, gpus[:2])
    r.poll()
    other = dict(nvmlsim.default_gpus(4)[3], uuid="GPU-00000000-0000-0000-0000-00000000beef")
    other["nvlink_errors"] = {"0": {"crc_flit": 70000}}
    nvmlsim.write_state(r.state, [*gpus[:3], other])
    got = r.poll()  # the third poll: not one that reads the NVLink counters
    values = {(s[0], tuple(map(tuple, s[1]))): s[2] for s in got["samples"]}
    assert values[("nodewarden_gpu_nvlink_errors_total", (("gpu", "3"), ("link", "0"), ("type", "crc_flit")))] == 70000
    assert any(k[0] == "nodewarden_gpu_info" and ("uuid", other["uuid"]) in k[1] for k in values)
    assert got["events"] == []  # its ECC count (0) is no drop from the old GPU's 9


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_nvlink_errors_every_is_a_whole_number_of_polls(every) -> None:
    with pytest.raises(ValueError, match="nvlink_errors_every"):
        collector.NvmlCollector(nvlink_errors_every=every)


def test_the_field_path_gives_the_per_counter_calls_values(run) -> None:
    """The same devices read through the field values and (a driver without field values) through
    one call per counter: the same series, the same values."""
    fields = run(faulty_gpus(), "fields")
    direct_gpus = faulty_gpus()
    for g in direct_gpus:
        g["not_supported"] = [*g["not_supported"], "field_values"]
        g.pop("recovery_action", None)  # the recovery action exists only as a field
    direct = run(direct_gpus, "direct")
    a, b = fields.poll(), direct.poll()
    assert any(fn == "nvmlDeviceGetTotalEccErrors" for fn, _ in direct.calls())
    assert not any(fn == "nvmlDeviceGetTotalEccErrors" for fn, _ in fields.calls())
    action = [s for s in a["samples"] if s[0] == "nodewarden_gpu_recovery_action"]
    assert [s for s in a["samples"] if s not in action] == b["samples"]
    got = {(s[0], tuple(map(tuple, s[1]))): s[2] for s in a["samples"]}
    assert got[("nodewarden_gpu_ecc_errors_total", (("gpu", "1"), ("scope", "aggregate"), ("type", "corrected")))] == 11
    assert got[("nodewarden_gpu_nvlink_errors_total", (("gpu", "2"), ("link", "3"), ("type", "recovery")))] == 8
    assert got[("nodewarden_gpu_nvlink_errors_total", (("gpu", "2"), ("link", "11"), ("type", "replay")))] == 9
    assert got[("nodewarden_gpu_nvlink_errors_total", (("gpu", "2"), ("link", "15"), ("type", "crc_flit")))] == 4
    assert got[("nodewarden_gpu_nvlink_state", (("gpu", "2"), ("link", "3")))] == 0   # down, read as a field
    assert got[("nodewarden_gpu_nvlink_state", (("gpu", "2"), ("link", "15")))] == 0
    assert got[("nodewarden_gpu_nvlink_state", (("gpu", "2"), ("link", "4")))] == 1
    assert got[("nodewarden_gpu_remapped_rows", (("cause", "correctable"), ("gpu", "3")))] == 3
    assert got[("nodewarden_gpu_row_remap_pending", (("gpu", "3"),))] == 1
    assert got[("nodewarden_gpu_pcie_replays_total", (("gpu", "4"),))] == 12
    assert got[("nodewarden_gpu_retired_pages", (("cause", "single_bit_ecc"), ("gpu", "5")))] == 2
    assert got[("nodewarden_gpu_retired_pages_pending", (("gpu", "5"),))] == 1
    assert ("nodewarden_gpu_retired_pages", (("cause", "single_bit_ecc"), ("gpu", "0"))) not in got  # Hopper
    assert got[("nodewarden_gpu_recovery_action", (("action", "gpu_reset"), ("gpu", "7")))] == 1
    assert not any(k[0] == "nodewarden_gpu_nvlink_state" and ("link", "12") in k[1] and ("gpu", "6") in k[1]
                   for k in got)


def test_a_counter_rise_read_through_a_field_is_an_event(run) -> None:
    r = run(faulty_gpus())
    r.poll()
    nvmlsim.update_gpu(r.state, 1, {"ecc": {"uncorrected": {"volatile": 2, "aggregate": 3}}})
    nvmlsim.update_gpu(r.state, 3, {"remapped_rows": {"failure": 1}})
    assert sorted(r.poll()["events"]) == ["gpu_ecc", "row_remap"]


def test_not_supported_is_not_asked_again_until_the_reprobe(run) -> None:
    gpus = faulty_gpus()
    gpus[0]["not_supported"] = [*gpus[0]["not_supported"], "remapped_rows", "temperature"]
    r = run(gpus)
    r.poll()
    first = by_function(r.calls(), 0)
    assert first["nvmlDeviceGetRemappedRows"] == 1 and first["nvmlDeviceGetTemperature"] == 1
    r.poll()
    second = by_function(r.calls(), 0)
    assert "nvmlDeviceGetRemappedRows" not in second and "nvmlDeviceGetTemperature" not in second
    assert "nvmlDeviceGetRetiredPages" not in second  # Hopper's, from the first poll
    # the driver now answers (an upgrade would reload it; the re-probe finds it anyway)
    nvmlsim.update_gpu(r.state, 0, {"not_supported": ["retired_pages", "retired_pages_pending"],
                                    "remapped_rows": {"correctable": 4}})
    r.advance(collector.UNSUPPORTED_REPROBE_SECONDS - 10)
    r.poll()
    assert "nvmlDeviceGetTemperature" not in by_function(r.calls(), 0)
    r.advance(20)
    got = r.poll()
    third = by_function(r.calls(), 0)
    assert third["nvmlDeviceGetTemperature"] == 1
    assert "nvmlDeviceGetRemappedRows" not in third  # the field answers now: no per-counter call
    values = {(s[0], tuple(map(tuple, s[1]))): s[2] for s in got["samples"]}
    assert values[("nodewarden_gpu_remapped_rows", (("cause", "correctable"), ("gpu", "0")))] == 4
    assert values[("nodewarden_gpu_temperature_celsius", (("gpu", "0"),))] == 33


def test_the_identity_is_read_again_after_a_loss_and_after_an_hour(run) -> None:
    r = run(faulty_gpus())
    r.poll()
    r.calls()
    nvmlsim.update_gpu(r.state, 2, {"lost": True})
    assert "gpu_lost" in r.poll()["events"]
    nvmlsim.update_gpu(r.state, 2, {"lost": False, "uuid": "GPU-after-reset"})
    r.calls()
    got = r.poll()
    assert by_function(r.calls(), 2)["nvmlDeviceGetUUID"] == 1
    assert any(s[0] == "nodewarden_gpu_info" and ["uuid", "GPU-after-reset"] in s[1] for s in got["samples"])
    r.poll()
    assert "nvmlDeviceGetUUID" not in by_function(r.calls(), 1)
    r.advance(collector.STATIC_REREAD_SECONDS + 1)
    r.poll()
    calls = r.calls()
    assert all(by_function(calls, g)["nvmlDeviceGetUUID"] == 1 for g in range(8))


def test_unchanged_counters_reuse_their_samples_and_sensors_are_fresh() -> None:
    """A poll whose counters did not change hands on the same Sample objects (the exposition then
    compares by identity and formats nothing); temperature and power are built at every poll, and
    a counter that rose gives new samples with its value."""
    c = collector.NvmlCollector(hostname="n", clock=lambda: 1.0)
    reading = collector.GpuReading(0, uuid="GPU-x", pci_bus_id="0000:18:00.0", name="H100", minor=0,
                                   ecc={("corrected", "volatile"): 1}, temperature_celsius=40.0,
                                   power_milliwatts=100_000.0)
    readings = [reading]
    c._read_all = lambda: list(readings)  # type: ignore[method-assign]
    a = c.collect().samples
    readings[0] = collector.dataclasses.replace(reading, temperature_celsius=41.0)
    b = c.collect().samples
    sensors = {"nodewarden_gpu_temperature_celsius", "nodewarden_gpu_power_watts"}
    same = [x for x in a if x.name not in sensors]
    assert [x for x in b if x.name not in sensors] == same
    assert all(x is y for x, y in zip(same, [x for x in b if x.name not in sensors]))
    assert {x.name: x.value for x in b if x.name in sensors} == {"nodewarden_gpu_temperature_celsius": 41.0,
                                                                 "nodewarden_gpu_power_watts": 100.0}
    readings[0] = collector.dataclasses.replace(reading, ecc={("corrected", "volatile"): 2})
    s = c.collect()
    ecc = [x for x in s.samples if x.name == "nodewarden_gpu_ecc_errors_total"]
    assert [x.value for x in ecc] == [2.0] and ecc[0] is not next(x for x in a if x.name == ecc[0].name)
    assert [e.kind for e in s.events] == ["gpu_ecc"]


@pytest.mark.parametrize("value_type, member, value", [
    (0, "dVal", 612.5), (1, "uiVal", 4_000_000_000), (2, "ulVal", 2**40 + 3), (3, "ullVal", 2**63 + 5),
    (4, "sllVal", -(2**40)), (5, "siVal", -7), (6, "usVal", 65535)])
def test_field_values_unpacked_at_once_are_what_pynvml_reads(value_type, member, value) -> None:
    """The structs of one nvmlDeviceGetFieldValues answer are unpacked in one go (nvml.h's
    40-byte nvmlFieldValue_t); the values are those pynvml's attribute access gives."""
    pynvml = envneeds.module("pynvml", "nvidia-ml-py, the [test] extra")
    arr = (pynvml.c_nvmlFieldValue_t * 3)()
    for i, v in enumerate(arr):
        v.fieldId, v.scopeId, v.valueType, v.nvmlReturn = 3 + i, i, value_type, (0, 3, 0)[i]
        setattr(v.value, member, value)
    raw = nvml._raw_field_values(arr)
    assert raw is not None and [r[:2] for r in raw] == [(value_type, 0), (value_type, 3), (value_type, 0)]
    assert [nvml._unpack_value(t, b) for t, _, b in raw] == [nvml._field_value(v) for v in arr]
    assert nvml._unpack_value(*raw[0][::2]) == int(value)


def values_of(got: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s[0], tuple(map(tuple, s[1]))): s[2] for s in got["samples"]}


def test_a_failed_field_values_call_is_read_per_counter_and_its_rises_are_events(run) -> None:
    """One nvmlDeviceGetFieldValues that fails (NVML_ERROR_UNKNOWN, not a driver without it):
    that poll's values come from the per-counter calls, so nothing vanishes and a rise in it is
    an event; the next poll batches again."""
    r = run(faulty_gpus())
    first = r.poll()
    nvmlsim.update_gpu(r.state, 0, {"call_returns": {"nvmlDeviceGetFieldValues": 999},
                                    "ecc": {"uncorrected": {"volatile": 1, "aggregate": 1}},
                                    "remapped_rows": {"pending": 1}})
    r.calls()
    second = r.poll()
    calls = by_function(r.calls(), 0)
    assert calls["nvmlDeviceGetTotalEccErrors"] == 4 and calls["nvmlDeviceGetRemappedRows"] == 1
    assert len(second["samples"]) == len(first["samples"])
    v = values_of(second)
    assert v[("nodewarden_gpu_ecc_errors_total", (("gpu", "0"), ("scope", "volatile"), ("type", "uncorrected")))] == 1
    assert sorted(second["events"]) == ["gpu_ecc", "row_remap"]
    nvmlsim.update_gpu(r.state, 0, {"call_returns": {"nvmlDeviceGetFieldValues": 0}})  # NVML_SUCCESS again
    r.poll()
    assert "nvmlDeviceGetTotalEccErrors" not in by_function(r.calls(), 0)  # not remembered as unsupported


def test_a_counter_rise_across_a_poll_that_could_not_read_it_is_an_event_at_the_next(run) -> None:
    r = run(faulty_gpus())
    r.poll()
    nvmlsim.update_gpu(r.state, 0, {"field_returns": {"4": 999, "6": 999},  # uncorrected ECC: NVML_ERROR_UNKNOWN
                                    "ecc": {"uncorrected": {"volatile": 2, "aggregate": 2}}})
    second = r.poll()
    assert second["events"] == []
    assert ("nodewarden_gpu_ecc_errors_total", (("gpu", "0"), ("scope", "volatile"), ("type", "uncorrected"))) \
        not in values_of(second)  # not read: absent this poll, never a made-up value
    nvmlsim.update_gpu(r.state, 0, {"field_returns": {"4": 0, "6": 0}})
    assert r.poll()["events"] == ["gpu_ecc"]


def test_a_failed_link_probe_is_probed_again_at_the_next_poll(run) -> None:
    """An NVLink probe that errs (not NOT_SUPPORTED) at the first poll does not hide the GPU's
    links for an hour: what does not change is kept only when it was read in full."""
    gpus = faulty_gpus()
    gpus[3]["call_returns"] = {"nvmlDeviceGetNvLinkState": 999}
    r = run(gpus)
    links = lambda got: sum(1 for s in got["samples"] if s[0] == "nodewarden_gpu_nvlink_state" and ["gpu", "3"] in s[1])  # noqa: E731
    assert links(r.poll()) == 0
    nvmlsim.update_gpu(r.state, 3, {"call_returns": {"nvmlDeviceGetNvLinkState": 0}})
    assert links(r.poll()) == 18
    r.calls()
    r.poll()
    assert "nvmlDeviceGetNvLinkState" not in by_function(r.calls(), 3)  # complete now: kept
