"""The setup cache's spec form, key and words (issue 26): pure, no cloud."""

from __future__ import annotations

import pytest

from tpujob import spec as spec_mod
from tpujob.attempt import setup_cache
from tpujob.errors import SpecError

BASE = """\
name: cached
tpu: {{accelerator: {accelerator}, zone: {zone}{runtime}}}
run_dir: gs://my-bucket/runs
sync: {sync}
setup:
  run: pip install -r requirements.txt
  cache: [venv, ~/.cache/pip]
  key_files: [requirements.txt]
run: {{command: python train.py}}
"""


def resolved(tmp_path, accelerator="v4-8", zone="us-central2-b", runtime="", text=None):
    text = text or BASE.format(accelerator=accelerator, zone=zone, sync=tmp_path,
                               runtime=f", runtime_version: {runtime}" if runtime else "")
    parsed, lines = spec_mod.parse(text)
    return spec_mod.resolve(parsed, lines, default_project="proj-12345")


def test_the_short_form_stays_and_caches_nothing(tmp_path):
    (tmp_path / "requirements.txt").write_text("jax\n")
    text = BASE.format(accelerator="v4-8", zone="us-central2-b", sync=tmp_path, runtime="")
    short = text.split("setup:")[0] + "setup: pip install jax\nrun: {command: python train.py}\n"
    spec = resolved(tmp_path, text=short)
    assert (spec.spec.setup_command, spec.spec.setup_cache) == ("pip install jax", None)
    assert setup_cache.key(spec, "v4-8") is None


def test_the_key_follows_the_key_files_runtime_and_generation(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("jax==0.4.30\n")
    spec = resolved(tmp_path)
    assert spec.spec.setup_command == "pip install -r requirements.txt"
    first = setup_cache.key(spec, "v4-8")
    assert first == setup_cache.key(resolved(tmp_path), "v4-8")  # the same inputs, the same key
    assert setup_cache.key(spec, "v4-32") == first  # the same generation and image
    assert setup_cache.key(spec, "v5litepod-8") != first  # a fallback to another generation
    assert setup_cache.key(resolved(tmp_path, runtime="tpu-vm-tf-2.16.1-pjrt"), "v4-8") != first
    requirements.write_text("jax==0.4.31\n")
    assert setup_cache.key(spec, "v4-8") != first  # read again at each setup
    assert setup_cache.host_archive(first) == f"/mnt/tpujob-run/tpujob-cache/{first}"


@pytest.mark.parametrize("change,message", [
    (("run_dir: gs://my-bucket/runs\n", ""), "setup.cache is kept in the run dir's bucket: set run_dir"),
    (("requirements.txt]", "missing.txt]"), "setup.key_files: 'missing.txt' is not a file in the sync directory"),
    (("[venv, ~/.cache/pip]", "[../etc]"), "setup.cache: '../etc' is not a directory or file to cache"),
    (("run: pip install -r requirements.txt", "run: ' '"), "setup.run is empty"),
])
def test_a_bad_long_form_is_refused_with_one_line(tmp_path, change, message):
    (tmp_path / "requirements.txt").write_text("jax\n")
    text = BASE.format(accelerator="v4-8", zone="us-central2-b", sync=tmp_path, runtime="")
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        resolved(tmp_path, text=text.replace(*change))


def test_hits_and_misses_in_words():
    assert setup_cache.describe(["", ""]) is None
    assert setup_cache.describe(["hit 1.3", "hit 2.0"]) == "hit on 2 of 2 hosts (unpacked in 1.3 s on host 0)"
    assert setup_cache.describe(["miss absent stored 4.2", "miss absent"]) == (
        "miss on 2 of 2 hosts (host 0: no archive under this key yet): the setup ran; stored by host 0 "
        "(packed in 4.2 s)")
    assert setup_cache.describe(["miss unpack-failed store-failed"]) == (
        "miss on 1 of 1 hosts (host 0: unpacking the archive failed): the setup ran; host 0 could not "
        "store it (see its setup.err)")
    assert setup_cache.describe(["miss mismatch stored 2.1 sha256 " + "a" * 64 + " key " + "b" * 32]) == (
        "miss on 1 of 1 hosts (host 0: the archive was refused: its sha256 is not the one recorded when it was "
        "stored): the setup ran; stored by host 0 (packed in 2.1 s)")
    assert "(host 0: the archive was refused: no sha256 of it is recorded)" in setup_cache.describe(
        ["miss unverified"])


def test_the_digest_host_0_reports_is_kept_by_bucket_and_key(tmp_path):
    """What a later setup's hosts check the archive against: the sha256 in host 0's note, kept
    under the run dir's bucket and the key the host stored it under (issue 45)."""
    from tpujob.store.repository import open_store

    (tmp_path / "requirements.txt").write_text("jax\n")
    spec = resolved(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    key = setup_cache.key(spec, "v4-8")
    assert key is not None and setup_cache.digest_of(store, spec, key) == ""  # none: nothing trusted
    digest = "c" * 64
    setup_cache.record_digests(store, spec, ["", f"miss absent stored 3.0 sha256 {digest} key {key}", "hit 1.0"])
    assert setup_cache.digest_of(store, spec, key) == digest
    assert store.setup_cache_digest("another-bucket", key) is None
    setup_cache.record_digests(store, spec, [f"miss mismatch stored 3.0 sha256 {'d' * 64} key {key}"])
    assert setup_cache.digest_of(store, spec, key) == "d" * 64  # host 0 stored a new one in its place
