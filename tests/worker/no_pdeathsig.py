"""Worker test jobs, with the children's parent-death signal turned off.

Imported by a worker (`--import tests.worker.no_pdeathsig`): its children then notice a dead
supervisor only by checking `getppid()`, the path used where Linux's PDEATHSIG is not there.
"""

from __future__ import annotations

from django_qless.core.workers import child
from tests.worker import jobs  # noqa: F401 - the job targets

__all__: list[str] = []

child.set_parent_death_signal = lambda signum: False  # type: ignore[assignment]
