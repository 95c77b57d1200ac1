"""Settings for the pytest-django suites (tests/app, tests/ui, tests/worker).

QLESS points at the session's private Redis: tests/app/conftest.py overrides it per test
with the ``redis_url`` fixture; subprocesses (workers, commands) get it through the
``QLESS_URL`` environment variable, which django_qless/conf reads as the default alias's URL.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = "django-qless-tests-not-secret"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Django 6 ships django.tasks; on 5.2 the django-tasks backport provides it.
    *([] if find_spec("django.tasks") else ["django_tasks"]),
    "django_qless",
    "tests.app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.app.urls"

# The default hasher spends ~0.4 s of CPU per password on purpose; the suites create users
# and log in hundreds of times, and no test is about the hash.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        # In memory unless a subprocess test gives a file (never a file in the tree).
        "NAME": os.environ.get("QLESS_TEST_DB", ":memory:"),
        "TEST": {"NAME": os.environ.get("QLESS_TEST_DB_TEST") or None},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
STATIC_URL = "/static/"

QLESS = {
    "default": {"URL": os.environ.get("QLESS_URL", "redis://localhost:6379/0")},
    "JOB_MODULES": ["tests.app.legacy_jobs"],
}
# Subprocess tests that check the webhook receiver point it at a local server.
if os.environ.get("QLESS_TEST_WEBHOOK"):
    QLESS["RECEIVERS"] = {"WEBHOOK_URL": os.environ["QLESS_TEST_WEBHOOK"],
                          "WEBHOOK_EVENTS": ["completed", "failed"]}
# Subprocess tests of cron schedules declare some in settings (JSON).
if os.environ.get("QLESS_TEST_SCHEDULE"):
    QLESS["SCHEDULE"] = json.loads(os.environ["QLESS_TEST_SCHEDULE"])
# "host:port": subprocess tests run the default alias through a Sentinel instead.
if os.environ.get("QLESS_TEST_SENTINEL"):
    _host, _port = os.environ["QLESS_TEST_SENTINEL"].rsplit(":", 1)
    QLESS["default"] = {"SENTINELS": [(_host, int(_port))], "MASTER_NAME": "mymaster"}

TASKS = {
    "default": {
        "BACKEND": "django_qless.tasks_backend.QlessBackend",
        "QUEUES": ["default", "tasks"],
    },
}

# Django 6.1 moved mail configuration to MAILERS (the old EMAIL_* settings warn); the test
# runner swaps the backend for locmem either way.
if find_spec("django.core.mail.deprecation"):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

# Django 6 takes plain addresses (and deprecates pairs); 5.2 needs (name, address) pairs.
ADMINS = ["ops@example.com"] if find_spec("django.tasks") else [("Ops", "ops@example.com")]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "root": {"handlers": ["null"], "level": "WARNING"},
}
