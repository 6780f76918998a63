"""A throwaway PostgreSQL cluster for the tests: Debian's server binaries (`postgresql`, which
`scripts/setup --test` installs), a data directory of its own, trust authentication on
127.0.0.1 and a free port, fsync off. One cluster per test session; one database per test.

initdb and postgres refuse to run as root ("cannot be run as root"): as root the cluster runs
as the `postgres` system user the Debian package creates, through runuser (util-linux), in a
directory under /tmp that user can enter (pytest's own tmp dirs are private to root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def server_bin() -> Path | None:
    """The directory of initdb/pg_ctl: Debian's newest /usr/lib/postgresql/N/bin, else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="tpujob-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *argv: str) -> None:
        done = subprocess.run([*self.as_user, *argv], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")

    def start(self) -> Cluster:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres",
                  "--encoding=UTF8", "--no-sync")
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -F -c max_connections=300 "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
