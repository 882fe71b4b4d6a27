"""validate's arguments are checked before the suite runs (exit 2, naming them), and its
reports never replace what is not a regular file: ``--json /dev/stdout`` (or a FIFO, a device)
is written into, a symlink's target is replaced atomically, the link kept."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from nodewarden import exitcodes
from nodewarden.cli import main

LINKS = ["validate", "--checks", "links", "--profile", "generic", "--no-progress"]


def test_a_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main([*LINKS, "--json", str(fifo)]) in (exitcodes.OK, exitcodes.UNHEALTHY, exitcodes.INCOMPLETE)
    reader.join(10)
    assert fifo.is_fifo()  # still a FIFO: it was once renamed over with a regular file
    assert json.loads(got[0])["schema"] == "nodewarden.validate/1"


def test_a_symlink_keeps_pointing_at_its_report(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("target.json")
    main([*LINKS, "--json", str(tmp_path / "link")])
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["schema"] == "nodewarden.validate/1"


@pytest.mark.parametrize("args, message", [
    (["--json", ""], "--json: an empty path"),
    (["--json", "/nonexistent-dir/x.json"], "--json: /nonexistent-dir/x.json: no directory"),
    (["--json", "{tmp}"], "is a directory"),
    (["--textfile", "/nonexistent-dir"], "--textfile: /nonexistent-dir: not a directory"),
    (["--set", "cpu.duration_seconds=0", "--checks", "cpu"], "cpu: duration_seconds must be"),
    (["--set", "gemm.n=1.5", "--checks", "gemm", "--device", "cpu"], "gemm: n must be an integer"),
    (["--set", "cpu.inject_wrong_answer_cpu=0", "--checks", "cpu"], "is a test hook that injects a fault"),
    (["--set", "allreduce.inject_wrong_rank=1", "--checks", "allreduce"], "is a test hook"),
])
def test_bad_arguments_stop_before_anything_runs(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    argv = ["validate", "--profile", "generic", "--no-progress", *args]
    if "--checks" not in args:
        argv += ["--checks", "links"]
    assert main(argv) == exitcodes.USAGE
    err = capsys.readouterr()
    assert message in err.err
    assert err.out == ""  # no table: nothing ran


def test_an_injection_hook_in_a_config_file_is_refused(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "v.toml"
    cfg.write_text("[checks.host_memory_bandwidth]\ninject_corrupt_element = 3\n")
    assert main(["validate", "--checks", "host_memory_bandwidth", "--config", str(cfg), "--no-progress"]) \
        == exitcodes.USAGE
    assert "inject_corrupt_element" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[1, 2]"])
def test_a_bad_baseline_file_is_named(tmp_path: Path, capsys, content: bytes) -> None:
    base = tmp_path / "base.json"
    base.write_bytes(content)
    assert main([*LINKS, "--baseline", str(base)]) == exitcodes.USAGE
    assert f"{base}: not a nodewarden baseline" in capsys.readouterr().err
