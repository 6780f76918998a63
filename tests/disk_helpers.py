"""Names shared by the tests of disks against the emulator (tests/cloud, tests/attempt, tests/service)."""

PROJECT = "tpujob-local"
ZONE = "us-central2-b"


def disk_dir(server, name: str):
    return server.emulator.compute.disk_dir(PROJECT, ZONE, name)
