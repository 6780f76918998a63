"""How the suite spreads over xdist's workers (`-n auto --dist loadgroup`, .ci/run's command):
two workers a core, the longest tests handed out first, and no more tests that keep a core busy
from start to end running at once than there are cores.

Why the cap: most end-to-end tests wait (on leases, graces, notices, host timeouts) and leave
their core idle, but a few train a job on emulated hosts, or run eight sweeps at once, and keep
more than a core busy. Handed out longest first, those few started together, four on two cores,
each at half speed; then the waiting ones ran together and left the cores a third idle (cold
compile cache, 2026-11-28: 97-100% busy to 330-360 s, 45-77% from there to 510-540 s; 556-631 s
in nine fresh clones). With at most one such test a core, the other workers take the waiting
tests and the short ones beside them: seven cold runs with the cap took 518-581 s, busy to the end.
Since, the lab's and the scheduler's end-to-end tests (several tpujob processes that mostly wait
on each other's sweeps) joined the capped ones, and two at a time left the cores a third idle
(2026-12-05, 2,207 tests: 646 s, 808 CPU-s); a third at once took 624 s (799 CPU-s). The cap is
one more than the cores; `TPUJOB_TEST_CPU_BOUND_CAP` sets it for a measurement.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Node id prefixes of the tests that keep a core busy while they run: run alone (warm compile
# cache, two cores, 2026-11-28, `pytest -n 0 FILE`), each used about a core or more (CPU-s /
# wall s; the waiting tests 0.2-0.5).
CPU_BOUND = (
    "tests/e2e/test_soak.py::",  # 95 / 82: six jobs, sweeps and faults for a minute
    "tests/e2e/test_multislice.py::test_a_two_slice_job_survives",  # 88 / 58
    "tests/e2e/test_concurrency.py::",  # 82 / 79: eight sweep processes at once
    "tests/e2e/test_compute_engine.py::test_the_runtime_succeeds_through_a_preemption_on_compute_engine",  # 78 / 68
    "tests/e2e/test_elastic.py::",  # 77 / 60
    "tests/e2e/test_readme_quick_start.py::",  # 64 / 54: the demo, then a job followed to its end
    "tests/runtime/test_runtime_e2e.py::",  # 32 / 27: compiles the programs of the runtime's own tests
    "tests/e2e/test_ui_browser.py::test_the_dashboard_shows_a_preempted_job",  # 32 / 30
    "tests/e2e/test_runtime_preemption.py::",  # 31 / 27
    "tests/e2e/test_notify_sweeps.py::",  # 20 / 20: four requeue processes
    "tests/e2e/test_hangs.py::test_a_frozen_host",  # 30 / 52 for the file; this one trains until a freeze
    "tests/e2e/test_lab.py::",  # 49 / 61 at load 3.5 (2026-12-05): three nodes' tpujob processes, two key modes
    "tests/e2e/test_lab_scheduler.py::",  # 31 / 36 at load 5 (2026-12-05): two nodes' requeue processes at once
)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def workers() -> int:
    """`-n auto`: two workers a core. The end-to-end tests leave a core idle while they wait on
    sweeps, timeouts and notices (one worker a core: 76% busy, 1144 s for the suite here on
    2026-11-27). A third worker on two cores filled part of that (89% busy, 1010 s); once the e2e
    tests shared one compiled program per shape, three left a quarter of the cores idle (warm
    compile cache, 2026-11-27: 631.24 s, 962 busy CPU-s, 76%) and a fourth filled it (586.26 s,
    1002 busy CPU-s). Five (682 s) and six (685 s, 2026-11-28) made the tests that train slower
    than the idle time they filled."""
    return max(1, cores() * 2)


def expected_length(item) -> float:
    """How long a test is expected to take, from its own timeout mark (the long end-to-end
    tests carry one sized to them), slow tests before the rest."""
    timeout = item.get_closest_marker("timeout")
    seconds = float(timeout.args[0]) if timeout and timeout.args else 0.0
    return seconds + (1e6 if item.get_closest_marker("slow") else 0.0)


def is_cpu_bound(nodeids) -> bool:
    """Whether a work unit (one test, or an xdist_group's tests) holds a CPU-bound test."""
    return any(nodeid.startswith(CPU_BOUND) for nodeid in nodeids)


def next_scope(queue: Mapping[str, Mapping[str, bool]], assigned: Mapping[object, Mapping[str, Mapping[str, bool]]],
               most: int) -> str:
    """The work unit a free worker takes from `queue` (scope -> {node id: done}, in hand-out
    order): the first one, unless it is CPU-bound and `most` CPU-bound units are already
    assigned and unfinished (`assigned`: worker -> scope -> {node id: done}); then the first
    that is not, if any is left. With only CPU-bound units left, the first one: an idle core is
    worse than a shared one."""
    running = sum(1 for units in assigned.values() for unit in units.values()
                  if is_cpu_bound(unit) and not all(unit.values()))
    first = next(iter(queue))
    if running < most or not is_cpu_bound(queue[first]):
        return first
    return next((scope for scope, unit in queue.items() if not is_cpu_bound(unit)), first)


def scheduler(config, log, most: int | None = None):
    """xdist's loadgroup scheduling with at most `most` (the cores and one) CPU-bound units at once;
    None (xdist's own) for other modes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    cap = most or int(os.environ.get("TPUJOB_TEST_CPU_BOUND_CAP", cores() + 1))

    class CpuBoundCapped(LoadGroupScheduling):
        def _assign_work_unit(self, node) -> None:
            self.workqueue.move_to_end(next_scope(self.workqueue, self.assigned_work, cap), last=False)
            super()._assign_work_unit(node)

    return CpuBoundCapped(config, log)
