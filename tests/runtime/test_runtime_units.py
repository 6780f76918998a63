"""Fast, in-process tests of the runtime's pure parts: contract, config, peaks, data, packing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tpujob.errors import UsageError
from tpujob.runtime import contract, peaks
from tpujob.runtime.config import ConfigError, DataConfig, config_from_dict, load_config
from tpujob.runtime.data import Batches, DataError
from tpujob.runtime.pack import EOT, PackError, decode, pack_files

RUNTIME = Path(contract.__file__).parent


def test_runtime_imports_nothing_else_from_tpujob():
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("tpujob"), f"{path.name}: {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("tpujob") for a in node.names), path.name


def test_orchestrator_side_modules_do_not_import_jax():
    code = ("import sys, tpujob.runtime.contract, tpujob.runtime.config, tpujob.runtime.peaks; "
            "assert 'jax' not in sys.modules, 'jax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_exit_codes_are_distinct_and_clear_of_shell_codes():
    codes = [contract.EXIT_SUCCESS, contract.EXIT_ERROR, contract.EXIT_PREEMPTED, contract.EXIT_NAN,
             contract.EXIT_INIT_CHECK, contract.EXIT_CONFIG, contract.EXIT_RECOMPILE]
    assert len(set(codes)) == len(codes) and set(codes) == set(contract.EXIT_CODES)
    assert all(c < 126 and c != 2 for c in codes)  # 2: Python's usage; 126+: shell, signals


def test_status_round_trip_and_malformed(tmp_path):
    st = contract.Status("nan", 7, "non-finite", compiles=1, exit_code=76, extra={"x": 1})
    contract.write_status(tmp_path, st)
    back = contract.parse_status((tmp_path / "status.json").read_text())
    assert (back.state, back.step, back.compiles, back.exit_code, back.extra) == (
        "nan", 7, 1, 76, {"x": 1})
    with pytest.raises(ValueError, match="no valid state"):
        contract.parse_status('{"state": "exploded"}')
    with pytest.raises(ValueError, match="not JSON"):
        contract.parse_status('{"state": ')
    # A program's odd value in a field is not fatal: the verdict still counts.
    odd = contract.parse_status('{"state": "failed", "step": "12", "exit_code": true, "message": 3}')
    assert (odd.state, odd.step, odd.exit_code, odd.message) == ("failed", 0, None, "3")


def test_what_the_orchestrator_reads_of_a_run_dir_is_one_type():
    status = contract.Status("failed", 12, "bad data", exit_code=1)
    seen = contract.RunDirStatus.of(status, 3.5, url="gs://b/runs/000001")
    assert (seen.state, seen.step, seen.message, seen.exit_code, seen.heartbeat_age, seen.url) == (
        "failed", 12, "bad data", 1, 3.5, "gs://b/runs/000001")
    assert contract.RunDirStatus.of(None, None, problem="status.json is not JSON") == contract.RunDirStatus(
        problem="status.json is not JSON")


@pytest.mark.parametrize("raw, key", [
    ({"checkpoint_evry": 5}, "checkpoint_evry"),
    ({"optimizer": {"lrr": 1}}, "optimizer.lrr"),
    ({"model": {"preset": "tiny", "layers": 3}}, "model.layers"),
    ({"data": {"kind": "shards", "pth": "/x"}}, "data.pth"),
])
def test_unknown_keys_are_errors_naming_the_key(raw, key):
    with pytest.raises(ConfigError, match="unknown key") as info:
        config_from_dict(raw)
    assert info.value.key == key


@pytest.mark.parametrize("raw, key", [
    ({"steps": True}, "steps"),
    ({"batch_size": 0}, "batch_size"),
    ({"model": "7b"}, "model.preset"),
    ({"data": {"kind": "shards"}}, "data.path"),
    ({"accelerator": "v9-8"}, "accelerator"),
    ({"heartbeat_every_s": 60}, "heartbeat_every_s"),
])
def test_invalid_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert info.value.key == key


def test_presets_overrides_and_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {preset: 124m, n_layer: 4}\noptimizer: {lr: 6e-4}\nsteps: 50\n")
    cfg = load_config(path)
    assert (cfg.model.n_layer, cfg.model.d_model, cfg.model.vocab_size) == (4, 768, 50304)
    assert cfg.optimizer.lr == 6e-4 and cfg.decay_steps == 50
    with pytest.raises(ConfigError, match="not valid YAML"):
        path.write_text("a: [")
        load_config(path)


def test_peaks_by_accelerator_and_device_kind():
    assert peaks.peak_flops(peaks.generation("v4-8")) == 275e12
    assert peaks.peak_flops(peaks.generation("v5litepod-16")) == 197e12
    assert peaks.peak_flops(peaks.generation("v5e")) == 197e12
    assert peaks.peak_flops(peaks.generation("v6e-256")) == 918e12
    assert peaks.peak_flops(peaks.generation("h100")) == 989e12
    assert peaks.generation("cpu") is None
    assert peaks.generation_from_device_kind("TPU v5 lite") == "v5litepod"
    assert peaks.generation_from_device_kind("TPU v5p") == "v5p"
    assert peaks.generation_from_device_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert peaks.generation_from_device_kind("cpu") is None
    assert peaks.mxu_multiple("v6e") == 256 and peaks.mxu_multiple("v4") == 128
    with pytest.raises(ValueError, match="unknown accelerator"):
        peaks.generation("v7x-8")


def test_synthetic_batches_are_a_pure_function_of_seed_and_step():
    b = Batches(DataConfig(), seed=1, global_batch=8, seq_len=16, vocab_size=512)
    full = b.rows(5, 0, 8)
    assert full.shape == (8, 17) and full.dtype == np.int32
    assert (b.rows(5, 2, 6) == full[2:6]).all()  # a host's slice is its rows of the global batch
    assert (Batches(DataConfig(), 1, 8, 16, 512).rows(5, 0, 8) == full).all()
    assert not (b.rows(6, 0, 8) == full).all()
    assert not (Batches(DataConfig(), 2, 8, 16, 512).rows(5, 0, 8) == full).all()


def test_pack_then_read_shards(tmp_path):
    docs = [b"hello world " * 50, bytes(range(256)) * 3, b"short"]
    files = []
    for i, d in enumerate(docs):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_bytes(d)
    out = tmp_path / "packed"
    result = pack_files(files, out, shard_tokens=500)
    total = sum(len(d) + 1 for d in docs)
    assert result.tokens == total and len(result.shards) == -(-total // 500)
    tokens = np.concatenate([np.fromfile(out / s, dtype=np.uint16) for s in result.shards])
    assert decode(tokens) == docs and (tokens == EOT).sum() == 3
    meta = json.loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == 257 and meta["dtype"] == "uint16"

    cfg = DataConfig(kind="shards", path=str(out))
    b = Batches(cfg, seed=0, global_batch=4, seq_len=64, vocab_size=512)
    rows = b.rows(3, 0, 4)
    assert (rows == Batches(cfg, 0, 4, 64, 512).rows(3, 0, 4)).all()
    flat = tokens.tolist()
    for row in rows.tolist():  # every row is a window of the packed stream
        assert any(flat[i:i + 65] == row for i in range(len(flat) - 64))
    with pytest.raises(DataError, match="outside vocab_size"):
        Batches(cfg, 0, 4, 64, vocab_size=200).rows(0, 0, 4)
    with pytest.raises(PackError, match="already holds"):
        pack_files(files, out)


def test_cli_data_pack(tmp_path):
    from tpujob.cli.data import register

    app = typer.Typer()
    register(app)
    doc = tmp_path / "a.txt"
    doc.write_text("some text")
    result = CliRunner().invoke(app, ["data", "pack", str(doc), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "packed 1 documents, 10 tokens into 1 shard(s)" in result.output
    missing = CliRunner().invoke(app, ["data", "pack", str(tmp_path / "nope"), "--out", "x"])
    assert isinstance(missing.exception, UsageError) and "is not a file" in str(missing.exception)


def test_init_judge_catches_the_classic_mistakes():
    from tpujob.runtime.initcheck import judge
    from tpujob.runtime.model import InitRule

    rng = np.random.default_rng(0)
    good = rng.normal(0, 0.01, 100_000)
    rule = InitRule("normal", 0.01)
    assert judge(rule, good.size, good.mean(), good.std(), np.abs(good).max()) is None
    unscaled = good * 2  # the missing 1/sqrt(2 L) on a residual projection
    assert "std" in judge(rule, good.size, unscaled.mean(), unscaled.std(), np.abs(unscaled).max())
    uniform = rng.uniform(0, 1, 100_000)
    assert judge(rule, uniform.size, uniform.mean(), uniform.std(), 1.0) is not None
    assert judge(InitRule("ones"), 8, 0.0, 0.0, 0.0) == "want constant 1"
    assert judge(InitRule("zeros"), 8, 0.0, 0.0, 0.0) is None
