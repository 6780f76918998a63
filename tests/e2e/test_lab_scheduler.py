"""The lab's scheduler with two nodes sweeping one store at once (issue 48, docs/scheduler.md):
each node its own TPUJOB_HOME and person, one PostgreSQL store, one emulator, every sweep a
real `tpujob requeue` process with real SSH to the emulated hosts. Two low-band jobs fill the
quota; a high-band one is submitted; the two nodes' concurrent sweeps evict one low job once
(one compare-and-set winner per move), the high job runs and ends, and the evicted job is
admitted again and resumes from the checkpoint it wrote on the stop's SIGTERM. Throughout, the
emulator never holds more nodes than the quota allows.

The high job ends by its owner's `delete`, which deletes its slice before the job's move (as a
success and an eviction do: decide frees a slice before the move that frees its chips)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from reconcile_helpers import ZONE, Node, api_list

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # 35-85 s here

CHIPS = 4  # a v4-8's chips: the quota below holds two of them
# A program following the runtime contract in a few lines of shell (docs/runtime.md): a step a
# second in its heartbeat (with the checkpoint it resumed from), a checkpoint in the shared run
# dir on SIGTERM (the stop's signal), then exit 75, the runtime's "preempted".
CHECKPOINTING = r"""
ck="$TPUJOB_RUN_DIR/checkpoint"; step=0; from=null
if [ -f "$ck" ]; then step=$(cat "$ck"); from=$step; fi
trap 'echo "$step" > "$ck"; echo "checkpoint at step $step"; exit 75' TERM
while :; do
  step=$((step + 1))
  printf '{"attempt": %s, "step": %s, "resumed_from": %s}\n' "$TPUJOB_ATTEMPT" "$step" "$from" \
    > "$TPUJOB_RUN_DIR/heartbeat"
  sleep 1
