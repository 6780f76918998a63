"""A lab as one runs it: several login nodes, each its own TPUJOB_HOME (its own SSH key) and
person, on one PostgreSQL store and one emulator, their clocks ten minutes apart
(TPUJOB_CLOCK_SKEW_SECONDS), every command a real `tpujob` process; with metadata keys, and
under OS Login with an account per person (TPUJOB_EMULATOR_ACCOUNT). Node A creates a job; node
B sweeps it (and shows its logs) without harming it, the nodes race to recover its preemption,
a node C that joins while it runs manages it too, and B cancels it with --force. A second job,
preempted with a long backoff, shows that a node's clock does not shorten another's backoff."""

from __future__ import annotations

import json

import pytest
from reconcile_helpers import ZONE, Node, node_ref, spec_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SKEW = 600.0  # ten minutes: A runs behind, B ahead, C on time


class Shown(dict):
    """A job as the store has it (read in this process: a `tpujob show` process per look would
    double the test's CPU), keyed as `show --json` keys it."""

    @classmethod
    def read(cls, url: str, ref: str) -> Shown:
        from tpujob.store.repository import open_store

        store = open_store(url)
        job = store.find(ref)
        return cls(state=job.state, attempt=job.attempt, failures=job.failures, preemptions=job.preemptions,
                   attempts=[{"slice_name": a.slice_name, "end_reason": a.end_reason}
                             for a in store.attempts(job.id)],
                   events=[{"kind": e.kind, "message": e.message} for e in store.events(job.id)])


def _said(shown: dict) -> str:
    return "\n".join(f"{e['kind']}: {e['message']}" for e in shown["events"])


