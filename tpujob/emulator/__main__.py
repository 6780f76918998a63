"""`python -m tpujob.emulator`: serve the local TPU cloud in the foreground until SIGTERM.

`tpujob emulator start` runs this in the background; it holds emulator.lock in --state-dir
while it lives (one emulator a directory), writes endpoints.json there once it serves and
removes it on exit.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import pathlib
import signal
import sys
import threading

from tpujob.emulator.process import ENDPOINTS_FILE, SERVING_LOCK, claim
from tpujob.emulator.server import DEFAULT_PROJECT, EmulatorServer

log = logging.getLogger("tpujob.emulator")


def _machines_factory(enabled: bool, image_env: dict[str, str]):
    if not enabled:
        return None
    from tpujob.emulator.machines.slice import SliceMachines  # paramiko: only when hosts are wanted

    return functools.partial(SliceMachines, image_env=image_env)


def _name_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tpujob.emulator", description=__doc__)
    parser.add_argument("--state-dir", type=pathlib.Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--project", default=DEFAULT_PROJECT)
    parser.add_argument("--provisioning-delay", type=float, default=0.2)
    parser.add_argument("--ssh-port", type=int, default=0, help="0: any free port")
    parser.add_argument("--no-hosts", action="store_true",
                        help="no SSH hosts: nodes get addresses only (API tests)")
    parser.add_argument("--no-storage", action="store_true")
    parser.add_argument("--image-env", type=_name_value, action="append", default=[], metavar="NAME=VALUE",
                        help="set in every SSH session on every host, as the image's /etc/environment would")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serving = claim(args.state_dir)  # kept open until the process ends
    if serving is None:
        sys.exit(f"error: another emulator serves {args.state_dir} (it holds {SERVING_LOCK} there)")

    server = EmulatorServer(args.state_dir, host=args.host, port=args.port, project=args.project,
                            provisioning_delay=args.provisioning_delay, ssh_port=args.ssh_port,
                            machines_factory=_machines_factory(not args.no_hosts, dict(args.image_env)),
                            storage=not args.no_storage)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    info = server.start()
    if not args.no_hosts:
        from tpujob.emulator.machines.slice import REAPER

        # `tpujob emulator stop` waits for it too: the hosts are gone once both are.
        info["reaper_pid"] = REAPER.pid()
    endpoints = args.state_dir / ENDPOINTS_FILE
    tmp = endpoints.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, endpoints)  # readers never see half a file
    log.info("serving %s", json.dumps(info))
    stopping.wait()
    log.info("stopping")
    try:
        server.stop()
    finally:
        try:
            if json.loads(endpoints.read_text()).get("pid") == os.getpid():
                endpoints.unlink()
        except (OSError, ValueError):  # already removed by `tpujob emulator stop`
            pass


if __name__ == "__main__":
    main()
