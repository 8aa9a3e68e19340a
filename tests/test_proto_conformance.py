"""Our protobuf schema is the upstream YDB schema under other package names.

Both the official ``ydb`` package's generated modules and ours are imported in this one process,
which alone proves the descriptor pools do not collide. Then every message and enum we define is
compared, field by field, with the upstream descriptor of the same name, and a fully populated
message of every type crosses between the two in both directions.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.unknown_fields import UnknownFieldSet

import ydb_topic_async._proto as ours_pkg

pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    # A message's DESCRIPTOR is typed as either backend's descriptor (upb's is the one at run time).
    from google._upb._message import FieldDescriptor as UpbFieldDescriptor

upstream_common = pytest.importorskip("ydb._grpc.common")

OUR_PREFIX = "YdbTopicAsync"
UPSTREAM_PREFIX = "Ydb"


NOT_YDB = {"iam_token_service_pb2"}
"""Our modules of other services' protocols: Yandex Cloud's IAM token service, whose agreement
with the cloud's schema is proven by wire vectors in tests/credentials/test_cloud_credentials.py."""


def _our_modules() -> list[Any]:
    return [
        importlib.import_module(f"{ours_pkg.__name__}.{m.name}")
        for m in pkgutil.iter_modules(ours_pkg.__path__)
        if m.name.endswith("_pb2") and m.name not in NOT_YDB
    ]


def _upstream_name(our_full_name: str) -> str:
    assert our_full_name.startswith(OUR_PREFIX), our_full_name
    return UPSTREAM_PREFIX + our_full_name[len(OUR_PREFIX) :]


def _walk_messages(desc: Descriptor) -> Iterator[Descriptor]:
    yield desc
    for nested in desc.nested_types:
        yield from _walk_messages(nested)


def _all_ours() -> tuple[list[Descriptor], list[EnumDescriptor]]:
    messages: list[Descriptor] = []
    enums: list[EnumDescriptor] = []
    for module in _our_modules():
        fd = module.DESCRIPTOR
        enums.extend(fd.enum_types_by_name.values())
        for top in fd.message_types_by_name.values():
            for m in _walk_messages(top):
                messages.append(m)
                enums.extend(m.enum_types)
    return messages, enums


OUR_MESSAGES, OUR_ENUMS = _all_ours()
POOL = descriptor_pool.Default()


def _upstream_pool_loaded() -> None:
    # Importing the official protos registers them in the default pool.
    for name in ("ydb_topic_pb2", "ydb_query_pb2", "ydb_discovery_pb2", "ydb_auth_pb2", "ydb_scheme_pb2"):
        importlib.import_module(f"ydb._grpc.common.protos.{name}")


_upstream_pool_loaded()


def test_every_generated_module_is_covered() -> None:
    names = {m.DESCRIPTOR.name.rsplit("/", 1)[-1] for m in _our_modules()}
    assert {"ydb_topic.proto", "ydb_operation.proto", "ydb_status_codes.proto", "ydb_issue_message.proto",
            "ydb_scheme.proto", "ydb_discovery.proto", "ydb_auth.proto", "ydb_query.proto"} <= names
    assert len(OUR_MESSAGES) > 150
    # Our descriptors live under our own package; none shadows an upstream name.
    assert all(m.full_name.startswith(OUR_PREFIX + ".") for m in OUR_MESSAGES)


def _field_signature(f: FieldDescriptor, our: bool) -> tuple[Any, ...]:
    type_name = None
    if f.message_type is not None:
        type_name = f.message_type.full_name
    elif f.enum_type is not None:
        type_name = f.enum_type.full_name
    if our and type_name is not None and type_name.startswith(OUR_PREFIX):
        type_name = _upstream_name(type_name)
    oneof = f.containing_oneof.name if f.containing_oneof is not None else None
    return (f.number, f.type, f.is_repeated, f.has_presence, type_name, oneof)


