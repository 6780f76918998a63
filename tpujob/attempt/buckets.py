"""Buckets against the slice's region, checked at create (and by `doctor`): a bucket the job
mounts, or its run dir's, in another region than the slice is slow and costs egress."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpujob.attempt.run_dirs import run_dir_location
from tpujob.errors import MissingBucket, NotFoundError, UsageError
from tpujob.spec import ResolvedSpec

if TYPE_CHECKING:  # google-cloud-storage is slow to import; Gcs is imported where it is made
    from tpujob.cloud.gcs import Gcs

# Multi-regions and predefined dual-regions (Cloud Storage's bucket locations), by the regions
# they hold: a bucket there is as close to the slice as a regional one.
_MULTI = {"US": ("us-",), "EU": ("europe-",), "ASIA": ("asia-",)}
_DUAL = {"NAM4": ("us-central1", "us-east1"), "EUR4": ("europe-north1", "europe-west4"),
         "ASIA1": ("asia-northeast1", "asia-northeast2")}


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def serves_region(location: str, data_locations: list[str], region: str) -> bool:
    location, region = location.upper(), region.lower()
    if data_locations:  # a custom dual-region lists its two regions
        return region in {d.lower() for d in data_locations}
    if location in _MULTI:
        return region.startswith(_MULTI[location])
    if location in _DUAL:
        return region in _DUAL[location]
    return location.lower() == region


def create_command(bucket: str, spec: ResolvedSpec, cloud: str) -> str:
    """The command that creates `bucket` where the job's slice is: on Google, in the slice's
    region; on the local cloud, in the emulator's Cloud Storage."""
    if cloud == "local":
        return f"tpujob emulator create-bucket {bucket}"
    return (f"gcloud storage buckets create gs://{bucket} --project {spec.project} "
            f"--location {region_of(spec.zone)}")


def create_local_bucket(client: Any, bucket: str) -> bool:
    """Create `bucket` in the emulator's Cloud Storage (`client`) unless it exists; whether it
    was made."""
    if client.lookup_bucket(bucket) is not None:
        return False
    client.create_bucket(bucket)
    return True


def check_bucket_regions(gcs: Gcs, spec: ResolvedSpec, strict: bool, cloud: str = "gcp") -> list[str]:
    """Each bucket the job mounts (and its run dir's) against the slice's region: a warning per
    cross-region bucket, or a UsageError with `strict`. A bucket that does not exist is refused
    (MissingBucket, naming the command that creates it on `cloud`); one whose metadata we may
    not read (storage.buckets.get) is a warning."""
    from tpujob.errors import CloudError

    region = region_of(spec.zone)
    names = [b.bucket for b in spec.spec.buckets]
    location = run_dir_location(spec, 0)
    if location and location[0] not in names:
        names.append(location[0])
    warnings = []
    for name in names:
        try:
            where, data = gcs.bucket_location(name)
        except NotFoundError:
            raise MissingBucket(name, create_command(name, spec, cloud)) from None
        except CloudError as exc:
            warnings.append(f"could not check the location of bucket {name}: {exc}")
            continue
        if serves_region(where, data, region):
            continue
        message = (f"bucket {name} is in {where}, the slice in {region}: every read and write "
                   "crosses regions (inter-region egress is billed per GB, and latency slows "
                   "checkpoints and data loading); use a bucket in " + region)
        if strict:
            raise UsageError(message + " (refused with --strict)")
        warnings.append(message)
    return warnings
