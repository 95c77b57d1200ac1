"""Fault-injection suite: one fault each, then the invariants of docs/faults.md.

Run: `pytest -m fault tests/faults`. The catalogue (which fault, what must hold, which test)
is docs/faults.md; worker-process faults that need no Redis fault live in tests/worker.
"""
