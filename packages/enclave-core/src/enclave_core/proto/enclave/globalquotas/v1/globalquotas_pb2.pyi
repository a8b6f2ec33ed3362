from enclave_core.proto.enclave.snapshot.v1 import snapshot_pb2 as _snapshot_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
