"""tpujob's own SSH key: ed25519, kept under $TPUJOB_HOME/ssh/, its public half in `ssh-keys`.

paramiko 5 cannot generate Ed25519 keys, so `cryptography` makes it and writes it in OpenSSH's
own format, which paramiko (and ssh) read.
"""

from __future__ import annotations

import os
import pathlib

from tpujob.errors import ConfigError

KEY_NAME = "tpujob_ed25519"
COMMENT = "tpujob"


def key_path(home: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(home) / "ssh" / KEY_NAME


def ensure_key(home: pathlib.Path) -> pathlib.Path:
    """The private key file, created (mode 600, directory 700) on first use."""
    path = key_path(home)
    if path.exists():
        return path
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    # Written under a temporary name and renamed: two commands starting at once never see a
    # half-written key, and the file is 600 from its first byte.
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    path.with_suffix(".pub").write_bytes(public + f" {COMMENT}\n".encode())
    os.replace(tmp, path)
    return path


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
