"""Warm rank actors on a Ray cluster: the cluster's answer to the warm starter.

A fresh Ray worker imports torch and the lab's rank code before its rank can start, seconds on every job. The
pool keeps, on every node, as many :class:`lab.train.ray_ranks.RankActor` as the node has CPUs, each started
once and warmed (:meth:`RankActor.warm`: torch and the rank code loaded, :func:`lab.train.preload.load_rank_code`),
and a spare store writer on each node where launchers run. A job still asks Ray for a placement group, one bundle
per rank, so Ray's own gang scheduling decides where the job runs and whether it waits; it then borrows, for each
bundle, a warm actor on that bundle's node (the pool's actors hold no CPU of their own: the bundle holds the
rank's), forms its own gloo group with them, and gives them back when they ended clean (:meth:`RankActor.run` says
so: no process group left, its scratch folder gone).

What a job starts from on a borrowed actor is reset: the environment and torch's random generator and default
dtype are those the actor had when it warmed (a fresh process's), and the process group and scratch folder are
the job's own and gone when it ends. What a process caches for any job (the rank code, the bundled data set,
torch's compiled kernels) stays, as it does in the warm starter.

An actor that is killed, lost with its node or ends unclean is not given back; the pool starts another on that node
when it next refills (every look at the nodes refills it, :mod:`lab.train.ray_nodes`, and so does every job's
end). A loan whose job is gone (its launcher died before it gave anything back: Ray then removes the job's placement
group) is ended at the next refill, so no rank of a dead job trains on.

The pool is one detached actor in the lab's namespace, on the node of whoever made it first (:func:`pool`: the
job manager's first look at the cluster's nodes, or ``python -m lab.train.ray_pool ADDRESS`` before a class, both
on the class server). Its name carries a digest of the lab's code (:data:`lab.train.ray_ranks.POOL_NAME`): a
server running other code makes a pool of its own and ends the others, whose actors hold the old code. A job's
launcher only looks the pool up, and starts fresh actors where there is none.
"""
from __future__ import annotations

import json
import sys
import time

import ray
from ray.util import placement_group_table
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from lab.train.ray_ranks import POOL_NAME, POOL_PREFIX

NAMESPACE = "lab"


def _gone(group) -> bool:
    """Whether a job's placement group was removed (its launcher released it, or Ray did with its dead driver)."""
    try:
        return placement_group_table(group).get("state") == "REMOVED"
    except Exception:  # noqa: BLE001 - a group Ray no longer knows is gone too
        return True


