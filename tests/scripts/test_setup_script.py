"""scripts/setup, the first half of both README commands, run in a copy of the checkout with a
PATH that holds only stand-ins: `id` says who runs it, `apt-get` records its calls and "installs"
a package by adding the stand-ins of what it provides, `ldconfig -p` lists libfuse.so.2 once
libfuse2 is "installed", and `python3 -m venv` makes a .venv whose pip records its calls. No real
package, venv or pip is touched, so these run in milliseconds on any machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
# The real tools the script and the stand-ins use; everything else on PATH is a stand-in.
REAL = ("bash", "dirname", "grep", "rm", "sha256sum", "cut", "mkdir", "chmod", "cat")

LOG = 'printf "%s\\n" "${0##*/} $*" >> "$SETUP_CALLS"'
# What each package provides, as stand-ins (apt-get "installs" a package by writing them).
PROVIDES = {"cron": ["crontab"], "procps": ["ps"], "fuse": ["fusermount"],
            "util-linux": ["nsenter", "unshare"], "libfuse2": ["lib/libfuse.so.2"],
            "python3-venv": ["lib/ensurepip"], "postgresql": ["pg_ctlcluster"],
            "chromium": ["chromium"], "chromium-driver": ["chromedriver"]}
TEST_ONLY = {"postgresql", "chromium", "chromium-driver"}  # needed by `scripts/setup --test` alone

STANDINS = {
    "id": '[ "$1" = -u ] && echo "$FAKE_UID"',
    "apt-get": LOG + r"""
echo "DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-}" >> "$SETUP_CALLS"
[ "$1" = update ] && [ -e "$FAKE_ROOT/update-fails" ] && exit 100
[ "$1" = install ] || exit 0
for p in "$@"; do
  case $p in -*|install) continue ;; esac
  for f in $(cat "$FAKE_ROOT/provides/$p"); do provide "$f"; done
done""",
    "ldconfig": r"""
[ -e "$FAKE_ROOT/lib/libfuse.so.2" ] && echo "	libfuse.so.2 (libc6,x86-64) => /lib/libfuse.so.2"
# A machine with many libraries: far more than a pipe holds after the line looked for.
[ -e "$FAKE_ROOT/many-libraries" ] && for ((i = 0; i < 20000; i++)); do echo "	libx$i.so.1 => /lib/libx$i.so.1"; done
true""",
    "python3": LOG + r"""
case "$*" in
  "-c import ensurepip") [ -e "$FAKE_ROOT/lib/ensurepip" ] ;;
  "-c import sys; sys.exit(sys.version_info < (3, 10))") exit 0 ;;
  "-m venv .venv")
    mkdir -p .venv/bin
    printf '#!/usr/bin/env bash\n[ -e "$FAKE_ROOT/broken-venv" ] && exit 127; exit 0\n' > .venv/bin/python
    printf '#!/usr/bin/env bash\nprintf "%%s\\n" "pip $*" >> "$SETUP_CALLS"\n' > .venv/bin/pip
    printf 'printf "#!/usr/bin/env bash\\n" > .venv/bin/tpujob; chmod +x .venv/bin/tpujob\n' >> .venv/bin/pip
    chmod +x .venv/bin/python .venv/bin/pip ;;
  *) echo "python3 stand-in: unexpected $*" >&2; exit 99 ;;
