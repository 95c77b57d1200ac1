"""Fork-and-ORM driver: `manage.py qless_worker` whose supervisor uses the ORM between forks.

Run as `python -m tests.faults.fork_db_worker qless_worker <options>` with the test settings and
FORK_DB_LEDGER set. Before handing over to Django's command line (exactly what manage.py does)
it runs an ORM query, and after every fork the supervisor runs another one (the
django-tasks-scheduler #393 trigger: maintenance code in the parent reopens its connection).
Each `before_fork` appends a JSON line to the ledger saying whether the supervisor's
connection was open when the hook started and whether any was still open when it returned.
The job `make_user` writes a row through the ORM in the forked child.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from django_qless import job

__all__ = ["QUEUE", "main", "make_user"]

QUEUE = "forkdb"


# An explicit name: run as `-m`, this module is __main__ and would register "__main__.make_user".
@job(queue=QUEUE, name="forkdb.make_user")
def make_user(n: int) -> int:
    """Create user forkdb-<n> (first name: this child's pid) through the ORM; return the pid."""
    from django.contrib.auth.models import User

    User.objects.create(username=f"forkdb-{n}", first_name=str(os.getpid()))
    return os.getpid()


def _record(**row: Any) -> None:
    fd = os.open(os.environ["FORK_DB_LEDGER"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def _parent_query(when: str) -> None:
    """Run the supervisor's maintenance query and record its result (or its error)."""
    from django.contrib.auth.models import User

    try:
        count = User.objects.filter(username__startswith="forkdb-").count()
        _record(ev="parent_query", when=when, pid=os.getpid(), count=count)
    except Exception as exc:
        _record(ev="parent_error", when=when, pid=os.getpid(), error=repr(exc)[:300])


def _instrument() -> None:
    """Wrap the Django hooks so the supervisor queries between forks and we see the closes."""
    from django.db import connections

    from django_qless.hooks import DjangoWorkerHooks

    original_before = DjangoWorkerHooks.before_fork
    original_after = DjangoWorkerHooks.after_fork_parent

    def before_fork(self: DjangoWorkerHooks) -> None:
        open_before = connections["default"].connection is not None
        original_before(self)
        still_open = [c.alias for c in connections.all() if c.connection is not None]
        _record(ev="before_fork", pid=os.getpid(), open_before=open_before, open_after=still_open)

    def after_fork_parent(self: DjangoWorkerHooks, pid: int) -> None:
        original_after(self, pid)
        _parent_query(f"after fork of {pid}")

    DjangoWorkerHooks.before_fork = before_fork  # type: ignore[method-assign]
    DjangoWorkerHooks.after_fork_parent = after_fork_parent  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    """Set Django up, query, instrument the hooks and run the management command."""
    import django
    from django.core.management import execute_from_command_line

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.app.settings")
    django.setup()
    _instrument()
    _parent_query("startup")
    try:
        execute_from_command_line(["manage.py", *argv])
    finally:
        _parent_query("exit")


if __name__ == "__main__":
    main(sys.argv[1:])
