"""The probes of bundle_cost.py: each stops where it says and leaves no data behind."""

from __future__ import annotations

import time

import pytest
import redis
from bundle_cost import COMMANDS, variants


@pytest.mark.parametrize("mode", ["bundle", "full"])
def test_build_and_loader_probes_stop_before_the_command(redis_url: str, mode: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.flushdb()
    for command in COMMANDS:
        texts = variants(command, mode)
        assert r.eval(texts["build"], 0) == 1
        assert r.eval(texts["loaders"], 0) == 1
        assert r.keys("*") == [], command  # nothing ran: no key written
    # The loader probe runs the loaders: one that named no route would fail here.
    broken = variants("put", mode)["loaders"].replace(" put=(", " nope=(")
    with pytest.raises(redis.ResponseError):
        r.eval(broken, 0)
    # The call itself is the command's.
    assert r.eval(variants("put", mode)["call"], 0, "put", repr(time.time()), "", "q", "j1",
                  "K", "{}", "0") == "j1"
    r.flushdb()
    r.close()
