from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RoleBinding(_message.Message):
    __slots__ = ("namespace", "role")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    role: str
    def __init__(self, namespace: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("kind", "name", "token_id", "roles")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    token_id: str
    roles: _containers.RepeatedCompositeFieldContainer[RoleBinding]
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., token_id: _Optional[str] = ..., roles: _Optional[_Iterable[_Union[RoleBinding, _Mapping]]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("subject", "ttl_seconds", "kind")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    subject: str
    ttl_seconds: float
    kind: str
    def __init__(self, subject: _Optional[str] = ..., ttl_seconds: _Optional[float] = ..., kind: _Optional[str] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("token_id", "subject", "kind", "created_by", "issued_unix", "expires_unix", "revoked_unix")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ISSUED_UNIX_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_FIELD_NUMBER: _ClassVar[int]
    REVOKED_UNIX_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    subject: str
    kind: str
    created_by: str
    issued_unix: float
    expires_unix: float
    revoked_unix: float
    def __init__(self, token_id: _Optional[str] = ..., subject: _Optional[str] = ..., kind: _Optional[str] = ..., created_by: _Optional[str] = ..., issued_unix: _Optional[float] = ..., expires_unix: _Optional[float] = ..., revoked_unix: _Optional[float] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "info")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    token: str
    info: TokenInfo
    def __init__(self, token: _Optional[str] = ..., info: _Optional[_Union[TokenInfo, _Mapping]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id",)
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    def __init__(self, token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: TokenInfo
    def __init__(self, info: _Optional[_Union[TokenInfo, _Mapping]] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("job_id", "since_unix", "limit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    since_unix: float
    limit: int
    def __init__(self, job_id: _Optional[str] = ..., since_unix: _Optional[float] = ..., limit: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("time_unix", "principal", "method", "job_id", "namespace", "result", "detail")
    TIME_UNIX_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    time_unix: float
    principal: str
    method: str
    job_id: str
    namespace: str
    result: str
    detail: str
    def __init__(self, time_unix: _Optional[float] = ..., principal: _Optional[str] = ..., method: _Optional[str] = ..., job_id: _Optional[str] = ..., namespace: _Optional[str] = ..., result: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ...) -> None: ...
