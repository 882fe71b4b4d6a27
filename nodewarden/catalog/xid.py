"""Lookups in the Xid catalog: the codes, a code's group, and :class:`XidInfo` (facts + policy).

Pure: every function takes a code (any int: a code outside the catalog is described as unknown,
never an error) and, where the policy matters, an optional :class:`~nodewarden.catalog.policy.Policy`
(default: the shipped one). Sources: NVIDIA Xid catalog 2025-10-29 and r555 listing (facts),
Fire-Flyer Table V (groups), ``policy.toml`` (actions).
"""

from __future__ import annotations

import dataclasses
import operator

from nodewarden.catalog.groups import UNKNOWN_GROUP
from nodewarden.catalog.loading import bucket, causes, rows
from nodewarden.catalog.policy import Policy, default_policy

__all__ = ["XidInfo", "codes", "group_of", "lookup"]


@dataclasses.dataclass(frozen=True)
class XidInfo:
    """Everything nodewarden knows about one Xid code.

    Fields:
      code: the Xid number.
      known: False for a code that is not in the shipped catalog.
      mnemonic: NVIDIA's mnemonic (``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS``); None if unknown.
      description: nodewarden's one-line description.
      group: one of :data:`~nodewarden.catalog.groups.GROUPS`, or ``"unknown"``.
      group_source: ``paper`` (Fire-Flyer Table V), ``nodewarden``, or ``unknown``.
      immediate_action / investigatory_action: NVIDIA's resolution buckets
        (``RESTART_APP``, ``RESET_GPU``, ``CONTACT_SUPPORT``, ...); None where NVIDIA lists none.
      possible_causes: the causes NVIDIA's r555 listing marks (``HW error``, ``driver error``...).
      action: nodewarden's policy action, one of :data:`~nodewarden.catalog.policy.ACTIONS`.
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


def codes() -> tuple[int, ...]:
    """All Xid codes in the shipped catalog (tuple of int, ascending: 1..172)."""
    return tuple(sorted(rows()))


def group_of(code: int) -> str:
    """The group of ``code``: one of :data:`~nodewarden.catalog.groups.GROUPS`, or ``"unknown"``
    for a code outside the catalog. Groups of the 16 codes the Fire-Flyer paper names are the
    paper's Table V groups. Raises TypeError only for a non-integer argument."""
    row = rows().get(operator.index(code))
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
    pol = policy if policy is not None else default_policy()
    rule = pol.rule(code)
    row = rows().get(code)
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
        immediate_action=bucket(row.immediate_action),
        investigatory_action=bucket(row.investigatory_action),
        possible_causes=causes(row.possible_causes),
        action=rule.action,
        hardware=rule.hardware,
    )
