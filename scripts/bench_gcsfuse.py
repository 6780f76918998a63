"""What a run dir on the emulated gcsfuse costs: CPU of the runtime, the mount and the storage
server for one tiny job, and the client CPU of one object lookup (what every path lookup of a
mount with its metadata cache off is made of) through google-cloud-storage and through the
mount's own JSON API client.

Run as root (FUSE):  .venv/bin/python scripts/bench_gcsfuse.py [STEPS]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tpujob.emulator.machines.gcs_json import BucketApi

CONFIG = "model: tiny\nsteps: {steps}\ncheckpoint_every: 20\nlog_every: 1\nheartbeat_every_s: 1\n" \
         "batch_size: 8\nseq_len: 64\n"


def cpu_seconds(pid: int, children: bool = True) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def lookups(endpoint: str, n: int) -> tuple[float, float]:
    """Client CPU (ms) of one object GET, half of them misses, by each client."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    bucket = storage.Client(project="tpujob-local", credentials=AnonymousCredentials()).bucket("bench")
    api = BucketApi(endpoint, "bench")
    results = []
    for get in (bucket.get_blob, api.stat):
        start = time.process_time()
        for _ in range(n):
            get("runs/1/heartbeat")
            get("runs/1/missing")
        results.append(1000 * (time.process_time() - start) / (2 * n))
    return results[0], results[1]


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    work = Path(tempfile.mkdtemp(prefix="bench-gcsfuse-"))
    server = subprocess.Popen([sys.executable, "-m", "tpujob.emulator", "--state-dir", str(work / "emulator"),
                               "--no-hosts", "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mount = work / "mnt"
    mount.mkdir()
    daemon = None
    try:
        while not (work / "emulator" / "endpoints.json").exists():
            time.sleep(0.1)
        endpoint = json.loads((work / "emulator" / "endpoints.json").read_text())["storage_endpoint"]
        api = BucketApi(endpoint, "bench")
        urllib.request.urlopen(urllib.request.Request(  # the bucket (buckets.insert)
            f"{endpoint}/storage/v1/b?project=tpujob-local", data=b'{"name": "bench"}',
            headers={"Content-Type": "application/json"}), timeout=10).read()
        api.upload("runs/1/heartbeat", b"{}")
        env = dict(os.environ, STORAGE_EMULATOR_HOST=endpoint)
        daemon = subprocess.Popen([sys.executable, "-m", "tpujob.emulator.machines.gcsfuse", "--foreground",
                                   "--implicit-dirs",
                                   "--metadata-cache-ttl-secs", "0", "--rename-dir-limit", "100000", "bench",
                                   str(mount)], env=env)
        while not os.path.ismount(mount):
            time.sleep(0.05)
        config = work / "config.yaml"
        config.write_text(CONFIG.format(steps=steps))
        server_before, daemon_before, started = cpu_seconds(server.pid), cpu_seconds(daemon.pid), time.monotonic()
        runtime = subprocess.run([sys.executable, "-m", "tpujob.runtime", str(config)], capture_output=True, text=True,
                                 env=dict(env, TPUJOB_RUN_DIR=str(mount / "runs" / "2")))
        wall = time.monotonic() - started
        runtime_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # the one child waited for so far
        print(f"one tiny job, {steps} steps, a checkpoint every 20, heartbeat every 1 s, run dir on the mount:")
        mount_cpu = cpu_seconds(daemon.pid) - daemon_before
        server_cpu = cpu_seconds(server.pid, children=False) - server_before
        runtime_cpu_s = runtime_cpu.ru_utime + runtime_cpu.ru_stime
        print(f"  runtime exit {runtime.returncode}, {wall:.1f} s wall; CPU seconds: runtime {runtime_cpu_s:.1f}, "
              f"mount {mount_cpu:.1f}, storage server {server_cpu:.1f}")
        gcs, own = lookups(endpoint, 500)
        print(f"one object lookup, client CPU: google-cloud-storage {gcs:.2f} ms, gcs_json.BucketApi {own:.2f} ms")
        return 0 if runtime.returncode == 0 else 1
    finally:
        if daemon is not None:
            subprocess.run(["fusermount", "-u", str(mount)], check=False)
            daemon.wait(10)
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
