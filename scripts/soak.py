"""An emulated night: jobs under preemptions, stockouts, API faults, dead hosts and sweeps killed
at their crash points, then the invariants tpujob promises, checked on what is left.

Against a fresh emulator (hosts on) and a store of its own (SQLite in a temporary TPUJOB_HOME,
`--db-url URL`, or `--postgres`: a throwaway PostgreSQL server, tests/pg_cluster.py):
- `--jobs` jobs: every third one the bundled JAX runtime with its run dir on the emulator's
  gs:// bucket (checkpoint every CHECKPOINT_EVERY steps, synchronous and async saves in
  turn), the others plain commands, some
  finishing, some running all night; 1-, 2- and 4-host slices (v4-8, v4-16, v4-32); the last
  job a plain command on a Compute Engine TPU VM (`api: compute`, v6e-8 in CE_ZONE) whose
  SIGTERM "save" takes SAVE_SECONDS, so that sweeps land in its VM's notice (STOPPING);
- `tpujob watch` and 4 loops of `tpujob requeue` (each sweep its own process) all night;
- a chaos loop, seeded (`--seed`), drawing every CHAOS_EVERY s from: a preemption with spot's
  SIGTERM notice (grace) or without (SIGKILL), a stockout of the zone, API 429/503 answers
  (api_error_rate), one of Google's replayed create errors (tests/fixtures/gcp_errors), a
  killed host, and a requeue process SIGKILLed at one of the sweep's crash points.
After `--minutes`, with every fault off, it sweeps until nothing changes, then checks:
1. every job RUNNING or in an end state;
2. every node and queued resource belongs to the live attempt of an active job, none twice,
   and `tpujob gc --json` finds no orphan;
3. each job's events in order, every state move legal and chained from the one before;
4. runtime jobs: steps never go back; an attempt ended by a SIGTERM preemption loses no step
   when its program wrote its checkpoint within the grace (status.json `preempted`, read as the
   preemption returns), any other at most one checkpoint interval (two with async saves:
   docs/runtime.md);
5. runtime jobs: no attempt failed unless a host of it was killed (nothing in the night is a
   program error; a checkpoint left unrestorable was one).
It prints the counts (jobs, preemptions, faults, sweeps, crashes, invariants) and goodput, and
exits 0 only when no invariant was violated.

    .venv/bin/python scripts/soak.py [--minutes 10] [--seed 1] [--jobs 6] [--db-url URL | --postgres] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import soak_invariants  # scripts/, beside this file

ROOT = Path(__file__).resolve().parents[1]
ZONE = "us-central2-b"
CE_ZONE = "us-east5-a"  # offers v6e: the Compute Engine job's zone
SAVE_SECONDS = 3  # the Compute Engine job's SIGTERM save: exit 75 (preempted) after it
BUCKET = "tpujob-soak"
CHECKPOINT_EVERY = 10
CHAOS_EVERY = 4.0
REQUEUE_LOOPS = 4
FIXTURES = ROOT / "tests" / "fixtures" / "gcp_errors"
# Google's create errors a sweep retries (capacity, internal): replayed, they must not end a job.
REPLAYED = ("stockout_in_operation", "internal_on_create")

# decay_steps 30: the demo's schedule (jobs.example.yaml), so a runtime job here runs the
# demo's compiled program whatever its steps (JAX's compile-cache key holds the schedule).
RUNTIME = """\
name: soak-rt-{i}
tpu: {{accelerator: {accelerator}, zone: {zone}, queued: {queued}}}
run_dir: gs://{bucket}/runs
requeue: {{backoff_seconds: 2, min_run_seconds: 0, max_preemptions: 1000, max_failures: 20}}
run:
  runtime: {{model: tiny, steps: {steps}, batch_size: 8, seq_len: 64, checkpoint_every: {checkpoint_every},
            async_checkpoint: {async_}, log_every: 5, heartbeat_every_s: 1, optimizer: {{decay_steps: 30}}}}
