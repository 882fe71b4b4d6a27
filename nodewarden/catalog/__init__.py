"""The Xid catalog: what each NVIDIA Xid code means, its group, and what nodewarden does about it.

Two data files ship beside this module and are read once, on first use, through
:mod:`importlib.resources` (nothing is read at import time):

- ``xid_catalog.csv``: one row per Xid 1-172. ``mnemonic``, ``immediate_action``,
  ``investigatory_action`` and ``possible_causes`` are NVIDIA's facts (Xid catalog dated
  2025-10-29, causes from the r555 listing of Sep 2024); ``group`` is the Fire-Flyer paper's
  Table V group (arXiv 2408.14158v2) where ``group_source`` is ``paper``, else nodewarden's
  own assignment; ``description`` is nodewarden's own wording. See ``SOURCES.md``.
- ``policy.toml``: nodewarden's own policy (action and whether the fault is hardware),
  which an operator can override with :func:`load_policy`.

Everything here is pure: :func:`lookup`, :func:`explain` and :func:`as_dict` take a code
and an optional :class:`Policy`, and never raise for an integer code.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import operator
import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

__all__ = [
    "ACTIONS",
    "GROUPS",
    "GROUP_LABELS",
    "GROUP_REMEDY",
    "TABLE5_LABELS",
    "UNKNOWN_GROUP",
    "Policy",
    "Rule",
    "XidInfo",
    "as_dict",
    "catalog_version",
    "codes",
    "explain",
    "group_of",
    "load_policy",
    "lookup",
]

CATALOG_FILE = "xid_catalog.csv"
POLICY_FILE = "policy.toml"

# Provenance of the shipped data (SOURCES.md has the details).
NVIDIA_CATALOG_DATE = "2025-10-29"
NVIDIA_CAUSES_LISTING = "r555 (Sep 2024)"
PAPER = "Fire-Flyer AI-HPC, arXiv 2408.14158v2"

# The Fire-Flyer paper's Table V groups, in the paper's table order, as machine-readable keys.
GROUPS: tuple[str, ...] = ("software", "nvlink", "memory_ecc", "uncorrectable", "other")
UNKNOWN_GROUP = "unknown"

# Group names as printed in the paper's Table VI (Xid counts over one year); the analysis
# reproduces that table with these labels.
GROUP_LABELS: dict[str, str] = {
    "software": "Software Causes",
    "nvlink": "NVLink Error",
    "memory_ecc": "GPU ECC Error",
    "uncorrectable": "Uncorrectable Failures",
    "other": "GPU GSP ERROR",
}

# Group names as printed in the paper's Table V (the grouping itself).
TABLE5_LABELS: dict[str, str] = {
    "software": "Software Causes",
    "nvlink": "NVLink Error",
    "memory_ecc": "Memory ECC Error",
    "uncorrectable": "Uncorrectable GPU Failures",
    "other": "Other Failures",
}

# What to do about each group, after the paper's Table V, in nodewarden's words.
GROUP_REMEDY: dict[str, str] = {
    "software": (
        "Usually the application or its CUDA stack: restart the job and check the "
        "application; the GPU stays in service."
    ),
    "nvlink": (
        "Jobs using the link fail: take the node out, reset its GPUs, and check or "
        "replace the NVLink bridge or link if the error returns."
    ),
    "memory_ecc": (
        "GPU memory is wearing out: reset the GPU so row remapping (or page retirement) "
        "takes effect, test its memory, and replace the GPU when remapping fails."
    ),
    "uncorrectable": (
        "The GPU cannot recover by itself: drain the node and send it for hardware "
        "diagnosis and repair."
    ),
    "other": (
        "GPU firmware (GSP) or other faults: reset the GPU or reboot the node; update "
        "driver and firmware, or repair, if it recurs."
    ),
}

# nodewarden's actions, mildest last. "drain" and "reset_gpu" both take the node out of
# scheduling (a GPU reset needs the GPU idle).
ACTIONS: tuple[str, ...] = ("drain", "reset_gpu", "restart_app", "ignore", "investigate")
_REMOVES_NODE = frozenset({"drain", "reset_gpu"})
_ACTION_TEXT: dict[str, str] = {
    "drain": "drain: take the node out of scheduling until it is repaired or cleared",
    "reset_gpu": "reset_gpu: take the node out of scheduling, reset the GPU, validate, return it",
    "restart_app": "restart_app: restart the job; the node stays in service",
    "ignore": "ignore: nothing to do",
    "investigate": "investigate: the node stays in service; a person should read the log",
}

# The facts file's phrases for "no causes": kept verbatim in the CSV, shown as a note.
_NO_CAUSES = ("no cause marked in r555 listing", "not in r555 cause listing (newer code)")
_NONE_LISTED = "none listed"

_CSV_COLUMNS = (
    "xid", "mnemonic", "description", "group", "group_source",
    "immediate_action", "investigatory_action", "possible_causes",
)


@dataclasses.dataclass(frozen=True)
class XidInfo:
    """Everything nodewarden knows about one Xid code.

    Fields:
      code: the Xid number.
      known: False for a code that is not in the shipped catalog.
      mnemonic: NVIDIA's mnemonic (``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS``); None if unknown.
      description: nodewarden's one-line description.
      group: one of :data:`GROUPS`, or ``"unknown"``.
      group_source: ``paper`` (Fire-Flyer Table V), ``nodewarden``, or ``unknown``.
      immediate_action / investigatory_action: NVIDIA's resolution buckets
        (``RESTART_APP``, ``RESET_GPU``, ``CONTACT_SUPPORT``, ...); None where NVIDIA lists none.
      possible_causes: the causes NVIDIA's r555 listing marks (``HW error``, ``driver error``...).
      action: nodewarden's policy action, one of :data:`ACTIONS`.
      hardware: True when the policy treats the code as a hardware fault that takes the node
        out of scheduling.
    """

    code: int
    known: bool
    mnemonic: str | None
    description: str
    group: str
    group_source: str
    immediate_action: str | None
    investigatory_action: str | None
    possible_causes: tuple[str, ...]
    action: str
    hardware: bool


@dataclasses.dataclass(frozen=True)
class Rule:
    """One resolved policy rule: ``action`` (one of :data:`ACTIONS`), ``hardware``, and
    ``source``, which says where the rule came from (``policy.toml``, an operator file,
    ``overrides``, an NVIDIA bucket default, or the default for unknown codes)."""

    action: str
    hardware: bool
    source: str


@dataclasses.dataclass(frozen=True)
class _Row:
    code: int
    mnemonic: str
    description: str
    group: str
    group_source: str
    immediate_action: str
    investigatory_action: str
    possible_causes: str


# --- data loading (lazy, once) --------------------------------------------------------------

def _read_resource(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _rows() -> dict[int, _Row]:
    reader = csv.DictReader(io.StringIO(_read_resource(CATALOG_FILE)))
    if tuple(reader.fieldnames or ()) != _CSV_COLUMNS:
        raise RuntimeError(f"{CATALOG_FILE}: unexpected columns {reader.fieldnames!r}")
    rows: dict[int, _Row] = {}
    for rec in reader:
        row = _Row(
            code=int(rec["xid"]),
            mnemonic=rec["mnemonic"],
            description=rec["description"],
            group=rec["group"],
            group_source=rec["group_source"],
            immediate_action=rec["immediate_action"],
            investigatory_action=rec["investigatory_action"],
            possible_causes=rec["possible_causes"],
        )
        if row.group not in GROUPS:
            raise RuntimeError(f"{CATALOG_FILE}: Xid {row.code} has unknown group {row.group!r}")
        rows[row.code] = row
    return rows


@functools.cache
def _shipped_policy_data() -> dict[str, Any]:
    return tomllib.loads(_read_resource(POLICY_FILE))


@functools.cache
def _default_policy() -> Policy:
    return Policy._build([(_shipped_policy_data(), POLICY_FILE)])


# --- small helpers ------------------------------------------------------------------------

def _bucket(value: str) -> str | None:
    return None if value == _NONE_LISTED else value


def _causes(value: str) -> tuple[str, ...]:
    if value in _NO_CAUSES or not value:
        return ()
    return tuple(part.strip() for part in value.split(";") if part.strip())


def _causes_note(code: int) -> str | None:
    row = _rows().get(code)
    if row is None:
        return None
    if row.possible_causes == _NO_CAUSES[1]:
        return "none: the code is newer than NVIDIA's r555 cause listing"
    if row.possible_causes == _NO_CAUSES[0] or not row.possible_causes:
        return "none marked in NVIDIA's r555 listing"
    return None


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


# --- policy ---------------------------------------------------------------------------------

_UNKNOWN_RULE = Rule("investigate", False, "default for codes not in the catalog")
_UNMAPPED_BUCKET = ("investigate", False)


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
        row = _rows().get(code)
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
        return self.rule(code).action in _REMOVES_NODE

    def drain_codes(self) -> tuple[int, ...]:
        """Sorted codes (catalog codes and any extra codes with a rule) whose action takes the
        node out of scheduling: ``drain`` or ``reset_gpu``, since a GPU reset needs an idle node.
        Returns a tuple of int."""
        candidates = set(_rows()) | set(self._rules)
        return tuple(sorted(c for c in candidates if self.drains(c)))

    def __repr__(self) -> str:
        return f"Policy({len(self._rules)} rules, {len(self._buckets)} bucket defaults)"


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
    layers: list[tuple[Mapping[str, Any], str]] = [(_shipped_policy_data(), POLICY_FILE)]
    if path is not None:
        with open(path, "rb") as fh:
            layers.append((tomllib.load(fh), str(path)))
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise ValueError(f"overrides: expected a dict of Xid code to table, got {overrides!r}")
        layers.append(({"xid": dict(overrides)}, "overrides"))
    if len(layers) == 1:
        return _default_policy()
    return Policy._build(layers)


# --- lookups ----------------------------------------------------------------------------------

def codes() -> tuple[int, ...]:
    """All Xid codes in the shipped catalog (tuple of int, ascending: 1..172)."""
    return tuple(sorted(_rows()))


def group_of(code: int) -> str:
    """The group of ``code``: one of :data:`GROUPS`, or ``"unknown"`` for a code outside the
    catalog. Groups of the 16 codes the Fire-Flyer paper names are the paper's Table V groups."""
    row = _rows().get(operator.index(code))
    return row.group if row is not None else UNKNOWN_GROUP


