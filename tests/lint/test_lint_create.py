"""`tpujob create` lints the job's sync directory: findings on stderr, `--strict` refuses on an
error-level finding before anything is recorded or the cloud is touched; `--dry-run` shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

TRAIN = ("import torch_xla.core.xla_model as xm\nfrom model import Net\n\n"
         "net = Net().to(xm.xla_device())\n")
# No torch_xla import here: the train script beside it makes this torch_xla code.
MODEL_ERROR = ("import torch\n\n\nclass Net(torch.nn.Module):\n    def go(self, x):\n"
               "        return x.cuda()\n")
MODEL_WARNING = "import torch\n\nw = torch.empty(3)\ntorch.nn.init.normal_(w)\n"


@pytest.fixture
def job_spec(spec_file, tmp_path: Path):
    """A spec whose sync directory holds train.py and the given model.py."""
    def write(model: str | None, sync: bool = True) -> Path:
        code = tmp_path / "code"
        code.mkdir(exist_ok=True)
        (code / "train.py").write_text(TRAIN)
        if model is not None:
            (code / "model.py").write_text(model)
        line = f"sync: {code}\n" if sync else ""
        return spec_file("name: linted\n"
                         "tpu: {accelerator: v4-8, zone: us-central2-b, project: lab}\n"
                         f"{line}run: {{command: python train.py}}\n")
    return write


def test_findings_are_printed_and_the_job_recorded(cli, job_spec, stored_jobs, offline) -> None:
    result = cli("create", job_spec(MODEL_ERROR))
    assert result.code == 0, result.err
    finding, summary = result.err.splitlines()[:2]
    assert ":6:16 TPU003 error: x.cuda(): CUDA device in torch_xla code (fix: " in finding
    assert finding.split(":")[0].endswith("model.py")
    assert summary == "lint: 1 error, 0 warnings in the sync directory"
    assert "recorded" in result.out
    assert stored_jobs() == 1 and offline == ["cloud"]


def test_strict_refuses_an_error_before_anything_is_recorded_or_spent(
        cli, job_spec, stored_jobs, offline, tpujob_home) -> None:
    result = cli("create", "--strict", job_spec(MODEL_ERROR))
    assert result.code == 2
    *shown, error = result.err.strip().splitlines()
    assert [line.split(" ")[1] for line in shown[:-1]] == ["TPU003"]
    assert error.startswith("error: --strict: 1 error-level lint finding in the sync directory ")
    assert "nothing recorded" in error
    assert stored_jobs() == 0 and offline == []
    assert not (tpujob_home / "tpujob.db").exists()


def test_strict_lets_warnings_through(cli, job_spec, stored_jobs, offline) -> None:
    result = cli("create", "--strict", job_spec(MODEL_WARNING))
    assert result.code == 0, result.err
    assert " TPU009 " in result.err
    assert stored_jobs() == 1


def _findings(err: str) -> list[str]:
    """stderr less create's own closing line about re-queueing (no sweeper in these tests)."""
    return [line for line in err.splitlines() if "nothing will re-queue" not in line]


def test_strict_with_a_clean_sync_dir_or_none(cli, job_spec, stored_jobs, offline) -> None:
    clean = cli("create", "--strict", job_spec("import torch\n"))
    assert (clean.code, _findings(clean.err)) == (0, [])
    unsynced = cli("create", "--strict", job_spec(MODEL_ERROR, sync=False))
    assert (unsynced.code, _findings(unsynced.err)) == (0, [])
    assert stored_jobs() == 2


def test_dry_run_shows_findings_and_strict_predicts_the_refusal(cli, job_spec, stored_jobs) -> None:
    spec = job_spec(MODEL_ERROR)
    plan = cli("create", "--dry-run", spec)
    assert plan.code == 0
    assert " TPU003 " in plan.err and "dry run: nothing recorded" in plan.out
    strict = cli("create", "--dry-run", "--strict", "--json", spec)
    assert strict.code == 2 and strict.out == ""
    assert strict.err.strip().splitlines()[-1].startswith("error: --strict: 1 error-level")
    assert stored_jobs() == 0
