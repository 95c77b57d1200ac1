"""`python -m django_qless.core.workers`: the worker CLI."""

import sys

from django_qless.core.worker_cli import main

if __name__ == "__main__":
    sys.exit(main())
