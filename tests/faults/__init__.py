"""Fault-injection suite (reliability.md §b). Run: `pytest -m fault tests/faults`.

Catalogue map (FI-nn -> test): 02, 04, 06, 07 (Redis unreachable at TERM: closed and
half-open), 08, 10, 11, 16, 18 (worker start warning), 24 (with FI-01's history/retry
checks), 26 in test_worker_faults; 05, 12, 13, 15, 17, 18, 23,
27, 28 in test_engine_faults; 14 in test_contention (CI: 4 processes x 5 threads, 2,000
jobs; QLESS_FI14_FULL=1 for 50 x 20, 50,000); 19, 20 in test_connection_faults; 25 in
test_retention (CI: 5,000 completed; QLESS_FI25_FULL=1 for 200,000); 29 in
test_sentinel; 21 (200 forks of a supervisor that used the ORM) in test_fi21_fork_db.
FI-01, 03, 07 (reachable Redis), 09 are covered by tests/worker (test_faults.py,
test_lifecycle.py) and not repeated here; FI-22 (on_commit) belongs to tests/app.
FI-11's `everysec` variant is documentation only (up to ~1 s of acknowledged writes may
be lost).
"""
