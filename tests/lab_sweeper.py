"""One node of a lab, as a separate process: sweeps a shared store against the emulator (hosts
stubbed, programs always running) once a start file appears, so that two of them sweep at once.

    python tests/lab_sweeper.py STORE_URL EMULATOR_URL START_FILE ACTOR SWEEPS

Each node orders the queue in a shuffled order of its own (seeded by ACTOR): nodes whose plans
disagree, as when they read the owners' usage at different moments, so that only the store's
re-check in each admission's transaction keeps them within the quota.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from tpujob.cloud.tpu_api import GcpCloud
from tpujob.reconcile import admission
from tpujob.reconcile.observation import HostObservation, Program, Setup, SetupSeen
from tpujob.reconcile.reconciler import Reconciler
from tpujob.store.repository import open_store


class Hosts:
    def start_setup(self, job, attempt, slice_):
        return self.setup_status(job, attempt, slice_)

    def setup_status(self, job, attempt, slice_):
        return SetupSeen(tuple(Setup.DONE for _ in slice_.hosts))

    def launch(self, job, attempt, slice_):
        pass

    def program_status(self, job, attempt, slice_):
        return tuple(HostObservation(Program.RUNNING) for _ in slice_.hosts)

    def stop_program(self, job, attempt, slice_, grace_seconds=30):
        pass

    def unmount(self, job, attempt, slice_):
        pass

    def data_disks(self, job, attempt):
        return ()

    def prepare(self, job):
        pass


def main(store_url: str, emulator_url: str, start: str, actor: str, sweeps: str) -> None:
    shuffled = random.Random(actor)
    ordered = admission.order

    def disagreeing(*args, **kwargs):
        queue = ordered(*args, **kwargs)
        shuffled.shuffle(queue)
        return queue

    admission.order = disagreeing  # type: ignore[assignment]
    store = open_store(store_url)
    cloud = GcpCloud.for_emulator(emulator_url, retry_initial=0.01, retry_maximum=0.05, poll_interval=0.01)
    rec = Reconciler(store, cloud, Hosts(), actor)  # type: ignore[arg-type]
    while not Path(start).exists():  # both processes start sweeping on the same signal
        time.sleep(0.01)
    for _ in range(int(sweeps)):
        report = rec.sweep()
        print(f"{actor}: admitted {report.admitted}, errors {report.errors}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
