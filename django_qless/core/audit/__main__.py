"""Run the auditor's command line: `python -m django_qless.core.audit`."""

import sys

from .cli import main

sys.exit(main())
