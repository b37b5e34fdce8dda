from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf.internal import python_message as _python_message
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MsgType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kGet: _ClassVar[MsgType]
    kPut: _ClassVar[MsgType]
    kSync: _ClassVar[MsgType]
    kUpdate: _ClassVar[MsgType]
    kSyncRequest: _ClassVar[MsgType]
    kSyncResponse: _ClassVar[MsgType]
    kStop: _ClassVar[MsgType]
    kData: _ClassVar[MsgType]
    kRGet: _ClassVar[MsgType]
    kRUpdate: _ClassVar[MsgType]
    kConnect: _ClassVar[MsgType]
    kMetric: _ClassVar[MsgType]

class EntityType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kWorkerParam: _ClassVar[EntityType]
    kWorkerLayer: _ClassVar[EntityType]
    kServer: _ClassVar[EntityType]
    kStub: _ClassVar[EntityType]
    kRuntime: _ClassVar[EntityType]

class ConnectionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kOneToOne: _ClassVar[ConnectionType]
    kOneToAll: _ClassVar[ConnectionType]
    kOneToMany: _ClassVar[ConnectionType]
kGet: MsgType
kPut: MsgType
kSync: MsgType
kUpdate: MsgType
kSyncRequest: MsgType
kSyncResponse: MsgType
kStop: MsgType
kData: MsgType
kRGet: MsgType
kRUpdate: MsgType
kConnect: MsgType
kMetric: MsgType
kWorkerParam: EntityType
kWorkerLayer: EntityType
kServer: EntityType
kStub: EntityType
kRuntime: EntityType
kOneToOne: ConnectionType
kOneToAll: ConnectionType
kOneToMany: ConnectionType

class RecordProto(_message.Message):
    __slots__ = ("shape", "label", "pixel", "data")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PIXEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    label: int
    pixel: bytes
    data: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., label: _Optional[int] = ..., pixel: _Optional[bytes] = ..., data: _Optional[_Iterable[float]] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("type", "user_type", "image")
    Extensions: _python_message._ExtensionDict
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        kSingleLabelImage: _ClassVar[Record.Type]
    kSingleLabelImage: Record.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    type: Record.Type
    user_type: str
    image: RecordProto
    def __init__(self, type: _Optional[_Union[Record.Type, str]] = ..., user_type: _Optional[str] = ..., image: _Optional[_Union[RecordProto, _Mapping]] = ...) -> None: ...

class BlobProto(_message.Message):
    __slots__ = ("shape", "data")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., data: _Optional[_Iterable[float]] = ...) -> None: ...

class BlobProtos(_message.Message):
    __slots__ = ("id", "version", "name", "blob")
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    id: _containers.RepeatedScalarFieldContainer[int]
    version: _containers.RepeatedScalarFieldContainer[int]
    name: _containers.RepeatedScalarFieldContainer[str]
    blob: _containers.RepeatedCompositeFieldContainer[BlobProto]
    def __init__(self, id: _Optional[_Iterable[int]] = ..., version: _Optional[_Iterable[int]] = ..., name: _Optional[_Iterable[str]] = ..., blob: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ...) -> None: ...

class MetricProto(_message.Message):
    __slots__ = ("name", "count", "val")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    VAL_FIELD_NUMBER: _ClassVar[int]
    name: _containers.RepeatedScalarFieldContainer[str]
    count: _containers.RepeatedScalarFieldContainer[int]
    val: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[_Iterable[str]] = ..., count: _Optional[_Iterable[int]] = ..., val: _Optional[_Iterable[float]] = ...) -> None: ...

class CaffeDatum(_message.Message):
    __slots__ = ("channels", "height", "width", "data", "label", "float_data", "encoded")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    channels: int
    height: int
    width: int
    data: bytes
    label: int
    float_data: _containers.RepeatedScalarFieldContainer[float]
    encoded: bool
    def __init__(self, channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[bytes] = ..., label: _Optional[int] = ..., float_data: _Optional[_Iterable[float]] = ..., encoded: _Optional[bool] = ...) -> None: ...

class CaffeBlob(_message.Message):
    __slots__ = ("num", "channels", "height", "width", "data", "diff")
    NUM_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    num: int
    channels: int
    height: int
    width: int
    data: _containers.RepeatedScalarFieldContainer[float]
    diff: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, num: _Optional[int] = ..., channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., data: _Optional[_Iterable[float]] = ..., diff: _Optional[_Iterable[float]] = ...) -> None: ...

class SingaProto(_message.Message):
    __slots__ = ("zookeeper_host", "log_dir")
    ZOOKEEPER_HOST_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    zookeeper_host: str
    log_dir: str
    def __init__(self, zookeeper_host: _Optional[str] = ..., log_dir: _Optional[str] = ...) -> None: ...