def lookup(code: int, policy: Policy | None = None) -> XidInfo:
    """Describe Xid ``code`` as an :class:`XidInfo`.

    ``policy`` defaults to the shipped policy. Any int is accepted: a code outside the
    catalog (0, negative, 175, ...) gives ``known=False``, group ``"unknown"`` and the
    policy's default for unknown codes (``investigate``, not hardware). Sources: NVIDIA Xid
    catalog 2025-10-29 and r555 listing (facts), Fire-Flyer Table V (groups), policy.toml.
    Raises TypeError only for a non-integer argument.
    """
    code = operator.index(code)
    pol = policy if policy is not None else _default_policy()
    rule = pol.rule(code)
    row = _rows().get(code)
    if row is None:
        return XidInfo(
            code=code,
            known=False,
            mnemonic=None,
            description=f"Unknown Xid {code} (not in the catalog this nodewarden ships)",
            group=UNKNOWN_GROUP,
            group_source=UNKNOWN_GROUP,
            immediate_action=None,
            investigatory_action=None,
            possible_causes=(),
            action=rule.action,
            hardware=rule.hardware,
        )
    return XidInfo(
        code=code,
        known=True,
        mnemonic=row.mnemonic,
        description=row.description,
        group=row.group,
        group_source=row.group_source,
        immediate_action=_bucket(row.immediate_action),
        investigatory_action=_bucket(row.investigatory_action),
        possible_causes=_causes(row.possible_causes),
        action=rule.action,
        hardware=rule.hardware,
    )


