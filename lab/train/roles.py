"""A job's roles: the task manager, the compute workers and a parameter server where the sync mode
uses one, each with the device it stands for and that device's resource group."""
from __future__ import annotations

from lab.scenario.groups import resource_groups


def parse_job(sc) -> dict:
    """The task-level design's parsing step: the job's roles (a task manager, a parameter server where the sync mode
    uses one, the compute workers), the device each worker stands for, and the topology's resource
    groups (one hardware type each) those devices belong to. Plain data (JSON-ready)."""
    tr = sc.training
    groups = resource_groups(sc.topology)
    group_of = {d.split("/", 1)[1]: g.name for g in groups for d in g.devices}
    if tr.parallel == "placement" and tr.placement:  # one process per device of the plan
        devs = sorted({dev for _, dev in tr.placement})  # ranks follow the model's order, decided by each process
        roles = [{"role": "task manager", "rank": None, "device": None, "group": None,
                  "process": "the launcher (starts one process per device, watches heartbeats)"}]
        roles += [{"role": "stage", "rank": None, "device": d, "group": group_of.get(d),
                   "process": f"the stage process of {d}", "operators": [op for op, x in tr.placement if x == d]}
                  for d in devs]
        return {"workers": len(devs), "parameter_server": None, "tasks": len(devs), "sync": "placement",
                "strategy": tr.strategy, "roles": roles,
                "resource_groups": [{"name": g.name, "type": g.type, "devices": g.size} for g in groups]}
    ps = tr.sync == "param_server"
    devs = list(tr.worker_devices)
    roles = [{"role": "task manager", "rank": None, "device": None, "group": None,
              "process": "the launcher (splits the job, watches heartbeats, restarts)"}]
    for r in range(tr.workers):
        dev = devs[r] if r < len(devs) else None
        roles.append({"role": "compute worker", "rank": r, "device": dev, "group": group_of.get(dev),
                      "process": f"worker rank {r}"})
    if ps:
        dev = devs[tr.workers] if len(devs) > tr.workers else None
        roles.append({"role": "parameter server", "rank": tr.workers, "device": dev, "group": group_of.get(dev),
                      "process": f"rank {tr.workers}"})
    return {"workers": tr.workers, "parameter_server": tr.workers if ps else None, "tasks": tr.workers + ps,
            "sync": tr.sync, "roles": roles,
            "resource_groups": [{"name": g.name, "type": g.type, "devices": g.size} for g in groups]}