@pytest.fixture(params=["metadata keys", "os login"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def lab(postgres_url, project, local_cloud, tmp_path, mode):
    nodes = {name: Node(tmp_path / name, postgres_url, skew, f"{user}@example.com")
             for name, skew, user in (("a", -SKEW, "alice"), ("b", SKEW, "bob"), ("c", 0.0, "carol"))}
    if mode == "os login":  # nobody holds roles/compute.osAdminLogin yet
        local_cloud.oslogin(project, True)
    yield nodes
    for ref in ("lab", "slow"):
        nodes["c"].run("delete", "--force", ref, ok=False)


def test_any_node_of_a_lab_keeps_any_job_alive(lab, mode, local_cloud, project, tmp_path):
    a, b, c = lab["a"], lab["b"], lab["c"]

    def show(ref: str) -> Shown:
        return Shown.read(a.url, ref)
    spec = tmp_path / "lab.yaml"
    spec.write_text(spec_text("lab", command="echo hello from A; sleep 900", backoff_seconds=0, min_run_seconds=0,
                              unhealthy_grace_seconds=1))
    created = a.run("create", str(spec), "--json")
    job = str(json.loads(created.stdout)["id"])
    assert show(job)["state"] == "RUNNING"

    if mode == "os login":
        # B logs in as its own user (bob_example_com), and A's program runs as alice's: without
        # roles/compute.osAdminLogin B cannot read it. Found out before anything is judged: the
        # job is left RUNNING (not "program missing", not replaced), and B says what it lacks.
        for _ in range(2):
            swept = b.run("requeue")
            assert "roles/compute.osAdminLogin" in swept.stderr and "sudo" in swept.stderr, swept.stderr
        shown = show(job)
        assert (shown["state"], shown["attempt"], shown["preemptions"]) == ("RUNNING", 1, 0), _said(shown)
        local_cloud.oslogin(project, True, admins=[n.user for n in (a, b, c)])

    # B joined after the slice was made: its key is not on it. Its sweeps add it and leave the
    # job RUNNING on its first attempt, nothing counted; its clock, 20 minutes ahead of A's,
    # judges nothing A wrote as old.
    for _ in range(2):
        swept = b.run("requeue")
        assert "cannot log in" not in swept.stderr, swept.stderr + _said(show(job))
    shown = show(job)
    said = _said(shown)
    assert shown["state"] == "RUNNING" and shown["attempt"] == 1, said
    assert (shown["failures"], shown["preemptions"]) == (0, 0), said
    assert ("added this node's SSH key" in said) == (mode == "metadata keys")
    assert "unhealthy" not in said and "health:" not in said
    assert "hello from A" in b.run("logs", job).stdout

    # Preempted: A and B sweep at once; whichever acts first recovers it, once.
    first = show(job)["attempts"][0]["slice_name"]
    local_cloud.preempt(node_ref(project, ZONE, first))
    racing = [n.start("requeue") for n in (a, b)]
    for proc in racing:
        assert proc.wait(timeout=240) == 0, proc.stderr.read() if proc.stderr else ""
    shown = show(job)
    for _ in range(3):
        if shown["state"] == "RUNNING":
            break
        a.run("requeue")
        shown = show(job)
    said = _said(shown)
    assert shown["state"] == "RUNNING" and shown["attempt"] == 2, said
    assert (shown["preemptions"], shown["failures"]) == (1, 0), said
    assert [x["end_reason"] for x in shown["attempts"]] == ["preempted", None], said

    # C joins while the job runs: it manages it (adds its own key to the live slice, or acts
    # as the attempt's user through sudo).
    swept = c.run("requeue")
    assert "cannot log in" not in swept.stderr, swept.stderr
    shown = show(job)
    assert shown["state"] == "RUNNING" and shown["attempt"] == 2, _said(shown)
    assert "hello from A" in c.run("logs", job).stdout

    # A second job, preempted as it starts (a flap: under min_run_seconds), waits out a 15
    # minute backoff: A (behind) moves it to RECOVERING; B, 20 minutes ahead of A, must not
    # read the backoff as spent.
    slow = tmp_path / "slow.yaml"
    slow.write_text(spec_text("slow", backoff_seconds=900, min_run_seconds=3600))
    slow_id = str(json.loads(a.run("create", str(slow), "--json").stdout)["id"])
    slice_ = show(slow_id)["attempts"][0]["slice_name"]
    local_cloud.preempt(node_ref(project, ZONE, slice_))
    a.run("requeue", slow_id)
    assert show(slow_id)["state"] == "RECOVERING", _said(show(slow_id))
    b.run("requeue", slow_id)
    shown = show(slow_id)
    assert shown["state"] == "RECOVERING" and shown["attempt"] == 1, _said(shown)

    # B cancels A's job: the program stops on the slice B did not make.
    refused = b.run("cancel", job, ok=False)  # A's job: a lab's convention asks for --force
    assert refused.returncode == 4 and show(job)["state"] == "RUNNING", refused.stderr
    b.run("cancel", "--force", job)
    shown = show(job)
    assert shown["state"] == "CANCELLED", _said(shown)
    assert shown["failures"] == 0


def test_a_watch_puts_the_keys_of_nodes_that_joined_meanwhile_on_new_slices(project, monkeypatch):
    # A `tpujob watch` runs for weeks: the nodes that join the lab meanwhile register their
    # keys, and the slices it creates from then on carry them (read again before each sweep).
    from tpujob.service import keep_alive
    from tpujob.service.context import Context

    ctx = Context.load()
    made: list = []
    real = keep_alive.reconciler
    monkeypatch.setattr(keep_alive, "reconciler", lambda c, **kw: made.append(real(c, **kw)) or made[-1])
    joined = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJoinedLater tpujob"
    keep_alive.watch(ctx, 0.01, lambda report: ctx.store.register_node(joined, "d:/home/d/.tpujob"),
                     max_sweeps=2)
    keys = made[0].acting.ssh_keys
    assert len(keys) == 2 and keys[-1] == f"{ctx.settings.ssh_user}:{joined}", keys


def test_a_node_that_joins_adds_its_key_to_a_compute_engine_jobs_vm(postgres_url, project, local_cloud,
                                                                    tmp_path):
    # On the Compute Engine path (`tpu.api: compute`) B's key reaches A's VM through
    # instances.setMetadata (ComputeTpuCloud.add_ssh_keys): B's sweep leaves the job RUNNING on its
    # first attempt, says so in its events, and B reads the program's output.
    a, b = (Node(tmp_path / name, postgres_url, 0.0, f"{user}@example.com")
            for name, user in (("a", "alice"), ("b", "bob")))
    spec = tmp_path / "ce.yaml"
    spec.write_text(spec_text("ce", command="echo hello from A; sleep 900", accelerator="v6e-8", zone="us-east4-a",
                              backoff_seconds=0, min_run_seconds=0, unhealthy_grace_seconds=1)
                    .replace("  queued: false\n", "  queued: false\n  api: compute\n"))
    job = str(json.loads(a.run("create", str(spec), "--json").stdout)["id"])
    try:
        swept = b.run("requeue")
        assert "cannot log in" not in swept.stderr and "not in the slice" not in swept.stderr, swept.stderr
        shown = Shown.read(a.url, job)
        said = _said(shown)
        assert (shown["state"], shown["attempt"], shown["failures"]) == ("RUNNING", 1, 0), said
        assert "added this node's SSH key (tpujob)" in said
        assert "hello from A" in b.run("logs", job).stdout
    finally:
        b.run("delete", "--force", job, ok=False)