@pytest.mark.parametrize("ours", OUR_MESSAGES, ids=lambda d: d.full_name)
def test_message_matches_upstream(ours: Descriptor) -> None:
    upstream = POOL.FindMessageTypeByName(_upstream_name(ours.full_name))
    our_fields = {f.name: _field_signature(f, True) for f in ours.fields}
    up_fields = {f.name: _field_signature(f, False) for f in upstream.fields}
    assert our_fields == up_fields
    assert sorted(o.name for o in ours.oneofs) == sorted(o.name for o in upstream.oneofs)
    assert ours.GetOptions().map_entry == upstream.GetOptions().map_entry


@pytest.mark.parametrize("ours", OUR_ENUMS, ids=lambda d: d.full_name)
def test_enum_matches_upstream(ours: EnumDescriptor) -> None:
    upstream = POOL.FindEnumTypeByName(_upstream_name(ours.full_name))
    assert [(v.name, v.number) for v in ours.values] == [(v.name, v.number) for v in upstream.values]


def _populate(msg: Message, depth: int = 0) -> None:
    """Set every field (one member of each oneof, rotating) to a non-default value."""
    seen_oneofs: set[str] = set()
    for f in msg.DESCRIPTOR.fields:
        oneof = f.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if oneof.name in seen_oneofs:
                continue
            seen_oneofs.add(oneof.name)
            f = oneof.fields[depth % len(oneof.fields)]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key_f, val_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            key = _scalar(key_f)
            mapping = getattr(msg, f.name)
            if val_f.message_type is not None:
                if depth < 3:
                    _populate(mapping[key], depth + 1)
            else:
                mapping[key] = _scalar(val_f)
            continue
        if f.message_type is not None:
            if depth >= 3:
                continue
            if f.is_repeated:
                _populate(getattr(msg, f.name).add(), depth + 1)
            else:
                _populate(getattr(msg, f.name), depth + 1)
                getattr(msg, f.name).SetInParent()
            continue
        value = _scalar(f)
        if f.is_repeated:
            getattr(msg, f.name).extend([value, value])
        else:
            setattr(msg, f.name, value)


def _scalar(f: FieldDescriptor | UpbFieldDescriptor) -> Any:
    if f.enum_type is not None:
        values = [v.number for v in f.enum_type.values]
        return values[-1]
    return {
        FieldDescriptor.TYPE_STRING: f"s{f.number}",
        FieldDescriptor.TYPE_BYTES: bytes([f.number % 256, 7]),
        FieldDescriptor.TYPE_BOOL: True,
        FieldDescriptor.TYPE_DOUBLE: 1.5 + f.number,
        FieldDescriptor.TYPE_FLOAT: 2.5,
    }.get(f.type, f.number + 3)


@pytest.mark.parametrize("ours", [m for m in OUR_MESSAGES if not m.GetOptions().map_entry], ids=lambda d: d.full_name)
def test_populated_message_round_trips_both_ways(ours: Descriptor) -> None:
    our_cls = GetMessageClass(ours)
    up_cls = GetMessageClass(POOL.FindMessageTypeByName(_upstream_name(ours.full_name)))
    for depth in range(2):  # two passes select different oneof members
        original = our_cls()
        _populate(original, depth)
        wire = original.SerializeToString(deterministic=True)
        upstream = up_cls.FromString(wire)
        assert upstream.SerializeToString(deterministic=True) == wire
        assert len(UnknownFieldSet(upstream)) == 0
        assert len(upstream.ListFields()) == len(original.ListFields())
        assert our_cls.FromString(upstream.SerializeToString(deterministic=True)) == original


def test_changing_a_field_number_is_detected() -> None:
    """The comparison is sensitive: a message with one renumbered field no longer matches."""
    ours = POOL.FindMessageTypeByName("YdbTopicAsync.Topic.StreamWriteMessage.InitRequest")
    upstream = POOL.FindMessageTypeByName("Ydb.Topic.StreamWriteMessage.InitRequest")
    sigs = {f.name: _field_signature(f, True) for f in ours.fields}
    path_sig = sigs["path"]
    sigs["path"] = (path_sig[0] + 100, *path_sig[1:])
    assert sigs != {f.name: _field_signature(f, False) for f in upstream.fields}
