"""The Xid groups: the Fire-Flyer paper's Table V (arXiv 2408.14158v2), as machine-readable keys,
with the names the paper prints for them and what to do about each.

Data only (no file is read). Which group a code belongs to is a column of ``xid_catalog.csv``
(:func:`nodewarden.catalog.xid.group_of`); ``SOURCES.md`` says which codes the paper names and
which groups nodewarden assigned.
"""

from __future__ import annotations

__all__ = ["GROUPS", "GROUP_LABELS", "GROUP_REMEDY", "TABLE5_LABELS", "UNKNOWN_GROUP"]

# The paper's Table V groups, in the paper's table order.
GROUPS: tuple[str, ...] = ("software", "nvlink", "memory_ecc", "uncorrectable", "other")
# The group of a code outside the shipped catalog.
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
