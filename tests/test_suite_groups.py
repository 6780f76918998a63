"""The suite's own scheduling: tests marked `xdist_group` share a worker under `--dist loadgroup`
(.ci/run's), so those that share a machine-wide resource (the quick start's `tpujob ui` port)
never run side by side. xdist carries the group in the test's node id; a pytest whose node ids
drop it (9.2 with xdist 3.8: pytest-dev/pytest-xdist#1386) scatters them silently."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import suite_schedule


@pytest.mark.xdist_group("suite-groups")
def test_a_grouped_test_carries_its_group_to_the_scheduler(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under xdist's --dist loadgroup")  # a plain run has no workers to share
    assert request.node.nodeid.endswith("@suite-groups"), request.node.nodeid


# ---- at most one CPU-bound test a core (tests/suite_schedule.py) ----------------------------

def test_every_cpu_bound_entry_names_tests_that_exist():
    """A renamed test or file would drop out of the cap silently: each entry is a file of the
    suite and, where it names one, the start of a test function's name in it."""
    root = Path(__file__).resolve().parents[1]
    for entry in suite_schedule.CPU_BOUND:
        path, _, name = entry.partition("::")
        source = (root / path).read_text()  # FileNotFoundError names the file gone
        assert f"def {name}" in source, f"{entry}: no test of that name in {path}"


SOAK, ELASTIC, CONCURRENCY = ("tests/e2e/test_soak.py::test_a", "tests/e2e/test_elastic.py::test_b",
                              "tests/e2e/test_concurrency.py::test_c")
LIGHT = [f"tests/cli/test_cli.py::test_{n}" for n in range(6)]


def test_a_free_worker_takes_the_first_test_unless_the_cores_each_run_a_cpu_bound_one():
    queue = {SOAK: {SOAK: False}, LIGHT[0]: {LIGHT[0]: False}}
    assert suite_schedule.next_scope(queue, {"gw0": {}}, 2) == SOAK
    running = {"gw0": {ELASTIC: {ELASTIC: False}}, "gw1": {CONCURRENCY: {CONCURRENCY: False}}}
    assert suite_schedule.next_scope(queue, running, 2) == LIGHT[0]
    assert suite_schedule.next_scope(queue, running, 3) == SOAK
    finished = {"gw0": {ELASTIC: {ELASTIC: True}}, "gw1": {CONCURRENCY: {CONCURRENCY: False}}}
    assert suite_schedule.next_scope(queue, finished, 2) == SOAK
    grouped = {"gw0": {"g": {LIGHT[1] + "@g": True, ELASTIC + "@g": False}}, "gw1": running["gw1"]}
    assert suite_schedule.next_scope(queue, grouped, 2) == LIGHT[0]  # a group holding one counts
    only_heavy = {SOAK: {SOAK: False}}
    assert suite_schedule.next_scope(only_heavy, running, 2) == SOAK  # rather than an idle worker


class FakeWorker:
    def __init__(self, name: str):
        self.name, self.shutting_down, self.sent = name, False, []
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True

    def __repr__(self):
        return self.name


def test_xdists_scheduler_with_the_cap_runs_two_cpu_bound_tests_at_once_on_two_cores():
    """The installed xdist's own loadgroup scheduler, subclassed: four workers, three CPU-bound
    tests first in the collection. Two start; the third waits for one of them to end, while
    the other workers take the light tests."""
    config = SimpleNamespace(getvalue={"dist": "loadgroup", "tx": ["4*popen"]}.get,
                             option=SimpleNamespace(loadscopereorder=True))
    sched = suite_schedule.scheduler(config, None, most=2)
    collection = [SOAK, ELASTIC, CONCURRENCY, *LIGHT]
    workers = [FakeWorker(f"gw{n}") for n in range(4)]
    for worker in workers:
        sched.add_node(worker)
    for worker in workers:
        sched.add_node_collection(worker, collection)
    sched.schedule()
    sent = {w.name: [collection[i] for i in w.sent] for w in workers}
    cpu_bound = [nodeid for tests in sent.values() for nodeid in tests if suite_schedule.is_cpu_bound([nodeid])]
    assert cpu_bound == [SOAK, ELASTIC], sent
    assert CONCURRENCY not in str(sent)
    soak_worker = next(w for w in workers if SOAK in sent[w.name])
    for index in list(soak_worker.sent):  # the soak's worker finishes what it holds
        sched.mark_test_complete(soak_worker, index)
    handed = [collection[i] for w in workers for i in w.sent]
    assert CONCURRENCY in handed, handed
