"""`tpujob init`: a starter spec that `tpujob validate` accepts as written, for every generation,
with the generation's defaults, and that never overwrites a file without --force."""

from __future__ import annotations

import json

import pytest
import yaml

# accelerator -> (hosts, zone, runtime version, data-disk type) the starter must name.
GENERATIONS = {
    "v2-8": (1, "us-central1-b", "tpu-ubuntu2204-base", "pd-balanced"),
    "v4-8": (1, "us-central2-b", "tpu-ubuntu2204-base", "pd-balanced"),
    "v4-32": (4, "us-central2-b", "tpu-ubuntu2204-base", "pd-balanced"),
    "v5litepod-16": (4, "us-central1-a", "v2-alpha-tpuv5-lite", "pd-balanced"),
    "v5p-8": (1, "us-east5-a", "v2-alpha-tpuv5", "pd-balanced"),
    "v6e-8": (1, "us-east1-d", "v2-alpha-tpuv6e", "hyperdisk-ml"),
    # Compute Engine only: no runtime version or queued resource, the image family instead.
    "tpu7x-16": (2, "us-central1-c", "ubuntu-accel-2404-amd64-tpu-tpu7x", "hyperdisk-ml"),
}


def _uncomment_disks(text: str) -> str:
    """The starter with its commented-out `disks:` example switched on."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("# disks:"):
            inside = True
        elif inside and not line.startswith("#  "):
            inside = False
        out.append(line[2:] if inside else line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("acc", sorted(GENERATIONS))
def test_the_starter_validates_with_the_generation_defaults(cli, tmp_path, acc):
    hosts, zone, runtime, disk_type = GENERATIONS[acc]
    path = tmp_path / "job.yaml"
    result = cli("init", path, "--accelerator", acc)
    assert result.code == 0, result.err
    assert result.out.startswith(f"wrote {path}: job ")
    assert f"{acc} ({hosts} host" in result.out
    checked = cli("validate", "--json", path)
    assert checked.code == 0, checked.err
    resolved = json.loads(checked.out)
    assert (resolved["accelerator"], resolved["hosts"], resolved["zone"], resolved["runtime_version"]) == \
        (acc, hosts, zone, runtime)
    assert resolved["spec"]["run"]["command"] == "python train.py"
    assert resolved["spec"]["run_dir"] == "gs://my-bucket/runs"
    text = path.read_text()
    assert "tpujob cron install --every 5m" in text
    # The commented disk example is a real one: switched on, it validates with the right type.
    with_disk = tmp_path / "with-disk.yaml"
    with_disk.write_text(_uncomment_disks(text))
    checked = cli("validate", "--json", with_disk)
    assert checked.code == 0, checked.err
    assert json.loads(checked.out)["disk_types"] == {"data": disk_type}


def test_the_requeue_block_holds_the_defaults_a_spec_without_it_gets(cli, tmp_path):
    from tpujob.spec import RequeuePolicy, parse

    path = tmp_path / "job.yaml"
    assert cli("init", path).code == 0
    written = yaml.safe_load(path.read_text())["requeue"]
    assert set(written) == set(RequeuePolicy.model_fields)
    assert parse(path.read_text())[0].requeue == RequeuePolicy()


def test_by_default_it_writes_job_yaml_here_named_after_the_directory(cli, tmp_path, monkeypatch):
    project = tmp_path / "My_Model v2"
    project.mkdir()
    monkeypatch.chdir(project)
    result = cli("init")
    assert result.code == 0, result.err
    assert yaml.safe_load((project / "job.yaml").read_text())["name"] == "my-model-v2"
    assert yaml.safe_load((project / "job.yaml").read_text())["tpu"]["accelerator"] == "v4-8"
    assert "`tpujob validate job.yaml`" in result.out
    # A directory argument gets job.yaml in it.
    other = tmp_path / "123"
    other.mkdir()
    assert cli("init", other).code == 0
    assert yaml.safe_load((other / "job.yaml").read_text())["name"] == "my-job"


def test_it_refuses_to_overwrite_unless_forced(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: mine\n")
    result = cli("init", path)
    assert result.code == 4
    assert result.error_line == (f"error: {path} already exists; tpujob init does not overwrite it "
                                 f"(--force does, or name another file)")
    assert path.read_text() == "name: mine\n"
    forced = cli("init", path, "--force", "--accelerator", "v5p-8")
    assert forced.code == 0, forced.err
    assert forced.out.startswith(f"overwrote {path}: ")
    assert yaml.safe_load(path.read_text())["tpu"]["accelerator"] == "v5p-8"


@pytest.mark.parametrize("acc, message", [
    ("v9-8", "unknown TPU generation 'v9'"),
    ("v4-12", "v4-12 does not exist (nearest: v4-8 or v4-16)"),
    ("tpu", "'tpu' is not an accelerator type like v4-8"),
])
def test_an_unknown_accelerator_is_refused_and_nothing_written(cli, tmp_path, acc, message):
    result = cli("init", tmp_path / "job.yaml", "--accelerator", acc)
    assert result.code == 2
    assert message in result.error_line
    assert list(tmp_path.iterdir()) == []


def test_a_missing_directory_is_refused(cli, tmp_path):
    result = cli("init", tmp_path / "nope" / "job.yaml")
    assert result.code == 2
    assert result.error_line == f"error: no directory {tmp_path / 'nope'} to write job.yaml in"


def test_init_imports_no_cloud_ssh_or_jax(tmp_path):
    import subprocess
    import sys

    probe = ("import sys; from tpujob.cli.main import main; code = main(sys.argv[1:]); "
             "heavy = [m for m in sys.modules if m.split('.')[0] in ('grpc', 'paramiko', 'jax') "
             "or m.startswith(('google.cloud', 'google.api_core', 'sqlmodel'))]; print(code, heavy)")
    out = subprocess.run([sys.executable, "-c", probe, "init", str(tmp_path / "job.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stderr
