"""django-qless: a qless-compatible Redis job queue for Django."""

__version__ = "0.1.0"
__all__ = ["__version__"]