esac""",
}


def provide(root: Path, what: str) -> None:
    path = root / ("bin/" + what if "/" not in what else what)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + LOG + "\n")
    path.chmod(0o755)


class Machine:
    """A copy of the checkout's set-up files and a PATH of stand-ins, with every package
    present until a test removes one."""

    def __init__(self, root: Path):
        self.root, self.repo, self.bin = root, root / "repo", root / "bin"
        (self.repo / "scripts").mkdir(parents=True)
        shutil.copy2(ROOT / "scripts" / "setup", self.repo / "scripts" / "setup")
        shutil.copy2(ROOT / "pyproject.toml", self.repo / "pyproject.toml")
        self.bin.mkdir()
        for tool in REAL:
            (self.bin / tool).symlink_to(shutil.which(tool))
        # `provide` for apt-get's stand-in: the same as the Python helper below.
        helper = 'provide() { case $1 in */*) f="$FAKE_ROOT/$1" ;; *) f="$FAKE_ROOT/bin/$1" ;; esac\n' \
                 '  mkdir -p "${f%/*}"; printf "#!/usr/bin/env bash\\n%s\\n" \'' + LOG + '\' > "$f"; chmod +x "$f"; }\n'
        for name, body in STANDINS.items():
            (self.bin / name).write_text("#!/usr/bin/env bash\n" + helper + body + "\n")
            (self.bin / name).chmod(0o755)
        (root / "provides").mkdir()
        for package, files in PROVIDES.items():
            (root / "provides" / package).write_text(" ".join(files))
            for what in files:
                provide(root, what)
        self.calls_file = root / "calls"

    def remove(self, package: str) -> None:
        for what in PROVIDES[package]:
            (self.root / ("bin/" + what if "/" not in what else what)).unlink()

    def run(self, *args: str, uid: int = 0) -> subprocess.CompletedProcess:
        self.calls_file.write_text("")
        env = {"PATH": str(self.bin), "FAKE_ROOT": str(self.root), "FAKE_UID": str(uid),
               "SETUP_CALLS": str(self.calls_file), "HOME": str(self.root)}
        return subprocess.run([str(self.repo / "scripts" / "setup"), *args], cwd=self.root, env=env,
                              capture_output=True, text=True, timeout=30)

    @property
    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines()

    def called(self, tool: str) -> list[str]:
        return [c for c in self.calls if c.split(" ", 1)[0] == tool]


@pytest.fixture
def machine(tmp_path) -> Machine:
    return Machine(tmp_path)


def test_with_everything_present_it_makes_the_venv_and_installs_the_runtime_extra(machine):
    result = machine.run()
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get") == []
    assert machine.called("python3")[-1] == "python3 -m venv .venv"
    assert machine.called("pip") == ["pip install -q --disable-pip-version-check -e .[runtime]"]


def test_missing_packages_are_installed_as_root_then_the_venv_is_made(machine):
    machine.remove("cron")
    machine.remove("libfuse2")
    result = machine.run("--test")
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get") == ["apt-get update -qq", "apt-get install -y -qq libfuse2 cron"]
    assert machine.calls.count("DEBIAN_FRONTEND=noninteractive") == 2
    assert machine.called("pip") == ["pip install -q --disable-pip-version-check -e .[runtime,test]"]
    assert "installing libfuse2 cron (for libfuse.so.2 crontab)" in result.stderr


def test_a_failed_apt_get_update_still_tries_the_install(machine):
    machine.remove("cron")
    (machine.root / "update-fails").touch()
    result = machine.run()
    assert result.returncode == 0, result.stderr
    assert "apt-get update failed" in result.stderr
    assert machine.called("apt-get") == ["apt-get update -qq", "apt-get install -y -qq cron"]


@pytest.mark.parametrize("package", sorted(PROVIDES))
def test_each_missing_package_is_found_and_installed(machine, package):
    machine.remove(package)
    result = machine.run(*(["--test"] if package in TEST_ONLY else []))
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get")[-1] == f"apt-get install -y -qq {package}"


@pytest.mark.parametrize("package", sorted(TEST_ONLY))
def test_a_package_only_the_tests_use_is_not_installed_for_the_demo(machine, package):
    machine.remove(package)
    result = machine.run()
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get") == []


def test_a_long_library_list_still_shows_libfuse(machine):
    (machine.root / "many-libraries").touch()
    result = machine.run()
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get") == []


def test_not_root_it_prints_the_exact_install_line_and_does_nothing_else(machine):
    machine.remove("fuse")
    machine.remove("python3-venv")
    machine.remove("procps")
    result = machine.run("--test", uid=1000)
    assert result.returncode == 1
    assert result.stdout == "sudo apt-get install -y python3-venv procps fuse\n"
    assert "missing system packages: python3-venv procps fuse" in result.stderr
    assert machine.called("apt-get") == [] and machine.called("pip") == []
    assert "python3 -m venv .venv" not in machine.calls
    assert not (machine.repo / ".venv").exists()


def test_a_package_apt_get_did_not_provide_stops_it(machine):
    machine.remove("cron")
    (machine.root / "provides" / "cron").write_text("")  # an install that provides no crontab
    result = machine.run()
    assert result.returncode == 1
    assert "still missing after apt-get: cron (for crontab)" in result.stderr
    assert not (machine.repo / ".venv").exists()


def test_a_second_run_is_a_no_op(machine):
    assert machine.run("--test").returncode == 0
    result = machine.run("--test")
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get") == [] and machine.called("pip") == []
    # Not even python3 starts (a pyenv shim takes half a second): the working .venv is enough.
    assert machine.called("python3") == []
    # The demo's plain run needs less than the tests installed: nothing to do either.
    assert machine.run().returncode == 0
    assert machine.called("pip") == []


def test_pip_runs_again_for_more_extras_or_a_changed_pyproject(machine):
    assert machine.run().returncode == 0
    assert machine.run("--test").returncode == 0
    assert machine.called("pip") == ["pip install -q --disable-pip-version-check -e .[runtime,test]"]
    with open(machine.repo / "pyproject.toml", "a") as f:
        f.write("\n# a new dependency\n")
    assert machine.run("--test").returncode == 0
    assert len(machine.called("pip")) == 1
    assert "python3 -m venv .venv" not in machine.calls  # the venv itself is kept


def test_a_broken_venv_is_made_again(machine):
    assert machine.run().returncode == 0
    (machine.root / "broken-venv").touch()  # its python no longer runs (e.g. Python upgraded)
    result = machine.run()
    (machine.root / "broken-venv").unlink()
    assert result.returncode == 0, result.stderr
    assert ".venv is broken" in result.stderr
    assert "python3 -m venv .venv" in machine.calls
    assert len(machine.called("pip")) == 1


def test_a_broken_venv_without_ensurepip_installs_python3_venv_first(machine):
    assert machine.run().returncode == 0
    (machine.root / "broken-venv").touch()
    machine.remove("python3-venv")
    result = machine.run()
    (machine.root / "broken-venv").unlink()
    assert result.returncode == 0, result.stderr
    assert machine.called("apt-get")[-1] == "apt-get install -y -qq python3-venv"
    assert "python3 -m venv .venv" in machine.calls


def test_a_failed_pip_install_is_not_recorded_as_done(machine):
    assert machine.run().returncode == 0
    (machine.repo / ".venv" / "bin" / "pip").write_text("#!/usr/bin/env bash\nexit 1\n")
    assert machine.run("--test").returncode == 1
    # What pip left behind is unknown: even the extras installed before are installed again.
    (machine.repo / ".venv" / "bin" / "pip").write_text(
        '#!/usr/bin/env bash\nprintf "%s\\n" "pip $*" >> "$SETUP_CALLS"\n')
    assert machine.run().returncode == 0
    assert len(machine.called("pip")) == 1  # tried again, not skipped


def test_the_extras_it_installs_exist(machine):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert machine.run("--test").returncode == 0
    installed = machine.called("pip")[0].rsplit(".[", 1)[1].rstrip("]").split(",")
    assert set(installed) <= set(extras) and "test" in installed


def test_an_unknown_option_is_a_usage_error(machine):
    result = machine.run("--tests")
    assert result.returncode == 2 and "usage: scripts/setup [--test]" in result.stderr
    assert machine.calls == []


def test_the_script_is_executable_in_the_checkout():
    assert os.access(ROOT / "scripts" / "setup", os.X_OK)
