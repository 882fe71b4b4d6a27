"""Hardware profiles: per-product thresholds for the validator's checks (TOML files beside this
module), chosen by name or, with ``auto``, from the GPU product name NVML reports."""

from __future__ import annotations

import copy
import logging
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from nodewarden import nvml

log = logging.getLogger(__name__)


class ProfileError(ValueError):
    """An unknown profile name, or a config file with a bad key or value (message names it)."""


def names() -> list[str]:
    """Names of the shipped profiles (file stems), sorted."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


def load(name: str) -> dict[str, Any]:
    """The shipped profile ``name`` as a dict (``name``, ``description``, ``match``, one table per
    check). Raises ProfileError for an unknown name."""
    if name not in names():
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(names())}, auto")
    with resources.files(__name__).joinpath(f"{name}.toml").open("rb") as f:
        return tomllib.load(f)


def _first_gpu_name(s: nvml.Session) -> str | None:
    if s.count() == 0:
        return None
    h = s.handle(0)
    return None if h is None else nvml.identity(s, h).name


def gpu_product_name(timeout_s: float = nvml.DEFAULT_TIMEOUT_S) -> str | None:
    """The first GPU's product name from NVML (``nvmlDeviceGetName`` of device 0, e.g. ``NVIDIA
    H100 80GB HBM3``), or None without NVML, without GPUs or when the call fails (a lost GPU).
    Raises :class:`nodewarden.nvml.NvmlTimeout` when NVML does not answer within ``timeout_s``
    seconds (or an earlier NVML call of this process is still blocked in the driver)."""
    try:
        name, _ = nvml.query(_first_gpu_name, timeout_s, "profile auto-detection (nvmlDeviceGetName)")
    except (nvml.GpuLost, nvml.NvmlCallError):
        return None
    return name


def match(product: str | None) -> str:
    """The profile whose ``match`` substrings occur in ``product`` (case-insensitive), else generic."""
    if product:
        low = product.lower()
        for n in names():
            for needle in load(n).get("match", []):
                if needle.lower() in low:
                    return n
    return "generic"


def resolve(name: str, product: str | None = None, timeout_s: float = nvml.DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Load ``name``; ``auto`` matches ``product`` (default: NVML's first GPU,
    :func:`gpu_product_name` bounded by ``timeout_s`` seconds) to a profile. NVML that does not
    answer in time is a node without a product name, as one without NVML: ``generic``, with a
    warning on the log (the checks that read NVML then fail at once on the same hung driver)."""
    if name == "auto":
        if product is None:
            try:
                product = gpu_product_name(timeout_s)
            except nvml.NvmlTimeout as e:
                log.warning("--profile auto: %s: no GPU product name, using the generic profile", e)
        return load(match(product))
    return load(name)


def apply_config(profile: dict[str, Any], path: str | Path | None, sets: list[str] | None = None) -> dict[str, Any]:
    """The profile with a config file's ``[checks.NAME]`` tables and ``NAME.key=value`` overrides
    merged in. Raises ProfileError naming the file and key for unknown checks or bad values: an
    unknown parameter, or a number (alone or in a list) that is NaN, infinite or negative (no
    parameter of a check takes one: sizes, counts, seconds, thresholds and ratios are >= 0)."""
    from nodewarden.validator.registry import NAMES

    merged = copy.deepcopy(profile)
    if path is not None:
        try:
            with open(path, "rb") as f:
                cfg = tomllib.load(f)
        except OSError as e:
            raise ProfileError(f"{path}: {e.strerror or e}") from e
        except tomllib.TOMLDecodeError as e:
            raise ProfileError(f"{path}: invalid TOML: {e}") from e
        for key in cfg:
            if key != "checks":
                raise ProfileError(f"{path}: unknown key {key!r} (expected [checks.NAME] tables)")
        for check, table in cfg.get("checks", {}).items():
            if check not in NAMES:
                raise ProfileError(f"{path}: checks.{check}: unknown check; known: {', '.join(NAMES)}")
            if not isinstance(table, dict):
                raise ProfileError(f"{path}: checks.{check}: expected a table")
            for key, value in table.items():
                _known_key(check, key, f"{path}: checks.{check}.{key}")
                _checked_number(value, f"{path}: checks.{check}.{key}")
            merged.setdefault(check, {}).update(table)
    for item in sets or []:
        key, sep, raw = item.partition("=")
        check, dot, param = key.partition(".")
        if not sep or not dot or not param:
            raise ProfileError(f"--set {item!r}: expected CHECK.KEY=VALUE")
        if check not in NAMES:
            raise ProfileError(f"--set {item!r}: unknown check {check!r}; known: {', '.join(NAMES)}")
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare string such as a path
        _known_key(check, param, f"--set {item!r}")
        _checked_number(value, f"--set {item!r}: {check}.{param}")
        merged.setdefault(check, {})[param] = value
    return merged


def known_keys(check: str) -> set[str]:
    """Parameters check ``check`` understands: its DEFAULTS and QUICK keys and every key a
    shipped profile sets for it."""
    from nodewarden.validator.registry import get

    mod = get(check)
    keys = set(getattr(mod, "DEFAULTS", {})) | set(getattr(mod, "QUICK", {}))
    for n in names():
        keys |= set(load(n).get(check, {}) or {})
    return keys


def _known_key(check: str, key: str, where: str) -> None:
    """A misspelt threshold would silently never apply: refuse it, naming it."""
    if key.startswith("inject_"):  # the checks' fault-injection hooks: tests set them on run(), no operator
        raise ProfileError(f"{where}: {key!r} of check {check} is a test hook that injects a fault, not a setting")
    keys = {k for k in known_keys(check) if not k.startswith("inject_")}
    if key not in keys:
        raise ProfileError(f"{where}: unknown parameter {key!r} of check {check}; known: {', '.join(sorted(keys))}")


def _checked_number(value: Any, where: str) -> None:
    """Refuse NaN, +-inf and negative numbers (also inside a list), naming ``where``."""
    import math
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v) or v < 0:
            raise ProfileError(f"{where}: must be a finite number >= 0 (got {v!r})")
