"""A non-editable install (a wheel) carries the host scripts and renders every one of them from
its own installed copy, and carries the demo's example spec: a plain `pip install .` must not
depend on the checkout's templates/ or jobs.example.yaml."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_NAMES = sorted(p.name for p in (ROOT / "templates").glob("*.sh"))  # host scripts
TEMPLATE_FILES = sorted(p.name for p in (ROOT / "templates").iterdir() if p.is_file())  # and job templates

# Run in a fresh interpreter whose only tpujob is the installed wheel (PYTHONPATH=target comes
# before the editable install's finder): render every template with awkward values.
PROBE = r"""
import json, re, shlex, subprocess, sys
import tpujob
from tpujob.hosts import scripts

value = "it's $(rm -rf ~); echo \"x\"\n"
root = scripts.templates_dir()
report = {"package": tpujob.__file__, "templates": str(root), "rendered": {}}
for name in sys.argv[1:]:
    keys = set(re.findall(r"\{\{(\w+)\}\}", (root / name).read_text()))
    text = scripts.render(name, **{k: value for k in keys})
    syntax = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    report["rendered"][name] = {"placeholders_left": "{{" in text,
                                "quoted": not keys or shlex.quote(value) in text,
                                "bash_syntax_ok": syntax.returncode == 0}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed (without dependencies) into a directory of its own."""
    target = tmp_path_factory.mktemp("site")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                              str(target), str(wheel)], capture_output=True, text=True, timeout=240)
    assert install.returncode == 0, install.stderr
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built (pip wheel, isolated build) from a copy of the checkout, so that no build/
    directory lands in the developer's tree."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "templates", src / "templates", ignore=ignore)
    shutil.copytree(ROOT / "tpujob", src / "tpujob", symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                           capture_output=True, text=True, timeout=240)
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("tpujob-*.whl")
    return path


def test_the_templates_directory_is_linked_into_the_package():
    link = ROOT / "tpujob" / "templates"
    assert link.is_symlink() and link.resolve() == (ROOT / "templates").resolve()
    assert TEMPLATE_NAMES, "no templates found"


def test_the_wheel_carries_every_template(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    carried = sorted(n.removeprefix("tpujob/templates/") for n in names if n.startswith("tpujob/templates/"))
    assert carried == TEMPLATE_FILES
    assert set(TEMPLATE_NAMES) < set(TEMPLATE_FILES)


def test_the_repository_example_is_the_packaged_one():
    link = ROOT / "jobs.example.yaml"
    assert link.is_symlink() and link.resolve() == (ROOT / "tpujob" / "examples" / "demo.yaml").resolve()


def test_the_wheel_carries_the_example_spec(wheel):
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("tpujob/examples/demo.yaml") == (ROOT / "jobs.example.yaml").read_bytes()


def test_every_template_renders_from_the_installed_wheel(installed, tmp_path):
    target = installed
    # The checkout stays where it is: what proves the wheel is enough is that the package and
    # the templates the probe rendered both lie under the install target.
    out = subprocess.run([sys.executable, "-c", PROBE, *TEMPLATE_NAMES], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert Path(report["package"]).is_relative_to(target)
    assert Path(report["templates"]).is_relative_to(target)
    assert sorted(report["rendered"]) == TEMPLATE_NAMES
    for name, checks in report["rendered"].items():
        assert checks == {"placeholders_left": False, "quoted": True, "bash_syntax_ok": True}, name


# The demo's spec as the demo finds it, and `tpujob init`'s starter, from the installed copy;
# both must be valid specs.
EXAMPLE_PROBE = r"""
import json
from tpujob import spec
from tpujob.catalogue import accelerator
from tpujob.service import starter
from tpujob.service.demo import example_spec

path = example_spec()
resolved, _ = spec.load(path, default_project="p")
text = starter.render(accelerator("v5p-8"), "mine", "us-east5-a")
started = spec.resolve(spec.parse(text)[0], default_project="p")
print(json.dumps({"path": str(path), "accelerator": resolved.accelerator, "starter": started.accelerator}))
"""


def test_the_demo_and_init_find_their_specs_in_the_installed_wheel(installed, tmp_path):
    out = subprocess.run([sys.executable, "-c", EXAMPLE_PROBE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert Path(report["path"]).is_relative_to(installed), report
    assert (report["accelerator"], report["starter"]) == ("v4-16", "v5p-8")


def test_the_wheel_carries_the_dashboards_pages_and_script(wheel):
    """`tpujob ui` from a plain install: its templates and static files are package data."""
    names = set(zipfile.ZipFile(wheel).namelist())
    ui = ROOT / "tpujob" / "ui"
    wanted = {f"tpujob/ui/{p.relative_to(ui)}" for sub in ("templates", "static") for p in (ui / sub).iterdir()}
    assert wanted and wanted <= names, sorted(wanted - names)
