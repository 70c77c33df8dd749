"""Warm rank actors on a Ray cluster: the cluster's answer to the warm starter.

A fresh Ray worker imports torch and the lab's rank code before its rank can start, seconds on every job. The
pool keeps, on every node, as many :class:`lab.train.ray_ranks.RankActor` as the node has CPUs, each started
once and warmed (:meth:`RankActor.warm`: torch and the rank code loaded, :func:`lab.train.preload.load_rank_code`).
A job still asks Ray for a placement group, one bundle per rank, so Ray's own gang scheduling decides where the
job runs and whether it waits; it then borrows, for each bundle, a warm actor on that bundle's node (the pool's
actors hold no CPU of their own: the bundle holds the rank's), forms its own gloo group with them, and gives them
back when they ended clean (:meth:`RankActor.run` says so: no process group left, its scratch folder gone). An
actor that is killed, lost with its node or ends unclean is not given back; the pool starts another on that node
when it next refills (every look at the nodes refills it, :mod:`lab.train.ray_nodes`, and so does every job's
end).

Nothing of one job reaches the next: each job starts with the environment and torch's random generator an
actor had when it was warmed (a fresh process's), runs its own process group and scratch folder, and ends them.

The pool is one detached actor named :data:`POOL_NAME` in the lab's namespace, made by the first who asks
(:func:`pool`): the job manager's first look at the cluster's nodes (:mod:`lab.train.ray_nodes`), or
``python -m lab.train.ray_pool ADDRESS`` before a class; a job's launcher only looks it up, and starts fresh
actors where there is none.
"""
from __future__ import annotations

import json
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from lab.train.ray_ranks import POOL_NAME

NAMESPACE = "lab"


@ray.remote(num_cpus=0, max_restarts=0)
class RankPool:
    """The warm rank actors of every node: ``idle`` maps a node id to the actors ready to lend, ``lent`` to those a
    job holds; each kept with the answer it owes to the pool's last question (a dead actor answers with an
    error)."""

    def __init__(self):
        self.idle: dict[str, dict[str, list]] = {}  # node -> actor id -> [actor, its pending answer or None]
        self.lent: dict[str, dict[str, list]] = {}
        self.size: dict[str, int] = {}
        # node where launchers run -> its spare store writers (one, started before the job that takes it)
        self.writers: dict[str, dict[str, list]] = {}

    def _nodes(self) -> dict[str, int]:
        """The alive nodes that run ranks, with how many warm actors each keeps (its CPUs)."""
        return {n["NodeID"]: int(n["Resources"].get("CPU", 0)) for n in ray.nodes()
                if n["Alive"] and int(n["Resources"].get("CPU", 0)) > 0}

    @staticmethod
    def _sweep(actors: dict[str, list]) -> None:
        """Forget the actors that died (killed while idle or with their job, ended unclean): each is asked where it
        runs, one question at a time, which an idle actor answers at once, a busy one after its job and a dead one
        with an error."""
        for key, entry in list(actors.items()):
            actor, ref = entry
            if ref is None:
                entry[1] = actor.where.remote()
            elif ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                    entry[1] = None
                except ray.exceptions.RayError:
                    del actors[key]

    def refill(self, launchers: str | None = None) -> dict:
        """Start warm actors where a node holds fewer than its size, idle and lent together, and a spare store
        writer on each node where launchers run (``launchers``: one more such node); forget the nodes that left
        and the actors that died. Returns the status."""
        from lab.train.ray_ranks import RankActor, StoreWriter

        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        if launchers:
            self.writers.setdefault(launchers, {})
        for node in list(self.writers):
            if node not in alive:
                del self.writers[node]
                continue
            self._sweep(self.writers[node])
            if not self.writers[node]:
                writer = StoreWriter.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node, soft=False)).remote()
                self.writers[node][writer._actor_id.hex()] = [writer, None]
        self.size = self._nodes()
        for node in set(self.idle) | set(self.lent):
            if node not in self.size:  # lost with its node
                self.idle.pop(node, None)
                self.lent.pop(node, None)
        for node, size in self.size.items():
            idle, lent = self.idle.setdefault(node, {}), self.lent.setdefault(node, {})
            self._sweep(idle)
            self._sweep(lent)
            while len(idle) + len(lent) < size:
                actor = RankActor.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node, soft=False)).remote()
                actor.warm.remote()  # loads torch and the rank code now, before a job waits for it
                idle[actor._actor_id.hex()] = [actor, None]
        return self.status()

    def borrow(self, nodes: list[str]) -> list:
        """One idle actor on each node of ``nodes`` (a node may come more than once), or None where the node has
        none left (the job starts a fresh one there)."""
        out = []
        for node in nodes:
            idle = self.idle.get(node) or {}
            key = next(iter(idle), None)
            entry = idle.pop(key) if key is not None else None
            if entry is not None:
                self.lent.setdefault(node, {})[key] = [entry[0], None]
            out.append(entry[0] if entry is not None else None)
        return out

    def borrow_writer(self, node: str):
        """The spare store writer on ``node`` (None the first time a launcher asks there); a new spare starts."""
        spares = self.writers.setdefault(node, {})
        key = next(iter(spares), None)
        writer = spares.pop(key)[0] if key is not None else None
        self.refill()
        return writer

    def give_back(self, actor, node: str) -> bool:
        """An actor whose job ended clean goes back to the idle ones (its node still there). True when kept."""
        key = actor._actor_id.hex()
        if self.lent.get(node, {}).pop(key, None) is None or node not in self.size:
            ray.kill(actor, no_restart=True)
            return False
        self.idle.setdefault(node, {})[key] = [actor, None]
        return True

    def status(self) -> dict:
        """Per node: the actors ready to lend, those lent, and the spare store writers."""
        return {"idle": {node: len(actors) for node, actors in self.idle.items()},
                "lent": {node: len(actors) for node, actors in self.lent.items()},
                "writers": {node: len(w) for node, w in self.writers.items()}}

    def _idle_actors(self) -> list:
        return [entry[0] for actors in self.idle.values() for entry in actors.values()]

    def ready(self, timeout_s: float) -> dict:
        """Wait until every idle actor has warmed and every spare writer started (at most ``timeout_s``); returns
        the status."""
        refs = [a.warm.remote() for a in self._idle_actors()]
        refs += [w.where.remote() for spares in self.writers.values() for w, _ in spares.values()]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return self.status()

    def pids(self) -> list[int]:
        """The processes of the idle actors (what a count of rank processes leaves out)."""
        out = []
        for ref in [a.where.remote() for a in self._idle_actors()]:
            try:
                out.append(int(ray.get(ref, timeout=30)["pid"]))
            except ray.exceptions.RayError:
                continue
        return out


