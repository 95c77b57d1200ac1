"""The one-node against three-shard comparison counts every job where it ran.

No assertion here is on speed: they check that each phase moves every job, on the nodes
the placement says, and that the report renders.
"""

from __future__ import annotations

import cluster


def test_both_setups_move_every_job_on_the_nodes_placement_names() -> None:
    doc = cluster.run(quick=True, jobs=180, procs=6, binary=cluster.find_redis_server())
    for setup in ("one_node", "three_shards"):
        for phase in cluster.PHASES:
            assert doc[setup][phase]["jobs"] == 180, (setup, phase)
    # Two queues per primary, one process each: every primary served a third of the jobs.
    assert doc["three_shards"]["drain"]["jobs_by_node"] == [60, 60, 60]
    assert doc["one_node"]["enqueue"]["jobs_by_node"] == [180]
    assert len(set(doc["placement"].values())) == 6
    text = cluster.render(doc)
    assert "3 shards" in text and "each primary" in text
