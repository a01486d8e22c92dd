"""`TensorMethods`: the Tensor API functions of the topic modules, attached as methods (Tensor inherits them).

Each function lives in the module of its topic with `self: Tensor` as its first parameter; this class only lists
them, so a reader finds any method's module here and tensor.py keeps the core (construction, elementwise ops,
autograd state, realization).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from tg.tensor import activation as _act
from tg.tensor import aliases as _aliases
from tg.tensor import autograd as _autograd
from tg.tensor import creation as _creation
from tg.tensor import external as _external
from tg.tensor import hashing as _hashing
from tg.tensor import indexing as _indexing
from tg.tensor import linalg as _linalg
from tg.tensor import matrix as _matrix
from tg.tensor import movement as _movement
from tg.tensor import nnops as _nn
from tg.tensor import operators as _operators
from tg.tensor import random as _random
from tg.tensor import reduce as _reduce_ops
from tg.tensor import scan as _scan

P = ParamSpec("P")
R = TypeVar("R")


class _on_tensor_class(Generic[P, R]):
    """A class method whose `cls` is always the Tensor class itself, also when reached through a subclass or an
    instance: `nn.Parameter.zeros(3)` builds a Tensor (Parameter's constructor takes a tensor), and the random
    stream's seed and counter stay on Tensor."""

    __slots__ = ("__func__",)

    def __init__(self, func: Callable[Concatenate[Any, P], R]) -> None:
        self.__func__ = func

    def __get__(self, obj: Any, owner: type | None = None) -> Callable[P, R]:
        cls: Any = owner if owner is not None else type(obj)
        return MethodType(self.__func__, cls._tensor_class())


class TensorMethods:
    """The topic modules' functions as methods (see the module docstring)."""

    __slots__ = ()

    # creation (creation.py; the functions that take no tensor get the Tensor class as `cls`)
    full = _on_tensor_class(_creation.full)
    zeros = _on_tensor_class(_creation.zeros)
    ones = _on_tensor_class(_creation.ones)
    empty = _on_tensor_class(_creation.empty)
    arange = _on_tensor_class(_creation.arange)
    linspace = _on_tensor_class(_creation.linspace)
    eye = _on_tensor_class(_creation.eye)
    from_blob = _on_tensor_class(_external.from_blob)
    from_url = _on_tensor_class(_external.from_url)
    full_like = _creation.full_like
    zeros_like = _creation.zeros_like
    ones_like = _creation.ones_like
    empty_like = _creation.empty_like
    rand_like = _creation.rand_like
    randn_like = _creation.randn_like

    # grad mode and training mode (autograd.py)
    no_grad = _autograd.no_grad
    enable_grad = _autograd.enable_grad
    train = staticmethod(_autograd.train)

    # movement (movement.py)
    reshape = _movement.reshape
    view = _movement.view
    permute = _movement.permute
    expand = _movement.expand
    _broadcast_to = _movement.broadcast_to
    pad = _movement.pad
    shrink = _movement.shrink
    flip = _movement.flip
    transpose = _movement.transpose
    flatten = _movement.flatten
    squeeze = _movement.squeeze
    unsqueeze = _movement.unsqueeze
    cat = _movement.cat
    stack = _movement.stack
    repeat = _movement.repeat
    repeat_interleave = _movement.repeat_interleave
    split = _movement.split
    chunk = _movement.chunk
    unflatten = _movement.unflatten
    roll = _movement.roll
    unfold = _movement.unfold
    tril = _movement.tril
    triu = _movement.triu
    diagonal = _movement.diagonal
    diag = _movement.diag
    meshgrid = _movement.meshgrid
    _windows = _movement.windows

    # Python operators (operators.py)
    __floordiv__ = _operators.__floordiv__
    __rfloordiv__ = _operators.__rfloordiv__
    __mod__ = _operators.__mod__
    __rmod__ = _operators.__rmod__
    __add__ = _operators.__add__
    __radd__ = _operators.__radd__
    __sub__ = _operators.__sub__
    __rsub__ = _operators.__rsub__
    __mul__ = _operators.__mul__
    __rmul__ = _operators.__rmul__
    __truediv__ = _operators.__truediv__
    __rtruediv__ = _operators.__rtruediv__
    __pow__ = _operators.__pow__
    __rpow__ = _operators.__rpow__
    __matmul__ = _operators.__matmul__
    __rmatmul__ = _operators.__rmatmul__
    __and__ = _operators.__and__
    __rand__ = _operators.__rand__
    __or__ = _operators.__or__
    __ror__ = _operators.__ror__
    __xor__ = _operators.__xor__
    __rxor__ = _operators.__rxor__
    __lshift__ = _operators.__lshift__
    __rlshift__ = _operators.__rlshift__
    __rshift__ = _operators.__rshift__
    __rrshift__ = _operators.__rrshift__
    __lt__ = _operators.__lt__
    __gt__ = _operators.__gt__
    __eq__ = _operators.__eq__  # type: ignore[assignment]
    __ne__ = _operators.__ne__  # type: ignore[assignment]

    # PyTorch habits (aliases.py)
    size = _aliases.size
    dim = _aliases.dim
    itemsize = property(_aliases.itemsize)
    is_floating_point = _aliases.is_floating_point
    clone = _aliases.clone
    cpu = _aliases.cpu
    expand_as = _aliases.expand_as
    view_as = _aliases.view_as
    reshape_as = _aliases.reshape_as
    type_as = _aliases.type_as
    lt = _aliases.lt
    le = _aliases.le
    gt = _aliases.gt
    ge = _aliases.ge
    eq = _aliases.eq
    ne = _aliases.ne
    logical_and = _aliases.logical_and
    logical_or = _aliases.logical_or
    logical_xor = _aliases.logical_xor
    bitwise_and = _aliases.bitwise_and
    bitwise_or = _aliases.bitwise_or
    bitwise_xor = _aliases.bitwise_xor
    bitwise_not = _aliases.bitwise_not
    lshift = _aliases.lshift
    rshift = _aliases.rshift
    fmod = _aliases.fmod
    add_ = _aliases.add_
    sub_ = _aliases.sub_
    mul_ = _aliases.mul_
    div_ = _aliases.div_
    pow_ = _aliases.pow_
    __iadd__ = _aliases.__iadd__
    __isub__ = _aliases.__isub__
    __imul__ = _aliases.__imul__
    __itruediv__ = _aliases.__itruediv__
    __ifloordiv__ = _aliases.__ifloordiv__
    __imod__ = _aliases.__imod__
    __ipow__ = _aliases.__ipow__
    __imatmul__ = _aliases.__imatmul__
    __iand__ = _aliases.__iand__
    __ior__ = _aliases.__ior__
    __ixor__ = _aliases.__ixor__
    __ilshift__ = _aliases.__ilshift__
    __irshift__ = _aliases.__irshift__
    zero_ = _aliases.zero_
    fill_ = _aliases.fill_
    clamp_ = _aliases.clamp_
    copy_ = _aliases.copy_
    uniform_ = _aliases.uniform_
    normal_ = _aliases.normal_
    sequential = _aliases.sequential
    round = _aliases.round
    const_like = _aliases.const_like
    const = _on_tensor_class(_aliases.const)
    ufix = _aliases.ufix
    alu = _aliases.alu
    usum = _aliases.usum
    uprod = _aliases.uprod
    replace = _aliases.replace
    to_ = _aliases.to_
    rearrange = _aliases.rearrange
    pad_to = _aliases.pad_to
    shrink_to = _aliases.shrink_to

    # activations and composite math (activation.py)
    relu = _act.relu
    relu6 = _act.relu6
    leaky_relu = _act.leaky_relu
    elu = _act.elu
    celu = _act.celu
    selu = _act.selu
    softplus = _act.softplus
    logsigmoid = _act.logsigmoid
    silu = _act.silu
    swish = _act.swish
    mish = _act.mish
    quick_gelu = _act.quick_gelu
    gelu = _act.gelu
    softsign = _act.softsign
    hardsigmoid = _act.hardsigmoid
    hardswish = _act.hardswish
    hardtanh = _act.hardtanh
    log10 = _act.log10
    sinh = _act.sinh
    cosh = _act.cosh
    asinh = _act.asinh
    acosh = _act.acosh
    atanh = _act.atanh
    atan = _act.atan
    asin = _act.asin
    acos = _act.acos
    lerp = _act.lerp
    copysign = _act.copysign
    logaddexp = _act.logaddexp
    isinf = _act.isinf
    isfinite = _act.isfinite
    isclose = _act.isclose
    allclose = _act.allclose
    clamp = _act.clamp

    # neural-network ops (nnops.py)
    conv2d = _nn.conv2d
    conv_transpose2d = _nn.conv_transpose2d
    max_pool2d = _nn.max_pool2d
    max_unpool2d = _nn.max_unpool2d
    avg_pool2d = _nn.avg_pool2d
    linear = _nn.linear
    layernorm = _nn.layernorm
    batchnorm = _nn.batchnorm
    normalize = _nn.normalize
    dropout = _nn.dropout
    one_hot = _nn.one_hot
    sparse_categorical_crossentropy = _nn.sparse_categorical_crossentropy
    cross_entropy = _nn.cross_entropy
    nll_loss = _nn.nll_loss
    binary_crossentropy = _nn.binary_crossentropy
    binary_crossentropy_logits = _nn.binary_crossentropy_logits
    scaled_dot_product_attention = _nn.scaled_dot_product_attention

    # reductions and matmul (reduce.py)
    _reduce = _reduce_ops._reduce
    sum = _reduce_ops.sum
    prod = _reduce_ops.prod
    max = _reduce_ops.max
    min = _reduce_ops.min
    mean = _reduce_ops.mean
    var = _reduce_ops.var
    std = _reduce_ops.std
    var_mean = _reduce_ops.var_mean
    std_mean = _reduce_ops.std_mean
    any = _reduce_ops.any_
    all = _reduce_ops.all_
    argmax = _reduce_ops.argmax
    argmin = _reduce_ops.argmin
    logsumexp = _reduce_ops.logsumexp
    softmax = _reduce_ops.softmax
    log_softmax = _reduce_ops.log_softmax
    softmin = _reduce_ops.softmin
    matmul = _reduce_ops.matmul
    dot = _reduce_ops.dot

    # einsum and resampling (linalg.py)
    einsum = staticmethod(_linalg.einsum)
    qr = _matrix.qr
    svd = _matrix.svd

    # hashing (hashing.py)
    keccak = _hashing.keccak
    hash = _hashing.tensor_hash
    newton_schulz = _matrix.newton_schulz
    interpolate = _linalg.interpolate

    # scans and sorting (scan.py)
    cumsum = _scan.cumsum
    cumprod = _scan.cumprod
    cummax = _scan.cummax
    cummin = _scan.cummin
    logcumsumexp = _scan.logcumsumexp
    sort = _scan.sort
    argsort = _scan.argsort
    topk = _scan.topk

    # indexing, gather and scatter (indexing.py)
    __getitem__ = _indexing.__getitem__
    __setitem__ = _indexing.__setitem__
    gather = _indexing.gather
    scatter = _indexing.scatter
    scatter_reduce = _indexing.scatter_reduce
    masked_fill = _indexing.masked_fill
    masked_select = _indexing.masked_select
    nonzero = _indexing.nonzero

    # random numbers and initialisers (random.py)
    manual_seed = staticmethod(_random.manual_seed)
    rand = _on_tensor_class(_random.rand)
    randn = _on_tensor_class(_random.randn)
    randint = _on_tensor_class(_random.randint)
    uniform = _on_tensor_class(_random.uniform)
    normal = _on_tensor_class(_random.normal)
    randperm = _on_tensor_class(_random.randperm)
    multinomial = _random.multinomial
    threefry = _random.threefry
    random_bits = _on_tensor_class(_random.random_bits)
    scaled_uniform = _on_tensor_class(_random.scaled_uniform)
    glorot_uniform = _on_tensor_class(_random.glorot_uniform)
    kaiming_uniform = _on_tensor_class(_random.kaiming_uniform)
    kaiming_normal = _on_tensor_class(_random.kaiming_normal)
