"""The queue dashboard's views, one module per page (see ``django_qless.urls``)."""

__all__: list[str] = []
