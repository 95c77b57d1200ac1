"""cluster_cost.py: its setups count every job on the node holding it, and its report sorts
redis-server's functions into the groups it names.

No assertion here is on speed or instruction counts (those need valgrind and vary by build).
"""

from __future__ import annotations

from typing import Any

import cluster
import cluster_cost
import pytest

from testservers.redis_server import find_redis_server


def test_wakeup_setups_count_the_commands_of_every_job_on_its_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "IDLE_SECONDS", 0.2)  # (the idle rates are not checked)
    out = cluster_cost.wakeups(find_redis_server(), 120)
    assert {s: len(nodes) for s, nodes in out.items()} == {
        "1 node, 6 procs": 1, "1 node, 2 procs": 1, "3 plain servers, 6 procs": 3,
        "1-node cluster, 6 procs": 1, "3 primaries, 6 procs": 3}
    for setup, nodes in out.items():
        for node in nodes:
            # put, reserve / complete_and_reserve and their redis.calls: about 26 a job on
            # the node of the job's queue (a node counted another's jobs would be far off)
            assert 20 < node["commands"] < 60, (setup, node)
            assert node["client"] > 0
    assert "3 primaries, 6 procs #3" in cluster_cost.render_wakeups(out)


def test_functions_are_grouped_by_name() -> None:
    assert cluster_cost.group_of("getNodeByQuery") == "cluster"
    assert cluster_cost.group_of("keyHashSlot") == "cluster"
    assert cluster_cost.group_of("pubsubPublishMessage") == "pubsub"
    assert cluster_cost.group_of("luaV_execute") == "lua"
    assert cluster_cost.group_of("0x0000000000159c70") == "unnamed"
    assert cluster_cost.group_of("je_malloc") == "alloc"
    assert cluster_cost.group_of("str_to_mpn.part.0.constprop.0") == "other"  # (glibc's)
    assert cluster_cost.group_of("lpFind") == "other"


def test_report_divides_by_jobs_and_lists_the_differences() -> None:
    def phase(jobs: int, scale: int) -> dict[str, Any]:
        return {"jobs": jobs, "commands": {"fcall": jobs},
                "functions": {"getNodeByQuery": 10 * scale, "lpFind": 100 * scale}}

    out = {f"{s}:{p}": phase(10, 2 if s.startswith("cluster") else 1)
           for s in ("default", "shard", "alternate", "cluster", "cluster-alternate")
           for p in cluster_cost.PHASES}
    text = cluster_cost.render(out, top=2)
    assert "  total                   " in text
    assert "cluster - shard, put: +11 per job" in text
    assert "+1  getNodeByQuery  [cluster]" in text
