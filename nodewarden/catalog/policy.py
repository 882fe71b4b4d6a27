"""nodewarden's Xid policy: an action and a hardware flag for every code.

The shipped policy is ``policy.toml`` beside this module; an operator file and overrides are
layered on it by :func:`load_policy`. Vendor facts (the NVIDIA buckets a code's default comes
from) are in the catalog (:mod:`nodewarden.catalog.loading`); the decisions are here.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from nodewarden.catalog.loading import POLICY_FILE, rows, shipped_policy_data

__all__ = ["ACTIONS", "Policy", "Rule", "default_policy", "load_policy"]

# nodewarden's actions, mildest last. "drain" and "reset_gpu" both take the node out of
# scheduling (a GPU reset needs the GPU idle).
ACTIONS: tuple[str, ...] = ("drain", "reset_gpu", "restart_app", "ignore", "investigate")
REMOVES_NODE = frozenset({"drain", "reset_gpu"})


@dataclasses.dataclass(frozen=True)
class Rule:
    """One resolved policy rule: ``action`` (one of :data:`ACTIONS`), ``hardware``, and
    ``source``, which says where the rule came from (``policy.toml``, an operator file,
    ``overrides``, an NVIDIA bucket default, or the default for unknown codes)."""

    action: str
    hardware: bool
    source: str


_UNKNOWN_RULE = Rule("investigate", False, "default for codes not in the catalog")
_UNMAPPED_BUCKET = ("investigate", False)
_CODE_RE = re.compile(r"[0-9]+")


def _parse_code(key: object, where: str) -> int:
    if isinstance(key, bool):
        raise ValueError(f"{where}: Xid code {key!r} is not a positive integer")
    if isinstance(key, int):
        code = key
    elif isinstance(key, str) and _CODE_RE.fullmatch(key.strip()):
        code = int(key.strip())
    else:
        raise ValueError(f"{where}: Xid code {key!r} is not a positive integer")
    if code < 1:
        raise ValueError(f"{where}: Xid code {key!r} is not a positive integer")
    return code


def _parse_entry(entry: object, where: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected a table with 'action' and/or 'hardware', got {entry!r}")
    unknown = sorted(str(k) for k in entry if k not in ("action", "hardware"))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; expected 'action', 'hardware'")
    if not entry:
        raise ValueError(f"{where}: empty table; give 'action' and/or 'hardware'")
    fields: dict[str, Any] = {}
    if "action" in entry:
        action = entry["action"]
        if action not in ACTIONS:
            raise ValueError(
                f"{where}.action: invalid action {action!r}; expected one of {', '.join(ACTIONS)}"
            )
        fields["action"] = action
    if "hardware" in entry:
        hardware = entry["hardware"]
        if not isinstance(hardware, bool):
            raise ValueError(f"{where}.hardware: expected true or false, got {hardware!r}")
        fields["hardware"] = hardware
    return fields


class Policy:
    """nodewarden's Xid policy: an action and a hardware flag for every code.

    Build it with :func:`load_policy`; the shipped policy is ``policy.toml``. A code with an
    ``[xid.N]`` rule uses it; any other catalog code gets the default of its NVIDIA
    immediate-action bucket (``[bucket.NAME]``, else ``investigate``/not hardware); a code
    outside the catalog gets ``investigate``/not hardware. Instances are immutable.
    """

    __slots__ = ("_rules", "_buckets")

    def __init__(self, rules: Mapping[int, Rule], buckets: Mapping[str, Rule]) -> None:
        self._rules: dict[int, Rule] = dict(rules)
        self._buckets: dict[str, Rule] = dict(buckets)

    @classmethod
    def _build(cls, layers: Iterable[tuple[Mapping[str, Any], str]]) -> Policy:
        """Apply policy-file-shaped mappings in order; later layers win field by field."""
        rules: dict[int, Rule] = {}
        buckets: dict[str, Rule] = {}
        policy = cls(rules, buckets)
        for data, source in layers:
            unknown = sorted(str(k) for k in data if k not in ("xid", "bucket"))
            if unknown:
                raise ValueError(f"{source}: unknown table(s) {', '.join(unknown)}; expected [xid.N], [bucket.NAME]")
            bucket_tables = data.get("bucket", {})
            if not isinstance(bucket_tables, Mapping):
                raise ValueError(f"{source}: 'bucket' must be a table of [bucket.NAME] tables")
            for name, entry in bucket_tables.items():
                fields = _parse_entry(entry, f"bucket.{name}")
                base = policy._buckets.get(str(name), Rule(*_UNMAPPED_BUCKET, source))
                policy._buckets[str(name)] = Rule(
                    fields.get("action", base.action), fields.get("hardware", base.hardware), source
                )
            xid_tables = data.get("xid", {})
            if not isinstance(xid_tables, Mapping):
                raise ValueError(f"{source}: 'xid' must be a table of [xid.N] tables")
            for key, entry in xid_tables.items():
                where = f"xid.{key}"
                code = _parse_code(key, where)
                fields = _parse_entry(entry, where)
                base = policy.rule(code)
                policy._rules[code] = Rule(
                    fields.get("action", base.action), fields.get("hardware", base.hardware), source
                )
        return policy

    def rule(self, code: int) -> Rule:
        """The resolved :class:`Rule` for ``code`` (any int; never raises)."""
        code = operator.index(code)
        if code in self._rules:
            return self._rules[code]
        row = rows().get(code)
        if row is None:
            return _UNKNOWN_RULE
        default = self._buckets.get(row.immediate_action)
        if default is None:
            return Rule(*_UNMAPPED_BUCKET, f"default: NVIDIA bucket {row.immediate_action} has no mapping")
        return Rule(default.action, default.hardware, f"default for NVIDIA bucket {row.immediate_action}")

    def action(self, code: int) -> str:
        """The action for ``code``: one of :data:`ACTIONS` (str). Never raises for an int."""
        return self.rule(code).action

    def is_hardware(self, code: int) -> bool:
        """True when ``code`` is treated as a hardware fault (bool). Never raises for an int."""
        return self.rule(code).hardware

    def drains(self, code: int) -> bool:
        """True when ``code``'s action takes the node out of scheduling (``drain`` or ``reset_gpu``)."""
        return self.rule(code).action in REMOVES_NODE

    def drain_codes(self) -> tuple[int, ...]:
        """Sorted codes (catalog codes and any extra codes with a rule) whose action takes the
        node out of scheduling: ``drain`` or ``reset_gpu``, since a GPU reset needs an idle node.
        Returns a tuple of int."""
        candidates = set(rows()) | set(self._rules)
        return tuple(sorted(c for c in candidates if self.drains(c)))

    def __repr__(self) -> str:
        return f"Policy({len(self._rules)} rules, {len(self._buckets)} bucket defaults)"


