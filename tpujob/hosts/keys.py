"""tpujob's own SSH key: ed25519, kept under $TPUJOB_HOME/ssh/, its public half in `ssh-keys`.

paramiko 5 cannot generate Ed25519 keys, so `cryptography` makes it and writes it in OpenSSH's
own format, which paramiko (and ssh) read.
"""

from __future__ import annotations

import fcntl
import os
import pathlib

from tpujob.errors import ConfigError
from tpujob.settings import private_dir

KEY_NAME = "tpujob_ed25519"
COMMENT = "tpujob"


def key_path(home: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(home) / "ssh" / KEY_NAME


def ensure_key(home: pathlib.Path) -> pathlib.Path:
    """The private key file, created (mode 600, directory 700) on first use, with its .pub."""
    path = key_path(home)
    pub = path.with_suffix(".pub")
    if path.exists() and pub.exists():
        return path
    private_dir(path.parent).chmod(0o700)
    # Several commands may start at once on a fresh home (cron's sweep, a `create`): without
    # the lock, each would generate a pair and the last .pub and the last private key to land
    # could come from different pairs, and SSH would then fail on every host.
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _generate(path, pub)
        elif not pub.exists():  # lost (or never written by a crashed run): rebuilt, not replaced
            _write_atomically(pub, _public_line(path.read_bytes()), 0o644)
    return path


def _generate(path: pathlib.Path, pub: pathlib.Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    private = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    # The .pub first, the private key last: the private key's presence is what says "done"
    # to the next command, so its public half is already in place when it appears.
    _write_atomically(pub, _public_line(private), 0o644)
    _write_atomically(path, private, 0o600)


def _public_line(private: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(private, password=None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return public + f" {COMMENT}\n".encode()


def _write_atomically(path: pathlib.Path, data: bytes, mode: int) -> None:
    """Under a temporary name, then renamed: nobody reads a half-written file, and a private
    key is 600 from its first byte."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def load_key(home: pathlib.Path):
    """The paramiko key object (paramiko is imported here, not at module import)."""
    import paramiko

    path = ensure_key(home)
    try:
        return paramiko.Ed25519Key(filename=str(path))
    except (paramiko.SSHException, OSError) as err:
        raise ConfigError(f"cannot read tpujob's SSH key {path}: {err}") from err


def public_key_line(home: pathlib.Path) -> str:
    """"ssh-ed25519 AAAA... tpujob": the public half, as authorized_keys takes it."""
    pub = ensure_key(home).with_suffix(".pub")
    return pub.read_text().strip()


def ssh_keys_metadata(home: pathlib.Path, user: str) -> str:
    """The node's `ssh-keys` metadata value: "USER:ssh-ed25519 AAAA... tpujob"."""
    return f"{user}:{public_key_line(home)}"
