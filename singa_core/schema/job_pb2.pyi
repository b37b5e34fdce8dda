from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf.internal import python_message as _python_message
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AlgType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kBP: _ClassVar[AlgType]
    kCD: _ClassVar[AlgType]
    kBPTT: _ClassVar[AlgType]
    kUserAlg: _ClassVar[AlgType]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kUnknown: _ClassVar[Phase]
    kTrain: _ClassVar[Phase]
    kVal: _ClassVar[Phase]
    kTest: _ClassVar[Phase]
    kPositive: _ClassVar[Phase]
    kNegative: _ClassVar[Phase]
    kForward: _ClassVar[Phase]
    kBackward: _ClassVar[Phase]
    kLoss: _ClassVar[Phase]
    kDeploy: _ClassVar[Phase]
    kAggGrad: _ClassVar[Phase]

class UnrollConnType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kUnrollOneToOne: _ClassVar[UnrollConnType]
    kUnrollOneToAll: _ClassVar[UnrollConnType]
    kUnrollFirstToLast: _ClassVar[UnrollConnType]
    kUnrollCustomized: _ClassVar[UnrollConnType]

class LayerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kCSVInput: _ClassVar[LayerType]
    kImagePreprocess: _ClassVar[LayerType]
    kRecordInput: _ClassVar[LayerType]
    kLMDBData: _ClassVar[LayerType]
    kLabel: _ClassVar[LayerType]
    kMnist: _ClassVar[LayerType]
    kRGBImage: _ClassVar[LayerType]
    kShardData: _ClassVar[LayerType]
    kCharRNN: _ClassVar[LayerType]
    kRNNLabel: _ClassVar[LayerType]
    kOneHot: _ClassVar[LayerType]
    kConvolution: _ClassVar[LayerType]
    kCConvolution: _ClassVar[LayerType]
    kDropout: _ClassVar[LayerType]
    kDummy: _ClassVar[LayerType]
    kInnerProduct: _ClassVar[LayerType]
    kLRN: _ClassVar[LayerType]
    kPooling: _ClassVar[LayerType]
    kCPooling: _ClassVar[LayerType]
    kRBMHid: _ClassVar[LayerType]
    kRBMVis: _ClassVar[LayerType]
    kReLU: _ClassVar[LayerType]
    kSTanh: _ClassVar[LayerType]
    kSigmoid: _ClassVar[LayerType]
    kSoftmax: _ClassVar[LayerType]
    kGRU: _ClassVar[LayerType]
    kEmbedding: _ClassVar[LayerType]
    kActivation: _ClassVar[LayerType]
    kBM: _ClassVar[LayerType]
    kCudnnConv: _ClassVar[LayerType]
    kCudnnPool: _ClassVar[LayerType]
    kCudnnLRN: _ClassVar[LayerType]
    kCudnnSoftmax: _ClassVar[LayerType]
    kCudnnActivation: _ClassVar[LayerType]
    kCudnnBM: _ClassVar[LayerType]
    kEuclideanLoss: _ClassVar[LayerType]
    kSoftmaxLoss: _ClassVar[LayerType]
    kCudnnSoftmaxLoss: _ClassVar[LayerType]
    kAccuracy: _ClassVar[LayerType]
    kArgSort: _ClassVar[LayerType]
    kCSVOutput: _ClassVar[LayerType]
    kRecordOutput: _ClassVar[LayerType]
    kCharRNNOutput: _ClassVar[LayerType]
    kBridgeDst: _ClassVar[LayerType]
    kBridgeSrc: _ClassVar[LayerType]
    kConcate: _ClassVar[LayerType]
    kSlice: _ClassVar[LayerType]
    kSplit: _ClassVar[LayerType]
    kRNNDummy: _ClassVar[LayerType]
    kUserLayer: _ClassVar[LayerType]

class ParamType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kParam: _ClassVar[ParamType]
    kUser: _ClassVar[ParamType]

class InitMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kConstant: _ClassVar[InitMethod]
    kGaussian: _ClassVar[InitMethod]
    kUniform: _ClassVar[InitMethod]
    kGaussianSqrtFanIn: _ClassVar[InitMethod]
    kUniformSqrtFanIn: _ClassVar[InitMethod]
    kUniformSqrtFanInOut: _ClassVar[InitMethod]
    kUserInit: _ClassVar[InitMethod]

class UpdaterType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kSGD: _ClassVar[UpdaterType]
    kAdaGrad: _ClassVar[UpdaterType]
    kRMSProp: _ClassVar[UpdaterType]
    kNesterov: _ClassVar[UpdaterType]
    kAdaDelta: _ClassVar[UpdaterType]
    kAdam: _ClassVar[UpdaterType]
    kAdamMax: _ClassVar[UpdaterType]
    kUserUpdater: _ClassVar[UpdaterType]

class ChangeMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    kFixed: _ClassVar[ChangeMethod]
    kInverseT: _ClassVar[ChangeMethod]
    kInverse: _ClassVar[ChangeMethod]
    kExponential: _ClassVar[ChangeMethod]
    kLinear: _ClassVar[ChangeMethod]
    kStep: _ClassVar[ChangeMethod]
    kFixedStep: _ClassVar[ChangeMethod]
    kUserChange: _ClassVar[ChangeMethod]

class ActivationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RELU: _ClassVar[ActivationType]
    SIGMOID: _ClassVar[ActivationType]
    TANH: _ClassVar[ActivationType]
    STANH: _ClassVar[ActivationType]
