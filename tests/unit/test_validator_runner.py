"""The validator's runner, profiles, report and CLI: exit codes, JSON report, textfile,
baseline, configuration errors. Checks here are small real modules registered for the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests import envneeds

from nodewarden import exitcodes
from nodewarden.cli import main
from nodewarden.validator import checks, profiles, registry, runner
from nodewarden.validator.base import RunContext
from nodewarden.validator.result import CheckResult, Measurement, exit_code


def _module(name: str, run, needs: tuple[str, ...] = (), defaults: dict | None = None) -> types.ModuleType:
    mod = types.ModuleType(f"nodewarden.validator.checks.{name}")
    mod.NAME, mod.NEEDS, mod.DEFAULTS, mod.QUICK, mod.run = name, needs, defaults or {}, {"size": 1}, run
    return mod


@pytest.fixture
def fake_checks(monkeypatch: pytest.MonkeyPatch):
    """Replace the suite with three small checks: one measuring a rate, one failing, one raising."""
    def rate(ctx, params):
        r = CheckResult("alpha", "pass")
        r.measure("rate", params["rate"], "B/s", threshold=params.get("min") or None)
        if r.measurements[0].ok() is False:
            r.status, r.reason = "fail", f"rate {params['rate']} below {params['min']}"
        return r

    def boom(ctx, params):
        raise RuntimeError("sensor exploded")

    mods = {"alpha": _module("alpha", rate, defaults={"rate": 100.0, "min": 0}),
            "beta": _module("beta", boom),
            "gamma": _module("gamma", lambda ctx, p: CheckResult("gamma", "pass"), needs=("gpu",))}
    monkeypatch.setattr(registry, "NAMES", tuple(mods))
    monkeypatch.setattr(registry, "QUICK_NAMES", ("alpha",))
    monkeypatch.setattr(registry, "get", lambda name: mods[name])
    return mods


def test_check_modules_match_the_registry() -> None:
    """The explicit list in nodewarden.validator.registry and the modules of the checks package
    stay in step."""
    folder = Path(checks.__file__).parent
    files = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(registry.NAMES) == files
    assert set(registry.QUICK_NAMES) <= set(registry.NAMES)
    for name in registry.NAMES:
        mod = registry.get(name)
        assert mod.NAME == name
        assert isinstance(mod.NEEDS, tuple) and isinstance(mod.DEFAULTS, dict) and callable(mod.run)


def test_exit_code_mapping() -> None:
    def res(*statuses: str) -> list[CheckResult]:
        return [CheckResult(f"c{i}", s) for i, s in enumerate(statuses)]
    assert exit_code(res("pass", "skip", "warn")) == exitcodes.OK
    assert exit_code(res("pass", "fail", "error")) == exitcodes.UNHEALTHY
    assert exit_code(res("pass", "error", "skip")) == exitcodes.INCOMPLETE
    assert exit_code([]) == exitcodes.OK


def test_runner_isolates_errors_and_skips_absent_hardware(fake_checks) -> None:
    ctx = RunContext(profile={"name": "generic"}, device="cpu")
    results = runner.run_suite(["alpha", "beta", "gamma"], ctx)
    by = {r.check: r for r in results}
    assert by["alpha"].status == "pass"
    assert by["beta"].status == "error" and "sensor exploded" in by["beta"].reason
    assert by["gamma"].status == "skip" and "GPU" in by["gamma"].reason
    assert all(r.duration_s >= 0 for r in results)


def test_params_merge_order(fake_checks) -> None:
    ctx = RunContext(profile={"alpha": {"min": 5}}, quick=True)
    assert runner.params_for("alpha", ctx) == {"rate": 100.0, "min": 5, "size": 1}


def test_cli_exit_codes_json_and_drain_line(fake_checks, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    rc = main(["validate", "--profile", "generic", "--checks", "alpha", "--set", "alpha.min=1000",
               "--json", str(out), "--no-progress"])
    assert rc == exitcodes.UNHEALTHY
    text = capsys.readouterr().out
    assert "DRAIN: nodewarden alpha: rate 100.0 below 1000" in text
    doc = json.loads(out.read_text())
    assert doc["schema"] == "nodewarden.validate/1" and doc["exit_code"] == 1 and doc["profile"] == "generic"
    (check,) = doc["checks"]
    assert check["status"] == "fail"
    assert check["measurements"] == [{"name": "rate", "value": 100.0, "unit": "B/s", "threshold": 1000,
                                      "op": ">=", "device": None}]


def test_cli_usage_errors_exit_2(fake_checks, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--checks", "alpha,nope", "--no-progress"]) == exitcodes.USAGE
    assert "unknown check(s) nope" in capsys.readouterr().err
    assert main(["validate", "--profile", "b200_magic", "--no-progress"]) == exitcodes.USAGE
    assert "unknown profile 'b200_magic'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[checks.omega]\nmin = 1\n")
    assert main(["validate", "--config", str(bad), "--no-progress"]) == exitcodes.USAGE
    assert "checks.omega: unknown check" in capsys.readouterr().err
    bad.write_text("[checks.alpha\n")
    assert main(["validate", "--config", str(bad), "--no-progress"]) == exitcodes.USAGE
    assert "invalid TOML" in capsys.readouterr().err


def test_cli_error_only_run_exits_3(fake_checks) -> None:
    assert main(["validate", "--profile", "generic", "--checks", "beta", "--no-progress"]) == exitcodes.INCOMPLETE


def test_baseline_recorded_then_enforced(fake_checks, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "baseline.json"
    assert main(["validate", "--profile", "generic", "--checks", "alpha", "--baseline", str(base), "--no-progress"]) == 0
    assert json.loads(base.read_text())["checks"] == {"alpha": {"rate": 100.0}}
    # Same speed: passes, and the ratio is reported.
    out = tmp_path / "r.json"
    assert main(["validate", "--profile", "generic", "--checks", "alpha", "--baseline", str(base), "--json", str(out),
                 "--no-progress"]) == 0
    ratio = [m for m in json.loads(out.read_text())["checks"][0]["measurements"] if m["name"] == "rate_vs_baseline"]
    assert ratio[0]["value"] == 1.0 and ratio[0]["threshold"] == 0.9
    # 20 % slower than its own baseline: the node is drained even without a profile threshold.
    assert main(["validate", "--profile", "generic", "--checks", "alpha", "--baseline", str(base),
                 "--set", "alpha.rate=80.0", "--no-progress"]) == exitcodes.UNHEALTHY
    assert "80% of baseline" in capsys.readouterr().out
    # ... unless the tolerance allows it.
    assert main(["validate", "--profile", "generic", "--checks", "alpha", "--baseline", str(base),
                 "--set", "alpha.rate=80.0", "--tolerance", "0.25", "--no-progress"]) == exitcodes.OK


def test_textfile_is_valid_prometheus(fake_checks, tmp_path: Path) -> None:
    assert main(["validate", "--profile", "generic", "--checks", "alpha,gamma", "--textfile", str(tmp_path),
                 "--no-progress"]) == 0
    prom = (tmp_path / "nodewarden_validator.prom").read_text()
    assert 'nodewarden_validator_check_status{check="alpha",status="pass"} 1.0' in prom
    assert 'nodewarden_validator_check_status{check="gamma",status="skip"} 1.0' in prom
    assert 'nodewarden_validator_check_status{check="gamma",status="pass"} 0.0' in prom
    assert 'nodewarden_validator_check_value{check="alpha",device="",metric="rate",unit="B/s"} 100.0' in prom
    assert "nodewarden_validator_last_run_timestamp_seconds" in prom
    promtool = envneeds.command("promtool", "lints the validator's metrics (Debian package prometheus)")
    proc = subprocess.run([promtool, "check", "metrics"], input=prom, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("product, expected", [
    ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm5_80gb"),
    ("NVIDIA H200", "h200_sxm_141gb"),
    ("NVIDIA GeForce RTX 4090", "generic"),
    (None, "generic"),
])
def test_profile_auto_match(product: str | None, expected: str) -> None:
    assert profiles.match(product) == expected
    assert profiles.resolve("auto", product=product or "")["name"] == expected


def test_every_profile_has_a_table_per_check() -> None:
    for name in profiles.names():
        prof = profiles.load(name)
        assert prof["name"] == name
        for check in registry.NAMES:
            assert isinstance(prof.get(check), dict), (name, check)
        for table in (prof[c] for c in registry.NAMES):
            for key, value in table.items():
                assert isinstance(value, (int, float, str, bool)), (name, key)


def test_measurement_ok() -> None:
    assert Measurement("x", 5, "B/s", threshold=4).ok() is True
    assert Measurement("x", 3, "B/s", threshold=4).ok() is False
    assert Measurement("x", 3, "s", threshold=4, op="<=").ok() is True
    assert Measurement("x", "n/a", "", threshold=4).ok() is None
    assert Measurement("x", 3, "B/s").ok() is None


def test_validate_never_imports_heavy_modules_for_usage_errors() -> None:
    """`nodewarden validate --list` (and the agent) must not pull in torch or pandas."""
    code = ("import sys; from nodewarden.cli import main; main(['validate', '--list']); "
            "print('torch' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def test_misspelt_parameters_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt threshold would never apply: usage error naming it, not a silent pass."""
    assert main(["validate", "--checks", "links", "--set", "links.ib_min_ports_typo=3", "--no-progress"]) == 2
    assert "unknown parameter 'ib_min_ports_typo' of check links" in capsys.readouterr().err
    cfg = tmp_path / "c.toml"
    cfg.write_text("[checks.links]\nib_ports_minimum = 8\n")
    assert main(["validate", "--checks", "links", "--config", str(cfg), "--no-progress"]) == 2
    assert "checks.links.ib_ports_minimum: unknown parameter" in capsys.readouterr().err


