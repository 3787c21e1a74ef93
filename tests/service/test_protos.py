"""The committed Python modules of Envoy's rate limit protocol are what scripts/gen_protos.sh
generates from the .proto files beside them, and those keep Envoy's names and numbers."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.service.proto.envoy.config.core.v3 import base_pb2
from ratekeeper.service.proto.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2

REPO = Path(__file__).resolve().parent.parent.parent
PROTO = REPO / "src" / "ratekeeper" / "service" / "proto"


def _serialized_descriptor(text: str) -> bytes:
    m = re.search(r"AddSerializedFile\((b'.*?')\)\n", text, re.S)
    assert m is not None
    out = ast.literal_eval(m.group(1))  # a bytes literal written by protoc
    assert isinstance(out, bytes)
    return out


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None or shutil.which("bash") is None,
                    reason="needs grpcio-tools and bash")
def test_generated_modules_match_the_proto_files(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(REPO / "scripts" / "gen_protos.sh"), str(tmp_path)], cwd=REPO,
                   env=env, check=True, capture_output=True, timeout=120)
    fresh = tmp_path / "ratekeeper" / "service" / "proto"
    committed = sorted(p.relative_to(PROTO) for p in PROTO.rglob("*_pb2*.py*"))
    generated = sorted(p.relative_to(fresh) for p in fresh.rglob("*_pb2*.py*"))
    assert committed == generated and len(committed) == 9
    for rel in committed:
        ours, theirs = (PROTO / rel).read_text(), (fresh / rel).read_text()
        if rel.suffix == ".py" and not rel.stem.endswith("_grpc"):
            # The descriptor (every name and number) must match whatever protoc version ran.
            assert _serialized_descriptor(ours) == _serialized_descriptor(theirs), rel
        version = re.search(r"Protobuf Python Version: (\S+)|GRPC_GENERATED_VERSION = '(\S+)'",
                            theirs)
        if version is None or version.group(0) in ours:
            assert ours == theirs, f"{rel} differs: run scripts/gen_protos.sh"
    for init in fresh.rglob("__init__.py"):
        assert (PROTO / init.relative_to(fresh)).exists()


def test_names_and_field_numbers_are_envoys() -> None:
    def fields(msg: object) -> dict[str, int]:
        return {f.name: f.number for f in msg.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert rls_pb2.DESCRIPTOR.package == "envoy.service.ratelimit.v3"
    svc = rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"]
    assert svc.full_name == "envoy.service.ratelimit.v3.RateLimitService"
    assert [m.name for m in svc.methods] == ["ShouldRateLimit"]
    assert fields(rls_pb2.RateLimitRequest) == {"domain": 1, "descriptors": 2, "hits_addend": 3}
    resp = rls_pb2.RateLimitResponse
    assert fields(resp) == {"overall_code": 1, "statuses": 2, "response_headers_to_add": 3,
                            "request_headers_to_add": 4, "raw_body": 5, "dynamic_metadata": 6,
                            "quota": 7}
    assert fields(resp.DescriptorStatus) == {"code": 1, "current_limit": 2, "limit_remaining": 3,
                                             "duration_until_reset": 4, "quota": 5}
    assert fields(resp.RateLimit) == {"name": 3, "requests_per_unit": 1, "unit": 2}
    assert fields(resp.Quota) == {"requests": 1, "valid_until": 2, "id": 3}
    assert dict(resp.RateLimit.Unit.items()) == {
        "UNKNOWN": 0, "SECOND": 1, "MINUTE": 2, "HOUR": 3, "DAY": 4, "WEEK": 7, "MONTH": 5,
        "YEAR": 6}
    assert dict(resp.Code.items()) == {"UNKNOWN": 0, "OK": 1, "OVER_LIMIT": 2}
    d = ratelimit_pb2.RateLimitDescriptor
    assert d.DESCRIPTOR.full_name == "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor"
    assert fields(d) == {"entries": 1, "limit": 2, "hits_addend": 3, "is_negative_hits": 4}
    assert fields(d.Entry) == {"key": 1, "value": 2}
    assert fields(d.RateLimitOverride) == {"requests_per_unit": 1, "unit": 2}
    assert d.DESCRIPTOR.fields_by_name["hits_addend"].message_type.full_name == \
        "google.protobuf.UInt64Value"
    assert fields(base_pb2.HeaderValue) == {"key": 1, "value": 2, "raw_value": 3}