kBP: AlgType
kCD: AlgType
kBPTT: AlgType
kUserAlg: AlgType
kUnknown: Phase
kTrain: Phase
kVal: Phase
kTest: Phase
kPositive: Phase
kNegative: Phase
kForward: Phase
kBackward: Phase
kLoss: Phase
kDeploy: Phase
kAggGrad: Phase
kUnrollOneToOne: UnrollConnType
kUnrollOneToAll: UnrollConnType
kUnrollFirstToLast: UnrollConnType
kUnrollCustomized: UnrollConnType
kCSVInput: LayerType
kImagePreprocess: LayerType
kRecordInput: LayerType
kLMDBData: LayerType
kLabel: LayerType
kMnist: LayerType
kRGBImage: LayerType
kShardData: LayerType
kCharRNN: LayerType
kRNNLabel: LayerType
kOneHot: LayerType
kConvolution: LayerType
kCConvolution: LayerType
kDropout: LayerType
kDummy: LayerType
kInnerProduct: LayerType
kLRN: LayerType
kPooling: LayerType
kCPooling: LayerType
kRBMHid: LayerType
kRBMVis: LayerType
kReLU: LayerType
kSTanh: LayerType
kSigmoid: LayerType
kSoftmax: LayerType
kGRU: LayerType
kEmbedding: LayerType
kActivation: LayerType
kBM: LayerType
kCudnnConv: LayerType
kCudnnPool: LayerType
kCudnnLRN: LayerType
kCudnnSoftmax: LayerType
kCudnnActivation: LayerType
kCudnnBM: LayerType
kEuclideanLoss: LayerType
kSoftmaxLoss: LayerType
kCudnnSoftmaxLoss: LayerType
kAccuracy: LayerType
kArgSort: LayerType
kCSVOutput: LayerType
kRecordOutput: LayerType
kCharRNNOutput: LayerType
kBridgeDst: LayerType
kBridgeSrc: LayerType
kConcate: LayerType
kSlice: LayerType
kSplit: LayerType
kRNNDummy: LayerType
kUserLayer: LayerType
kParam: ParamType
kUser: ParamType
kConstant: InitMethod
kGaussian: InitMethod
kUniform: InitMethod
kGaussianSqrtFanIn: InitMethod
kUniformSqrtFanIn: InitMethod
kUniformSqrtFanInOut: InitMethod
kUserInit: InitMethod
kSGD: UpdaterType
kAdaGrad: UpdaterType
kRMSProp: UpdaterType
kNesterov: UpdaterType
kAdaDelta: UpdaterType
kAdam: UpdaterType
kAdamMax: UpdaterType
kUserUpdater: UpdaterType
kFixed: ChangeMethod
kInverseT: ChangeMethod
kInverse: ChangeMethod
kExponential: ChangeMethod
kLinear: ChangeMethod
kStep: ChangeMethod
kFixedStep: ChangeMethod
kUserChange: ChangeMethod
RELU: ActivationType
SIGMOID: ActivationType
TANH: ActivationType
STANH: ActivationType

class JobProto(_message.Message):
    __slots__ = ("name", "neuralnet", "train_one_batch", "updater", "cluster", "train_steps", "disp_freq", "gpu", "test_freq", "test_steps", "validate_freq", "validate_steps", "checkpoint_freq", "checkpoint_path", "warmup_steps", "debug", "reset_param_version", "num_openblas_threads", "checkpoint_after", "disp_after", "test_after", "validate_after", "resume", "step", "id", "seed", "keep_checkpoints")
    Extensions: _python_message._ExtensionDict
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEURALNET_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ONE_BATCH_FIELD_NUMBER: _ClassVar[int]
    UPDATER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TRAIN_STEPS_FIELD_NUMBER: _ClassVar[int]
    DISP_FREQ_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    TEST_FREQ_FIELD_NUMBER: _ClassVar[int]
    TEST_STEPS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_FREQ_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FREQ_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_FIELD_NUMBER: _ClassVar[int]
    RESET_PARAM_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_OPENBLAS_THREADS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_AFTER_FIELD_NUMBER: _ClassVar[int]
    DISP_AFTER_FIELD_NUMBER: _ClassVar[int]
    TEST_AFTER_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_AFTER_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    neuralnet: NetProto
    train_one_batch: AlgProto
    updater: UpdaterProto
    cluster: ClusterProto
    train_steps: int
    disp_freq: int
    gpu: _containers.RepeatedScalarFieldContainer[int]
    test_freq: int
    test_steps: int
    validate_freq: int
    validate_steps: int
    checkpoint_freq: int
    checkpoint_path: _containers.RepeatedScalarFieldContainer[str]
    warmup_steps: int
    debug: bool
    reset_param_version: bool
    num_openblas_threads: int
    checkpoint_after: int
    disp_after: int
    test_after: int
    validate_after: int
    resume: bool
    step: int
    id: int
    seed: int
    keep_checkpoints: int
    def __init__(self, name: _Optional[str] = ..., neuralnet: _Optional[_Union[NetProto, _Mapping]] = ..., train_one_batch: _Optional[_Union[AlgProto, _Mapping]] = ..., updater: _Optional[_Union[UpdaterProto, _Mapping]] = ..., cluster: _Optional[_Union[ClusterProto, _Mapping]] = ..., train_steps: _Optional[int] = ..., disp_freq: _Optional[int] = ..., gpu: _Optional[_Iterable[int]] = ..., test_freq: _Optional[int] = ..., test_steps: _Optional[int] = ..., validate_freq: _Optional[int] = ..., validate_steps: _Optional[int] = ..., checkpoint_freq: _Optional[int] = ..., checkpoint_path: _Optional[_Iterable[str]] = ..., warmup_steps: _Optional[int] = ..., debug: _Optional[bool] = ..., reset_param_version: _Optional[bool] = ..., num_openblas_threads: _Optional[int] = ..., checkpoint_after: _Optional[int] = ..., disp_after: _Optional[int] = ..., test_after: _Optional[int] = ..., validate_after: _Optional[int] = ..., resume: _Optional[bool] = ..., step: _Optional[int] = ..., id: _Optional[int] = ..., seed: _Optional[int] = ..., keep_checkpoints: _Optional[int] = ...) -> None: ...

