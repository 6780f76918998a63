"""tpujob's own fault-injection surface: the sweep's crash points.

With `TPUJOB_CRASH_AT=<point>` in its environment, a sweep kills itself with SIGKILL when it
reaches that point, as a machine that loses power there would. The crash tests
(tests/e2e/test_crash.py) and the soak (scripts/soak.py) arm them to show that the next sweep
converges: nothing created twice, nothing orphaned. Unset, as it always is outside those, a
crash point costs one environment lookup.

The points, in the order a job meets them (the handlers of
tpujob/reconcile/act.py):
- `placement`: a fallback placement chosen, its attempt not yet opened;
- `provisioning`: the attempt opened, the slice not yet requested;
- `slice-requested`: the create sent, its event not yet written;
- `slice-deleted`: a lost slice deleted, the job not yet moved on;
- `setup-started`: setup started (detached) on every host, nothing recorded of it;
- `launched`: the program started on every host, the job not yet RUNNING;
- `moved`: a state move written, the sweep not yet done with the job.
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = ("placement", "provisioning", "slice-requested", "slice-deleted", "setup-started", "launched", "moved")
ENV = "TPUJOB_CRASH_AT"


def crash_point(name: str) -> None:
    """Die here, as under SIGKILL, when the environment arms this point."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
