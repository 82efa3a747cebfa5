"""The issue's fault storm, shared by the puller's fault test and the capture's: random splits, merges, leader
transfers, store stops and starts, busy stores, dropped streams and PD leader moves on one table's regions
(:class:`Storm`, on a thread until told to stop), and a raw MVCC workload of row changes with locks held open and
some transactions rolled back (:class:`Workload`, on the cluster's loop)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from cdc_core.codec import key as keycodec
from cdc_core.upstream.faults import FaultError
from cdc_core.upstream.store.mvcc import Mutation, MvccError, Op


@dataclass
class Workload:
    """Transactions of a few rows each, written straight into the MVCC store on the cluster's loop, with some
    transactions kept open (locks holding the resolved ts back) and some rolled back."""

    table_id: int
    target_changes: int
    keys: int = 5_000
    rows_per_txn: int = 8
    max_open: int = 16
    seed: int = 7
    # Spread the changes over at least this long, so that the storm overlaps the whole workload however fast
    # the client and the machine are (a rate limit of the generator; 0 = as fast as possible).
    min_seconds: float = 0.0
    committed: int = 0
    rolled_back: int = 0
    last_commit_ts: int = 0
    done: bool = False
    _open: list[tuple[int, list[bytes]]] = field(default_factory=list)

    async def run(self, ec: Any) -> None:
        cluster = ec.cluster
        store, tso = cluster.store, cluster.tso
        rng = random.Random(self.seed)
        locked: set[bytes] = set()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while self.committed < self.target_changes or self._open:
            if self.min_seconds:
                ahead = self.committed / self.target_changes * self.min_seconds - (loop.time() - t0)
                if ahead > 0:
                    await asyncio.sleep(min(ahead, 0.05))
            if self.committed < self.target_changes:
                keys = {keycodec.row_key(self.table_id, rng.randrange(-self.keys // 2, self.keys // 2))
                        for _ in range(self.rows_per_txn)} - locked
                muts = [Mutation(k, Op.DELETE if rng.random() < 0.2 else Op.PUT, rng.randbytes(24)) for k in keys]
                if muts:
                    start_ts = tso.next()
                    try:
                        store.prewrite(muts, muts[0].key, start_ts)
                    except MvccError:
                        pass
                    else:
                        self._open.append((start_ts, [m.key for m in muts]))
                        locked.update(m.key for m in muts)
            if len(self._open) >= self.max_open or (self.committed >= self.target_changes and self._open):
                # Mostly one of the oldest: locks live a while but do not pin the resolved ts for long.
                start_ts, keys_ = self._open.pop(rng.randrange(min(4, len(self._open))))
                locked.difference_update(keys_)
                if rng.random() < 0.03:
                    store.rollback(keys_, start_ts)
                    self.rolled_back += len(keys_)
                else:
                    commit_ts = tso.next()
                    store.commit(keys_, start_ts, commit_ts)
                    self.committed += len(keys_)
                    self.last_commit_ts = commit_ts
            # Yield every transaction: the cluster's loop also serves the scans, feeds and faults, and a
            # writer hogging it would starve region initialization (the resolved ts would barely move).
            await asyncio.sleep(0)
        self.done = True


@dataclass
class Storm:
    """Random region and store faults on the workload's table until told to stop."""

    ec: Any
    db: str
    table_id: int
    seed: int = 11
    table: str = "t"
    handles: int = 2_500  # splits at handles in [-handles, handles)
    counts: dict[str, int] = field(default_factory=dict)

    def _one(self, rng: random.Random) -> None:
        f = self.ec.faults
        start, end = keycodec.table_span(self.table_id)
        regions = [r for r in f.table_regions(self.db, self.table)
                   if r.start_key >= start and r.end_key and r.end_key <= end]
        kind = rng.choices(["split", "merge", "transfer", "stop", "drop", "busy", "pd_leader"],
                           [5, 4, 4, 1, 1, 1, 1])[0]
        if kind == "split" and len(regions) < 48:
            at = [rng.randrange(-self.handles, self.handles) for _ in range(rng.randint(1, 3))]
            f.split_table(self.db, self.table, handles=at)
        elif kind == "merge" and len(regions) >= 2:
            i = rng.randrange(len(regions) - 1)
            f.merge(regions[i].id, regions[i + 1].id)
        elif kind == "transfer" and regions:
            r = rng.choice(regions)
            f.transfer_leader(r.id, rng.choice([s for s in (1, 2, 3) if s != r.leader_store_id]))
        elif kind == "stop":
            store = rng.randint(1, 3)
            f.stop_store(store, move_leaders=rng.random() < 0.5)
            time.sleep(rng.uniform(0.05, 0.3))
            f.start_store(store)
        elif kind == "drop":
            f.drop_streams(rng.choice([0, 1, 2, 3]))
        elif kind == "busy":
            f.busy(rng.randint(1, 3), rng.uniform(0.1, 0.4))
        elif kind == "pd_leader":  # the puller's next PD call finds a follower and must follow the leader
            f.transfer_pd_leader(rng.choice([m for m in (1, 2, 3) if m != self.ec.cluster.pd_members.leader_id]))
        else:
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def run(self, stop: Any) -> None:
        """Runs on a thread (each fault waits for the cluster's loop)."""
        rng = random.Random(self.seed)
        while not stop.is_set():
            try:
                self._one(rng)
            except FaultError:
                pass
            stop.wait(rng.uniform(0.02, 0.12))
