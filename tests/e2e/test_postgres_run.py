"""A whole job on the emulator with its store on a real PostgreSQL server: create, preemption,
`tpujob requeue` until it runs again, success; the store's rows live on the server."""

from __future__ import annotations

import pytest
from reconcile_helpers import ZONE, assert_no_orphans, node_ref, record, running, sweep_until
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.slow

# Attempt 1 runs until it is preempted; attempt 2 finishes.
COMMAND = 'echo "$TPUJOB_ATTEMPT" >> /mnt/ran; [ "$TPUJOB_ATTEMPT" = 1 ] && sleep 600; exit 0'


@pytest.fixture
def pg_ctx(postgres_url, project, monkeypatch, tpujob_home):
    from tpujob.service import jobs
    from tpujob.service.context import Context

    monkeypatch.setenv("TPUJOB_DB_URL", postgres_url)
    context = Context.load()
    yield context
    for job in context.store.list_jobs(include_ended=True):
        if job.state != "DELETED":
            jobs.delete(context, str(job.id))


def test_create_preempt_requeue_succeed_with_the_store_on_postgresql(cli, pg_ctx, postgres_url, local_cloud,
                                                                    project, tmp_path, tpujob_home):
    ctx = pg_ctx
    job = record(ctx, tmp_path, name="pg", command=COMMAND, backoff_seconds=None, min_run_seconds=0)
    sweep_until(ctx, job.id, running)
    first = ctx.store.current_attempt(job.id).slice_name

    local_cloud.preempt(node_ref(project, ZONE, first))
    result = cli("requeue")
    assert result.code == 0, result.err
    job = sweep_until(ctx, job.id, lambda j: j.state == "SUCCEEDED")
    assert (job.preemptions, job.attempt) == (1, 2)
    assert [(a.number, a.end_reason) for a in ctx.store.attempts(job.id)][0] == (1, "preempted")
    listed = cli("list", "--all")
    assert listed.code == 0 and "SUCCEEDED" in listed.out

    # The rows are on the server, and no SQLite file was made beside the settings.
    with create_engine(postgres_url).connect() as conn:
        moves = conn.execute(text("SELECT to_state FROM event WHERE job_id = :j AND to_state IS NOT NULL "
                                  "ORDER BY id"), {"j": job.id}).scalars().all()
    assert moves[:4] == ["PENDING", "PROVISIONING", "SETTING_UP", "RUNNING"]
    assert moves[-1] == "SUCCEEDED" and "RECOVERING" in moves
    assert not (tpujob_home / "tpujob.db").exists()
    cli("delete", str(job.id))
    assert_no_orphans(ctx, local_cloud, project)
