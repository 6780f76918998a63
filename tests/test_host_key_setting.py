"""The `ssh_host_keys` setting: strict by default, accept-new on request, nothing else."""

from __future__ import annotations

import json

import yaml


def test_strict_is_the_default(cli):
    assert json.loads(cli("config", "show", "--json").out)["ssh_host_keys"] == "strict"
    assert ["ssh_host_keys:", "strict"] in [line.split() for line in cli("config", "show").out.splitlines()]


def test_accept_new_is_set_and_kept(cli, tpujob_home):
    result = cli("config", "set", "ssh_host_keys", "accept-new")
    assert (result.code, result.out) == (0, "ssh_host_keys = accept-new\n")
    assert yaml.safe_load((tpujob_home / "config.yaml").read_text()) == {"ssh_host_keys": "accept-new"}
    assert json.loads(cli("config", "show", "--json").out)["ssh_host_keys"] == "accept-new"


def test_another_value_is_refused_and_nothing_written(cli, tpujob_home):
    result = cli("config", "set", "ssh_host_keys", "no")
    assert result.code == 2
    assert result.error_line == "error: ssh_host_keys must be one of strict, accept-new, not 'no'"
    assert not (tpujob_home / "config.yaml").exists()


def test_a_bad_value_from_the_environment_is_a_config_error(cli, monkeypatch):
    monkeypatch.setenv("TPUJOB_SSH_HOST_KEYS", "off")
    result = cli("list")
    assert result.code == 6 and "ssh_host_keys must be one of strict, accept-new" in result.error_line