@ray.remote(num_cpus=0, max_restarts=0)
class RankPool:
    """The warm rank actors of every node: ``idle`` maps a node id to the actors ready to lend, ``lent`` to those a
    job holds (with its placement group); each kept with the answer it owes to the pool's last question (a dead
    actor answers with an error). Every method answers at once: what takes time is awaited by the caller."""

    def __init__(self):
        self.idle: dict[str, dict[str, list]] = {}  # node -> actor id -> [actor, its pending answer or None]
        self.lent: dict[str, dict[str, list]] = {}  # node -> actor id -> [actor, pending answer, job's group]
        self.size: dict[str, int] = {}
        # node where launchers run -> its spare store writers (one, started before the job that takes it)
        self.writers: dict[str, dict[str, list]] = {}
        self.writer_loans: dict[str, list] = {}  # writer id -> [writer, job's group]

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
            actor, ref = entry[0], entry[1]
            if ref is None:
                entry[1] = actor.where.remote()
            elif ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                    entry[1] = None
                except ray.exceptions.RayError:
                    del actors[key]

    @staticmethod
    def _end(actor) -> None:
        try:
            ray.kill(actor, no_restart=True)
        except ray.exceptions.RayError:  # gone already
            pass

    def _orphans(self) -> None:
        """End the loans whose job is gone: an actor or writer its launcher never gave back nor ended."""
        for lent in self.lent.values():
            for key, (actor, _, group) in list(lent.items()):
                if _gone(group):
                    self._end(actor)
                    del lent[key]
        for key, (writer, group) in list(self.writer_loans.items()):
            if _gone(group):
                self._end(writer)
                del self.writer_loans[key]

    def refill(self, launchers: str | None = None) -> dict:
        """Start warm actors where a node holds fewer than its size, idle and lent together, and a spare store
        writer on each node where launchers run (``launchers``: one more such node); forget the nodes that left
        and the actors that died, and end the loans of jobs that are gone. Returns the status."""
        from lab.train.ray_ranks import RankActor
        from lab.train.ray_store import StoreWriter

        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        self._orphans()
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

    def borrow(self, nodes: list[str], group) -> list:
        """One idle actor on each node of ``nodes`` (a node may come more than once), or None where the node has
        none left (the job starts a fresh one there), lent to the job of placement group ``group``."""
        out = []
        for node in nodes:
            idle = self.idle.get(node) or {}
            key = next(iter(idle), None)
            entry = idle.pop(key) if key is not None else None
            if entry is not None:
                self.lent.setdefault(node, {})[key] = [entry[0], None, group]
            out.append(entry[0] if entry is not None else None)
        return out

    def borrow_writer(self, node: str, group):
        """The spare store writer on ``node``, lent to the job of ``group`` (None the first time a launcher asks
        there); a new spare starts."""
        spares = self.writers.setdefault(node, {})
        key = next(iter(spares), None)
        writer = spares.pop(key)[0] if key is not None else None
        if writer is not None:
            self.writer_loans[key] = [writer, group]
        self.refill()
        return writer

    def give_back(self, actor, node: str) -> bool:
        """An actor whose job ended clean goes back to the idle ones (its node still there). True when kept."""
        key = actor._actor_id.hex()
        if self.lent.get(node, {}).pop(key, None) is None or node not in self.size:
            self._end(actor)
            return False
        self.idle.setdefault(node, {})[key] = [actor, None]
        return True

    def status(self) -> dict:
        """Per node: the actors ready to lend, those lent, and the spare store writers."""
        return {"idle": {node: len(actors) for node, actors in self.idle.items()},
                "lent": {node: len(actors) for node, actors in self.lent.items()},
                "writers": {node: len(w) for node, w in self.writers.items()}}

    def idle_actors(self) -> list:
        """The idle actors (their callers ask them what takes time: warming, their processes)."""
        return [entry[0] for actors in self.idle.values() for entry in actors.values()]

    def spare_writers(self) -> list:
        return [entry[0] for spares in self.writers.values() for entry in spares.values()]


def pool():
    """The cluster's pool for this code (made, detached, on the caller's node by the first caller; Ray makes it
    once however many ask at once). Pools of other code, and their actors, end."""
    from ray.util import list_named_actors

    for named in list_named_actors(all_namespaces=True):
        if named.get("namespace") == NAMESPACE and named["name"].startswith(POOL_PREFIX) and named["name"] != POOL_NAME:
            try:
                ray.kill(ray.get_actor(named["name"], namespace=NAMESPACE), no_restart=True)
            except (ValueError, ray.exceptions.RayError):  # ended meanwhile
                pass
    here = ray.get_runtime_context().get_node_id()
    return RankPool.options(name=POOL_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)).remote()


def warm(address: str, timeout_s: float = 300.0) -> dict:
    """Connect to the cluster at ``address``, fill the pool (with a spare store writer on this node, where the
    lab's launchers run) and wait for its actors to warm. Returns its status."""
    from lab.train.ray_ranks import connect

    connect(address)
    p = pool()
    ray.get(p.refill.remote(ray.get_runtime_context().get_node_id()))
    refs = [a.warm.remote() for a in ray.get(p.idle_actors.remote())]
    refs += [w.where.remote() for w in ray.get(p.spare_writers.remote())]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    return ray.get(p.status.remote())


def held(address: str) -> dict:
    """What the cluster holds for the lab, once the pool has refilled: its idle actors' processes and the placement
    groups not removed (a job's, while it runs; none once every job ended)."""
    from lab.train.ray_ranks import connect

    connect(address)
    p = pool()
    ray.get(p.refill.remote())  # what died since the last look is replaced first
    pids = []
    for ref in [a.where.remote() for a in ray.get(p.idle_actors.remote())]:
        try:
            pids.append(int(ray.get(ref, timeout=30)["pid"]))
        except ray.exceptions.RayError:
            continue
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
