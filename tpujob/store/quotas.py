"""The lab's scheduler in the store: its caps (`quota`), the users' fair-share weights, and what
a sweep reads to decide admissions (reconcile/admission.py). A mixin of Store (repository.py),
which owns admission itself (`Store.admit`: a compare-and-set move)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, update
from sqlalchemy import select as sa_select
from sqlmodel import col, select

from tpujob.store.models import Attempt, Budget, Job, Quota, ShareWeight
from tpujob.store.states import ACTIVE, State
from tpujob.store.transactions import Transactions

# The states in which a job holds its chips: admitted, and not ended.
HOLDING: frozenset[State] = frozenset(ACTIVE - {State.QUEUED})


class Quotas(Transactions):
    def set_quota(self, family: str, chips: int, *, region: str = "", provisioning: str = "") -> Quota:
        """Declare (or change) a cap; "" stands for any region or provisioning."""
        now = self.clock()
        with self._tx() as session:
            row = session.get(Quota, (family, region, provisioning))
            if row is None:
                row = Quota(family=family, region=region, provisioning=provisioning, chips=chips, set_at=now)
                session.add(row)
            else:
                row.chips, row.set_at = chips, now
            session.flush()
            return Quota(family=family, region=region, provisioning=provisioning, chips=chips, set_at=now)

    def remove_quota(self, family: str, *, region: str = "", provisioning: str = "") -> bool:
        with self._tx() as session:
            row = session.get(Quota, (family, region, provisioning))
            if row is None:
                return False
            session.delete(row)
            return True

    def quotas(self) -> list[Quota]:
        with self._read() as session:
            return list(session.exec(select(Quota).order_by(col(Quota.family), col(Quota.region),
                                                            col(Quota.provisioning))))

    def set_weight(self, owner: str, weight: float) -> None:
        with self._tx() as session:
            row = session.get(ShareWeight, owner)
            if row is None:
                session.add(ShareWeight(owner=owner, weight=weight))
            else:
                row.weight = weight

    def set_budget(self, owner: str, dollars: float, period: str) -> None:
        with self._tx() as session:
            row = session.get(Budget, owner)
            if row is None:
                session.add(Budget(owner=owner, dollars=dollars, period=period))
            else:
                row.dollars, row.period = dollars, period

    def budgets(self) -> list[Budget]:
        with self._read() as session:
            return list(session.exec(select(Budget).order_by(col(Budget.owner))))

    def spend_rows(self, job_ids: list[int] | None = None, owners_since: float | None = None
                   ) -> list[tuple[int, str | None, str, float, float | None]]:
        """(job id, owner, the job's spec_json, started_at, ended_at) of the attempts of these
        jobs, and of every attempt running at or after `owners_since`: what spending is summed
        from (reconcile/spending.py)."""
        where: list[Any] = []
        if job_ids:
            where.append(col(Attempt.job_id).in_(job_ids))
        if owners_since is not None:
            where.append(col(Attempt.ended_at).is_(None) | (col(Attempt.ended_at) >= owners_since))
        if not where:
            return []
        query = (sa_select(col(Job.id), col(Job.owner), col(Job.spec_json), col(Attempt.started_at),
                           col(Attempt.ended_at))
                 .join(Job, col(Job.id) == col(Attempt.job_id)).where(or_(*where)))
        with self._read() as session:
            return [(job_id, owner, spec, started, ended)
                    for job_id, owner, spec, started, ended in session.execute(query)]

    def weights(self) -> dict[str, float]:
        with self._read() as session:
            return {row.owner: row.weight for row in session.exec(select(ShareWeight))}

    def usage_rows(self, since: float) -> list[tuple[str | None, str, int, float, float | None]]:
        """(owner, accelerator, slices, started_at, ended_at) of every attempt running at or after
        `since`: what fair share's decayed chip-hours are summed from."""
        query = (sa_select(col(Job.owner), col(Attempt.accelerator), col(Attempt.slices), col(Attempt.started_at),
                           col(Attempt.ended_at))
                 .join(Job, col(Job.id) == col(Attempt.job_id))
                 .where((col(Attempt.ended_at).is_(None)) | (col(Attempt.ended_at) >= since)))
        with self._read() as session:
            return [(owner, accel, slices, started, ended)
                    for owner, accel, slices, started, ended in session.execute(query)]

    def set_waiting(self, job_id: int, reason: str) -> None:
        """Why a QUEUED job waits (`list`, `show`); written only when it changed."""
        with self._tx() as session:
            session.exec(update(Job).where(and_(col(Job.id) == job_id, col(Job.state) == State.QUEUED.value,
                                                col(Job.waiting_for).is_distinct_from(reason)))
                         .values(waiting_for=reason))
