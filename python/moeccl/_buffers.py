"""Datatypes both ways, and buffers (numpy arrays, torch tensors, objects
with __cuda_array_interface__ or __dlpack__) as (pointer, elements, type,
memory kind), checked before any library call."""
import ctypes
import enum
import sys

from ._lib import ArgumentError


class DataType(enum.IntEnum):
    """moecclDataType_t (NCCL's values)."""
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11


class RedOp(enum.IntEnum):
    """moecclRedOp_t's built-in operations."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


ITEMSIZE = {DataType.INT8: 1, DataType.UINT8: 1, DataType.INT32: 4, DataType.UINT32: 4,
            DataType.INT64: 8, DataType.UINT64: 8, DataType.FLOAT16: 2, DataType.FLOAT32: 4,
            DataType.FLOAT64: 8, DataType.BFLOAT16: 2, DataType.FLOAT8E4M3: 1,
            DataType.FLOAT8E5M2: 1}

# numpy dtype names (bfloat16 and the fp8 types are ml_dtypes' names)
_NUMPY_NAMES = {"int8": DataType.INT8, "uint8": DataType.UINT8, "int32": DataType.INT32,
                "uint32": DataType.UINT32, "int64": DataType.INT64, "uint64": DataType.UINT64,
                "float16": DataType.FLOAT16, "float32": DataType.FLOAT32,
                "float64": DataType.FLOAT64, "bfloat16": DataType.BFLOAT16,
                "float8_e4m3fn": DataType.FLOAT8E4M3, "float8_e5m2": DataType.FLOAT8E5M2}
# torch dtype attribute names
_TORCH_NAMES = {"int8": DataType.INT8, "uint8": DataType.UINT8, "int32": DataType.INT32,
                "uint32": DataType.UINT32, "int64": DataType.INT64, "uint64": DataType.UINT64,
                "float16": DataType.FLOAT16, "float32": DataType.FLOAT32,
                "float64": DataType.FLOAT64, "bfloat16": DataType.BFLOAT16,
                "float8_e4m3fn": DataType.FLOAT8E4M3, "float8_e5m2": DataType.FLOAT8E5M2}
# __cuda_array_interface__ typestrs (little-endian)
_TYPESTRS = {"|i1": DataType.INT8, "|u1": DataType.UINT8, "<i4": DataType.INT32,
             "<u4": DataType.UINT32, "<i8": DataType.INT64, "<u8": DataType.UINT64,
             "<f2": DataType.FLOAT16, "<f4": DataType.FLOAT32, "<f8": DataType.FLOAT64}

# other names of datatypes (torch's, and short ones)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16",
            "int": "int32", "char": "int8", "fp8e4m3": "float8_e4m3fn",
            "float8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2", "float8e5m2": "float8_e5m2"}

_REDOP_NAMES = {"sum": RedOp.SUM, "prod": RedOp.PROD, "max": RedOp.MAX, "min": RedOp.MIN,
                "avg": RedOp.AVG}


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


def to_datatype(dtype):
    """A DataType from a DataType/int, a numpy dtype, a torch dtype or a name."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        try:
            return DataType(dtype)
        except ValueError:
            raise ArgumentError("datatype %d is not a moeccl datatype (0..11)" % dtype) from None
    torch = _torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
        if name in _TORCH_NAMES:
            return _TORCH_NAMES[name]
        raise ArgumentError("torch dtype %s has no moeccl datatype" % dtype)
    np = _numpy()
    if np is not None and not isinstance(dtype, str):
        try:
            d = np.dtype(dtype)
        except TypeError:
            d = None
        if d is not None:
            if d.byteorder == ">":
                raise ArgumentError("numpy dtype %s is big-endian; moeccl needs native order" % d)
            if d.name in _NUMPY_NAMES:
                return _NUMPY_NAMES[d.name]
            raise ArgumentError("numpy dtype %s has no moeccl datatype" % d)
    if isinstance(dtype, str):
        key = dtype.lower().replace("torch.", "")
        key = _ALIASES.get(key, key)
        if key in _NUMPY_NAMES:
            return _NUMPY_NAMES[key]
    raise ArgumentError("%r is not a datatype moeccl knows" % (dtype,))


