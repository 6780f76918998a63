"""sync: one tar per host over SFTP, .gitignore honoured, nothing sent when unchanged."""

from __future__ import annotations

from tpujob.hosts.sync import collect, sync


def make_tree(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text("print('hi')\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"x" * 10)
    (root / "notes.log").write_text("log")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / ".gitignore").write_text("# comment\ndata/\n*.log\n!keep.log\n")


def test_collect_honours_simple_gitignore(tmp_path):
    make_tree(tmp_path / "src")
    assert collect(tmp_path / "src") == [".gitignore", "pkg/train.py"]


def test_sync_uploads_then_skips_until_something_changes(slice_hosts, tmp_path):
    machines, group = slice_hosts(3)
    src = tmp_path / "src"
    make_tree(src)
    assert [r.output.strip() for r in sync(group, src, "code")] == ["updated"] * 3
    for i in range(3):
        code = machines.host_root(i) / "home" / "tpujob" / "code"
        assert (code / "pkg" / "train.py").read_text() == "print('hi')\n"
        assert not (code / "data").exists() and not (code / ".git").exists()
    assert [r.output for r in sync(group, src, "code")] == ["unchanged"] * 3
    (src / "pkg" / "train.py").write_text("print('bye')\n")
    (machines.host_root(1) / "home" / "tpujob" / "code" / "stale.txt").write_text("old")
    assert [r.output.strip() for r in sync(group, src, "code")] == ["updated"] * 3
    code1 = machines.host_root(1) / "home" / "tpujob" / "code"
    assert (code1 / "pkg" / "train.py").read_text() == "print('bye')\n"
    assert not (code1 / "stale.txt").exists()   # the directory is replaced, not merged
    assert not list((machines.host_root(1) / "home" / "tpujob").glob("*.tar.gz"))
