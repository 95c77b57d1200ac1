"""Enqueueing without ``django_qless`` in INSTALLED_APPS warns once, with what to do."""

from __future__ import annotations

import warnings

import pytest
from django.test import modify_settings

from django_qless import handle
from django_qless.handle import NotInstalledWarning
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_without_the_app_installed_warns_once(monkeypatch):
    monkeypatch.setattr(handle, "_INSTALL_CHECKED", False)
    with modify_settings(INSTALLED_APPS={"remove": ["django_qless"]}):
        with pytest.warns(NotInstalledWarning, match="Add 'django_qless' to INSTALLED_APPS"):
            first = jobs.add.enqueue(1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            second = jobs.add.enqueue(2)  # once per process
    assert first.status == second.status == "enqueued"


def test_enqueue_with_the_app_installed_says_nothing(monkeypatch):
    monkeypatch.setattr(handle, "_INSTALL_CHECKED", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jobs.add.enqueue(1).status == "enqueued"
