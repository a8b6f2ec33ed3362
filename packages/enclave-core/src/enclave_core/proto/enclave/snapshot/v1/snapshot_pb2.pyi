import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Snapshot(_message.Message):
    __slots__ = ("kind", "revision", "incarnation", "payload", "produced_at", "heartbeat", "items", "removed", "delta", "more", "unconfirmed")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_AT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    UNCONFIRMED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    revision: int
    incarnation: str
    payload: bytes
    produced_at: _timestamp_pb2.Timestamp
    heartbeat: bool
    items: _containers.RepeatedCompositeFieldContainer[Item]
    removed: _containers.RepeatedScalarFieldContainer[str]
    delta: bool
    more: bool
    unconfirmed: bool
    def __init__(self, kind: _Optional[str] = ..., revision: _Optional[int] = ..., incarnation: _Optional[str] = ..., payload: _Optional[bytes] = ..., produced_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat: _Optional[bool] = ..., items: _Optional[_Iterable[_Union[Item, _Mapping]]] = ..., removed: _Optional[_Iterable[str]] = ..., delta: _Optional[bool] = ..., more: _Optional[bool] = ..., unconfirmed: _Optional[bool] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("subscriber", "kinds", "heartbeat_seconds", "itemized")
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ITEMIZED_FIELD_NUMBER: _ClassVar[int]
    subscriber: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    heartbeat_seconds: int
    itemized: bool
    def __init__(self, subscriber: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., heartbeat_seconds: _Optional[int] = ..., itemized: _Optional[bool] = ...) -> None: ...
