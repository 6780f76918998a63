"""How GcpCloud turns what goes wrong into typed errors: what a sweep retries, what it gives up
on, what the user must fix (credentials), and the node's createTime that times provisioning."""

from __future__ import annotations

import datetime
import socket
import time

import pytest
from cloud_helpers import PROJECT, ZONE, wait_for_slice
from google.api_core import exceptions as gexc

from tpujob.cloud.api_calls import classify as _error
from tpujob.cloud.api_calls import retryable as _retryable
from tpujob.cloud.base import SlicePhase, SliceRequest
from tpujob.errors import (
    AuthError,
    CloudError,
    CloudRefused,
    ConfigError,
    NotFoundError,
    PermissionDenied,
    QuotaExceeded,
    StockoutError,
)


def request(name: str = "s1", accelerator: str = "v4-8", **kw) -> SliceRequest:
    return SliceRequest(project=PROJECT, zone=ZONE, name=name, accelerator_type=accelerator,
                        runtime_version="tpu-ubuntu2204-base", **kw)


STOCKOUT = ('There is no more capacity in the zone "us-central2-b"; you can try in another zone')
QUOTA = "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5."
RATE = "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service tpu.googleapis.com"


@pytest.mark.parametrize("err, typed, retried", [
    (gexc.ResourceExhausted(STOCKOUT), StockoutError, False),  # a failed create operation (code 8)
    (gexc.TooManyRequests(STOCKOUT), StockoutError, False),  # the same over HTTP 429
    (gexc.TooManyRequests(QUOTA), QuotaExceeded, False),  # a resource quota: no retry helps
    (gexc.ResourceExhausted(QUOTA), QuotaExceeded, False),
    (gexc.TooManyRequests(RATE), CloudError, True),  # a request rate: passes by itself
    (gexc.TooManyRequests("Quota limit 'CreateNodeRequestsPerMinute' has been exceeded"), CloudError, True),
    (gexc.ServiceUnavailable("try later"), CloudError, True),
    (gexc.InvalidArgument("acceleratorType v4-7 is not valid"), CloudRefused, False),
    (gexc.FailedPrecondition("runtime version not offered in zone"), CloudRefused, False),
    (gexc.PermissionDenied("tpu.nodes.create denied"), PermissionDenied, False),
    (gexc.Unauthenticated("token expired"), AuthError, False),
    (gexc.NotFound("node x"), NotFoundError, False),
])
def test_api_errors_are_classified(err, typed, retried):
    assert type(_error("creating node n", err)) is typed
    assert _retryable(err) is retried


def test_auth_errors_are_config_errors_with_a_hint():
    for err in (gexc.PermissionDenied("denied"), gexc.Unauthenticated("expired")):
        typed = _error("listing nodes in z", err)
        assert isinstance(typed, ConfigError) and typed.exit_code == 6
        assert "gcloud auth application-default login" in str(typed) and "\n" not in str(typed)


def test_quota_and_refusals_are_cloud_errors_exit_5():
    assert QuotaExceeded("q").exit_code == CloudRefused("r").exit_code == 5


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_errors_are_retried_then_a_cloud_error():
    from tpujob.cloud.tpu_api import GcpCloud

    cloud = GcpCloud.for_emulator(f"http://127.0.0.1:{_closed_port()}", retry_initial=0.01,
                                  retry_maximum=0.02, retry_deadline=0.3)
    with pytest.raises(CloudError,
                       match="listing queued resources in .*gave up after retries: ConnectionError") as info:
        cloud.list_slices(PROJECT, ZONE)
    assert info.value.exit_code == 5
    assert cloud.api_calls > 2  # retried like a 503, not raised at the first refusal


def test_credentials_that_cannot_refresh_are_a_config_error():
    from google.auth import credentials as gcreds
    from google.auth.exceptions import RefreshError

    from tpujob.cloud.tpu_api import GcpCloud

    class Expired(gcreds.Credentials):
        def refresh(self, request):
            raise RefreshError("invalid_grant: Token has been expired or revoked.")

    cloud = GcpCloud(endpoint=f"http://127.0.0.1:{_closed_port()}", credentials=Expired(),
                     retry_initial=0.01, retry_maximum=0.02, retry_deadline=0.3)
    with pytest.raises(AuthError, match="expired or revoked.*gcloud auth application-default login") as info:
        cloud.list_slices(PROJECT, ZONE)
    assert info.value.exit_code == 6


def test_a_bad_create_is_refused_for_good(cloud):
    with pytest.raises(CloudRefused, match="BadRequest"):
        cloud.create_node(request("bad", "v4-7"))


def test_nodes_carry_their_create_time(cloud, server):
    before = time.time()
    created = cloud.create_node(request("timed"))
    assert created.phase is SlicePhase.READY
    assert before - 1 <= created.node_create_time <= time.time() + 1
    listed = cloud.list_slices(PROJECT, ZONE)["timed"]
    assert listed.node_create_time == created.node_create_time
    body = server.emulator.tpu.get_node(f"projects/{PROJECT}/locations/{ZONE}/nodes/timed")
    stamp = datetime.datetime.strptime(body["createTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert abs(stamp.replace(tzinfo=datetime.timezone.utc).timestamp() - created.node_create_time) < 1e-3


def test_a_queued_resource_has_no_create_time_until_its_node_exists(cloud, server):
    server.emulator.world.stockout(ZONE, None, clear=False)
    try:
        cloud.create_queued_resource(request("qtimed", queued=True))
        waiting = cloud.get_slice(PROJECT, ZONE, "qtimed")
        assert waiting.phase is SlicePhase.QUEUED and waiting.node_create_time is None
        time.sleep(0.5)
        capacity_back = time.time()
    finally:
        server.emulator.world.stockout(ZONE, None, clear=True)
    ready = wait_for_slice(cloud, "qtimed", timeout=10)
    # The node is created when capacity comes, after the wait in the queue: its age is the
    # provisioning alone.
    assert ready.node_create_time is not None and ready.node_create_time >= capacity_back - 0.01
