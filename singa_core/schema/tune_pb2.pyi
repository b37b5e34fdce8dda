from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TuneProto(_message.Message):
    __slots__ = ("name", "param", "objective", "budget", "sampler", "early_stopping")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOPPING_FIELD_NUMBER: _ClassVar[int]
    name: str
    param: _containers.RepeatedCompositeFieldContainer[ParamSpace]
    objective: Objective
    budget: Budget
    sampler: Sampler
    early_stopping: EarlyStopping
    def __init__(self, name: _Optional[str] = ..., param: _Optional[_Iterable[_Union[ParamSpace, _Mapping]]] = ..., objective: _Optional[_Union[Objective, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., sampler: _Optional[_Union[Sampler, _Mapping]] = ..., early_stopping: _Optional[_Union[EarlyStopping, _Mapping]] = ...) -> None: ...

class ParamSpace(_message.Message):
    __slots__ = ("field", "choice", "uniform", "log_uniform", "int", "int_log_uniform")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_FIELD_NUMBER: _ClassVar[int]
    LOG_UNIFORM_FIELD_NUMBER: _ClassVar[int]
    INT_FIELD_NUMBER: _ClassVar[int]
    INT_LOG_UNIFORM_FIELD_NUMBER: _ClassVar[int]
    field: str
    choice: Choice
    uniform: Range
    log_uniform: Range
    int: IntRange
    int_log_uniform: IntRange
    def __init__(self, field: _Optional[str] = ..., choice: _Optional[_Union[Choice, _Mapping]] = ..., uniform: _Optional[_Union[Range, _Mapping]] = ..., log_uniform: _Optional[_Union[Range, _Mapping]] = ..., int: _Optional[_Union[IntRange, _Mapping]] = ..., int_log_uniform: _Optional[_Union[IntRange, _Mapping]] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, value: _Optional[_Iterable[str]] = ...) -> None: ...

class Range(_message.Message):
    __slots__ = ("low", "high", "step")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    step: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ..., step: _Optional[float] = ...) -> None: ...

class IntRange(_message.Message):
    __slots__ = ("low", "high", "step")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    low: int
    high: int
    step: int
    def __init__(self, low: _Optional[int] = ..., high: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class Objective(_message.Message):
    __slots__ = ("metric", "phase", "at", "direction")
    class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TEST: _ClassVar[Objective.Phase]
        VALIDATION: _ClassVar[Objective.Phase]
    TEST: Objective.Phase
    VALIDATION: Objective.Phase
    class At(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LAST: _ClassVar[Objective.At]
        BEST: _ClassVar[Objective.At]
    LAST: Objective.At
    BEST: Objective.At
    class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        AUTO: _ClassVar[Objective.Direction]
        MAXIMIZE: _ClassVar[Objective.Direction]
        MINIMIZE: _ClassVar[Objective.Direction]
    AUTO: Objective.Direction
    MAXIMIZE: Objective.Direction
    MINIMIZE: Objective.Direction
    METRIC_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    metric: str
    phase: Objective.Phase
    at: Objective.At
    direction: Objective.Direction
    def __init__(self, metric: _Optional[str] = ..., phase: _Optional[_Union[Objective.Phase, str]] = ..., at: _Optional[_Union[Objective.At, str]] = ..., direction: _Optional[_Union[Objective.Direction, str]] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("trials", "train_steps", "trial_seconds", "study_seconds")
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_STEPS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STUDY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    trials: int
    train_steps: int
    trial_seconds: float
    study_seconds: float
    def __init__(self, trials: _Optional[int] = ..., train_steps: _Optional[int] = ..., trial_seconds: _Optional[float] = ..., study_seconds: _Optional[float] = ...) -> None: ...

class Sampler(_message.Message):
    __slots__ = ("kind", "startup_trials")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TPE: _ClassVar[Sampler.Kind]
        RANDOM: _ClassVar[Sampler.Kind]
    TPE: Sampler.Kind
    RANDOM: Sampler.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TRIALS_FIELD_NUMBER: _ClassVar[int]
    kind: Sampler.Kind
    startup_trials: int
    def __init__(self, kind: _Optional[_Union[Sampler.Kind, str]] = ..., startup_trials: _Optional[int] = ...) -> None: ...

class EarlyStopping(_message.Message):
    __slots__ = ("rule", "min_steps", "startup_trials", "reduction_factor")
    class Rule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MEDIAN: _ClassVar[EarlyStopping.Rule]
        ASHA: _ClassVar[EarlyStopping.Rule]
        HYPERBAND: _ClassVar[EarlyStopping.Rule]
        NONE: _ClassVar[EarlyStopping.Rule]
    MEDIAN: EarlyStopping.Rule
    ASHA: EarlyStopping.Rule
    HYPERBAND: EarlyStopping.Rule
    NONE: EarlyStopping.Rule
    RULE_FIELD_NUMBER: _ClassVar[int]
    MIN_STEPS_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TRIALS_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    rule: EarlyStopping.Rule
    min_steps: int
    startup_trials: int
    reduction_factor: int
    def __init__(self, rule: _Optional[_Union[EarlyStopping.Rule, str]] = ..., min_steps: _Optional[int] = ..., startup_trials: _Optional[int] = ..., reduction_factor: _Optional[int] = ...) -> None: ...
