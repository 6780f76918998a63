"""The lab's nodes (migration 18): every $TPUJOB_HOME sharing this store, by its SSH public key.

A node registers (or refreshes) its own public key on every sweep and create; slices are
created with every registered key, so any node of the lab can log in on any job's hosts,
including a node that joins while jobs run (it adds its key to their live slices itself:
attempt/hosts.py). Only public keys are here: each private key stays in its node's home."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from tpujob.store.models import LabNode
from tpujob.store.transactions import Transactions


class LabNodes(Transactions):
    """The lab operations of Store."""

    def register_node(self, public_key: str, name: str, account: str | None = None) -> None:
        """This node's key, seen now: added once, its name, account and last_seen kept current."""
        now = self.clock()
        values = dict(name=name, last_seen=now, **({"account": account} if account else {}))
        for _ in range(2):  # two nodes' first sweeps at once: the loser of the insert updates
            with self._tx() as session:
                done = session.exec(update(LabNode).where(col(LabNode.public_key) == public_key).values(**values))
                if done.rowcount == 1:
                    return
            try:
                with self._tx() as session:
                    session.add(LabNode(public_key=public_key, registered_at=now, **values))
                return
            except IntegrityError:
                continue

    def lab_nodes(self) -> list[LabNode]:
        """Every registered node, the first registered first."""
        with self._read() as session:
            return list(session.exec(select(LabNode).order_by(col(LabNode.registered_at), col(LabNode.public_key))))