class AlgProto(_message.Message):
    __slots__ = ("alg", "user_alg", "cd_conf")
    Extensions: _python_message._ExtensionDict
    ALG_FIELD_NUMBER: _ClassVar[int]
    USER_ALG_FIELD_NUMBER: _ClassVar[int]
    CD_CONF_FIELD_NUMBER: _ClassVar[int]
    alg: AlgType
    user_alg: str
    cd_conf: CDProto
    def __init__(self, alg: _Optional[_Union[AlgType, str]] = ..., user_alg: _Optional[str] = ..., cd_conf: _Optional[_Union[CDProto, _Mapping]] = ...) -> None: ...

class CDProto(_message.Message):
    __slots__ = ("cd_k",)
    CD_K_FIELD_NUMBER: _ClassVar[int]
    cd_k: int
    def __init__(self, cd_k: _Optional[int] = ...) -> None: ...

class NetProto(_message.Message):
    __slots__ = ("layer", "partition_dim", "layer_group", "unroll_len")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_DIM_FIELD_NUMBER: _ClassVar[int]
    LAYER_GROUP_FIELD_NUMBER: _ClassVar[int]
    UNROLL_LEN_FIELD_NUMBER: _ClassVar[int]
    layer: _containers.RepeatedCompositeFieldContainer[LayerProto]
    partition_dim: int
    layer_group: _containers.RepeatedCompositeFieldContainer[LayerGroupProto]
    unroll_len: int
    def __init__(self, layer: _Optional[_Iterable[_Union[LayerProto, _Mapping]]] = ..., partition_dim: _Optional[int] = ..., layer_group: _Optional[_Iterable[_Union[LayerGroupProto, _Mapping]]] = ..., unroll_len: _Optional[int] = ...) -> None: ...

class LayerGroupProto(_message.Message):
    __slots__ = ("layer",)
    LAYER_FIELD_NUMBER: _ClassVar[int]
    layer: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layer: _Optional[_Iterable[str]] = ...) -> None: ...

