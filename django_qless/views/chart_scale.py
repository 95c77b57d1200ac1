"""A chart's y-axis: a round top value above the peak, and the gridlines to label."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["nice_top", "y_scale"]


def nice_top(peak: float) -> int:
    """Return the smallest 1, 2 or 5 times a power of ten that is at least ``peak``."""
    if peak <= 1:
        return 1
    power = 10 ** math.floor(math.log10(peak))
    for step in (1, 2, 5, 10):
        if step * power >= peak:
            return int(step * power)
    return int(10 * power)  # (not reached)


def y_scale(peak: float, height: int, room: int = 14) -> dict[str, Any]:
    """Return the axis top and gridlines (value, y) at 0, half and the top of the bars'
    ``height - room`` pixels."""
    top = nice_top(peak)
    usable = height - room
    lines = [{"value": v, "y": round(height - v / top * usable, 2)}
             for v in (0, top / 2, top) if v == int(v)]
    return {"top": top, "lines": [{**line, "value": int(line["value"])} for line in lines]}