def pool():
    """The cluster's pool (made, detached, by the first caller; Ray makes it once however many ask at once)."""
    return RankPool.options(name=POOL_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote()


def warm(address: str, timeout_s: float = 300.0) -> dict:
    """Connect to the cluster at ``address``, fill the pool (with a spare store writer on this node, where the
    lab's launchers run) and wait for its actors to warm. Returns its status."""
    from lab.train.ray_ranks import connect

    connect(address)
    p = pool()
    ray.get(p.refill.remote(ray.get_runtime_context().get_node_id()))
    return ray.get(p.ready.remote(timeout_s))


def held(address: str) -> dict:
    """What the cluster holds for the lab, once the pool has refilled: its idle actors' processes and the placement
    groups not removed (a job's, while it runs; none once every job ended)."""
    from ray.util import placement_group_table

    from lab.train.ray_ranks import connect

    connect(address)
    p = pool()
    ray.get(p.refill.remote())  # what died since the last look is replaced first
    pids = ray.get(p.pids.remote())
    groups = sum(1 for g in placement_group_table().values() if g.get("state") != "REMOVED")
    return {**ray.get(p.status.remote()), "pids": pids, "placement_groups": groups}


def main(argv: list[str]) -> int:
    """``python -m lab.train.ray_pool ADDRESS``: fill the pool and wait for its actors to warm (before a class, or
    a bench); with ``--held``, print what the cluster holds for the lab (:func:`held`) as JSON."""
    t0 = time.monotonic()
    try:
        if "--held" in argv:
            print(json.dumps(held(argv[0])), flush=True)
            return 0
        got = warm(argv[0])
    except Exception as exc:  # noqa: BLE001 - one line for whoever asked; jobs then start fresh actors
        print(f"the Ray cluster's warm ranks: {exc}", file=sys.stderr)
        return 1
    print(f"warm rank actors: {sum(got['idle'].values())} on {len(got['idle'])} nodes in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