"""

COMMAND = """\
name: soak-cmd-{i}
tpu: {{accelerator: {accelerator}, zone: {zone}, queued: {queued}}}
requeue: {{backoff_seconds: 2, min_run_seconds: 0, max_preemptions: 1000, max_failures: 20}}
run: {{command: {command}}}
"""


def tpujob(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tpujob.cli.main", *args], cwd=ROOT, env=env or os.environ,
                          capture_output=True, text=True, timeout=timeout)


class Night:
    """The jobs, the sweepers and the chaos, with what happened counted."""

    def __init__(self, directory: Path, seed: int, jobs: int, compile_cache: str | None = None):
        from tpujob.emulator import process

        self.directory, self.rng, self.count = directory, random.Random(seed), jobs
        self.process = process
        from tpujob.service.context import Context

        process.start(provisioning_delay=0.0, hosts=True,
                      image_env={"JAX_COMPILATION_CACHE_DIR": compile_cache} if compile_cache else None)
        self.client = process.client()

        self.ctx = Context.load()
        self.faults: Counter = Counter()
        self.preempted: dict[tuple[int, int], str] = {}  # (job, attempt) -> "sigterm" | "sigkill"
        # Attempts a host of which was killed: their program died without notice, whatever
        # preemption came after (a SIGTERM to a dead program saves nothing).
        self.killed: set[tuple[int, int]] = set()
        self.sweeps = self.crashes = 0
        self.lock = threading.Lock()
        self.crash_next: list[str] = []  # crash points armed for the next requeue processes
        self.stop = threading.Event()
        self.runtime_jobs: dict[int, bool] = {}  # job id -> async_checkpoint
        self.unsettled: list[str] = []  # what still moved when settling gave up
        self.resumptions = 0  # runtime attempts resumed from a checkpoint, checked for lost steps
        self.ledger_gaps: list[float] = []  # per job: |its ledger's buckets - its wall time| / wall
        self.preempting: list[threading.Thread] = []  # preemptions within their grace

    # -- the jobs ---------------------------------------------------------------------------
    def record_jobs(self) -> None:
        from tpujob.attempt.buckets import create_local_bucket
        from tpujob.clients import make_storage
        from tpujob.service import jobs

        create_local_bucket(make_storage(self.ctx.settings), BUCKET)
        four_hosts = 0
        for i in range(self.count):
            accelerator = self.rng.choice(["v4-8", "v4-8", "v4-16", "v4-32"])
            if accelerator == "v4-32":
                four_hosts += 1
                accelerator = "v4-32" if four_hosts <= 1 else "v4-16"  # a 2-core machine: one 4-host job
            queued = "true" if self.rng.random() < 0.5 else "false"
            if i == self.count - 1 and i % 3 != 0:
                forever = i % 3 == 1
                work = "sleep 100000" if forever else f"sleep {self.rng.randint(30, 180)}"
                command = f"trap 'sleep {SAVE_SECONDS}; exit 75' TERM; {work} & wait $!"
                text = COMMAND.format(i=i, accelerator="v6e-8", queued="false", command=json.dumps(command),
                                      zone=f"{CE_ZONE}, api: compute")
            elif i % 3 == 0:
                async_ = i % 2 == 1  # both checkpoint modes: their SIGKILL bounds differ
                text = RUNTIME.format(i=i, accelerator=accelerator, queued=queued, async_=json.dumps(async_),
                                      steps=self.rng.choice([200, 400]), zone=ZONE, bucket=BUCKET,
                                      checkpoint_every=CHECKPOINT_EVERY)
            else:
                command = "sleep 100000" if i % 3 == 1 else f"sleep {self.rng.randint(30, 180)}; exit 0"
                text = COMMAND.format(i=i, accelerator=accelerator, queued=queued, command=json.dumps(command),
                                      zone=ZONE)
            path = self.directory / f"job-{i}.yaml"
            path.write_text(text)
            job, _ = jobs.record(self.ctx, str(path))
            if i % 3 == 0:
                self.runtime_jobs[job.id] = async_

    # -- the sweepers -----------------------------------------------------------------------
    def requeue_loop(self) -> None:
        while not self.stop.is_set():
            env = dict(os.environ)
            with self.lock:
                point = self.crash_next.pop() if self.crash_next else None
            if point:
                env["TPUJOB_CRASH_AT"] = point
            done = tpujob("requeue", env=env)
            with self.lock:
                if done.stderr.strip():   # kept with --keep: what a sweep said, to diagnose a stall
                    with open(self.directory / "requeue.log", "a") as log:
                        log.write(f"{time.strftime('%H:%M:%S')} exit {done.returncode} "
                                  f"(crash point {point}):\n{done.stderr}")
                if done.returncode == -signal.SIGKILL:
                    self.crashes += 1
                elif done.returncode == 0:
                    self.sweeps += 1
            time.sleep(random.uniform(0.5, 2.0))  # not the seeded draw: threads would reorder it

    def start_sweepers(self) -> list:
        log = open(self.directory / "watch.log", "w")
        watch = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "watch", "--interval", "3"],
                                 cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        loops = [threading.Thread(target=self.requeue_loop, daemon=True) for _ in range(REQUEUE_LOOPS)]
        for loop in loops:
            loop.start()
        return [watch, *loops]

    # -- the chaos --------------------------------------------------------------------------
    def live_nodes(self) -> list[tuple[int, int, str]]:
        from tpujob.catalogue import COMPUTE
        from tpujob.spec.stored import api_of

        found = []
        for job in self.ctx.store.list_jobs():
            attempt = self.ctx.store.current_attempt(job.id)
            if job.state == "RUNNING" and attempt is not None and attempt.ended_at is None:
                where = (f"zones/{attempt.zone}/instances" if api_of(job) == COMPUTE
                         else f"locations/{attempt.zone}/nodes")
                found.append((job.id, attempt.number, f"projects/{job.project}/{where}/{attempt.slice_name}"))
        return found

    def preempt(self, job_id: int, number: int, node: str, grace: float) -> None:
        asked = time.time()
        try:
            self.client.preempt(node, grace_seconds=grace)  # returns once the hosts are down
        except Exception as exc:  # noqa: BLE001 - the node went meanwhile: not a preemption
            self.faults[f"preempt refused ({type(exc).__name__})"] += 1
            return
        kind = "sigterm" if grace > 0 else "sigkill"
        if grace > 0 and job_id in self.runtime_jobs and not self.saved_in_grace(job_id, asked):
            # The notice came, but the checkpoint (after any save still in flight) was not
            # written before the kill: what it may lose is bounded as without notice.
            kind = "sigterm, checkpoint not written in the grace"
        with self.lock:
            self.preempted[(job_id, number)] = kind
        self.faults[f"preemption ({kind})"] += 1

    def saved_in_grace(self, job_id: int, since: float) -> bool:
        """Whether the runtime's status.json says it stopped on the notice with its checkpoint
        written (contract.STATE_PREEMPTED), after `since`: the run dir's word, read from the
        bucket before the next attempt can write there."""
        from tpujob.clients import make_storage
        from tpujob.names import format_job_id
        from tpujob.runtime.contract import STATE_PREEMPTED, STATUS_FILE, parse_status

        blob = make_storage(self.ctx.settings).bucket(BUCKET).get_blob(f"runs/{format_job_id(job_id)}/{STATUS_FILE}")
        try:
            status = parse_status(blob.download_as_bytes()) if blob is not None else None
        except ValueError:
            return False
        # A stop save the runtime skipped (a save still in flight: status.json's stop_save) left
        # the steps since that save unsaved: bounded as without notice.
        return status is not None and status.state == STATE_PREEMPTED and (status.time or 0) > since \
            and status.extra.get("stop_save") != "skipped"

    def chaos(self, until: float) -> None:
        from tpujob.errors import TpujobError

        while time.monotonic() < until:
            time.sleep(CHAOS_EVERY * self.rng.uniform(0.5, 1.5))
            draw = self.rng.choice(["preempt", "preempt", "preempt_grace", "stockout", "api_errors",
                                    "replay", "kill_host", "crash"])
            try:
                # A fault that needs a live node waits for one rather than being lost: on a busy
                # machine (the suite's cold compiles beside it) the first slices come late, and
                # a minute whose preemptions all fell before them tested none (seen in CI's soak:
                # "preemptions: 0", 7 faults).
                while not self.inject(draw) and time.monotonic() < until:
                    time.sleep(1.0)
            except TpujobError as exc:  # the node went between the listing and the fault
                self.faults[f"{draw}: target gone ({type(exc).__name__})"] += 1

    def inject(self, draw: str) -> bool:
        """The fault `draw`; False (nothing done) when it needs a live node and none is."""
        from tpujob.faults import CRASH_POINTS

        nodes = self.live_nodes()
        if draw in ("preempt", "preempt_grace", "kill_host") and not nodes:
            return False
        if draw in ("preempt", "preempt_grace"):
            job_id, number, node = self.rng.choice(nodes)
            grace = 20.0 if draw == "preempt_grace" else 0.0
            thread = threading.Thread(target=self.preempt, args=(job_id, number, node, grace), daemon=True)
            thread.start()
            self.preempting.append(thread)
        elif draw == "stockout":
            self.client.stockout(ZONE)
            self.faults["stockout"] += 1
            threading.Timer(self.rng.uniform(3, 10), lambda: self.client.stockout(ZONE, clear=True)).start()
        elif draw == "api_errors":
            self.client.set_faults(api_error_rate=0.2)
            self.faults["API 429/503 (rate 0.2)"] += 1
            threading.Timer(self.rng.uniform(2, 6), lambda: self.client.set_faults(api_error_rate=0.0)).start()
        elif draw == "replay":
            name = self.rng.choice(REPLAYED)
            answer = json.loads((FIXTURES / f"{name}.json").read_text())
            self.client.fail_next(answer["method"], answer["status"], answer["message"],
                                  grpc_status=answer["grpc_status"], reason=answer["reason"],
                                  in_operation=answer["in_operation"])
            self.faults[f"replayed {name}"] += 1
        elif draw == "kill_host":
            job_id, number, node = self.rng.choice(nodes)
            hosts = self.client.hosts(node)
            if not hosts:  # listed by the store, but preempted meanwhile: its hosts are down
                self.faults["kill_host: target gone (no hosts)"] += 1
                return True
            with self.lock:
                self.killed.add((job_id, number))
            self.client.kill_host(node, self.rng.randrange(len(hosts)))
            self.faults["host killed"] += 1
        else:
            with self.lock:
                self.crash_next.append(self.rng.choice(CRASH_POINTS))
            self.faults["crash point armed for a requeue"] += 1
        return True

    def faults_off(self) -> None:
        self.client.set_faults(api_error_rate=0.0)
        self.client.clear_fail_next()
        self.client.stockout(ZONE, clear=True)
        with self.lock:
            self.crash_next.clear()

    def settle(self, limit: float = 600.0) -> int:
        """Sweep until two sweeps in a row change nothing (and nothing is mid-way, and no job is
        still leased); the sweeps. Not settling within `limit` s is a violation. The limit allows
        for a sweep SIGKILLed at a crash point just before the night ended: its job waits out the
        lease it held (TPUJOB_LEASE_SECONDS, 90 s by default), then needs a new attempt set up and
        running. That holds for an ended job too: one moved to SUCCEEDED by a sweep killed before
        it deleted the slice keeps the slice until a sweep after the lease frees it, and the
        invariants must not be read before (seen: "node ... belongs to no live attempt")."""
        from tpujob.service.keep_alive import reconciler
        from tpujob.store.states import State

        rec, quiet, sweeps, deadline = reconciler(self.ctx), 0, 0, time.monotonic() + limit
        moving = {State.PENDING, State.PROVISIONING, State.SETTING_UP, State.RECOVERING}
        leased: list[int] = []
        while quiet < 2 and time.monotonic() < deadline:
            before = [(j.id, j.state, j.attempt) for j in self.ctx.store.list_jobs(include_ended=True)]
            rec.sweep()
            sweeps += 1
            jobs = self.ctx.store.list_jobs(include_ended=True)
            after = [(j.id, j.state, j.attempt) for j in jobs]
            now = self.ctx.store.clock()
            # A lease left by a SIGKILLed sweep (the settling sweeps release theirs).
            leased = [j.id for j in jobs if j.lease_owner and (j.lease_expires or 0) > now]
            settled = all(State(s) not in moving for _, s, _ in after) and not leased
            quiet = quiet + 1 if after == before and settled else 0
            if os.environ.get("SOAK_DEBUG") and after != before:
                print("settle:", sorted(set(after) - set(before)), flush=True)
            time.sleep(1.0)
        if quiet < 2:
            self.unsettled = [f"job {i} still {s} (attempt {a})" for i, s, a in after if State(s) in moving]
            self.unsettled += [f"job {i} still leased" for i in leased]
            self.unsettled = self.unsettled or ["jobs still changing"]
        return sweeps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=6)
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--db-url", help="the store's SQLAlchemy URL (default: SQLite in a temporary home)")
    store.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL server (Debian's)")
    parser.add_argument("--compile-cache", metavar="DIR",
                        help="JAX's persistent compilation cache for every emulated host (default: each "
                             "job's own, in its run dir, as on Google); the suite passes its shared one")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (store, logs, and each deleted slice's program logs)")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="tpujob-soak-"))
    if args.keep:  # every deleted slice's program logs (a failed attempt's say why it died)
        os.environ["TPUJOB_EMULATOR_KEEP_LOGS"] = str(directory / "program-logs")
    os.environ.update(TPUJOB_HOME=str(directory / "home"), TPUJOB_EMULATOR_DIR=str(directory / "emulator"),
                      TPUJOB_PROJECT="soak", TPUJOB_ZONE=ZONE)
    os.environ.pop("TPUJOB_CRASH_AT", None)
    cluster = None
    if args.postgres:
        sys.path.insert(0, str(ROOT / "tests"))
        from pg_cluster import Cluster, server_bin

        if server_bin() is None:
            raise SystemExit("soak: --postgres needs Debian's postgresql (scripts/setup --test installs it)")
        cluster = Cluster(server_bin()).start()
        os.environ["TPUJOB_DB_URL"] = cluster.new_database()
    elif args.db_url:
        os.environ["TPUJOB_DB_URL"] = args.db_url
    backend = "PostgreSQL" if args.postgres or (args.db_url or "").startswith("postgres") else "SQLite"
    print(f"soak: {args.minutes:g} min, seed {args.seed}, {args.jobs} jobs, store on {backend}, in {directory}",
          flush=True)

    night = Night(directory, args.seed, args.jobs, args.compile_cache)
    violations = ["the night did not end"]  # kept for a look when the soak itself fails
    started = time.monotonic()
    try:
        night.record_jobs()
        sweepers = night.start_sweepers()
        night.chaos(started + args.minutes * 60)
        night.faults_off()
        night.stop.set()
        watch = sweepers[0]
        watch.send_signal(signal.SIGTERM)  # it stops once its sweep under way is done
        for thread in sweepers[1:]:
            thread.join(timeout=120)
        try:
            watch.wait(timeout=300)
        except subprocess.TimeoutExpired:  # a sweep stuck past any host step's lease: a crash
            watch.kill()
            watch.wait()
            night.crashes += 1
        night.sweeps += sum(1 for line in (directory / "watch.log").read_text().splitlines() if " sweep: " in line)
        for thread in night.preempting:  # preemptions still in their grace end first
            thread.join(timeout=60)
        settle_sweeps = night.settle()
        violations, checks = soak_invariants.check(
            night, zone=ZONE, compute_zone=CE_ZONE, checkpoint_every=CHECKPOINT_EVERY,
            gc=lambda: tpujob("gc", "--json"))
        report(night, args, time.monotonic() - started, settle_sweeps, violations, checks)
    finally:
        night.stop.set()
        night.process.stop()
        if cluster is not None:
            cluster.stop()
        if not args.keep and not violations:  # a failed night's store is the evidence
            shutil.rmtree(directory, ignore_errors=True)
    return 0 if not violations else 1


def report(night: Night, args, seconds: float, settle_sweeps: int, violations: list[str], checks: int) -> None:
    from tpujob.service.accounting import goodput

    now = time.time()
    jobs = night.ctx.store.list_jobs(include_ended=True)
    states = Counter(j.state for j in jobs)
    preemptions = Counter(v for v in night.preempted.values())
    print(f"ran {seconds / 60:.1f} min; jobs {len(jobs)}: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    late = preemptions["sigterm, checkpoint not written in the grace"]
    print(f"preemptions: {sum(preemptions.values())} ({preemptions['sigterm'] + late} with SIGTERM grace, "
          f"{late} of them runtime jobs whose checkpoint did not fit in it; {preemptions['sigkill']} SIGKILL); "
          f"the store counts {sum(j.preemptions for j in jobs)}")
    print(f"faults injected: {sum(night.faults.values())} (" +
          ", ".join(f"{k}: {n}" for k, n in sorted(night.faults.items())) + ")")
    print(f"sweeps: {night.sweeps} during the night + {settle_sweeps} to settle; sweeps SIGKILLed: {night.crashes}")
    print(f"invariants: {checks - len(violations)} held, {len(violations)} violated "
          f"({night.resumptions} runtime resumptions checked for lost steps)")
    gaps = night.ledger_gaps
    print(f"ledger: {len(gaps)} jobs, buckets off their wall time by at most {max(gaps, default=0.0):.4%} "
          f"(the invariant: 1 %)")
    for line in violations:
        print(f"  VIOLATED: {line}")
    print("goodput: " + ", ".join(f"{j.name} {goodput(j, now):.0%}" for j in jobs))
    if violations and not args.keep:
        print(f"kept for a look (a violated night's store, emulator and logs): {night.directory}")
    kept = night.directory / "program-logs"
    if args.keep and kept.is_dir():
        print(f"program logs of deleted slices (NODE/host-K/...): {kept}")


if __name__ == "__main__":
    sys.exit(main())
