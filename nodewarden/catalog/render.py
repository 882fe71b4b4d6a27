"""What ``nodewarden xid N`` prints: :func:`explain` (text) and :func:`as_dict` (``--json``).

Both take a code (any int) and an optional :class:`~nodewarden.catalog.policy.Policy` (default:
the shipped one), and never raise for an int.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nodewarden.catalog.groups import GROUP_REMEDY, TABLE5_LABELS, UNKNOWN_GROUP
from nodewarden.catalog.loading import NEWER_THAN_LISTING, NO_CAUSES_MARKED, catalog_version, rows
from nodewarden.catalog.policy import Policy, default_policy
from nodewarden.catalog.xid import lookup

__all__ = ["as_dict", "explain"]

_ACTION_TEXT: dict[str, str] = {
    "drain": "drain: take the node out of scheduling until it is repaired or cleared",
    "reset_gpu": "reset_gpu: take the node out of scheduling, reset the GPU, validate, return it",
    "restart_app": "restart_app: restart the job; the node stays in service",
    "ignore": "ignore: nothing to do",
    "investigate": "investigate: the node stays in service; a person should read the log",
}


def _causes_note(code: int) -> str | None:
    """Why a catalog code lists no causes (None for a code with causes, or outside the catalog)."""
    row = rows().get(code)
    if row is None:
        return None
    if row.possible_causes == NEWER_THAN_LISTING:
        return "none: the code is newer than NVIDIA's r555 cause listing"
    if row.possible_causes == NO_CAUSES_MARKED or not row.possible_causes:
        return "none marked in NVIDIA's r555 listing"
    return None


def as_dict(code: int, policy: Policy | None = None) -> dict[str, Any]:
    """JSON-serializable description of Xid ``code`` (for ``nodewarden xid N --json``).

    Keys: the :class:`~nodewarden.catalog.xid.XidInfo` fields (``possible_causes`` as a list),
    plus ``group_label`` (Table V name, or None), ``group_remedy`` (or None), ``drains`` (bool:
    the action takes the node out of scheduling), ``policy_source``, ``causes_note`` and
    ``catalog_version``. Never raises for an int.
    """
    pol = policy if policy is not None else default_policy()
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
    pol = policy if policy is not None else default_policy()
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