def catalog_version() -> str:
    """The sources and dates of the shipped catalog, as one line (str)."""
    return (
        f"NVIDIA Xid catalog {NVIDIA_CATALOG_DATE} / {NVIDIA_CAUSES_LISTING}; "
        f"Fire-Flyer Table V ({PAPER})"
    )


def as_dict(code: int, policy: Policy | None = None) -> dict[str, Any]:
    """JSON-serializable description of Xid ``code`` (for ``nodewarden xid N --json``).

    Keys: the :class:`XidInfo` fields (``possible_causes`` as a list), plus ``group_label``
    (Table V name, or None), ``group_remedy`` (or None), ``drains`` (bool: the action takes
    the node out of scheduling), ``policy_source``, ``causes_note`` and ``catalog_version``.
    Never raises for an int.
    """
    pol = policy if policy is not None else _default_policy()
    info = lookup(code, pol)
    out: dict[str, Any] = dataclasses.asdict(info)
    out["possible_causes"] = list(info.possible_causes)
    out["group_label"] = TABLE5_LABELS.get(info.group)
    out["group_remedy"] = GROUP_REMEDY.get(info.group)
    out["drains"] = pol.drains(info.code)
    out["policy_source"] = pol.rule(info.code).source
    out["causes_note"] = _causes_note(info.code)
    out["catalog_version"] = catalog_version()
    return out


