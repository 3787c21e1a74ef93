"""envoyproxy/ratelimit's environment settings read by ``ratekeeper serve`` (issue 32, item
2; the list is its src/settings/settings.go): each one with a meaning here is honoured (a
flag given wins), and one asking for what ratekeeper does not do is refused naming it, its
value and what to do instead. docs/service.md's table lists every setting.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.service._cli import add_serve, go_settings
from ratekeeper.service._server import _loader

UPSTREAM = Path(__file__).parent / "envoy_configs" / "upstream"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve(p)
    return p.parse_args(list(argv))


def test_go_listener_and_log_settings_fill_what_no_flag_gave() -> None:
    env = {"HOST": "0.0.0.0", "PORT": "9080", "GRPC_PORT": "9081", "LOG_LEVEL": "WARN",
           "LOG_FORMAT": "text", "GRPC_UDS": "/run/rl.sock"}
    args = _args("--grpc-port", "7000")
    go_settings(args, env)
    assert (args.host, args.http_port, args.grpc_port) == ("0.0.0.0", 9080, 7000)
    assert (args.log_level, args.log_format, str(args.grpc_unix)) == \
        ("warning", "text", "/run/rl.sock")


def test_no_go_settings_leave_ratekeepers_defaults() -> None:
    args = _args()
    assert go_settings(args, {}) == (False, False)
    assert (args.host, args.http_port, args.grpc_port, args.log_level, args.log_format,
            args.config, args.store) == ("127.0.0.1", 8080, 8081, "info", "json", None, None)


def test_go_runtime_and_redis_settings_become_config_and_store() -> None:
    args = _args()
    go_settings(args, {"RUNTIME_ROOT": "/srv/runtime_data/current",
                       "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "tcp",
                       "REDIS_URL": "redis.internal:6379", "REDIS_AUTH": "s3cr/t",
                       "REDIS_TLS": "true"})
    assert args.config == Path("/srv/runtime_data/current/ratelimit/config")
    assert args.store == "rediss://:s3cr%2Ft@redis.internal:6379"
    unix = _args()
    go_settings(unix, {"REDIS_URL": "/var/run/nutcracker/ratelimit.sock"})
    assert unix.store == "unix:///var/run/nutcracker/ratelimit.sock"


@pytest.mark.parametrize(("env", "message"), [
    ({"QUOTA_MODE": "true"}, r"QUOTA_MODE='true' cannot be honoured: global quota mode"),
    ({"BACKEND_TYPE": "memcache"}, r"BACKEND_TYPE='memcache' cannot be honoured"),
    ({"REDIS_PERSECOND": "true"}, r"REDIS_PERSECOND='true'"),
    ({"GRPC_HOST": "10.0.0.1"}, r"GRPC_HOST='10.0.0.1' differs"),
    ({"PORT": "http"}, r"PORT: not a port number: 'http'"),
    ({"LOG_LEVEL": "loud"}, r"LOG_LEVEL='loud' is not a log level"),
    ({"SHADOW_MODE": "yes"}, r"SHADOW_MODE='yes' is not a boolean"),
])
def test_go_setting_that_cannot_be_honoured_is_refused_naming_it_and_the_fix(
        env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        go_settings(_args(), env)


def test_go_setting_at_its_go_default_is_accepted() -> None:
    assert go_settings(_args(), {"QUOTA_MODE": "false", "BACKEND_TYPE": "redis",
                                 "REDIS_TYPE": "single"}) == (False, False)


def test_shadow_mode_setting_turns_global_shadow_mode_on_for_a_yaml_config() -> None:
    """envoyproxy/ratelimit's SHADOW_MODE (test/service/ratelimit_test.go::
    TestServiceGlobalShadowMode's setting) for a YAML deployment."""
    env = {"SHADOW_MODE": "true"}
    go = go_settings(_args(), env)
    holder = PolicyHolder(UPSTREAM / "basic_config.yaml",
                          loader=_loader(None, shadow_mode=go.shadow_mode))
    assert holder.current.settings.shadow_mode is True


def test_merge_domain_config_setting_joins_a_domain_given_in_two_files(tmp_path: Path) -> None:
    """envoyproxy/ratelimit test/config/config_test.go::TestMergeDomainConfigs's files,
    served with MERGE_DOMAIN_CONFIG=true (without it, a duplicate domain is refused)."""
    for name in ("merge_domain_key1.yaml", "merge_domain_key2.yaml"):
        shutil.copy(UPSTREAM / name, tmp_path / name)
    go = go_settings(_args(), {"MERGE_DOMAIN_CONFIG": "true"})
    holder = PolicyHolder(tmp_path, loader=_loader(None, merge_domains=go.merge_domains))
    rules = {r.name for r in holder.current.domains["test-domain"].rules}
    assert {"key1_value1", "key2_value2"} <= rules
