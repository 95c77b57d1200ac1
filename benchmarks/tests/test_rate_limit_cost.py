"""rate_limit_cost.py: each variant pops under its limit, and the report reads as documented."""

from __future__ import annotations

import shutil

import pytest
from rate_limit_cost import VARIANTS, measure, report


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind")
def test_every_variant_is_counted() -> None:
    costs = measure(shutil.which("redis-server") or "redis-server", 3, "fcall", VARIANTS)
    assert set(costs) == set(VARIANTS) and all(cost > 0 for cost in costs.values())
    lines: list[str] = []
    report(costs, lines.append)
    assert lines[0].startswith("  none: ") and "instructions per pop" in lines[0]
    assert all(line.endswith(" %)") for line in lines[1:])
