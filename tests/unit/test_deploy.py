"""Deployment files: the systemd validate units pass `systemd-analyze verify`, and the Slurm
health-check wrapper drains (or not) by nodewarden's exit status, run against a fake
`nodewarden` and a fake `scontrol` on PATH that record their arguments."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
HEALTHCHECK = ROOT / "deploy" / "slurm" / "nodewarden-healthcheck.sh"
UNITS = ("nodewarden-validate.service", "nodewarden-validate.timer")
INSTALLED = "/usr/local/bin/nodewarden"


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ---- systemd -------------------------------------------------------------------------------------

@envneeds.needs(shutil.which("systemd-analyze") is None, "systemd-analyze", "verifies the units (apt-get install systemd)")
def test_validate_units_verify(tmp_path: Path) -> None:
    """Verified as installed, with ExecStart's nodewarden pointed at a temporary stand-in (the
    real one need not be installed here)."""
    fake = executable(tmp_path / "nodewarden", "#!/bin/sh\nexit 0\n")
    for name in UNITS:
        (tmp_path / name).write_text((SYSTEMD / name).read_text().replace(INSTALLED, str(fake)))
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in UNITS)],
                       capture_output=True, text=True, timeout=60)
    ours = [line for line in (p.stdout + p.stderr).splitlines() if "nodewarden" in line]
    assert p.returncode == 0 and not ours, p.stdout + p.stderr


@envneeds.needs(shutil.which("systemd-analyze") is None, "systemd-analyze", "verifies the units (apt-get install systemd)")
def test_unverified_copy_only_misses_the_binary() -> None:
    """The shipped files as they are: the only complaint allowed is the absent nodewarden binary."""
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", *(str(SYSTEMD / n) for n in UNITS)],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        return  # nodewarden is installed at /usr/local/bin here
    problems = [line for line in (p.stdout + p.stderr).splitlines() if line.strip()]
    assert problems and all(INSTALLED in line for line in problems), problems


def test_unit_contents() -> None:
    service = (SYSTEMD / "nodewarden-validate.service").read_text()
    timer = (SYSTEMD / "nodewarden-validate.timer").read_text()
    assert "Type=oneshot" in service
    assert ("ExecStart=/usr/local/bin/nodewarden validate --no-progress --json /var/lib/nodewarden/validate.json "
            "--textfile /var/lib/node_exporter/textfile_collector") in service
    assert "--checks" not in service and "--quick" not in service  # the full suite
    for line in ("OnCalendar=weekly", "Persistent=yes", "WantedBy=timers.target"):
        assert line in timer
    assert any(line.startswith("RandomizedDelaySec=") for line in timer.splitlines())


# ---- Slurm health check -----------------------------------------------------------------------------

FAKE_NODEWARDEN = """#!/bin/sh
# Records its arguments, prints FAKE_OUTPUT, sleeps FAKE_SLEEP, exits FAKE_RC.
printf '%s\\n' "$@" > "$FAKE_LOG/nodewarden.args"
[ -n "${FAKE_OUTPUT:-}" ] && printf '%b\\n' "$FAKE_OUTPUT"
[ -n "${FAKE_SLEEP:-}" ] && exec sleep "$FAKE_SLEEP"
exit "${FAKE_RC:-0}"
"""
FAKE_SCONTROL = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_LOG/scontrol.args"
exit 0
"""