def explain(code: int, policy: Policy | None = None) -> str:
    """Multi-line, human-readable explanation of Xid ``code`` (what ``nodewarden xid N`` prints).

    Gives code and mnemonic, nodewarden's description, the group (and whether it comes from
    the Fire-Flyer paper), NVIDIA's immediate and investigatory buckets, NVIDIA's possible
    causes, nodewarden's policy action (and whether the node is drained), the group's remedy
    and the catalog's sources. For an unknown code it says so and still gives the policy's
    default. Returns str without a trailing newline; never raises for an int.
    """
    pol = policy if policy is not None else _default_policy()
    info = lookup(code, pol)
    rule = pol.rule(info.code)
    drains = pol.drains(info.code)
    width = 22

    def line(label: str, text: str) -> str:
        return f"  {(label + ':').ljust(width)}{text}"

    if info.known:
        head = f"Xid {info.code}  {info.mnemonic}"
    else:
        head = f"Xid {info.code}  (unknown)"
    out = [head, f"  {info.description}"]
    if info.known:
        origin = (
            f"Fire-Flyer paper Table V: {TABLE5_LABELS[info.group]}"
            if info.group_source == "paper"
            else "assigned by nodewarden; the paper does not name this code"
        )
        out.append(line("group", f"{info.group} ({origin})"))
        immediate = info.immediate_action or "none listed"
        if immediate == f"XID_{info.code}":  # NVIDIA's bucket "act as the line says" (Xid 154)
            immediate += " (do what the line's new recovery action says: GPU reset, node reboot, drain ...)"
        out.append(line("NVIDIA immediate", immediate))
        out.append(line("NVIDIA investigatory", info.investigatory_action or "none listed"))
        if info.possible_causes:
            causes = ", ".join(info.possible_causes) + " (NVIDIA r555 listing)"
        else:
            causes = _causes_note(info.code) or "none marked"
        out.append(line("possible causes", causes))
    else:
        out.append(line("group", f"{UNKNOWN_GROUP}: look the code up in a newer NVIDIA Xid catalog"))
    out.append(line("nodewarden action", _ACTION_TEXT[info.action]))
    out.append(
        line(
            "drain node",
            ("yes" if drains else "no")
            + (", hardware fault" if info.hardware else ", not treated as a hardware fault")
            + f" ({rule.source})",
        )
    )
    if info.known:
        out.append(line("group remedy", GROUP_REMEDY[info.group]))
    out.append(line("catalog", catalog_version()))
    return "\n".join(out)
