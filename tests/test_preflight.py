"""Preflight: `tpujob demo`, `tpujob emulator start` and `tpujob cron install` refuse, in one line
naming what is missing and the command that installs it (exit 6), before recording or starting
anything. The machine's lookups are replaced to simulate what is missing."""

from __future__ import annotations

import pytest

from tpujob import preflight
from tpujob.emulator import process


@pytest.fixture
def healthy(monkeypatch):
    """Every probe answers as on a machine with everything installed, running as root."""
    monkeypatch.setattr(preflight, "geteuid", lambda: 0)
    monkeypatch.setattr(preflight, "which", lambda program: f"/usr/bin/{program}")
    monkeypatch.setattr(preflight, "find_libfuse", lambda: "libfuse.so.2")
    monkeypatch.setattr(preflight, "load_library", lambda path: None)
    monkeypatch.setattr(preflight, "device_exists", lambda path: True)
    monkeypatch.setattr(preflight, "can_unshare_mount", lambda: None)
    return monkeypatch


def missing(monkeypatch, *programs: str) -> None:
    monkeypatch.setattr(preflight, "which", lambda p: None if p in programs else f"/usr/bin/{p}")


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_healthy_machine_passes_every_check(healthy):
    checks = preflight.emulator_checks()
    assert {c.status for c in checks} == {"ok"}
    assert [c.name for c in checks] == ["root", "unshare", "nsenter", "mountpoint", "mount", "/dev/fuse", "libfuse"]
    preflight.require(checks, "x")  # nothing raised


def test_this_machine_has_what_the_emulated_hosts_need():
    """The real probes on this machine (root, util-linux, fuse and libfuse2 installed)."""
    assert {c.name: c.status for c in preflight.emulator_checks()} == dict.fromkeys(
        ["root", "unshare", "nsenter", "mountpoint", "mount", "/dev/fuse", "libfuse"], "ok")


def test_each_missing_piece_is_an_error_with_its_install_command(healthy):
    missing(healthy, "unshare", "mount")
    healthy.setattr(preflight, "find_libfuse", lambda: None)
    healthy.setattr(preflight, "device_exists", lambda path: False)
    checks = by_name(preflight.emulator_checks())
    assert checks["unshare"].status == "error" and checks["unshare"].fix == "apt-get install -y util-linux"
    assert checks["mount"].fix == "apt-get install -y mount"
    assert checks["libfuse"].status == "error" and checks["libfuse"].fix == "apt-get install -y fuse libfuse2"
    assert "find_library('fuse')" in checks["libfuse"].detail
    assert checks["/dev/fuse"].status == "error" and "modprobe fuse" in checks["/dev/fuse"].fix
    assert checks["nsenter"].status == "ok"


def test_a_library_that_does_not_load_is_an_error(healthy):
    def refuse(path):
        raise OSError(f"{path}: cannot open shared object file")

    healthy.setattr(preflight, "load_library", refuse)
    check = by_name(preflight.emulator_checks())["libfuse"]
    assert check.status == "error" and "cannot be loaded" in check.detail


def test_not_root_is_an_error_and_install_lines_take_sudo(healthy):
    healthy.setattr(preflight, "geteuid", lambda: 1000)
    missing(healthy, "crontab")
    checks = by_name(preflight.emulator_checks())
    assert checks["root"].status == "error" and "sudo" in checks["root"].fix
    assert preflight.crontab_check().fix == "sudo apt-get install -y cron"


def test_root_in_a_container_without_mount_namespaces_is_an_error(healthy):
    healthy.setattr(preflight, "can_unshare_mount", lambda: "unshare: unshare failed: Operation not permitted")
    check = by_name(preflight.emulator_checks())["root"]
    assert check.status == "error" and "Operation not permitted" in check.detail and "--privileged" in check.fix


def test_refusal_merges_the_packages_into_one_install_line(healthy):
    missing(healthy, "nsenter", "mountpoint")
    healthy.setattr(preflight, "find_libfuse", lambda: None)
    with pytest.raises(Exception) as info:
        preflight.require_emulator()
    assert info.value.exit_code == 6
    assert str(info.value).endswith("Fix: apt-get install -y util-linux fuse libfuse2")


# ---- the real CLI ----------------------------------------------------------------------------


def test_emulator_start_refuses_without_libfuse_and_starts_nothing(cli, healthy, tpujob_home, no_emulator_left):
    healthy.setattr(preflight, "find_libfuse", lambda: None)
    result = cli("emulator", "start")
    assert result.code == 6
    line = result.error_line
    assert "libfuse 2 not found" in line and "apt-get install -y fuse libfuse2" in line
    assert process.status() is None and not (tpujob_home / "emulator" / "endpoints.json").exists()


def test_demo_refuses_without_unshare_and_records_nothing(cli, healthy, tpujob_home, stored_jobs,
                                                          no_emulator_left):
    missing(healthy, "unshare")
    result = cli("demo")
    assert result.code == 6
    assert "`unshare` not found" in result.error_line and "apt-get install -y util-linux" in result.error_line
    assert stored_jobs() == 0 and process.status() is None
    assert not (tpujob_home / "emulator").exists()


def test_demo_refuses_even_when_the_emulator_runs_already(cli, healthy, stored_jobs, monkeypatch):
    """A running emulator does not make a missing libfuse harmless: the first mount would fail."""
    monkeypatch.setattr(process, "status", lambda: {"tpu_endpoint": "http://127.0.0.1:1"})
    healthy.setattr(preflight, "find_libfuse", lambda: None)
    result = cli("demo")
    assert result.code == 6 and "libfuse" in result.error_line
    assert stored_jobs() == 0


def test_cron_install_refuses_without_crontab(cli, healthy):
    missing(healthy, "crontab")
    result = cli("cron", "install", "--every", "5m")
    assert result.code == 6
    assert "`crontab` program is not installed" in result.error_line
    assert result.error_line.endswith("Fix: apt-get install -y cron")
