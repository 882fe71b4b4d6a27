"""What a test needs from the machine it runs on (a program, a Python package, root, a writable
/dev/kmsg, a mount), and the one rule for when it is missing: outside CI the test is skipped with
the reason ``environment: <piece> missing: <why>``; under ``CI=true`` it fails with
``CI=true: <piece> missing: <why>``, so that a CI run never turns green with holes in it.

``tests/run.sh`` installs every piece it can; ``tests/conftest.py`` groups the skips by piece in
the summary. A test that does not apply to this machine (it has a GPU, it runs as root) is no
missing piece: it stays a plain ``pytest.skip``.
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

SKIP_PREFIX = "environment: "
MARKER = "envneed"
# hyperscan and atheris publish wheels for x86_64 only (the markers of pyproject.toml's extras):
# elsewhere their absence is expected, a plain skip.
ON_X86_64 = platform.machine() in ("x86_64", "AMD64")


def in_ci() -> bool:
    """True when the environment says this is a CI run (``CI=true``, as CI services set it;
    ``1`` and any letter case count too)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def missing_message(piece: str, why: str) -> str:
    """``"<piece> missing: <why>"``, the core of both the skip reason and the CI failure."""
    return f"{piece} missing: {why}"


def need(piece: str, why: str, *, expected: bool = True) -> NoReturn:
    """Stop the calling test (or test module, at import) because ``piece`` is missing; ``why``
    says what the test does with it and how to get it. Skips outside CI, fails under ``CI=true``.
    ``expected=False``: the piece is not built for this platform (no wheels for it), a plain
    skip even under CI."""
    message = missing_message(piece, why)
    if expected and in_ci():
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(SKIP_PREFIX + message if expected else message, allow_module_level=True)


def command(name: str, why: str, *alternatives: str) -> str:
    """The path of program ``name`` (or the first of ``alternatives`` found) on PATH; else
    :func:`need` it."""
    for candidate in (name, *alternatives):
        path = shutil.which(candidate)
        if path is not None:
            return path
    need(name, why)


def module(name: str, why: str, *, expected: bool = True) -> ModuleType:
    """Import and return module ``name``; :func:`need` it when it is not installed
    (ModuleNotFoundError for it or a parent package). Other import errors propagate: a package
    that is installed but broken is a failure, never a skip."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
            raise
        need(name, why, expected=expected)


def root(why: str) -> None:
    """:func:`need` root (effective uid 0) unless this process has it."""
    if os.geteuid() != 0:
        need("root", why)


def needs(missing: bool, piece: str, why: str, *, expected: bool = True) -> pytest.MarkDecorator:
    """A mark (for a test, a class, a ``pytest.param`` or ``pytestmark``) that applies
    :func:`need` at the test's setup when ``missing`` is true, as
    ``pytest.mark.skipif(missing, ...)`` would skip."""
    return getattr(pytest.mark, MARKER)(piece, why, missing=bool(missing), expected=expected)


def _kmsg_asked() -> bool:
    return os.environ.get("NODEWARDEN_WRITE_KMSG") == "1"


def kmsg_write(refusal: str | None) -> None:
    """Stop the calling test when it may not write into /dev/kmsg; ``refusal`` is
    ``kmsgtools.kmsg_refusal()``'s answer (None: it may). Without ``NODEWARDEN_WRITE_KMSG=1`` a
    plain skip, under CI too: an explicit choice, this machine's kernel log is not the tests'
    (tests/run.sh asks for it). Asked for and refused by the machine (not root, not writable):
    :func:`need` ``writable /dev/kmsg``."""
    if refusal is None:
        return
    if not _kmsg_asked():
        pytest.skip(refusal)
    need("writable /dev/kmsg", refusal)


def needs_kmsg_write(refusal: str | None) -> pytest.MarkDecorator:
    """:func:`kmsg_write` as a mark (for a test, a class or ``pytestmark``)."""
    if refusal is not None and not _kmsg_asked():
        return pytest.mark.skip(reason=refusal)
    return needs(refusal is not None, "writable /dev/kmsg", refusal or "")
