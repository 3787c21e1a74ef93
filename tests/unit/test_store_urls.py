"""One parser of store URLs behind the API, `ratekeeper simulate` and `ratekeeper serve`.

Each URL below is accepted or refused, with the same words, by all three.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratekeeper import ConfigError, MemoryStore
from ratekeeper.cli import main
from ratekeeper.service._server import StoreConfigError
from ratekeeper.service._server import open_store as service_store
from ratekeeper.stores import open_store
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore

GOOD = ["memory://", "MEMORY://", "memory://?max_keys=5", "redis://127.0.0.1:1/0",
        "rediss://127.0.0.1:1/0", "unix:///tmp/nowhere.sock", "redis+cluster://127.0.0.1:1"]
BAD = {
    "mongodb://x": "unknown store URL scheme 'mongodb'",
    "memory": "not a store URL",
    "127.0.0.1:6379": "not a store URL",
    "memory://host": "a memory store has no address",
    "memory://?max_keys=x": "max_keys must be a whole number",
    "redis+sentinel://127.0.0.1:1": "needs the master's name",
    "redis://:secret@127.0.0.1:1/0?db=x": "Invalid value for 'db'",  # redis-py's own parser
    "redis://127.0.0.1:port/0": "Port could not be cast",
}


@pytest.mark.parametrize("url", GOOD)
def test_every_form_opens_the_same_kind_of_store_everywhere(url: str) -> None:
    sync, asyn = open_store(url), open_store(url, asyncio=True)
    served, name = service_store(url)
    memory = url.lower().startswith("memory")
    assert isinstance(sync, MemoryStore if memory else RedisStore)
    assert isinstance(asyn, MemoryStore if memory else AsyncRedisStore)
    assert type(served) is type(asyn) and name == ("memory" if memory else url)


def test_max_keys_reaches_the_memory_store() -> None:
    assert open_store("memory://?max_keys=5").max_keys == 5
    assert open_store(None, max_keys=7).max_keys == 7


@pytest.mark.parametrize(("url", "words"), BAD.items())
def test_a_bad_url_is_refused_with_the_same_words_everywhere(url: str, words: str,
                                                             tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    with pytest.raises(ConfigError, match=words) as api:
        open_store(url)
    with pytest.raises(StoreConfigError) as service:
        service_store(url)
    assert str(api.value) in str(service.value)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"t": 0}) + "\n", encoding="utf-8")
    assert main(["simulate", "gcra", "--rate", "1/s", "--trace", str(trace), "--store", url]) == 2
    err = capsys.readouterr().err
    assert str(api.value) in err and "Traceback" not in err


@pytest.mark.parametrize("url", ["mongodb://user:hunter2@db:27017",
                                 "redis://user:hunter2@127.0.0.1:1/0?db=x"])
def test_a_password_never_reaches_an_error_message(url: str) -> None:
    with pytest.raises(ConfigError) as e:
        open_store(url)
    assert "hunter2" not in str(e.value) and "user:***@" in str(e.value)