class LayerProto(_message.Message):
    __slots__ = ("name", "srclayers", "param", "include", "exclude", "type", "user_type", "share_src_blobs", "unroll_len", "unroll_index", "unroll_conn_type", "shift", "partition_dim", "partition_id", "num_partitions", "store_conf", "lmdbdata_conf", "mnist_conf", "rgbimage_conf", "sharddata_conf", "char_rnn_conf", "onehot_conf", "activation_conf", "convolution_conf", "dropout_conf", "dummy_conf", "innerproduct_conf", "lrn_conf", "pooling_conf", "rbm_conf", "relu_conf", "softmax_conf", "gru_conf", "embedding_conf", "bm_conf", "softmaxloss_conf", "argsort_conf", "concate_conf", "slice_conf", "split_conf", "rnn_dummy_conf")
    Extensions: _python_message._ExtensionDict
    NAME_FIELD_NUMBER: _ClassVar[int]
    SRCLAYERS_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHARE_SRC_BLOBS_FIELD_NUMBER: _ClassVar[int]
    UNROLL_LEN_FIELD_NUMBER: _ClassVar[int]
    UNROLL_INDEX_FIELD_NUMBER: _ClassVar[int]
    UNROLL_CONN_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_DIM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    STORE_CONF_FIELD_NUMBER: _ClassVar[int]
    LMDBDATA_CONF_FIELD_NUMBER: _ClassVar[int]
    MNIST_CONF_FIELD_NUMBER: _ClassVar[int]
    RGBIMAGE_CONF_FIELD_NUMBER: _ClassVar[int]
    SHARDDATA_CONF_FIELD_NUMBER: _ClassVar[int]
    CHAR_RNN_CONF_FIELD_NUMBER: _ClassVar[int]
    ONEHOT_CONF_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_CONF_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_CONF_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_CONF_FIELD_NUMBER: _ClassVar[int]
    DUMMY_CONF_FIELD_NUMBER: _ClassVar[int]
    INNERPRODUCT_CONF_FIELD_NUMBER: _ClassVar[int]
    LRN_CONF_FIELD_NUMBER: _ClassVar[int]
    POOLING_CONF_FIELD_NUMBER: _ClassVar[int]
    RBM_CONF_FIELD_NUMBER: _ClassVar[int]
    RELU_CONF_FIELD_NUMBER: _ClassVar[int]
    SOFTMAX_CONF_FIELD_NUMBER: _ClassVar[int]
    GRU_CONF_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_CONF_FIELD_NUMBER: _ClassVar[int]
    BM_CONF_FIELD_NUMBER: _ClassVar[int]
    SOFTMAXLOSS_CONF_FIELD_NUMBER: _ClassVar[int]
    ARGSORT_CONF_FIELD_NUMBER: _ClassVar[int]
    CONCATE_CONF_FIELD_NUMBER: _ClassVar[int]
    SLICE_CONF_FIELD_NUMBER: _ClassVar[int]
    SPLIT_CONF_FIELD_NUMBER: _ClassVar[int]
    RNN_DUMMY_CONF_FIELD_NUMBER: _ClassVar[int]
    name: str
    srclayers: _containers.RepeatedScalarFieldContainer[str]
    param: _containers.RepeatedCompositeFieldContainer[ParamProto]
    include: _containers.RepeatedScalarFieldContainer[Phase]
    exclude: _containers.RepeatedScalarFieldContainer[Phase]
    type: LayerType
    user_type: str
    share_src_blobs: bool
    unroll_len: int
    unroll_index: int
    unroll_conn_type: _containers.RepeatedScalarFieldContainer[UnrollConnType]
    shift: _containers.RepeatedScalarFieldContainer[int]
    partition_dim: int
    partition_id: int
    num_partitions: int
    store_conf: StoreProto
    lmdbdata_conf: DataProto
    mnist_conf: MnistProto
    rgbimage_conf: RGBImageProto
    sharddata_conf: DataProto
    char_rnn_conf: CharRNNProto
    onehot_conf: OnehotProto
    activation_conf: ActivationProto
    convolution_conf: ConvolutionProto
    dropout_conf: DropoutProto
    dummy_conf: DummyProto
    innerproduct_conf: InnerProductProto
    lrn_conf: LRNProto
    pooling_conf: PoolingProto
    rbm_conf: RBMProto
    relu_conf: ReLUProto
    softmax_conf: SoftmaxProto
    gru_conf: GRUProto
    embedding_conf: EmbeddingProto
    bm_conf: BMProto
    softmaxloss_conf: SoftmaxLossProto
    argsort_conf: ArgSortProto
    concate_conf: ConcateProto
    slice_conf: SliceProto
    split_conf: SplitProto
    rnn_dummy_conf: RNNDummyProto
    def __init__(self, name: _Optional[str] = ..., srclayers: _Optional[_Iterable[str]] = ..., param: _Optional[_Iterable[_Union[ParamProto, _Mapping]]] = ..., include: _Optional[_Iterable[_Union[Phase, str]]] = ..., exclude: _Optional[_Iterable[_Union[Phase, str]]] = ..., type: _Optional[_Union[LayerType, str]] = ..., user_type: _Optional[str] = ..., share_src_blobs: _Optional[bool] = ..., unroll_len: _Optional[int] = ..., unroll_index: _Optional[int] = ..., unroll_conn_type: _Optional[_Iterable[_Union[UnrollConnType, str]]] = ..., shift: _Optional[_Iterable[int]] = ..., partition_dim: _Optional[int] = ..., partition_id: _Optional[int] = ..., num_partitions: _Optional[int] = ..., store_conf: _Optional[_Union[StoreProto, _Mapping]] = ..., lmdbdata_conf: _Optional[_Union[DataProto, _Mapping]] = ..., mnist_conf: _Optional[_Union[MnistProto, _Mapping]] = ..., rgbimage_conf: _Optional[_Union[RGBImageProto, _Mapping]] = ..., sharddata_conf: _Optional[_Union[DataProto, _Mapping]] = ..., char_rnn_conf: _Optional[_Union[CharRNNProto, _Mapping]] = ..., onehot_conf: _Optional[_Union[OnehotProto, _Mapping]] = ..., activation_conf: _Optional[_Union[ActivationProto, _Mapping]] = ..., convolution_conf: _Optional[_Union[ConvolutionProto, _Mapping]] = ..., dropout_conf: _Optional[_Union[DropoutProto, _Mapping]] = ..., dummy_conf: _Optional[_Union[DummyProto, _Mapping]] = ..., innerproduct_conf: _Optional[_Union[InnerProductProto, _Mapping]] = ..., lrn_conf: _Optional[_Union[LRNProto, _Mapping]] = ..., pooling_conf: _Optional[_Union[PoolingProto, _Mapping]] = ..., rbm_conf: _Optional[_Union[RBMProto, _Mapping]] = ..., relu_conf: _Optional[_Union[ReLUProto, _Mapping]] = ..., softmax_conf: _Optional[_Union[SoftmaxProto, _Mapping]] = ..., gru_conf: _Optional[_Union[GRUProto, _Mapping]] = ..., embedding_conf: _Optional[_Union[EmbeddingProto, _Mapping]] = ..., bm_conf: _Optional[_Union[BMProto, _Mapping]] = ..., softmaxloss_conf: _Optional[_Union[SoftmaxLossProto, _Mapping]] = ..., argsort_conf: _Optional[_Union[ArgSortProto, _Mapping]] = ..., concate_conf: _Optional[_Union[ConcateProto, _Mapping]] = ..., slice_conf: _Optional[_Union[SliceProto, _Mapping]] = ..., split_conf: _Optional[_Union[SplitProto, _Mapping]] = ..., rnn_dummy_conf: _Optional[_Union[RNNDummyProto, _Mapping]] = ...) -> None: ...