def test_gpus_on_the_bus_without_cuda_are_incomplete_not_a_cpu_pass(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--device auto on a node whose GPUs PyTorch cannot use (a CPU-only torch here) must not pass
    the GPU checks on the CPU fallback: could not complete (exit 3); --device cpu still runs them
    on purpose, and the table and the JSON report say cpu and the profile."""
    torch = envneeds.module("torch", "the validator's compute checks (tests/run.sh installs the CPU build)")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    sysfs = FIXTURES / "h100-hgx-ndr"
    small = ["--set", "gpu_memory.cpu_buffer_bytes=1048576", "--profile", "generic", "--no-progress"]
    assert main(["validate", "--checks", "gpu_memory", "--sysfs", str(sysfs), *small]) == exitcodes.INCOMPLETE
    out = capsys.readouterr().out
    assert ("INCOMPLETE: nodewarden gpu_memory: 8 NVIDIA GPU(s) on this node but PyTorch "
            f"{torch.__version__} is a CPU-only build (no CUDA)") in out
    assert "DRAIN:" not in out
    report = tmp_path / "r.json"
    assert main(["validate", "--checks", "gpu_memory", "--sysfs", str(sysfs), "--device", "cpu", "--json",
                 str(report), *small]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "gpu_memory" in line)
    assert [c.strip() for c in row.split("│")[1:5]] == ["gpu_memory", "pass", "cpu", "generic"]
    doc = json.loads(report.read_text())
    assert (doc["device"], doc["device_requested"], doc["profile"]) == ("cpu", "cpu", "generic")
    (check,) = doc["checks"]
    assert (check["status"], check["device"], check["profile"]) == ("pass", "cpu", "generic")


def test_auto_without_a_gpu_skips_the_compute_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """The default device on a node without an NVIDIA GPU (a VM's PCI bus): gemm, gpu_memory and
    allreduce did not test anything, so they are skip with the reason, never pass on the CPU."""
    torch = envneeds.module("torch", "the validator's compute checks (tests/run.sh installs the CPU build)")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    from nodewarden.validator.base import nvml_gpu_count
    if nvml_gpu_count():
        pytest.skip("NVML reports GPUs on this machine")
    ctx = RunContext(profile=profiles.load("generic"), sysfs=FIXTURES / "vm-virtio")
    results = runner.run_suite(["gpu_memory", "gemm", "allreduce"], ctx)
    assert [(r.status, r.device, r.profile) for r in results] == [("skip", None, "generic")] * 3
    assert all(r.reason == "no NVIDIA GPU on this node (none on the PCI bus, none in NVML)" for r in results)
    assert exit_code(results) == exitcodes.OK


def test_device_cuda_without_cuda_is_an_error_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--device cuda where PyTorch sees no CUDA device: gemm and gpu_memory used to pass with
    "0 GiB written"; the device asked for is absent: error, exit 3."""
    torch = envneeds.module("torch", "the validator's compute checks (tests/run.sh installs the CPU build)")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    report = tmp_path / "r.json"
    assert main(["validate", "--checks", "gpu_memory,gemm", "--device", "cuda", "--profile", "generic",
                 "--json", str(report), "--no-progress"]) == exitcodes.INCOMPLETE
    doc = json.loads(report.read_text())
    assert doc["device"] is None and doc["device_requested"] == "cuda"
    for check in doc["checks"]:
        assert check["status"] == "error" and check["measurements"] == [], check
        assert check["reason"].startswith("--device cuda: PyTorch ")
    assert "GiB written" not in capsys.readouterr().out
    # the checks themselves, called without the runner, refuse as well
    from nodewarden.validator.checks import gemm, gpu_memory
    ctx = RunContext(profile={}, device="cuda")
    assert gpu_memory.run(ctx, {}).status == "error" and gemm.run(ctx, {}).status == "error"


@pytest.mark.parametrize("pci_class, counted", [("0x030200", True), ("0x030000", True), ("0x038000", True),
                                                ("0x068000", False), ("0x020000", False)])
def test_nvidia_gpus_on_the_pci_bus(tmp_path: Path, pci_class: str, counted: bool) -> None:
    """An NVIDIA function of display class (VGA, 3D controller, other) is a GPU; an NVSwitch
    (bridge 0x0680) or a NIC is not; another vendor's display is not."""
    from nodewarden.validator.base import nvidia_gpus_on_pci
    for bdf, vendor, cls in (("0000:18:00.0", "0x10de", pci_class), ("0000:03:00.0", "0x1a03", "0x030000")):
        d = tmp_path / "bus" / "pci" / "devices" / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
    assert nvidia_gpus_on_pci(tmp_path) == (["0000:18:00.0"] if counted else [])
    assert nvidia_gpus_on_pci(tmp_path / "absent") == []
    assert len(nvidia_gpus_on_pci(FIXTURES / "h100-hgx-ndr")) == 8
    assert nvidia_gpus_on_pci(FIXTURES / "vm-virtio") == []


@pytest.mark.parametrize("argv, says", [
    (["--checks", ","], "--checks ',' names no check"),
    (["--checks", ""], "--checks '' names no check"),
    (["--tolerance", "-5"], "--tolerance"),
    (["--tolerance", "nan"], "--tolerance"),
    (["--tolerance", "inf"], "--tolerance"),
    (["--tolerance", "1"], "--tolerance"),
    (["--sysfs", "/nonexistent"], "--sysfs /nonexistent: no such directory"),
    (["--sysfs", "/etc/passwd"], "--sysfs /etc/passwd: no such directory"),
    (["--procfs", "/nonexistent"], "--procfs /nonexistent: no such directory"),
    (["--nvml-timeout", "0"], "--nvml-timeout"),
    (["--nvml-timeout", "nan"], "--nvml-timeout"),
    (["--nvml-timeout", "-1"], "--nvml-timeout"),
    (["--nvml-timeout", "1e9"], "--nvml-timeout"),
    (["--set", "gemm.seconds=nan"], "gemm.seconds: must be a finite number >= 0 (got nan)"),
    (["--set", "gemm.seconds=inf"], "gemm.seconds: must be a finite number >= 0 (got inf)"),
    (["--set", "storage.streams=-5"], "storage.streams: must be a finite number >= 0 (got -5)"),
    (["--set", "gpu_memory.walking_bits=[0, -1]"], "gpu_memory.walking_bits: must be a finite number >= 0"),
    (["--set", "storage.write_min_bytes_per_second=-inf"], "storage.write_min_bytes_per_second"),
])
def test_validate_refuses_bad_selections_and_numbers(argv: list[str], says: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing runs: an empty selection, a tolerance outside [0, 1), a NaN, infinite or negative
    parameter are usage errors (exit 2) naming the option, not a healthy exit 0."""
    try:
        rc = main(["validate", "--no-progress", *argv])
    except SystemExit as e:  # argparse's own type checks
        rc = e.code
    assert rc == exitcodes.USAGE
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_config_file_numbers_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[checks.gemm]\ntolerance_scale = nan\n")
    assert main(["validate", "--checks", "gemm", "--config", str(cfg), "--no-progress"]) == exitcodes.USAGE
    assert "checks.gemm.tolerance_scale: must be a finite number >= 0 (got nan)" in capsys.readouterr().err


def test_baseline_tolerance_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "b.json"
    base.write_text('{"version": 1, "checks": {}, "tolerance": NaN}')
    assert main(["validate", "--checks", "links", "--baseline", str(base), "--no-progress"]) == exitcodes.USAGE
    assert "tolerance must be a fraction from 0 to below 1 (got nan)" in capsys.readouterr().err


# ---- a core-only install, or a torch that does not import: real child processes --------------------

ROOT = Path(__file__).resolve().parents[2]
BROKEN_TORCH = 'raise OSError("libcudart.so.12: cannot open shared object file: No such file or directory")\n'


def torch_dir(tmp_path: Path, kind: str) -> Path:
    """A sys.path entry that hides torch (``hidden``: ``sys.modules['torch'] = None`` at start-up,
    so that neither find_spec nor import finds it, as on a core-only install) or shadows it with a
    package that raises on import (``broken``: a CUDA build whose libraries are missing)."""
    d = tmp_path / f"torch-{kind}"
    if kind == "hidden":
        d.mkdir()
        (d / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    else:
        (d / "torch").mkdir(parents=True)
        (d / "torch" / "__init__.py").write_text(BROKEN_TORCH)
    return d


@pytest.fixture(scope="module")
def nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests import nvmlsim
    return nvmlsim.build(tmp_path_factory.mktemp("nvml"))


def validate_child(tmp_path: Path, nvml_lib: Path, kind: str, sysfs: Path, *args: str,
                   nvml_gpus: int = 0) -> tuple[int, dict, str]:
    """``python -m nodewarden validate`` in a child whose torch is ``kind`` and whose NVML is the
    simulator with ``nvml_gpus`` GPUs (0: no driver). Returns (exit code, JSON report, output)."""
    from tests import nvmlsim
    state = tmp_path / "nvml.json"
    if nvml_gpus:
        nvmlsim.write_state(state, nvmlsim.default_gpus(nvml_gpus))
    env = nvmlsim.env(nvml_lib, state)  # no state file: nvmlInit says the driver is not loaded
    env["PYTHONPATH"] = f"{torch_dir(tmp_path, kind)}{os.pathsep}{ROOT}"
    report = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "nodewarden", "validate", "--no-progress", "--profile", "generic",
                        "--sysfs", str(sysfs), "--json", str(report), *args],
                       env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(report.read_text()), p.stdout + p.stderr


COMPUTE = ("--checks", "gpu_memory,gemm,allreduce")


def test_core_only_install_on_a_gpu_node_could_not_complete(tmp_path: Path, nvml_lib: Path) -> None:
    """Without torch on a node with NVIDIA GPUs (PCI bus) the gate is "could not complete", not
    healthy: the Slurm wrapper's action for exit 3 applies."""
    rc, doc, out = validate_child(tmp_path, nvml_lib, "hidden", FIXTURES / "h100-hgx-ndr", *COMPUTE)
    assert rc == exitcodes.INCOMPLETE, out
    assert [c["status"] for c in doc["checks"]] == ["error"] * 3
    assert {c["reason"] for c in doc["checks"]} == {
        "8 NVIDIA GPU(s) on this node but PyTorch is not installed (install nodewarden[validate])"}
    assert "INCOMPLETE: nodewarden gemm: 8 NVIDIA GPU(s)" in out


def test_core_only_install_counts_gpus_from_nvml_too(tmp_path: Path, nvml_lib: Path) -> None:
    """GPUs the driver reports through NVML count even where the PCI bus shows none (a VM tree)."""
    rc, doc, out = validate_child(tmp_path, nvml_lib, "hidden", FIXTURES / "vm-virtio", *COMPUTE, nvml_gpus=2)
    assert rc == exitcodes.INCOMPLETE, out
    assert doc["checks"][0]["reason"].startswith("2 NVIDIA GPU(s) on this node but PyTorch is not installed")


def test_core_only_install_on_a_node_without_gpus_skips(tmp_path: Path, nvml_lib: Path) -> None:
    rc, doc, out = validate_child(tmp_path, nvml_lib, "hidden", FIXTURES / "vm-virtio", *COMPUTE)
    assert rc == exitcodes.OK, out
    assert [(c["status"], c["device"]) for c in doc["checks"]] == [("skip", None)] * 3
    assert doc["device"] is None


@pytest.mark.parametrize("device", ["auto", "cuda", "cpu"])
def test_torch_that_fails_to_import_is_an_error_with_its_message(tmp_path: Path, nvml_lib: Path, device: str) -> None:
    """A broken torch used to end the run with a traceback and exit 1 ("drain"): each compute
    check is now an error carrying the import's message, exit 3, on every device choice."""
    rc, doc, out = validate_child(tmp_path, nvml_lib, "broken", FIXTURES / "h100-hgx-ndr", *COMPUTE,
                                  "--device", device)
    assert rc == exitcodes.INCOMPLETE, out
    for c in doc["checks"]:
        assert c["status"] == "error"
        assert "PyTorch does not import: OSError: libcudart.so.12: cannot open shared object file" in c["reason"]
    assert doc["device_requested"] == device and doc["device"] is None


def test_broken_torch_does_not_break_other_checks(tmp_path: Path, nvml_lib: Path) -> None:
    """A run without compute checks never imports torch (it used to, for the report's device)."""
    rc, doc, out = validate_child(tmp_path, nvml_lib, "broken", FIXTURES / "h100-hgx-ndr", "--checks", "links",
                                  "--set", "links.nvml=false")
    assert rc in (exitcodes.OK, exitcodes.UNHEALTHY), out
    assert doc["device"] is None and doc["checks"][0]["check"] == "links"
