"""The Xid catalog against its sources: NVIDIA's Xid catalog (2025-10-29, r555 causes) and the
Fire-Flyer paper's Table V (arXiv 2408.14158v2), plus nodewarden's own policy."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from nodewarden import catalog
from nodewarden.catalog import (
    ACTIONS,
    GROUP_LABELS,
    GROUP_REMEDY,
    GROUPS,
    TABLE5_LABELS,
    XidInfo,
    as_dict,
    explain,
    group_of,
    load_policy,
    lookup,
)

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests/fixtures/reference"  # copies, with their sources: SOURCE.md there
FACTS = REFERENCE / "xid_catalog_facts.csv"
TABLE6 = REPO / "nodewarden/analysis/reference/fireflyer/table6_xid_counts.csv"  # shipped with the package

ALL_CODES = list(range(1, 173))

# Fire-Flyer Table V, written out code by code.
PAPER_GROUPS = [
    (13, "software"),
    (31, "software"),
    (43, "software"),
    (45, "software"),
    (74, "nvlink"),
    (63, "memory_ecc"),
    (64, "memory_ecc"),
    (94, "memory_ecc"),
    (95, "memory_ecc"),
    (44, "uncorrectable"),
    (48, "uncorrectable"),
    (61, "uncorrectable"),
    (62, "uncorrectable"),
    (69, "uncorrectable"),
    (79, "uncorrectable"),
    (119, "other"),
]
PAPER_CODES = {code for code, _ in PAPER_GROUPS}

UNKNOWN_CODES = [175, 999, 0, -1, 173, 2**40]


def _facts() -> dict[int, dict[str, str]]:
    with FACTS.open(newline="", encoding="utf-8") as fh:
        return {int(row["xid"]): row for row in csv.DictReader(fh)}


def _shipped_policy() -> dict:
    text = resources.files("nodewarden.catalog").joinpath("policy.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


# --- the catalog ------------------------------------------------------------------------------

def test_catalog_has_every_code_1_to_172() -> None:
    assert catalog.codes() == tuple(ALL_CODES)


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_code_is_known_and_complete(code: int) -> None:
    info = lookup(code)
    assert isinstance(info, XidInfo)
    assert info.code == code
    assert info.known is True
    assert info.mnemonic
    assert info.description and "\n" not in info.description
    assert info.group in GROUPS
    assert info.group_source in ("paper", "nodewarden")
    assert info.action in ACTIONS
    assert isinstance(info.hardware, bool)
    assert isinstance(info.possible_causes, tuple)


@pytest.mark.parametrize(("code", "group"), PAPER_GROUPS)
def test_paper_codes_have_the_papers_group(code: int, group: str) -> None:
    info = lookup(code)
    assert info.group == group
    assert info.group_source == "paper"
    assert group_of(code) == group


def test_paper_codes_are_exactly_sixteen() -> None:
    from_paper = {c for c in ALL_CODES if lookup(c).group_source == "paper"}
    assert from_paper == PAPER_CODES
    assert len(from_paper) == 16


@pytest.mark.parametrize("code", ALL_CODES)
def test_mnemonic_matches_nvidia_facts(code: int) -> None:
    facts = _facts()
    assert lookup(code).mnemonic == facts[code]["mnemonic"]


@pytest.mark.parametrize("code", ALL_CODES)
def test_nvidia_columns_and_paper_group_match_facts(code: int) -> None:
    row = _facts()[code]
    info = lookup(code)
    immediate = None if row["immediate_action"] == "none listed" else row["immediate_action"]
    investigatory = None if row["investigatory_action"] == "none listed" else row["investigatory_action"]
    assert info.immediate_action == immediate
    assert info.investigatory_action == investigatory
    causes = row["possible_causes_r555"]
    if causes.startswith(("no cause marked", "not in r555")):
        assert info.possible_causes == ()
    else:
        assert info.possible_causes == tuple(c.strip() for c in causes.split(";"))
    paper_label = row["fireflyer_table5_group"].strip()
    if paper_label:
        assert TABLE5_LABELS[info.group] == paper_label
    else:
        assert info.group_source == "nodewarden"


@pytest.mark.parametrize(
    ("code", "mnemonic", "fragment"),
    [
        (13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics engine exception"),
        (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "page fault"),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double-bit"),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "row remapping recorded"),
        (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "row remapping failed"),
        (74, "NVLINK_ERROR", "NVLink"),
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "fallen off the bus"),
        (91, "RESERVED_XID", "Reserved"),
        (92, "EXCESSIVE_SBE_INTERRUPTS", "single-bit"),
        (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC"),
        (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC"),
        (119, "GSP_RPC_TIMEOUT", "GSP RPC timeout"),
        (120, "GSP_ERROR", "GSP error"),
        (172, "UNCORRECTABLE_SRAM_ERROR", "SRAM"),
    ],
)
def test_known_codes_table(code: int, mnemonic: str, fragment: str) -> None:
    info = lookup(code)
    assert info.mnemonic == mnemonic
    assert fragment in info.description


@pytest.mark.parametrize(
    ("code", "group"),
    [(92, "memory_ecc"), (140, "memory_ecc"), (136, "nvlink"), (144, "nvlink"), (137, "software"),
     (120, "other"), (167, "uncorrectable"), (76, "other"), (78, "other")],
)
def test_nodewarden_assigned_groups(code: int, group: str) -> None:
    info = lookup(code)
    assert (info.group, info.group_source) == (group, "nodewarden")


def test_group_tables_cover_every_group() -> None:
    assert GROUPS == ("software", "nvlink", "memory_ecc", "uncorrectable", "other")
    for table in (GROUP_LABELS, TABLE5_LABELS, GROUP_REMEDY):
        assert tuple(table) == GROUPS
        assert all(table.values())


def test_group_labels_are_table6_names() -> None:
    with TABLE6.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["xid"]]
    for row in rows:
        assert GROUP_LABELS[group_of(int(row["xid"]))] == row["gpu_error_type"]


# --- unknown codes ----------------------------------------------------------------------------

@pytest.mark.parametrize("code", UNKNOWN_CODES)
def test_unknown_codes_do_not_raise(code: int) -> None:
    info = lookup(code)
    assert info.known is False
    assert info.group == "unknown"
    assert info.mnemonic is None
    assert info.description == f"Unknown Xid {code} (not in the catalog this nodewarden ships)"
    assert info.action == "investigate"
    assert info.hardware is False
    assert group_of(code) == "unknown"
    text = explain(code)
    assert "unknown" in text.lower() and "investigate" in text
    json.dumps(as_dict(code))


# --- policy -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("code", "action", "hardware"),
    [
        (13, "restart_app", False),
        (31, "restart_app", False),
        (43, "ignore", False),
        (45, "ignore", False),
        (48, "drain", True),
        (61, "drain", True),
        (62, "drain", True),
        (63, "reset_gpu", True),
        (64, "drain", True),
        (69, "drain", True),
        (74, "drain", True),
        (79, "drain", True),
        (92, "reset_gpu", True),
        (94, "reset_gpu", True),
        (95, "reset_gpu", True),
        (119, "reset_gpu", True),
        (120, "reset_gpu", True),
        (140, "drain", True),
        # Codes without a rule: NVIDIA's immediate-action bucket decides.
        (8, "restart_app", False),  # RESTART_APP
        (38, "ignore", False),  # IGNORE
        (46, "reset_gpu", True),  # RESET_GPU
        (9, "drain", True),  # CONTACT_SUPPORT
        (166, "investigate", False),
    ],
)
def test_shipped_policy(code: int, action: str, hardware: bool) -> None:
    policy = load_policy()
    assert policy.action(code) == action
    assert policy.is_hardware(code) is hardware
    info = lookup(code)
    assert (info.action, info.hardware) == (action, hardware)


def test_shipped_policy_rules_are_consistent() -> None:
    data = _shipped_policy()
    for key, entry in data["xid"].items():
        assert int(key) in catalog.codes(), key
        assert entry["action"] in ACTIONS, key
        # A hardware fault takes the node out; a node that is taken out is for hardware.
        assert entry["hardware"] == (entry["action"] in ("drain", "reset_gpu")), key


def test_drain_codes() -> None:
    drains = load_policy().drain_codes()
    assert list(drains) == sorted(drains)
    for code in (48, 61, 62, 63, 64, 69, 74, 79, 92, 94, 95, 119, 120, 140):
        assert code in drains
    for code in (13, 31, 43, 45, 8):
        assert code not in drains


def test_policy_file_overrides_action(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[xid.79]\naction = "reset_gpu"\n\n[xid.13]\naction = "drain"\nhardware = true\n')
    policy = load_policy(path=str(path))
    assert policy.action(79) == "reset_gpu"
    assert policy.is_hardware(79) is True  # field not named: the shipped value stays
    assert policy.action(13) == "drain" and policy.is_hardware(13) is True
    assert 13 in policy.drain_codes()
    assert lookup(79, policy).action == "reset_gpu"
    assert str(path) in explain(79, policy)
    # The shipped policy is unchanged.
    assert load_policy().action(79) == "drain"
    assert lookup(79).action == "drain"


def test_dict_overrides_win_over_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[xid.79]\naction = "reset_gpu"\n')
    policy = load_policy({79: {"action": "ignore", "hardware": False}, "175": {"action": "drain"}}, path=str(path))
    assert policy.action(79) == "ignore"
    assert policy.is_hardware(79) is False
    assert policy.action(175) == "drain"
    assert lookup(175, policy).known is False
    assert 175 in policy.drain_codes()


def test_bucket_default_override(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[bucket.CONTACT_SUPPORT]\naction = "investigate"\nhardware = false\n')
    policy = load_policy(path=str(path))
    assert policy.action(9) == "investigate"
    assert policy.action(79) == "drain"  # an explicit rule is not a bucket default


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({79: {"action": "reboot"}}, "xid.79.action"),
        ({"79": {"action": "DRAIN"}}, "xid.79.action"),
        ({"abc": {"action": "drain"}}, "xid.abc"),
        ({"7.5": {"action": "drain"}}, "xid.7.5"),
        ({0: {"action": "drain"}}, "xid.0"),
        ({79: {"hardware": "yes"}}, "xid.79.hardware"),
        ({79: {"severity": "high"}}, "xid.79"),
        ({79: "drain"}, "xid.79"),
    ],
)
def test_invalid_overrides_raise_naming_the_key(overrides: dict, named: str) -> None:
    with pytest.raises(ValueError) as err:
        load_policy(overrides)
    assert named in str(err.value)


def test_invalid_action_in_file_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[xid.48]\naction = "panic"\n')
    with pytest.raises(ValueError, match=r"xid\.48\.action.*'panic'"):
        load_policy(path=str(path))


def test_unknown_table_in_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[xids.48]\naction = "drain"\n')
    with pytest.raises(ValueError, match="xids"):
        load_policy(path=str(path))


# --- explain and as_dict ----------------------------------------------------------------------

def test_explain_79() -> None:
    text = explain(79)
    assert "fallen off the bus" in text
    assert "drain" in text
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in text
    assert "RESTART_BM" in text and "CONTACT_SUPPORT" in text
    assert "Table V" in text
    assert GROUP_REMEDY["uncorrectable"] in text


def test_explain_non_paper_code_says_so() -> None:
    text = explain(92)
    assert "memory_ecc" in text and "nodewarden" in text


@pytest.mark.parametrize("code", ALL_CODES + UNKNOWN_CODES)
def test_explain_and_as_dict_for_every_code(code: int) -> None:
    assert explain(code).startswith(f"Xid {code}")
    data = as_dict(code)
    assert json.loads(json.dumps(data)) == data
    assert data["code"] == code
    assert isinstance(data["drains"], bool)


def test_as_dict_79() -> None:
    data = as_dict(79)
    assert data["known"] is True
    assert data["group"] == "uncorrectable"
    assert data["action"] == "drain" and data["drains"] is True and data["hardware"] is True
    assert "HW error" in data["possible_causes"]
    assert data["catalog_version"] == catalog.catalog_version()


def test_catalog_version() -> None:
    version = catalog.catalog_version()
    assert "2025-10-29" in version and "r555" in version and "Table V" in version


def test_import_reads_no_data_files() -> None:
    code = (
        "import nodewarden.catalog; from nodewarden.catalog import loading, policy; "
        "assert loading.rows.cache_info().currsize == 0; "
        "assert loading.shipped_policy_data.cache_info().currsize == 0; "
        "assert policy.default_policy.cache_info().currsize == 0"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_the_package_re_exports_its_modules_names() -> None:
    from nodewarden.catalog import groups, loading, policy, render, xid
    homes = {"ACTIONS": policy, "Policy": policy, "Rule": policy, "load_policy": policy,
             "GROUPS": groups, "GROUP_LABELS": groups, "GROUP_REMEDY": groups, "TABLE5_LABELS": groups,
             "UNKNOWN_GROUP": groups, "catalog_version": loading, "as_dict": render, "explain": render,
             "XidInfo": xid, "codes": xid, "group_of": xid, "lookup": xid}
    assert sorted(catalog.__all__) == sorted(homes)
    for name, module in homes.items():
        assert getattr(catalog, name) is getattr(module, name), name
