"""The nodes of a Ray cluster, as the Jobs page lists them for the teacher: run as ``python -m lab.train.ray_nodes
ADDRESS``, a short-lived Ray driver of its own (the class server never becomes one), it prints one JSON list of
rows: the node, its address and host, whether Ray counts it alive, its CPUs, the device kinds it declares (custom
resources named after the topology's device types, as ``ray start --resources '{"fpga": 1}'``) and its warm rank
actors ready to lend; each look also refills the pool of warm actors (:mod:`lab.train.ray_pool`)."""
from __future__ import annotations

import json
import sys
from typing import Iterable, Mapping

from lab.errors import LabError
from lab.scenario.topology import DEVICE_TYPES


def node_rows(nodes: Iterable[Mapping], warm: Mapping[str, int] | None = None) -> list[dict]:
    """Rows of Ray's node table (``ray.nodes()``), alive nodes first, with each node's warm rank actors ready to
    lend (``warm``: node id -> count, :mod:`lab.train.ray_pool`)."""
    out = []
    for n in nodes:
        res = n.get("Resources") or {}
        out.append({"node": str(n.get("NodeID", ""))[:12], "address": str(n.get("NodeManagerAddress", "")),
                    "host": str(n.get("NodeManagerHostname", "")), "alive": bool(n.get("Alive")),
                    "CPUs": float(res.get("CPU", 0.0)),
                    "device kinds": ", ".join(sorted(k for k in res if k in DEVICE_TYPES)),
                    "warm ranks": int((warm or {}).get(str(n.get("NodeID", "")), 0))})
    return sorted(out, key=lambda r: (not r["alive"], r["node"]))


POOL_TIMEOUT_S = 20.0


def main(argv: list[str]) -> int:
    """Print the nodes of the cluster at ``argv[0]``; a cluster that cannot be reached is one line on standard
    error and exit code 1."""
    import ray

    from lab.train.ray_ranks import connect

    try:
        connect(argv[0] if argv else "")
    except LabError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    try:
        from lab.train.ray_pool import pool

        try:  # every look at the nodes also refills the pool (a node that came back gets its warm actors), with a
            # spare store writer here, on the class server's node, where the lab's launchers run
            here = ray.get_runtime_context().get_node_id()
            warm = ray.get(pool().refill.remote(here), timeout=POOL_TIMEOUT_S)["idle"]
        except Exception:  # noqa: BLE001 - the nodes are the answer; a pool that cannot be had shows no warm ranks
            warm = {}
        print(json.dumps(node_rows(ray.nodes(), warm)))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
