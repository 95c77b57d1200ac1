"""An app whose ``@job`` lives in ``tasks.py``, which no worker imports (check W061)."""
