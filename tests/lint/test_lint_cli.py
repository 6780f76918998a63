"""`tpujob lint`: exit codes, output format, JSON shape, --deps and --accelerator."""

from __future__ import annotations

import importlib
import json
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tpujob.cli.lint import register
from tpujob.errors import SpecError, UsageError

CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture()
def invoke():
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:  # a callback keeps `lint` a subcommand, as in the real app
        pass

    def run(*args: str):
        return CliRunner().invoke(app, ["lint", *args])

    return run


def test_error_finding_exits_1_with_one_line_per_finding(invoke) -> None:
    result = invoke(str(CORPUS / "tpu003_pos.py"))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{CORPUS / 'tpu003_pos.py'}:6:13 TPU003 error: model.cuda(): ")
    assert lines[0].endswith(")") and "(fix: " in lines[0]
    assert lines[-1] == "5 errors, 0 warnings"


def test_warnings_only_exit_0(invoke) -> None:
    result = invoke(str(CORPUS / "tpu009_pos.py"))
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == "0 errors, 3 warnings"


def test_clean_directory_exits_0(invoke, tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("import torch\nx = torch.ones(3)\n")
    result = invoke(str(tmp_path))
    assert result.exit_code == 0
    assert result.output.strip() == "0 errors, 0 warnings"


def test_json_shape(invoke) -> None:
    result = invoke(str(CORPUS / "tpu004_pos.py"), "--json")
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert (report["errors"], report["warnings"], report["notes"]) == (0, 0, 2)
    first = report["findings"][0]
    assert set(first) == {"path", "line", "col", "rule", "severity", "message", "fix", "symbol",
                          "cell"}
    assert (first["rule"], first["line"], first["severity"]) == ("TPU004", 9, "note")
    assert first["symbol"] == "wrap"


def test_missing_path_is_a_usage_error(invoke, tmp_path: Path) -> None:
    result = invoke(str(tmp_path / "nope.py"))
    assert isinstance(result.exception, UsageError)
    assert result.exception.exit_code == 2


def test_no_path_exits_2(invoke) -> None:
    assert invoke().exit_code == 2


@pytest.mark.parametrize("acc", ["v9z-8", "v9z", "v6e-7"])
def test_unknown_accelerator_is_a_spec_error(invoke, acc: str) -> None:
    result = invoke(str(CORPUS / "tpu012_neg.py"), "--accelerator", acc)
    assert isinstance(result.exception, SpecError)
    assert result.exception.exit_code == 2


@pytest.mark.parametrize("acc", ["v6e-8", "v6e", "V6E"])
def test_v6e_checks_256_wide_mxu(invoke, tmp_path: Path, acc: str) -> None:
    source = tmp_path / "mlp.py"
    source.write_text("import flax.linen as nn\nlayer = nn.Dense(384)\n")
    assert "TPU012" not in invoke(str(source)).output
    result = invoke(str(source), "--accelerator", acc, "--json")
    (finding,) = json.loads(result.output)["findings"]
    assert finding["rule"] == "TPU012"
    assert "pads to 512 on the 256-wide MXU" in finding["message"]


@pytest.mark.parametrize("acc", ["v4", "v5e", "v5litepod", "v5p-8"])
def test_other_generations_keep_the_128_wide_mxu(invoke, tmp_path: Path, acc: str) -> None:
    source = tmp_path / "mlp.py"
    source.write_text("import flax.linen as nn\nlayer = nn.Dense(384)\n")
    result = invoke(str(source), "--accelerator", acc)
    assert result.exit_code == 0 and "TPU012" not in result.output


@pytest.fixture()
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `fakediffusers` importable from sys.path, as pip would leave it."""
    package = tmp_path / "site" / "fakediffusers"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('linting must not import me')\n")
    (package / "models" / "__init__.py").write_text("")
    (package / "models" / "attention_processor.py").write_text(textwrap.dedent("""\
        import torch_xla
        import torch.nn.functional as F

        class AttnProcessor2_0:
            def __call__(self, attn, q, k, v):
                out = F.scaled_dot_product_attention(q, k, v)
                return out.cuda()  # TPU003 in the user's code, but deps are checked for SDPA

        class AttnProcessor:
            def __call__(self, attn, q, k, v):
                return (q @ k.transpose(-2, -1)).softmax(-1) @ v
        """))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    return package


def test_deps_scans_installed_package_and_names_the_class(invoke, installed: Path) -> None:
    clean = CORPUS / "tpu001_neg.py"
    result = invoke(str(clean), "--deps", "fakediffusers", "--json")
    assert result.exit_code == 1
    (finding,) = json.loads(result.output)["findings"]
    assert finding["rule"] == "TPU002"
    assert finding["path"] == str(installed / "models" / "attention_processor.py")
    assert finding["line"] == 6
    assert finding["fix"].startswith("patch AttnProcessor2_0:")


def test_deps_comma_list_and_dotted_module(invoke, installed: Path) -> None:
    result = invoke(str(CORPUS / "tpu001_neg.py"),
                    "--deps", "fakediffusers.models.attention_processor,fakediffusers")
    assert result.exit_code == 1
    assert result.output.count("TPU002") == 1  # the same file is scanned once


def test_deps_missing_package_is_a_usage_error(invoke) -> None:
    result = invoke(str(CORPUS / "tpu001_neg.py"), "--deps", "surely_not_installed_pkg")
    assert isinstance(result.exception, UsageError)
    assert "not installed" in str(result.exception)


@pytest.fixture()
def second(installed: Path) -> Path:
    """A second installed package, `fakeattn`, beside fakediffusers."""
    package = installed.parent / "fakeattn"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from torch.nn.functional import scaled_dot_product_attention as sdpa\n\n\n"
        "class Attention:\n    def forward(self, q, k, v):\n        return sdpa(q, k, v)\n")
    importlib.invalidate_caches()
    return package


def rules_by_file(output: str) -> set[tuple[str, str]]:
    return {(Path(f["path"]).name, f["rule"]) for f in json.loads(output)["findings"]}


@pytest.mark.parametrize("order", ["path first", "deps first"])
def test_deps_takes_several_packages_after_one_option(invoke, second: Path, order: str) -> None:
    path = str(CORPUS / "tpu003_pos.py")
    args = ([path, "--deps", "fakediffusers", "fakeattn", "--json"] if order == "path first"
            else ["--deps", "fakediffusers", "fakeattn", path, "--json"])
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert rules_by_file(result.output) == {
        ("tpu003_pos.py", "TPU003"), ("attention_processor.py", "TPU002"),
        ("__init__.py", "TPU002")}


def test_words_after_deps_that_are_paths_stay_paths(invoke, second: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").mkdir()
    bad = "import torch_xla\nimport torch\nx = torch.ones(1).cuda()\n"
    (tmp_path / "src" / "train.py").write_text(bad)
    (tmp_path / "script.py").write_text(bad)
    monkeypatch.chdir(tmp_path)
    result = invoke("--deps", "fakeattn", "src", "script.py", "--json")
    assert rules_by_file(result.output) == {
        ("train.py", "TPU003"), ("script.py", "TPU003"), ("__init__.py", "TPU002")}


def test_a_missing_word_after_deps_is_read_as_a_package(invoke, installed: Path) -> None:
    result = invoke(str(CORPUS / "tpu001_neg.py"), "--deps", "fakediffusers", "nosuchpkg_xyz")
    assert isinstance(result.exception, UsageError)
    assert "--deps nosuchpkg_xyz: package not installed" in str(result.exception)


@pytest.mark.parametrize("args, spread", [
    (["a.py", "--deps", "x", "y.z", "--json"], ["a.py", "--deps", "x", "--deps", "y.z", "--json"]),
    (["--deps=x", "y", "b.py"], ["--deps=x", "--deps", "y", "b.py"]),
    (["--deps", "x,y", "z", "--", "w"], ["--deps", "x,y", "--deps", "z", "--", "w"]),
    (["--deps", "x", "./rel", "/abs"], ["--deps", "x", "./rel", "/abs"]),
])
def test_spread_deps(args: list[str], spread: list[str]) -> None:
    from tpujob.cli.lint import spread_deps

    assert spread_deps(args) == spread


def test_min_severity_filters_notes_and_warnings(invoke, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import jax\nimport torch_xla\nimport torch\n\np = jax.pmap(f)\nm = torch.nn.Module().cuda()\n"
        "layer = torch.nn.Linear(128, 200)\n")
    every = invoke(str(tmp_path))
    assert every.output.splitlines()[-1] == "1 error, 1 warning, 1 note"
    warnings = invoke(str(tmp_path), "--min-severity", "warning")
    assert warnings.output.splitlines()[-1] == "1 error, 1 warning"
    only_errors = invoke(str(tmp_path), "--min-severity", "error")
    assert [line.split()[1] for line in only_errors.output.splitlines()[:-1]] == ["TPU003"]
    assert only_errors.exit_code == 1


def test_an_unknown_min_severity_is_a_usage_error(invoke, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import jax\np = jax.pmap(f)\n")
    result = invoke(str(tmp_path), "--min-severity", "warn")
    assert isinstance(result.exception, UsageError)
    assert result.exception.exit_code == 2
    assert str(result.exception) == "--min-severity 'warn': use one of note, warning, error"
    assert result.output == ""  # checked before any file is read or anything printed