done
"""

SPEC = """\
name: {name}
priority: {band}
tpu: {{accelerator: v4-8, zone: {zone}, queued: false}}
run_dir: gs://rundir-tests/{prefix}
requeue: {{backoff_seconds: 0}}
run:
  command: |
{command}
"""


class NodeCount:
    """The emulator's nodes in the project's zone, listed over and over from a thread while the
    nodes sweep: the most seen at once, and every name seen."""

    def __init__(self, client, project: str):
        self.client, self.project = client, project
        self.most, self.names = 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            listed = [n["name"].rsplit("/", 1)[-1] for n in api_list(self.client, self.project, ZONE, "nodes")]
            self.most = max(self.most, len(listed))
            self.names.update(listed)
            self._stop.wait(0.05)  # a listing every 50 ms: a node lives for seconds at least

    def __enter__(self) -> NodeCount:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def lab(postgres_url, project, local_cloud, tmp_path):
    """Three login nodes of one lab (alice's, bob's, carol's) on one PostgreSQL store; every job
    deleted after, whatever was asserted (their programs stop with their slices)."""
    from tpujob.store.repository import open_store

    nodes = tuple(Node(tmp_path / name, postgres_url, 0.0, f"{user}@example.com")
                  for name, user in (("a", "alice"), ("b", "bob"), ("c", "carol")))
    yield nodes
    for job in open_store(postgres_url).list_jobs():
        nodes[2].run("delete", "--force", str(job.id), ok=False)


def test_two_nodes_sweeping_at_once_evict_once_and_the_evicted_job_resumes(
        lab, postgres_url, project, local_cloud, bucket, tmp_path):
    from tpujob.store.repository import open_store

    a, b, c = lab
    store = open_store(postgres_url)
    prefix = uuid.uuid4().hex[:8]  # the emulator's bucket outlives each test's store

    def spec(name: str, band: str, command: str) -> str:
        path = tmp_path / f"{name}.yaml"
        body = "\n".join("    " + line for line in command.strip().splitlines())
        path.write_text(SPEC.format(name=name, band=band, zone=ZONE, prefix=prefix, command=body))
        return str(path)

    def said(*job_ids: int) -> str:
        return "\n".join(f"{j}: {e.from_state}->{e.to_state} {e.kind}: {e.message}"
                         for j in job_ids for e in store.events(j))

    a.run("quota", "set", "v4", str(2 * CHIPS))
    with NodeCount(local_cloud, project) as nodes:
        # Each node submits a low job; the quota admits both (its create follows it to RUNNING).
        first = int(json.loads(a.run("create", "--json", spec("first", "low", CHECKPOINTING)).stdout)["id"])
        second = int(json.loads(b.run("create", "--json", spec("second", "low", CHECKPOINTING)).stdout)["id"])
        assert [store.get(j).state for j in (first, second)] == ["RUNNING", "RUNNING"], said(first, second)
        # Both have run past the minimum run time (their states' starts moved back: nobody waits
        # ten minutes in a test), the second started last: it is the one a high job evicts.
        now = store.clock()
        store.update(first, state_since=now - 1200)
        store.update(second, state_since=now - 660)

        # Recorded and swept once for itself alone: that sweep plans the eviction but acts on
        # the high job only; the two nodes' sweeps below carry it out.
        high = int(json.loads(c.run("create", "--timeout", "0", "--json",
                                    spec("high", "high", "sleep 600")).stdout)["id"])
        assert store.get(high).state == "QUEUED"

        def sweep_both_until(done, rounds: int = 8) -> None:
            for _ in range(rounds):
                racing = [n.start("requeue") for n in (a, b)]
                outputs = [p.communicate(timeout=240) for p in racing]
                assert [p.returncode for p in racing] == [0, 0], outputs
                if done():
                    return
            raise AssertionError(said(first, second, high))

        sweep_both_until(lambda: store.get(high).state == "RUNNING")
        evicted = store.get(second)
        assert (evicted.state, evicted.evictions, evicted.preemptions, evicted.failures) == ("QUEUED", 1, 0, 0)
        assert (store.get(first).state, store.get(first).evictions) == ("RUNNING", 0)

        # The high job ends (its owner deletes it: its slice goes first, then the job, so its
        # chips are free once its slice is gone); the evicted job is admitted again and resumes
        # from its checkpoint.
        c.run("delete", str(high))

        def resumed() -> bool:
            attempts = store.attempts(second)
            return len(attempts) == 2 and attempts[1].resumed_from_step is not None

        sweep_both_until(resumed)
        assert store.get(second).state == "RUNNING", said(second)

    # One winner per move: each of these happened once, by one node.
    def moves(job_id: int, src: str, dst: str) -> int:
        return sum(1 for e in store.events(job_id) if (e.from_state, e.to_state) == (src, dst))

    assert moves(second, "RUNNING", "QUEUED") == 1, said(second)  # evicted once, never twice
    assert moves(second, "QUEUED", "RECOVERING") == 1, said(second)  # admitted again once
    assert moves(high, "QUEUED", "PENDING") == 1, said(high)
    assert moves(first, "RUNNING", "QUEUED") == 0 and store.get(first).attempt == 1, said(first)
    one, two = store.attempts(second)
    assert (one.end_reason, two.end_reason) == ("evicted", None)
    (high_attempt,) = store.attempts(high)
    # In order: the evicted attempt ended before the high job's began, which ended before the
    # evicted job's next one began.
    assert one.ended_at <= high_attempt.started_at and high_attempt.ended_at <= two.started_at

    # Never a create past the quota: two v4-8 at most at any moment, one node per attempt.
    assert nodes.most <= 2, nodes.names
    slices = {x.slice_name for j in (first, second, high) for x in store.attempts(j)}
    assert nodes.names == slices and len(slices) == 4

    # No step lost beyond the checkpoint: the next attempt resumed from the step the SIGTERM
    # saved, at or past the last step the sweeps saw the evicted attempt reach.
    saved = int(bucket.blob(f"{prefix}/{second:06d}/checkpoint").download_as_text())
    assert two.resumed_from_step == saved and saved >= (one.last_step or 0) > 0, (saved, one.last_step)