class ParamProto(_message.Message):
    __slots__ = ("name", "type", "user_type", "init", "lr_scale", "wd_scale", "share_from", "id", "owner", "partition_dim", "shape")
    Extensions: _python_message._ExtensionDict
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    LR_SCALE_FIELD_NUMBER: _ClassVar[int]
    WD_SCALE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FROM_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_DIM_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: ParamType
    user_type: str
    init: ParamGenProto
    lr_scale: float
    wd_scale: float
    share_from: str
    id: int
    owner: int
    partition_dim: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[ParamType, str]] = ..., user_type: _Optional[str] = ..., init: _Optional[_Union[ParamGenProto, _Mapping]] = ..., lr_scale: _Optional[float] = ..., wd_scale: _Optional[float] = ..., share_from: _Optional[str] = ..., id: _Optional[int] = ..., owner: _Optional[int] = ..., partition_dim: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class ParamGenProto(_message.Message):
    __slots__ = ("type", "user_type", "value", "mean", "std", "low", "high")
    Extensions: _python_message._ExtensionDict
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    type: InitMethod
    user_type: str
    value: float
    mean: float
    std: float
    low: float
    high: float
    def __init__(self, type: _Optional[_Union[InitMethod, str]] = ..., user_type: _Optional[str] = ..., value: _Optional[float] = ..., mean: _Optional[float] = ..., std: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class UpdaterProto(_message.Message):
    __slots__ = ("type", "user_type", "rmsprop_conf", "adadelta_conf", "adam_conf", "adammax_conf", "learning_rate", "momentum", "weight_decay", "delta", "clip_low", "clip_high")
    Extensions: _python_message._ExtensionDict
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    RMSPROP_CONF_FIELD_NUMBER: _ClassVar[int]
    ADADELTA_CONF_FIELD_NUMBER: _ClassVar[int]
    ADAM_CONF_FIELD_NUMBER: _ClassVar[int]
    ADAMMAX_CONF_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    CLIP_LOW_FIELD_NUMBER: _ClassVar[int]
    CLIP_HIGH_FIELD_NUMBER: _ClassVar[int]
    type: UpdaterType
    user_type: str
    rmsprop_conf: RMSPropProto
    adadelta_conf: AdaDeltaProto
    adam_conf: AdamProto
    adammax_conf: AdamMaxProto
    learning_rate: LRGenProto
    momentum: float
    weight_decay: float
    delta: float
    clip_low: float
    clip_high: float
    def __init__(self, type: _Optional[_Union[UpdaterType, str]] = ..., user_type: _Optional[str] = ..., rmsprop_conf: _Optional[_Union[RMSPropProto, _Mapping]] = ..., adadelta_conf: _Optional[_Union[AdaDeltaProto, _Mapping]] = ..., adam_conf: _Optional[_Union[AdamProto, _Mapping]] = ..., adammax_conf: _Optional[_Union[AdamMaxProto, _Mapping]] = ..., learning_rate: _Optional[_Union[LRGenProto, _Mapping]] = ..., momentum: _Optional[float] = ..., weight_decay: _Optional[float] = ..., delta: _Optional[float] = ..., clip_low: _Optional[float] = ..., clip_high: _Optional[float] = ...) -> None: ...

class RMSPropProto(_message.Message):
    __slots__ = ("rho",)
    RHO_FIELD_NUMBER: _ClassVar[int]
    rho: float
    def __init__(self, rho: _Optional[float] = ...) -> None: ...

class AdaDeltaProto(_message.Message):
    __slots__ = ("rho",)
    RHO_FIELD_NUMBER: _ClassVar[int]
    rho: float
    def __init__(self, rho: _Optional[float] = ...) -> None: ...

class AdamProto(_message.Message):
    __slots__ = ("beta1", "beta2")
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    beta1: float
    beta2: float
    def __init__(self, beta1: _Optional[float] = ..., beta2: _Optional[float] = ...) -> None: ...

class AdamMaxProto(_message.Message):
    __slots__ = ("beta1", "beta2")
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    beta1: float
    beta2: float
    def __init__(self, beta1: _Optional[float] = ..., beta2: _Optional[float] = ...) -> None: ...

class LRGenProto(_message.Message):
    __slots__ = ("type", "user_type", "base_lr", "fixedstep_conf", "step_conf", "linear_conf", "exponential_conf", "inverse_conf", "inverset_conf")
    Extensions: _python_message._ExtensionDict
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    BASE_LR_FIELD_NUMBER: _ClassVar[int]
    FIXEDSTEP_CONF_FIELD_NUMBER: _ClassVar[int]
    STEP_CONF_FIELD_NUMBER: _ClassVar[int]
    LINEAR_CONF_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_CONF_FIELD_NUMBER: _ClassVar[int]
    INVERSE_CONF_FIELD_NUMBER: _ClassVar[int]
    INVERSET_CONF_FIELD_NUMBER: _ClassVar[int]
    type: ChangeMethod
    user_type: str
    base_lr: float
    fixedstep_conf: FixedStepProto
    step_conf: StepProto
    linear_conf: LinearProto
    exponential_conf: ExponentialProto
    inverse_conf: InverseProto
    inverset_conf: InverseTProto
    def __init__(self, type: _Optional[_Union[ChangeMethod, str]] = ..., user_type: _Optional[str] = ..., base_lr: _Optional[float] = ..., fixedstep_conf: _Optional[_Union[FixedStepProto, _Mapping]] = ..., step_conf: _Optional[_Union[StepProto, _Mapping]] = ..., linear_conf: _Optional[_Union[LinearProto, _Mapping]] = ..., exponential_conf: _Optional[_Union[ExponentialProto, _Mapping]] = ..., inverse_conf: _Optional[_Union[InverseProto, _Mapping]] = ..., inverset_conf: _Optional[_Union[InverseTProto, _Mapping]] = ...) -> None: ...

class FixedStepProto(_message.Message):
    __slots__ = ("step", "step_lr")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_LR_FIELD_NUMBER: _ClassVar[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    step_lr: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, step: _Optional[_Iterable[int]] = ..., step_lr: _Optional[_Iterable[float]] = ...) -> None: ...

class StepProto(_message.Message):
    __slots__ = ("gamma", "change_freq")
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FREQ_FIELD_NUMBER: _ClassVar[int]
    gamma: float
    change_freq: int
    def __init__(self, gamma: _Optional[float] = ..., change_freq: _Optional[int] = ...) -> None: ...

class LinearProto(_message.Message):
    __slots__ = ("change_freq", "final_lr")
    CHANGE_FREQ_FIELD_NUMBER: _ClassVar[int]
    FINAL_LR_FIELD_NUMBER: _ClassVar[int]
    change_freq: int
    final_lr: float
    def __init__(self, change_freq: _Optional[int] = ..., final_lr: _Optional[float] = ...) -> None: ...

class ExponentialProto(_message.Message):
    __slots__ = ("change_freq",)
    CHANGE_FREQ_FIELD_NUMBER: _ClassVar[int]
    change_freq: int
    def __init__(self, change_freq: _Optional[int] = ...) -> None: ...

class InverseProto(_message.Message):
    __slots__ = ("gamma", "pow")
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    POW_FIELD_NUMBER: _ClassVar[int]
    gamma: float
    pow: float
    def __init__(self, gamma: _Optional[float] = ..., pow: _Optional[float] = ...) -> None: ...

class InverseTProto(_message.Message):
    __slots__ = ("final_lr",)
    FINAL_LR_FIELD_NUMBER: _ClassVar[int]
    final_lr: float
    def __init__(self, final_lr: _Optional[float] = ...) -> None: ...

class UniformProto(_message.Message):
    __slots__ = ("low", "high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class GaussianProto(_message.Message):
    __slots__ = ("mean", "std")
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    mean: float
    std: float
    def __init__(self, mean: _Optional[float] = ..., std: _Optional[float] = ...) -> None: ...

class ClusterProto(_message.Message):
    __slots__ = ("nworker_groups", "nserver_groups", "nworkers_per_group", "nservers_per_group", "nworkers_per_procs", "nservers_per_procs", "workspace", "server_worker_separate", "sync_freq", "start_port", "share_memory", "poll_time")
    NWORKER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NSERVER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NWORKERS_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    NSERVERS_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    NWORKERS_PER_PROCS_FIELD_NUMBER: _ClassVar[int]
    NSERVERS_PER_PROCS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    SERVER_WORKER_SEPARATE_FIELD_NUMBER: _ClassVar[int]
    SYNC_FREQ_FIELD_NUMBER: _ClassVar[int]
    START_PORT_FIELD_NUMBER: _ClassVar[int]
    SHARE_MEMORY_FIELD_NUMBER: _ClassVar[int]
    POLL_TIME_FIELD_NUMBER: _ClassVar[int]
    nworker_groups: int
    nserver_groups: int
    nworkers_per_group: int
    nservers_per_group: int
    nworkers_per_procs: int
    nservers_per_procs: int
    workspace: str
    server_worker_separate: bool
    sync_freq: int
    start_port: int
    share_memory: bool
    poll_time: int
    def __init__(self, nworker_groups: _Optional[int] = ..., nserver_groups: _Optional[int] = ..., nworkers_per_group: _Optional[int] = ..., nservers_per_group: _Optional[int] = ..., nworkers_per_procs: _Optional[int] = ..., nservers_per_procs: _Optional[int] = ..., workspace: _Optional[str] = ..., server_worker_separate: _Optional[bool] = ..., sync_freq: _Optional[int] = ..., start_port: _Optional[int] = ..., share_memory: _Optional[bool] = ..., poll_time: _Optional[int] = ...) -> None: ...

class StoreProto(_message.Message):
    __slots__ = ("backend", "path", "separator", "mean_file", "std_file", "mean_value", "std_value", "batchsize", "shape", "encoded", "random_skip", "has_label", "prefetching")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SEPARATOR_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    STD_FILE_FIELD_NUMBER: _ClassVar[int]
    MEAN_VALUE_FIELD_NUMBER: _ClassVar[int]
    STD_VALUE_FIELD_NUMBER: _ClassVar[int]
    BATCHSIZE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    RANDOM_SKIP_FIELD_NUMBER: _ClassVar[int]
    HAS_LABEL_FIELD_NUMBER: _ClassVar[int]
    PREFETCHING_FIELD_NUMBER: _ClassVar[int]
    backend: str
    path: str
    separator: str
    mean_file: str
    std_file: str
    mean_value: float
    std_value: float
    batchsize: _containers.RepeatedScalarFieldContainer[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    encoded: bool
    random_skip: int
    has_label: bool
    prefetching: bool
    def __init__(self, backend: _Optional[str] = ..., path: _Optional[str] = ..., separator: _Optional[str] = ..., mean_file: _Optional[str] = ..., std_file: _Optional[str] = ..., mean_value: _Optional[float] = ..., std_value: _Optional[float] = ..., batchsize: _Optional[_Iterable[int]] = ..., shape: _Optional[_Iterable[int]] = ..., encoded: _Optional[bool] = ..., random_skip: _Optional[int] = ..., has_label: _Optional[bool] = ..., prefetching: _Optional[bool] = ...) -> None: ...

class DataProto(_message.Message):
    __slots__ = ("path", "batchsize", "random_skip")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BATCHSIZE_FIELD_NUMBER: _ClassVar[int]
    RANDOM_SKIP_FIELD_NUMBER: _ClassVar[int]
    path: str
    batchsize: int
    random_skip: int
    def __init__(self, path: _Optional[str] = ..., batchsize: _Optional[int] = ..., random_skip: _Optional[int] = ...) -> None: ...

class MnistProto(_message.Message):
    __slots__ = ("norm_a", "norm_b", "kernel", "sigma", "alpha", "beta", "gamma", "resize", "elastic_freq")
    NORM_A_FIELD_NUMBER: _ClassVar[int]
    NORM_B_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FREQ_FIELD_NUMBER: _ClassVar[int]
    norm_a: float
    norm_b: float
    kernel: int
    sigma: float
    alpha: float
    beta: float
    gamma: float
    resize: int
    elastic_freq: int
    def __init__(self, norm_a: _Optional[float] = ..., norm_b: _Optional[float] = ..., kernel: _Optional[int] = ..., sigma: _Optional[float] = ..., alpha: _Optional[float] = ..., beta: _Optional[float] = ..., gamma: _Optional[float] = ..., resize: _Optional[int] = ..., elastic_freq: _Optional[int] = ...) -> None: ...

class RGBImageProto(_message.Message):
    __slots__ = ("scale", "cropsize", "mirror", "meanfile")
    SCALE_FIELD_NUMBER: _ClassVar[int]
    CROPSIZE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    MEANFILE_FIELD_NUMBER: _ClassVar[int]
    scale: float
    cropsize: int
    mirror: bool
    meanfile: str
    def __init__(self, scale: _Optional[float] = ..., cropsize: _Optional[int] = ..., mirror: _Optional[bool] = ..., meanfile: _Optional[str] = ...) -> None: ...

class CharRNNProto(_message.Message):
    __slots__ = ("path", "vocab_path", "unroll_len", "batchsize")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOCAB_PATH_FIELD_NUMBER: _ClassVar[int]
    UNROLL_LEN_FIELD_NUMBER: _ClassVar[int]
    BATCHSIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    vocab_path: str
    unroll_len: int
    batchsize: int
    def __init__(self, path: _Optional[str] = ..., vocab_path: _Optional[str] = ..., unroll_len: _Optional[int] = ..., batchsize: _Optional[int] = ...) -> None: ...

class OnehotProto(_message.Message):
    __slots__ = ("vocab_size",)
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    vocab_size: int
    def __init__(self, vocab_size: _Optional[int] = ...) -> None: ...

class ActivationProto(_message.Message):
    __slots__ = ("type",)
    TYPE_FIELD_NUMBER: _ClassVar[int]
    type: ActivationType
    def __init__(self, type: _Optional[_Union[ActivationType, str]] = ...) -> None: ...

class ConvolutionProto(_message.Message):
    __slots__ = ("num_filters", "kernel", "pad", "stride", "kernel_x", "kernel_y", "pad_x", "pad_y", "stride_x", "stride_y", "workspace_byte_limit")
    NUM_FILTERS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_X_FIELD_NUMBER: _ClassVar[int]
    KERNEL_Y_FIELD_NUMBER: _ClassVar[int]
    PAD_X_FIELD_NUMBER: _ClassVar[int]
    PAD_Y_FIELD_NUMBER: _ClassVar[int]
    STRIDE_X_FIELD_NUMBER: _ClassVar[int]
    STRIDE_Y_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BYTE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    num_filters: int
    kernel: int
    pad: int
    stride: int
    kernel_x: int
    kernel_y: int
    pad_x: int
    pad_y: int
    stride_x: int
    stride_y: int
    workspace_byte_limit: int
    def __init__(self, num_filters: _Optional[int] = ..., kernel: _Optional[int] = ..., pad: _Optional[int] = ..., stride: _Optional[int] = ..., kernel_x: _Optional[int] = ..., kernel_y: _Optional[int] = ..., pad_x: _Optional[int] = ..., pad_y: _Optional[int] = ..., stride_x: _Optional[int] = ..., stride_y: _Optional[int] = ..., workspace_byte_limit: _Optional[int] = ...) -> None: ...

class DropoutProto(_message.Message):
    __slots__ = ("dropout_ratio",)
    DROPOUT_RATIO_FIELD_NUMBER: _ClassVar[int]
    dropout_ratio: float
    def __init__(self, dropout_ratio: _Optional[float] = ...) -> None: ...

class DummyProto(_message.Message):
    __slots__ = ("input", "output", "shape")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    input: bool
    output: bool
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, input: _Optional[bool] = ..., output: _Optional[bool] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class InnerProductProto(_message.Message):
    __slots__ = ("num_output", "bias_term", "transpose")
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    TRANSPOSE_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    bias_term: bool
    transpose: bool
    def __init__(self, num_output: _Optional[int] = ..., bias_term: _Optional[bool] = ..., transpose: _Optional[bool] = ...) -> None: ...

class LRNProto(_message.Message):
    __slots__ = ("local_size", "alpha", "beta", "knorm")
    LOCAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    KNORM_FIELD_NUMBER: _ClassVar[int]
    local_size: int
    alpha: float
    beta: float
    knorm: float
    def __init__(self, local_size: _Optional[int] = ..., alpha: _Optional[float] = ..., beta: _Optional[float] = ..., knorm: _Optional[float] = ...) -> None: ...

class PoolingProto(_message.Message):
    __slots__ = ("kernel", "pool", "pad", "stride", "kernel_x", "kernel_y", "pad_x", "pad_y", "stride_x", "stride_y")
    class PoolMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MAX: _ClassVar[PoolingProto.PoolMethod]
        AVG: _ClassVar[PoolingProto.PoolMethod]
    MAX: PoolingProto.PoolMethod
    AVG: PoolingProto.PoolMethod
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_X_FIELD_NUMBER: _ClassVar[int]
    KERNEL_Y_FIELD_NUMBER: _ClassVar[int]
    PAD_X_FIELD_NUMBER: _ClassVar[int]
    PAD_Y_FIELD_NUMBER: _ClassVar[int]
    STRIDE_X_FIELD_NUMBER: _ClassVar[int]
    STRIDE_Y_FIELD_NUMBER: _ClassVar[int]
    kernel: int
    pool: PoolingProto.PoolMethod
    pad: int
    stride: int
    kernel_x: int
    kernel_y: int
    pad_x: int
    pad_y: int
    stride_x: int
    stride_y: int
    def __init__(self, kernel: _Optional[int] = ..., pool: _Optional[_Union[PoolingProto.PoolMethod, str]] = ..., pad: _Optional[int] = ..., stride: _Optional[int] = ..., kernel_x: _Optional[int] = ..., kernel_y: _Optional[int] = ..., pad_x: _Optional[int] = ..., pad_y: _Optional[int] = ..., stride_x: _Optional[int] = ..., stride_y: _Optional[int] = ...) -> None: ...

class RBMProto(_message.Message):
    __slots__ = ("hdim", "bias_term", "gaussian")
    HDIM_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    GAUSSIAN_FIELD_NUMBER: _ClassVar[int]
    hdim: int
    bias_term: bool
    gaussian: bool
    def __init__(self, hdim: _Optional[int] = ..., bias_term: _Optional[bool] = ..., gaussian: _Optional[bool] = ...) -> None: ...

class GRUProto(_message.Message):
    __slots__ = ("dim_hidden", "bias_term")
    DIM_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    dim_hidden: int
    bias_term: bool
    def __init__(self, dim_hidden: _Optional[int] = ..., bias_term: _Optional[bool] = ...) -> None: ...

class ReLUProto(_message.Message):
    __slots__ = ("negative_slope",)
    NEGATIVE_SLOPE_FIELD_NUMBER: _ClassVar[int]
    negative_slope: float
    def __init__(self, negative_slope: _Optional[float] = ...) -> None: ...

class SoftmaxProto(_message.Message):
    __slots__ = ("num_softmax_per_instance",)
    NUM_SOFTMAX_PER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    num_softmax_per_instance: int
    def __init__(self, num_softmax_per_instance: _Optional[int] = ...) -> None: ...

class EmbeddingProto(_message.Message):
    __slots__ = ("vocab_size", "feature_dim")
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DIM_FIELD_NUMBER: _ClassVar[int]
    vocab_size: int
    feature_dim: int
    def __init__(self, vocab_size: _Optional[int] = ..., feature_dim: _Optional[int] = ...) -> None: ...

class BMProto(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SoftmaxLossProto(_message.Message):
    __slots__ = ("topk", "scale")
    TOPK_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    topk: int
    scale: float
    def __init__(self, topk: _Optional[int] = ..., scale: _Optional[float] = ...) -> None: ...

class ArgSortProto(_message.Message):
    __slots__ = ("topk",)
    TOPK_FIELD_NUMBER: _ClassVar[int]
    topk: int
    def __init__(self, topk: _Optional[int] = ...) -> None: ...

class ConcateProto(_message.Message):
    __slots__ = ("concate_dim", "num_concates")
    CONCATE_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_CONCATES_FIELD_NUMBER: _ClassVar[int]
    concate_dim: int
    num_concates: int
    def __init__(self, concate_dim: _Optional[int] = ..., num_concates: _Optional[int] = ...) -> None: ...

class SliceProto(_message.Message):
    __slots__ = ("slice_dim", "num_slices")
    SLICE_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_SLICES_FIELD_NUMBER: _ClassVar[int]
    slice_dim: int
    num_slices: int
    def __init__(self, slice_dim: _Optional[int] = ..., num_slices: _Optional[int] = ...) -> None: ...

class SplitProto(_message.Message):
    __slots__ = ("num_splits",)
    NUM_SPLITS_FIELD_NUMBER: _ClassVar[int]
    num_splits: int
    def __init__(self, num_splits: _Optional[int] = ...) -> None: ...

class RNNDummyProto(_message.Message):
    __slots__ = ("dynamic_srclayer", "shape", "integer", "low", "high")
    DYNAMIC_SRCLAYER_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    INTEGER_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    dynamic_srclayer: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    integer: bool
    low: float
    high: float
    def __init__(self, dynamic_srclayer: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., integer: _Optional[bool] = ..., low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...
