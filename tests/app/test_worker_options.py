"""Worker options are declared once (core/worker_options.py): both command lines, the
``WorkerConfig`` defaults and ``QLESS["WORKER"]`` come from that table."""

from __future__ import annotations

import environ
import pytest

from django_qless.conf import parse
from django_qless.core import worker_cli, worker_options
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.worker_options import OPTIONS, OptionSpec, WorkerConfig
from django_qless.management.commands.qless_worker import Command


def env(**values: str) -> environ.Env:
    e = environ.Env()
    e.ENVIRON = dict(values)
    return e


def flags_of(parser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def django_parser():
    return Command().create_parser("manage.py", "qless_worker")


def test_every_declared_option_is_on_both_command_lines_with_its_default():
    core, django = flags_of(worker_cli.build_parser()), flags_of(django_parser())
    config = WorkerConfig()
    for spec in OPTIONS:
        if spec.cli == "none":
            continue
        assert set(spec.flags) <= core, spec.name
        assert spec.cli == "core" or set(spec.flags) <= django, spec.name
        # sandbox_root's default is computed (the temp dir): None declares "not given".
        if spec.name in WorkerConfig.__dataclass_fields__ and spec.name != "sandbox_root":
            assert getattr(config, spec.name) == spec.default, spec.name


def test_a_new_spec_appears_in_both_command_lines_and_the_settings(monkeypatch):
    probe = OptionSpec("probe_limit", 3, "a probe", ("--probe-limit",), "int", 0,
                       setting="PROBE_LIMIT", setting_minimum=1, env="QLESS_WORKER_PROBE_LIMIT")
    monkeypatch.setattr(worker_options, "OPTIONS", (*OPTIONS, probe))
    assert worker_cli.build_parser().parse_args(["--probe-limit", "4"]).probe_limit == 4
    assert django_parser().parse_args(["--probe-limit", "5"]).probe_limit == 5
    conf, problems = parse({"WORKER": {"PROBE_LIMIT": 2}}, env())
    assert problems == [] and conf.worker.values["probe_limit"] == 2
    conf, problems = parse({}, env(QLESS_WORKER_PROBE_LIMIT="7"))
    assert problems == [] and conf.worker.values["probe_limit"] == 7
    _, problems = parse({"WORKER": {"PROBE_LIMIT": 0}}, env())
    assert [p.key for p in problems] == ["QLESS['WORKER']['PROBE_LIMIT']"]


def test_the_term_grace_comes_from_the_flag_the_setting_or_the_environment():
    assert worker_cli.config_from_args(worker_cli.build_parser().parse_args(
        ["--term-grace", "40", "q"])).term_grace == 40.0
    assert django_parser().parse_args(["--term-grace", "0"]).term_grace == 0.0
    conf, problems = parse({"WORKER": {"TERM_GRACE": 50}}, env())
    assert problems == [] and conf.worker.values["term_grace"] == 50.0
    conf, problems = parse({}, env(QLESS_WORKER_TERM_GRACE="0"))
    assert problems == [] and conf.worker.values["term_grace"] == 0.0
    _, problems = parse({"WORKER": {"TERM_GRACE": -1}}, env())
    assert [p.key for p in problems] == ["QLESS['WORKER']['TERM_GRACE']"]
    assert WorkerConfig().term_grace == 15.0


def test_the_health_file_comes_from_the_option_the_setting_or_the_environment(tmp_path):
    conf, problems = parse({"WORKER": {"HEALTH_FILE": "/run/qless/health"}}, env())
    assert problems == [] and conf.worker.values["health_file"] == "/run/qless/health"
    conf, problems = parse({}, env(QLESS_WORKER_HEALTH_FILE="/tmp/h"))
    assert problems == [] and conf.worker.values["health_file"] == "/tmp/h"
    _, problems = parse({"WORKER": {"HEALTH_FILE": 5}}, env())
    assert [(p.key, p.id) for p in problems] == [("QLESS['WORKER']['HEALTH_FILE']",
                                                  "django_qless.E033")]
    args = django_parser().parse_args(["--health-file", str(tmp_path / "h")])
    assert Command().build_config({**vars(args), "queues": ["q"]}).health_file == str(
        tmp_path / "h")


def test_a_connection_factory_returning_something_else_is_refused_plainly():
    config = WorkerConfig(queues=("q",), connect=lambda: object())
    with pytest.raises(InvalidArgument, match="a client needs a URL, a redis.Redis"):
        config.make_client()
