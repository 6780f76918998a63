"""Names shared by the storage tests."""

PROJECT = "tpujob-local"
ZONE = "us-central2-b"


def disk_dir(server, name: str):
    return server.emulator.compute.disk_dir(PROJECT, ZONE, name)
