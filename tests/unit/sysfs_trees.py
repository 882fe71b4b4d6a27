"""The sysfs fixture trees (tests/fixtures/sysfs, see PROVENANCE.md there) as the read layer's,
the collectors' and the checks' tests use them: a private copy per test, attributes rewritten in
place."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def copy_tree(name: str, tmp_path: Path) -> Path:
    """A copy of fixture tree ``name`` under ``tmp_path`` (symlinks kept, as sysfs has them)."""
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst, symlinks=True)
    return dst


def put(root: Path, rel: str, value: object) -> None:
    """Write one attribute (``value`` and a newline, as sysfs prints it), creating its directory."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def break_aer_files(root: Path, bdf: str = "0000:ba:00.0") -> Path:
    """Make ``aer_dev_nonfatal`` of ``bdf`` unreadable (a directory: EISDIR) and give
    ``aer_dev_fatal`` one line that is no ``<error> <count>``; returns the function's directory."""
    fn = root / "bus/pci/devices" / bdf
    target = os.path.realpath(fn / "aer_dev_nonfatal")
    os.unlink(target)
    os.mkdir(target)
    (fn / "aer_dev_fatal").write_text("DLP 0\nbroken\nTOTAL_ERR_FATAL 0\n")
    return fn


def add_mlx5_vf(root: Path) -> str:
    """An SR-IOV VF (``physfn`` link) of the h100 trees' mlx5_0 function 0000:1a:00.0, as
    ``bus/pci/devices/0000:1a:00.2``; returns its bdf. Readers leave VFs out."""
    vf = root / "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.2"
    vf.mkdir()
    for k, v in (("vendor", "0x15b3"), ("device", "0x101e"), ("class", "0x020700")):
        (vf / k).write_text(v + "\n")
    os.symlink("../0000:1a:00.0", vf / "physfn")
    os.symlink(os.path.relpath(vf, root / "bus/pci/devices"), root / "bus/pci/devices/0000:1a:00.2")
    return "0000:1a:00.2"