def numpy_dtype(datatype):
    """The numpy dtype of a moeccl datatype (bfloat16 and fp8 need ml_dtypes)."""
    import numpy as np
    dt = to_datatype(datatype)
    name = {v: k for k, v in _NUMPY_NAMES.items()}[dt]
    if dt in (DataType.BFLOAT16, DataType.FLOAT8E4M3, DataType.FLOAT8E5M2):
        try:
            import ml_dtypes
        except ImportError:
            raise ArgumentError("numpy has no %s without the ml_dtypes package" % name) from None
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def torch_dtype(datatype):
    """The torch dtype of a moeccl datatype (fp8 and uint32/64 need a recent torch)."""
    import torch
    dt = to_datatype(datatype)
    name = {v: k for k, v in _TORCH_NAMES.items()}[dt]
    if not hasattr(torch, name):
        raise ArgumentError("this torch (%s) has no torch.%s" % (torch.__version__, name))
    return getattr(torch, name)


def to_redop(op):
    """A reduction op value from RedOp, an int (PreMulSum ops too) or a name."""
    if isinstance(op, str):
        if op.lower() in _REDOP_NAMES:
            return int(_REDOP_NAMES[op.lower()])
        raise ArgumentError("reduction %r is not one of sum, prod, max, min, avg" % op)
    if hasattr(op, "value") and isinstance(op.value, int):
        return int(op.value)
    if isinstance(op, int) and not isinstance(op, bool) and op >= 0:
        return int(op)
    raise ArgumentError("reduction %r is not a moeccl reduction op" % (op,))


class Buffer:
    """One buffer of a call: ptr, count (elements), datatype, kind ("host"
    or "cuda"), the CUDA stream that goes with it (None: not known), and
    the object itself (kept alive while the call runs)."""
    __slots__ = ("ptr", "count", "datatype", "kind", "stream", "device", "obj", "shape")

    def __init__(self, ptr, count, datatype, kind, obj, shape, stream=None, device=None):
        self.ptr, self.count, self.datatype, self.kind = ptr, count, datatype, kind
        self.obj, self.shape, self.stream, self.device = obj, shape, stream, device

    @property
    def nbytes(self):
        return self.count * ITEMSIZE[self.datatype]


def _override(found, dtype, itemsize, what, *args):
    """The datatype of a buffer whose own is found (None: it has none) read
    as dtype (None: as its own).  what % args names the buffer in a refusal,
    formatted only then (str of a numpy dtype takes microseconds)."""
    if dtype is None:
        if found is None:
            raise ArgumentError("%s has no moeccl datatype; pass dtype= to say how to read it"
                                % (what % args))
        return found
    dt = to_datatype(dtype)
    if ITEMSIZE[dt] != itemsize:
        raise ArgumentError("%s has %d-byte elements; dtype %s needs %d" %
                            (what % args, itemsize, dt.name, ITEMSIZE[dt]))
    return dt


# DataTypes of numpy and torch dtypes, filled as they are met (None: the
# dtype has no moeccl datatype, or is big-endian): numpy's dtype.name and
# str(torch dtype) cost microseconds a call.
_NP_TYPES = {}
_TORCH_TYPES = {}
try:
    from numpy import ndarray as _ndarray
except ImportError:
    _ndarray = None