@pytest.fixture
def slurm(tmp_path: Path):
    """Run the wrapper with fake commands first on PATH; returns (run, log dir)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    executable(bindir / "nodewarden", FAKE_NODEWARDEN)
    executable(bindir / "scontrol", FAKE_SCONTROL)
    log = tmp_path / "log"
    log.mkdir()

    def run(rc: int, output: str = "", **env: str) -> subprocess.CompletedProcess:
        e = {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "FAKE_LOG": str(log),
             "FAKE_RC": str(rc), "FAKE_OUTPUT": output, "NODEWARDEN_NODENAME": "node01",
             "NODEWARDEN_JSON": str(tmp_path / "state" / "healthcheck.json"),
             "NODEWARDEN_DEFAULTS": str(tmp_path / "no-defaults"), "TMPDIR": str(tmp_path)}
        e.update(env)
        return subprocess.run(["/bin/sh", str(HEALTHCHECK)], env=e, capture_output=True, text=True, timeout=30)

    return run, log


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_healthy_does_not_drain(slurm) -> None:
    run, log = slurm
    p = run(0, "links pass")
    assert p.returncode == 0, p.stderr
    assert lines(log / "nodewarden.args")[:5] == ["validate", "--quick", "--no-progress", "--json",
                                                  str(log.parent / "state" / "healthcheck.json")]
    assert not (log / "scontrol.args").exists()
    assert (log.parent / "state").is_dir()  # the report's directory is made
    assert [p.name for p in log.parent.iterdir() if p.name.startswith("nodewarden-healthcheck.")] == []


def test_failed_check_drains_with_the_first_reason(slurm) -> None:
    run, log = slurm
    out = ("links  fail  mlx5_3/1 state DOWN phys_state Polling\\n"
           "DRAIN: nodewarden links: mlx5_3/1 state DOWN phys_state Polling\\n"
           "DRAIN: nodewarden gemm: bf16 410 TFLOP/s < 600 TFLOP/s")
    p = run(1, out)
    assert p.returncode == 1
    assert lines(log / "scontrol.args") == ["update", "nodename=node01", "state=drain",
                                            "reason=nodewarden links: mlx5_3/1 state DOWN phys_state Polling"]
    assert "draining node01" in p.stderr


def test_drain_reason_is_truncated_and_ascii(slurm) -> None:
    run, log = slurm
    p = run(1, "DRAIN: nodewarden gemm: fp16 ≥ " + "x" * 300, NODEWARDEN_REASON_MAX="40")
    assert p.returncode == 1
    reason = lines(log / "scontrol.args")[3]
    assert reason == "reason=nodewarden gemm: fp16..."  # cut at a word, ASCII dots (tests/unit/test_slurm_reason.py)


def test_failure_without_a_drain_line_still_drains(slurm) -> None:
    run, log = slurm
    assert run(1, "table only").returncode == 1
    assert lines(log / "scontrol.args")[3].startswith("reason=nodewarden: validation failed")


@pytest.mark.parametrize("rc", [2, 3])
def test_usage_and_incomplete_are_logged_not_drained(slurm, rc: int) -> None:
    run, log = slurm
    p = run(rc, "nodewarden validate: unknown check(s) bogus")
    assert p.returncode == rc
    assert not (log / "scontrol.args").exists()
    assert f"(exit {rc})" in p.stderr and "unknown check" in p.stderr


def test_incomplete_drains_when_configured(slurm) -> None:
    run, log = slurm
    p = run(3, "", NODEWARDEN_DRAIN_ON_INCOMPLETE="1")
    assert p.returncode == 3
    assert lines(log / "scontrol.args")[3] == "reason=nodewarden: validation could not complete (exit 3)"


def test_soft_exit_for_a_prolog(slurm) -> None:
    run, log = slurm
    assert run(3, "", NODEWARDEN_SOFT_EXIT="1").returncode == 0
    assert run(1, "DRAIN: nodewarden links: x", NODEWARDEN_SOFT_EXIT="1").returncode == 1


@envneeds.needs(shutil.which("timeout") is None, "timeout", "coreutils' timeout(1) runs the check under its limit")
def test_timeout_is_incomplete(slurm) -> None:
    run, log = slurm
    p = run(0, "", FAKE_SLEEP="20", NODEWARDEN_TIMEOUT="1")
    assert p.returncode == 3 and "did not finish within 1s" in p.stderr
    assert not (log / "scontrol.args").exists()


def test_missing_nodewarden_is_incomplete(slurm, tmp_path: Path) -> None:
    run, log = slurm
    p = run(0, "", NODEWARDEN=str(tmp_path / "absent" / "nodewarden"))
    assert p.returncode == 3 and "cannot run" in p.stderr


def test_args_and_defaults_file(slurm, tmp_path: Path) -> None:
    run, log = slurm
    defaults = tmp_path / "defaults"
    defaults.write_text('NODEWARDEN_ARGS="--quick --profile h100_sxm5_80gb"\nNODEWARDEN_NODENAME=gpu-a17\n')
    p = run(1, "DRAIN: nodewarden links: y", NODEWARDEN_DEFAULTS=str(defaults), NODEWARDEN_NODENAME="")
    assert p.returncode == 1
    assert lines(log / "nodewarden.args")[:4] == ["validate", "--quick", "--profile", "h100_sxm5_80gb"]
    assert lines(log / "scontrol.args")[1] == "nodename=gpu-a17"


@pytest.mark.parametrize("drain_on_incomplete", ["0", "1"])
def test_core_only_install_on_a_gpu_node_is_incomplete(slurm, tmp_path: Path, drain_on_incomplete: str) -> None:
    """The real nodewarden, installed without torch (hidden from a child interpreter) on a node
    with eight NVIDIA GPUs (the generated h100 fixture PCI tree): it used to exit 0 and the wrapper never drained
    or logged anything. Now exit 3: logged with the reason, drained only when configured."""
    import sys
    run, log = slurm
    hide = tmp_path / "no-torch"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    real = executable(tmp_path / "real-nodewarden",
                      f'#!/bin/sh\nPYTHONPATH="{hide}:{ROOT}" LD_LIBRARY_PATH= exec "{sys.executable}" -m nodewarden "$@"\n')
    sysfs = ROOT / "tests" / "fixtures" / "sysfs" / "h100-hgx-ndr"
    p = run(0, NODEWARDEN=str(real), NODEWARDEN_DRAIN_ON_INCOMPLETE=drain_on_incomplete,
            NODEWARDEN_ARGS=f"--quick --checks gpu_memory,gemm --profile generic --sysfs {sysfs}")
    assert p.returncode == 3, p.stderr
    assert ("could not complete (exit 3): nodewarden gpu_memory: 8 NVIDIA GPU(s) on this node but PyTorch is "
            "not installed") in p.stderr
    if drain_on_incomplete == "1":
        assert lines(log / "scontrol.args")[3].startswith(
            "reason=nodewarden: validation could not complete (exit 3): nodewarden gpu_memory: 8 NVIDIA GPU(s)")
    else:
        assert not (log / "scontrol.args").exists()
