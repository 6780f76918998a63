"""Known bad-host signatures, and a dead program's log as decide is told it (bounded, masked)."""

import pytest

from tpujob.attempt.host_answers import observation_of as _status
from tpujob.hosts.bad_host import SIGNATURES, bad_host_line
from tpujob.hosts.program import HostStatus
from tpujob.reconcile.observation import Program

# The wordings as their sources quote them (each signature's issue in tpujob/hosts/bad_host.py).
QUOTED = [
    "INFO:2024-06-25 00:34:55,142:jax._src.xla_bridge:889: Unable to initialize backend 'tpu': ABORTED: The TPU "
    "is already in use by process with pid 176028. Not attempting to load libtpu.so in this process.",
    "I0000 00:00:1649423660.053391 1924758 f236.cc:165] libtpu.so already in use by another process probably "
    "owned by another user. Run \"$ sudo lsof -w /dev/accel0\" to figure out which process is using the TPU.",
    "TPU initialization failed: open(/dev/vfio/1): Device or resource busy: Device or resource busy; Couldn't "
    "open iommu group /dev/vfio/1",
]


@pytest.mark.parametrize("line", QUOTED)
def test_each_quoted_wording_is_a_bad_host(line):
    log = f"step 1\nTraceback (most recent call last):\n  File \"x.py\"\n{line}\n"
    assert bad_host_line(log) == line


def test_every_signature_names_its_source_and_ordinary_failures_are_not_bad_hosts():
    assert all(s.source for s in SIGNATURES)
    assert bad_host_line("Traceback\nValueError: bad shape\n") is None
    assert bad_host_line("RuntimeError: Unable to initialize backend 'cuda': no GPU\n") is None


def test_a_dead_programs_log_reaches_decide_bounded_and_masked():
    tail = ("noise\n" * 5000 + "HF_TOKEN=abc123 loading\n"
            "RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process "
            "with pid 7. Not attempting to load libtpu.so in this process. s3cr3t\n")
    seen = _status(HostStatus(1, "exited", 1, 9, len(tail), ended_at=12.5, log_tail=tail), ("s3cr3t",))
    assert (seen.program, seen.exit_code, seen.ended_at) == (Program.EXITED, 1, 12.5)
    assert "s3cr3t" not in seen.said and "abc123" not in seen.said and "HF_TOKEN=***" in seen.said
    assert len(seen.said) <= 400 and "noise" not in seen.said.split(" | ")[-1]
    assert (seen.bad_host.startswith("RuntimeError: Unable to initialize backend 'tpu'")
            and "s3cr3t" not in seen.bad_host)
    # A program still running carries none of it.
    assert _status(HostStatus(0, "running", None, 9, 10)).said is None


def test_programs_run_with_jax_platforms_tpu_on_real_tpus_only():
    from tpujob.attempt.host_attempts import program_env

    assert program_env("gcp", {"A": "1"}) == {"JAX_PLATFORMS": "tpu", "A": "1"}
    assert program_env("gcp", {"JAX_PLATFORMS": "cpu"}) == {"JAX_PLATFORMS": "cpu"}   # the spec's word wins
    assert program_env("local", {"A": "1"}) == {"A": "1"}   # the emulator's hosts have no TPU


def test_an_abort_says_the_line_above_its_native_stack_not_the_frames():
    # What the soak's exit-134 runtimes left (scripts/soak.py --keep), shortened.
    tail = ("F1125 22:43:54.736486   32610 client.h:80] Terminating process because the JAX distributed service "
            "detected fatal errors.\n\nRPC: /xla.coordination.CoordinationService/RegisterTask\n"
            "*** Check failure stack trace: ***\n"
            + "".join(f"    @     0x7fec876e9f{i:02x}  xla::DistributedRuntimeCoordinationServiceClient::Connect()\n"
                      for i in range(40))
            + 'tpujob-program: line 1: 32610 Aborted                 bash -c "$1"\n')
    seen = _status(HostStatus(0, "exited", 134, 9, len(tail), ended_at=1.0, log_tail=tail))
    assert "Terminating process because the JAX distributed service detected fatal errors" in seen.said
    assert "0x7fec" not in seen.said and seen.said.endswith('bash -c "$1"')
