"""The invariant auditor: check that every job and every index agree, repair what is safe.

`python -m django_qless.core.audit --url URL [--fix] [--json]` runs it from the command line.
"""

from .auditor import AuditReport, Reads, Violation, audit, audit_all

__all__ = ["AuditReport", "Reads", "Violation", "audit", "audit_all"]