@functools.cache
def default_policy() -> Policy:
    """The shipped policy (``policy.toml`` alone), built once on the first call."""
    return Policy._build([(shipped_policy_data(), POLICY_FILE)])


def load_policy(
    overrides: dict[int | str, dict] | None = None, path: str | None = None
) -> Policy:
    """Build the effective :class:`Policy`.

    Layers, later ones winning field by field: the shipped ``policy.toml``; then the
    operator's TOML file at ``path`` (same shape: ``[xid.79]`` tables with ``action`` and/or
    ``hardware``, optional ``[bucket.RESTART_APP]``-style defaults); then ``overrides``, a
    dict from Xid code (int or numeric str) to ``{"action": ..., "hardware": ...}``.

    Returns a Policy. Raises ``ValueError`` naming the offending key (``xid.79.action``,
    ``xid.abc``) for an invalid action, a non-integer or non-positive code, a non-boolean
    ``hardware``, an unknown field or table, or a TOML syntax error
    (``tomllib.TOMLDecodeError``, a ValueError); ``OSError`` when ``path`` cannot be read.
    """
    layers: list[tuple[Mapping[str, Any], str]] = [(shipped_policy_data(), POLICY_FILE)]
    if path is not None:
        with open(path, "rb") as fh:
            layers.append((tomllib.load(fh), str(path)))
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise ValueError(f"overrides: expected a dict of Xid code to table, got {overrides!r}")
        layers.append(({"xid": dict(overrides)}, "overrides"))
    if len(layers) == 1:
        return default_policy()
    return Policy._build(layers)
