"""SFTP on an emulated host: paramiko's SFTPServer over the host's own filesystem view.

Paths are looked up under `/proc/HOLDER/root`, which the kernel resolves in the host's mount
namespace, so an upload to `/mnt/x` lands on that host's /mnt (and a read-only mount there
rejects it). Relative paths start at the user's home, as with OpenSSH's sftp-server. Absolute
symlinks are followed from the emulator's root, a limit of this view that uploads never meet.
"""

from __future__ import annotations

import os
import posixpath

import paramiko
from paramiko.sftp import SFTP_OK


def _errno(err: OSError) -> int:
    return paramiko.SFTPServer.convert_errno(err.errno)


class _Handle(paramiko.SFTPHandle):
    def stat(self):
        try:
            return paramiko.SFTPAttributes.from_stat(os.fstat(self.readfile.fileno()))
        except OSError as err:
            return _errno(err)

    def chattr(self, attr):
        try:
            paramiko.SFTPServer.set_file_attr(self.filename, attr)
            return SFTP_OK
        except OSError as err:
            return _errno(err)


class RootedSftp(paramiko.SFTPServerInterface):
    """Every path is taken inside `root` (the host's root directory, seen from outside)."""

    def __init__(self, server, *args, root: str, **kwargs):
        super().__init__(server, *args, **kwargs)
        self.root = root
        self.home = server.home

    def _host_path(self, path) -> str:
        path = path.decode() if isinstance(path, bytes) else path
        return posixpath.normpath(posixpath.join(self.home, path or "."))

    def _real(self, path) -> str:
        return self.root + self._host_path(path)

    def canonicalize(self, path):
        return self._host_path(path)

    def list_folder(self, path):
        real = self._real(path)
        try:
            out = []
            for name in os.listdir(real):
                attr = paramiko.SFTPAttributes.from_stat(os.lstat(os.path.join(real, name)))
                attr.filename = name
                out.append(attr)
            return out
        except OSError as err:
            return _errno(err)

    def stat(self, path):
        try:
            return paramiko.SFTPAttributes.from_stat(os.stat(self._real(path)))
        except OSError as err:
            return _errno(err)

    def lstat(self, path):
        try:
            return paramiko.SFTPAttributes.from_stat(os.lstat(self._real(path)))
        except OSError as err:
            return _errno(err)

    def open(self, path, flags, attr):
        real = self._real(path)
        try:
            mode = getattr(attr, "st_mode", None) or 0o666
            fd = os.open(real, flags | getattr(os, "O_BINARY", 0), mode)
        except OSError as err:
            return _errno(err)
        if flags & os.O_CREAT and attr is not None:
            attr._flags &= ~attr.FLAG_PERMISSIONS
            paramiko.SFTPServer.set_file_attr(real, attr)
        if flags & os.O_WRONLY:
            fmode = "ab" if flags & os.O_APPEND else "wb"
        elif flags & os.O_RDWR:
            fmode = "a+b" if flags & os.O_APPEND else "r+b"
        else:
            fmode = "rb"
        try:
            f = os.fdopen(fd, fmode)
        except OSError as err:
            os.close(fd)
            return _errno(err)
        handle = _Handle(flags)
        handle.filename = real
        handle.readfile = f
        handle.writefile = f
        return handle

    def _call(self, fn, *args):
        try:
            fn(*args)
            return SFTP_OK
        except OSError as err:
            return _errno(err)

    def remove(self, path):
        return self._call(os.remove, self._real(path))

    def rename(self, oldpath, newpath):
        new = self._real(newpath)
        if os.path.exists(new):   # SFTP v3 rename refuses to overwrite
            return paramiko.sftp.SFTP_FAILURE
        return self._call(os.rename, self._real(oldpath), new)

    def posix_rename(self, oldpath, newpath):
        return self._call(os.rename, self._real(oldpath), self._real(newpath))

    def mkdir(self, path, attr):
        def make(real):
            os.mkdir(real)
            if attr is not None:
                paramiko.SFTPServer.set_file_attr(real, attr)
        return self._call(make, self._real(path))

    def rmdir(self, path):
        return self._call(os.rmdir, self._real(path))

    def chattr(self, path, attr):
        return self._call(paramiko.SFTPServer.set_file_attr, self._real(path), attr)

    def readlink(self, path):
        try:
            return os.readlink(self._real(path))
        except OSError as err:
            return _errno(err)

    def symlink(self, target_path, path):
        return self._call(os.symlink, target_path, self._real(path))
