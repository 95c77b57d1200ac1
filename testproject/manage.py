#!/usr/bin/env python
"""Run administrative tasks for the django-qless demo project."""

import os
import sys
from pathlib import Path


def main() -> None:
    """Run the command line, with the repository on sys.path."""
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    sys.path.insert(1, str(here.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
