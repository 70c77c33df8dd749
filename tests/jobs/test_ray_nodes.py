"""The Ray cluster's nodes on the Jobs page: Ray's node table as rows (alive first, the device kinds a node
declares, nothing else of its resources), asked of a process of its own in the background; a cluster that cannot be
reached is a warning with why, and the page is drawn without waiting."""
from __future__ import annotations

import socket

import pytest

from lab.jobs.nodes import ClusterNodes
from lab.train.ray_nodes import node_rows
from lab.view.jobs.page import cluster_nodes


def test_rays_node_table_becomes_rows_with_the_device_kinds_a_node_declares_and_its_warm_ranks():
    table = [{"NodeID": "dead0123456789abcdef", "Alive": False, "NodeManagerAddress": "10.0.0.3",
              "NodeManagerHostname": "n3", "Resources": {}},
             {"NodeID": "b" * 40, "Alive": True, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "n2",
              "Resources": {"CPU": 2.0, "fpga": 1.0, "gpu": 1.0, "memory": 1e9, "node:10.0.0.2": 1.0}},
             {"NodeID": "a" * 40, "Alive": True, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "head",
              "Resources": {"memory": 1e9, "object_store_memory": 1e8}}]
    warm = {"b" * 40: 2, "dead0123456789abcdef": 1}  # a lost node's count: what the pool last knew
    assert node_rows(table, warm) == [
        {"node": "a" * 12, "address": "10.0.0.1", "host": "head", "alive": True, "CPUs": 0.0, "device kinds": "",
         "warm ranks": 0},
        {"node": "b" * 12, "address": "10.0.0.2", "host": "n2", "alive": True, "CPUs": 2.0,
         "device kinds": "fpga, gpu", "warm ranks": 2},
        {"node": "dead01234567", "address": "10.0.0.3", "host": "n3", "alive": False, "CPUs": 0.0,
         "device kinds": "", "warm ranks": 1}]
    assert [r["warm ranks"] for r in node_rows(table)] == [0, 0, 0]  # no pool yet


class _Manager:
    def __init__(self, nodes):
        self.nodes = nodes


@pytest.mark.slow  # its own process imports Ray to find nobody
def test_a_cluster_that_cannot_be_reached_is_a_warning_with_why_and_the_page_never_waits():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    nodes = ClusterNodes(address, every_s=3600)
    (first,) = cluster_nodes(_Manager(nodes))  # drawn at once, from no answer yet
    assert first.table is None and first.caption == "Asking the Ray cluster which nodes it has…"
    assert nodes.wait(60)
    (later,) = cluster_nodes(_Manager(nodes))
    (notice,) = later.notices
    assert notice.level == "warning" and "answers no connection" in notice.text and "Traceback" not in notice.text
    assert later.table is None and later.caption is None
    assert cluster_nodes(_Manager(None)) == []  # one machine: no nodes to show
