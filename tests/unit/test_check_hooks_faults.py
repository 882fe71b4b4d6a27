"""The checks' fault-injection hooks stay test-only: every ``inject_`` parameter of every check
is refused, naming it, from a config file and from ``--set``; no shipped profile sets one; and
each defaults to unset, so the production path never injects anything. (The callable hooks of
gemm, gpu_memory and storage are ``run()`` arguments or a callable value that TOML cannot
express, and the runner passes none of them.)"""

from __future__ import annotations

import pytest

from nodewarden.validator import profiles, registry

HOOKS = [(name, key) for name in registry.NAMES for key in getattr(registry.get(name), "DEFAULTS", {})
         if key.startswith("inject_")]


def test_the_hooks_are_the_ones_the_checks_document():
    assert sorted(HOOKS) == [("allreduce", "inject_hang_rank"), ("allreduce", "inject_slow_rank"),
                             ("allreduce", "inject_wrong_rank"), ("allreduce", "inject_wrong_result_rank"),
                             ("cpu", "inject_slow_cpu"),
                             ("cpu", "inject_wrong_answer_cpu"), ("host_memory_bandwidth", "inject_corrupt_element"),
                             ("host_memory_bandwidth", "inject_slow_cpu")]


@pytest.mark.parametrize("check, key", HOOKS)
def test_a_hook_is_unset_by_default_and_refused_from_set_and_config(tmp_path, check, key):
    assert registry.get(check).DEFAULTS[key] is None
    with pytest.raises(profiles.ProfileError, match=f"'{key}' of check {check} is a test hook"):
        profiles.apply_config({}, None, [f"{check}.{key}=0"])
    cfg = tmp_path / "v.toml"
    cfg.write_text(f"[checks.{check}]\n{key} = 0\n")
    with pytest.raises(profiles.ProfileError, match=f"{cfg}: checks.{check}.{key}: '{key}'"):
        profiles.apply_config({}, cfg)


@pytest.mark.parametrize("name", profiles.names())
def test_no_shipped_profile_sets_a_hook(name):
    prof = profiles.load(name)
    assert not [(c, k) for c, table in prof.items() if isinstance(table, dict) for k in table
                if k.startswith("inject_") or k in ("between", "corrupt", "devices")]
