"""The Xid catalog: what each NVIDIA Xid code means, its group, and what nodewarden does about it.

Vendor facts and nodewarden's decisions are kept apart, one module each:

- :mod:`~nodewarden.catalog.loading`: the data files ``xid_catalog.csv`` (NVIDIA's facts, the
  Fire-Flyer paper's groups) and ``policy.toml``, read once on first use (nothing is read at
  import time); their sources are in ``SOURCES.md``;
- :mod:`~nodewarden.catalog.groups`: the paper's Table V groups, their printed names, remedies;
- :mod:`~nodewarden.catalog.policy`: :class:`Policy` (action and hardware flag per code) and
  :func:`load_policy` (shipped policy, operator file, overrides);
- :mod:`~nodewarden.catalog.xid`: :func:`lookup`, :func:`group_of`, :func:`codes`;
- :mod:`~nodewarden.catalog.render`: what ``nodewarden xid N`` prints (:func:`explain`,
  :func:`as_dict`);
- :mod:`~nodewarden.catalog.sxid`: the NVSwitch SXid catalog.

Everything is pure: the lookups take a code and an optional :class:`Policy`, and never raise
for an integer code.
"""

from __future__ import annotations

from nodewarden.catalog.groups import GROUP_LABELS, GROUP_REMEDY, GROUPS, TABLE5_LABELS, UNKNOWN_GROUP
from nodewarden.catalog.loading import catalog_version
from nodewarden.catalog.policy import ACTIONS, Policy, Rule, load_policy
from nodewarden.catalog.render import as_dict, explain
from nodewarden.catalog.xid import XidInfo, codes, group_of, lookup

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