def _cached_type(cache, d):
    """The DataType of dtype d (numpy's or torch's) from cache, looked up on
    first use; None if it has none."""
    try:
        return cache[d]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a dtype
        return None
    try:
        t = to_datatype(d)
    except ArgumentError:
        t = None
    cache[d] = t
    return t


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _numpy_ptr(a):
    """The data pointer of a C-contiguous numpy array: through the buffer
    protocol when it is writable and not empty (a ctypes view, well under a
    microsecond), else from __array_interface__ (a dict and a descr list
    built every call: microseconds)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


# The fast path's readers: facts, or None for anything the general path
# must look at (which also fills the dtype caches: a dtype the fast path has
# not met yet goes that way once).  _numpy_ptr's common case inline: a call
# saved is a tenth of a microsecond.
def _numpy_facts(a, writable):
    fl = a.flags
    if not fl.c_contiguous or writable and not fl.writeable:
        return None
    dt = _NP_TYPES.get(a.dtype)
    if dt is None:
        return None
    try:
        return _addressof(_from_buffer(a)), a.size, dt
    except (TypeError, ValueError, BufferError):
        return _numpy_ptr(a), a.size, dt


def _torch_facts(t, writable):
    if t.layout is not _STRIDED or not t.is_cpu or not t.is_contiguous() \
            or writable and t.requires_grad:
        return None
    dt = _TORCH_TYPES.get(t.dtype)
    if dt is None:
        return None
    return t.data_ptr(), t.numel(), dt


def _no_facts(obj, writable):
    return None


# the fast path's reader for a buffer's exact type (numpy.ndarray, and
# torch.Tensor once torch is imported); subclasses and other types go the
# general way
_FACTS = {_ndarray: _numpy_facts} if _ndarray is not None else {}
_STRIDED = None


def _facts_of(tp):
    global _STRIDED
    torch = _torch()
    if torch is None or tp is not torch.Tensor or not hasattr(tp, "is_cpu"):
        return _no_facts
    _STRIDED = torch.strided
    _FACTS[tp] = _torch_facts
    return _torch_facts


def host_pair(send, recv, send_times=1, recv_times=1):
    """(send's pointer, recv's pointer, send's elements, DataType) of two
    host buffers of one datatype, send_times x recv's elements = recv_times x
    send's, that as_buffer would take as they are (C-contiguous numpy arrays
    or CPU tensors of a moeccl datatype, recv writable), else None: then
    as_buffer and the call's checks either take them or say why not.  A type
    lookup each, no Buffer and no numpy __array_interface__ dict built: the
    fast path of the calls whose cost matters."""
    s = (_FACTS.get(type(send)) or _facts_of(type(send)))(send, False)
    if s is None:
        return None
    r = (_FACTS.get(type(recv)) or _facts_of(type(recv)))(recv, True)
    if r is None or r[1] * send_times != s[1] * recv_times or r[2] is not s[2]:
        return None
    return s[0], r[0], s[1], s[2]


def _from_numpy(a, name, writable, dtype):
    fl = a.flags
    if not fl.c_contiguous:
        raise ArgumentError("%s: numpy array is not C-contiguous (use np.ascontiguousarray)"
                            % name)
    if writable and not fl.writeable:
        raise ArgumentError("%s: numpy array is read-only but the call writes it" % name)
    if a.dtype.byteorder == ">":
        raise ArgumentError("%s: numpy array is big-endian (%s); moeccl needs native order"
                            % (name, a.dtype))
    found = _cached_type(_NP_TYPES, a.dtype)
    if dtype is None and found is not None:
        dt = found
    else:
        dt = _override(found, dtype, a.itemsize, "%s (numpy %s)", name, a.dtype)
    count = a.nbytes // ITEMSIZE[dt]
    return Buffer(_numpy_ptr(a), count, dt, "host", a, tuple(a.shape))


def _from_torch(t, name, writable, dtype):
    torch = _torch()
    cuda = t.is_cuda
    cpu = t.is_cpu if hasattr(t, "is_cpu") else t.device.type == "cpu"
    if not cuda and not cpu:
        raise ArgumentError("%s: tensor on device %s; moeccl takes cpu or cuda tensors"
                            % (name, t.device))
    if t.layout is not torch.strided:
        raise ArgumentError("%s: %s tensors are not supported (dense only)" % (name, t.layout))
    if not t.is_contiguous():
        raise ArgumentError("%s: tensor is not contiguous (call .contiguous())" % name)
    found = _cached_type(_TORCH_TYPES, t.dtype)
    if dtype is None and found is not None:
        dt = found
    else:
        dt = _override(found, dtype, t.element_size(), "%s (torch %s)", name, t.dtype)
    count = t.numel() * t.element_size() // ITEMSIZE[dt]
    if writable and t.requires_grad and t.is_leaf and torch.is_grad_enabled():
        raise ArgumentError("%s: a leaf tensor that requires grad cannot be written in place "
                            "(use torch.no_grad() or .detach())" % name)
    if cuda:
        stream = torch.cuda.current_stream(t.device).cuda_stream
        return Buffer(t.data_ptr(), count, dt, "cuda", t, tuple(t.shape), stream, t.device.index)
    return Buffer(t.data_ptr(), count, dt, "host", t, tuple(t.shape))


def _from_cai(obj, name, writable, dtype):
    cai = obj.__cuda_array_interface__
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    if strides is not None:
        want, step = [], itemsize
        for n in reversed(shape):
            want.append(step)
            step *= n
        if tuple(strides) != tuple(reversed(want)) and 0 not in shape:
            raise ArgumentError("%s: CUDA array is not C-contiguous (strides %s)"
                                % (name, tuple(strides)))
    if writable and readonly:
        raise ArgumentError("%s: CUDA array is read-only but the call writes it" % name)
    dt = _override(_TYPESTRS.get(typestr), dtype, itemsize, "%s (CUDA array of %s)", name,
                   typestr)
    n = 1
    for s in shape:
        n *= s
    count = n * itemsize // ITEMSIZE[dt]
    return Buffer(ptr or 0, count, dt, "cuda", obj, shape, cai.get("stream"))


def as_buffer(obj, name, writable=False, dtype=None):
    """The Buffer of obj, or ArgumentError saying why it is refused."""
    if type(obj) is _ndarray:
        return _from_numpy(obj, name, writable, dtype)
    np, torch = _numpy(), _torch()
    if np is not None and isinstance(obj, np.ndarray):
        return _from_numpy(obj, name, writable, dtype)
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name, writable, dtype)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, name, writable, dtype)
    if hasattr(obj, "__dlpack__"):
        if torch is not None:
            return _from_torch(torch.utils.dlpack.from_dlpack(obj), name, writable, dtype)
        if np is not None and hasattr(np, "from_dlpack"):
            return _from_numpy(np.from_dlpack(obj), name, writable, dtype)
    if obj is None:
        raise ArgumentError("%s is None" % name)
    raise ArgumentError("%s: %s is not a buffer moeccl takes (a numpy array, a torch tensor, "
                        "or an object with __cuda_array_interface__ or __dlpack__)"
                        % (name, type(obj).__name__))


def same_kind(bufs):
    """The common memory kind of the non-None buffers; refuses a mix."""
    if len(bufs) == 2 and bufs[0] is not None and bufs[1] is not None \
            and bufs[0].kind == bufs[1].kind:
        return bufs[0].kind
    kinds = {b.kind for b in bufs if b is not None}
    if len(kinds) > 1:
        raise ArgumentError("buffers of one call must all be host or all be CUDA memory")
    return kinds.pop() if kinds else "host"


def same_type(bufs, names):
    if len(bufs) == 2 and bufs[0].datatype == bufs[1].datatype:
        return bufs[0].datatype
    types = [(n, b.datatype) for n, b in zip(names, bufs) if b is not None]
    if len({t for _, t in types}) > 1:
        raise ArgumentError("datatypes differ: " +
                            ", ".join("%s %s" % (n, t.name) for n, t in types))
    return types[0][1]
