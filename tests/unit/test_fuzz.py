"""The line parser's coverage-guided fuzz target (tests/fuzz/fuzz_line_parser.py, atheris), run for
a bounded time (NODEWARDEN_FUZZ_SECONDS, default 20) in a subprocess, seeded with the real
cases and the regression inputs. A crash makes atheris exit non-zero with the input printed:
keep that input in test_parser_properties.REGRESSIONS and fix the kind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests import envneeds

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "tests" / "fuzz" / "fuzz_line_parser.py"
SECONDS = int(os.environ.get("NODEWARDEN_FUZZ_SECONDS", "20"))


def test_fuzz_the_line_parser_for_a_bounded_time(tmp_path: Path) -> None:
    envneeds.module("atheris", "the fuzz engine, the [test] extra", expected=envneeds.ON_X86_64)
    from test_parser_properties import REGRESSIONS

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for case in (ROOT / "tests" / "fixtures" / "real_cases").glob("*.log"):
        shutil.copy(case, corpus / case.name)
    for i, line in enumerate(REGRESSIONS):
        (corpus / f"regression-{i}").write_bytes(line.encode()[:4096])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(TARGET), f"-max_total_time={SECONDS}", "-max_len=4096", "-timeout=10",
         f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=SECONDS + 120, env=env, cwd=tmp_path)
    done = re.search(r"Done (\d+) runs in (\d+) second", proc.stderr)
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    print(f"fuzz: {done.group(1) if done else '?'} executions in {SECONDS} s, {len(crashes)} crash(es)")
    assert proc.returncode == 0 and not crashes, proc.stderr[-4000:]
    assert done and int(done.group(1)) > 1000, proc.stderr[-2000:]
