"""`python -m tpujob.runtime CONFIG.yaml`: read the contract's environment, train, report, exit.

Every way out writes status.json (host 0) and exits with a code from contract.EXIT_CODES.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import time
import traceback
from pathlib import Path

from . import contract
from .config import ConfigError, RuntimeConfig, load_config
from .data import DataError
from .distributed import HostEnv, initialize, read_env
from .preemption import Preemption

log = logging.getLogger("tpujob.runtime")


def _setup_compilation_cache(run_dir: Path) -> None:
    # A re-queued attempt skips the (minutes-long on TPU) compile; an explicit
    # JAX_COMPILATION_CACHE_DIR in the environment wins.
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", str(run_dir / "compile_cache"))


def _status(run_dir: Path | None, is_main: bool, st: contract.Status) -> None:
    if run_dir is None or not is_main:
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        contract.write_status(run_dir, st)
    except OSError as e:
        log.error("cannot write %s: %s", contract.STATUS_FILE, e)


def _failed(message: str, code: int, step: int = 0, **kw) -> contract.Status:
    return contract.Status(contract.STATE_FAILED, step, message, exit_code=code, **kw)


def _usage() -> argparse.ArgumentParser:
    env = "\n".join(f"  {name:<20} {what}" for name, what in (
        (contract.ENV_RUN_DIR, "shared run dir: status.json, heartbeat, metrics, checkpoints (required)"),
        (contract.ENV_JOB_ID, "the job's id"),
        (contract.ENV_ATTEMPT, "the attempt's number"),
        (contract.ENV_HOST_INDEX, "this host's index in the slice (0 writes status.json)"),
        (contract.ENV_NUM_HOSTS, "hosts in the slice"),
        (contract.ENV_COORDINATOR, "host 0's ip:port for jax.distributed")))
    codes = "\n".join(f"  {code:<3} {what}" for code, what in contract.EXIT_CODES.items())
    return argparse.ArgumentParser(
        prog="python -m tpujob.runtime", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="tpujob's bundled JAX training runtime: restores the latest checkpoint in the "
                    "run dir, trains, checkpoints, reports (docs/runtime.md).",
        epilog=f"environment (set by tpujob on every host):\n{env}\n\nexit codes:\n{codes}")


def _config_path(argv: list[str]) -> str | int:
    """CONFIG's path, or the exit code: 0 after --help, EXIT_CONFIG for a usage error."""
    parser = _usage()
    parser.add_argument("config", metavar="CONFIG", help="the runtime config (YAML)")
    try:
        return parser.parse_args(argv).config
    except SystemExit as stop:  # argparse has printed the usage or the error
        return 0 if stop.code == 0 else contract.EXIT_CONFIG


def main(argv: list[str]) -> int:
    started = time.monotonic()
    config = _config_path(argv)
    if isinstance(config, int):
        return config
    host_tag = os.environ.get(contract.ENV_HOST_INDEX, "0")
    # Orbax and absl log every save at INFO: keep theirs at WARNING, ours at INFO.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s host{host_tag} %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    # SIGUSR1 prints every thread's Python stack to stderr (the host's program.log): the
    # orchestrator asks for it before it ends a hung program. faulthandler's handler is C
    # code, so it runs even while the main thread is blocked inside XLA (a collective waiting
    # for a dead peer), where a Python-level handler would wait for the main thread forever.
    faulthandler.register(contract.STACKS_SIGNAL, all_threads=True)
    # Until jax.distributed is up, the environment is all there is to tell host 0; a broken
    # environment is still reported in the run dir it names, if any.
    raw_run_dir = os.environ.get(contract.ENV_RUN_DIR)
    run_dir = Path(raw_run_dir) if raw_run_dir else None
    is_main = host_tag == "0"
    try:
        host = read_env(os.environ)
        host.run_dir.mkdir(parents=True, exist_ok=True)
        cfg = load_config(config)
    except ConfigError as e:
        log.error("config: %s", e)
        _status(run_dir, is_main, _failed(str(e), contract.EXIT_CONFIG))
        return contract.EXIT_CONFIG

    # The notice is listened for from before the slice forms: a SIGTERM while the hosts join,
    # restore or compile is kept, and acted on at the first step boundary (a checkpoint, exit
    # 75), within the grace as any other. JAX's own SIGTERM listener stays off (initialize).
    preemption = Preemption(cfg.sigterm_grace_s)
    try:
        return _join_and_train(cfg, host, run_dir, is_main, started, preemption)
    finally:
        preemption.restore()


def _join_and_train(cfg: RuntimeConfig, host: HostEnv, run_dir: Path | None, is_main: bool, started: float,
                    preemption: Preemption) -> int:
    try:
        initialize(host, cfg.distributed_timeout_s)
    except Exception as e:  # noqa: BLE001 - e.g. an unresolvable coordinator host
        log.error("distributed start-up failed:\n%s", traceback.format_exc())
        _status(run_dir, is_main, _failed(f"distributed start-up: {type(e).__name__}: {e}",
                                          contract.EXIT_ERROR))
        return contract.EXIT_ERROR
    import jax

    from .tpu_device import claim

    claim()  # where JAX's TPU backend starts: a TPU another process holds fails here (emulator only)
    # Now jax knows which process this is (TPU metadata may number the hosts, not the env).
    is_main = jax.process_index() == 0
    _setup_compilation_cache(host.run_dir)
    from .loop import InitCheckError, Trainer
    from .train import RecompileError

    trainer = None

    def where() -> dict:  # how far training got, for a failure's status
        if trainer is None:
            return {"step": 0}
        return {"step": trainer.step, "compiles": trainer.compiler.compiles}

    try:
        trainer = Trainer(cfg, host, started)
        outcome = trainer.run(preemption)
    except (ConfigError, DataError) as e:
        log.error("config: %s", e)
        _status(run_dir, is_main, _failed(str(e), contract.EXIT_CONFIG, **where()))
        return contract.EXIT_CONFIG
    except InitCheckError as e:
        log.error("%s; refused before step 1:\n%s", e, e.table)
        _status(run_dir, is_main, _failed(str(e), contract.EXIT_INIT_CHECK, **where(),
                                          extra={"init_check": e.table}))
        return contract.EXIT_INIT_CHECK
    except RecompileError as e:
        log.error("%s", e)
        _status(run_dir, is_main, _failed(str(e), contract.EXIT_RECOMPILE, **where()))
        return contract.EXIT_RECOMPILE
    except Exception as e:  # noqa: BLE001 - the orchestrator needs a status whatever broke
        log.error("unexpected error:\n%s", traceback.format_exc())
        _status(run_dir, is_main, _failed(f"{type(e).__name__}: {e}", contract.EXIT_ERROR, **where()))
        return contract.EXIT_ERROR

    log.info("%s at step %d: %s", outcome.state, outcome.step, outcome.message)
    _status(run_dir, is_main, contract.Status(
        outcome.state, outcome.step, outcome.message, compiles=outcome.compiles,
        exit_code=outcome.exit_code, resumed_from=outcome.resumed_from, extra=outcome.extra))
    return outcome.exit_code
