"""Loading libmoeccl.so, its prototypes, result codes and the error class.

The library is looked for, in order: $MOECCL_LIBRARY (a path to the .so),
a build tree above this package's source (build/.libs, build-bench/.libs,
build-plain/lib), the dynamic loader's own search (LD_LIBRARY_PATH, the ld.so cache), the
lib directory of `pkg-config moeccl`, of sys.prefix and of /usr/local,
then the build trees of the checkout pip installed the package from.
"""
import ctypes
import os
import subprocess
import sys
import threading

c_int_p = ctypes.POINTER(ctypes.c_int)
c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_float_p = ctypes.POINTER(ctypes.c_float)
c_void_pp = ctypes.POINTER(ctypes.c_void_p)

UNIQUE_ID_BYTES = 128


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class ConfigStruct(ctypes.Structure):
    """moecclConfig_t (NCCL 2.28's ncclConfig_t fields)."""
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int),
                ("minCTAs", ctypes.c_int), ("maxCTAs", ctypes.c_int),
                ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int),
                ("trafficClass", ctypes.c_int), ("commName", ctypes.c_char_p),
                ("collnetEnable", ctypes.c_int), ("CTAPolicy", ctypes.c_int),
                ("shrinkShare", ctypes.c_int), ("nvlsCTAs", ctypes.c_int),
                ("nChannelsPerNetPeer", ctypes.c_int), ("nvlinkCentricSched", ctypes.c_int)]


CONFIG_MAGIC = 0xCAFEBEEF
CONFIG_UNDEF_INT = -2147483648

# moecclResult_t
RESULT_NAMES = ["moecclSuccess", "moecclUnhandledCudaError", "moecclSystemError",
                "moecclInternalError", "moecclInvalidArgument", "moecclInvalidUsage",
                "moecclRemoteError", "moecclInProgress", "moecclTimeout"]
SUCCESS, IN_PROGRESS = 0, 7


class MoecclError(RuntimeError):
    """A moeccl call failed.  .result is the moecclResult_t value, .name its
    C name, .call the function, .detail moecclGetLastError's text."""

    def __init__(self, result, call, detail):
        self.result = result
        self.name = RESULT_NAMES[result] if 0 <= result < len(RESULT_NAMES) else str(result)
        self.call = call
        self.detail = detail
        msg = "%s: %s" % (call, self.name)
        if detail:
            msg += ": " + detail
        super().__init__(msg)


class ArgumentError(ValueError):
    """The Python side refused an argument before calling the library
    (wrong shape, dtype, device, layout or type)."""


def _candidates():
    env = os.environ.get("MOECCL_LIBRARY")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(os.path.dirname(here))
    paths = [os.path.join(top, rel, "libmoeccl.so.0")
             for rel in ("build/.libs", "build-bench/.libs", "build-plain/lib")]
    paths.append("libmoeccl.so.0")
    dirs = []
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "moeccl"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            dirs.append(out.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    dirs += [os.path.join(sys.prefix, "lib"), "/usr/local/lib"]
    try:  # written by pip install: the checkout's build trees
        from ._checkout import BUILD_LIBDIRS
        dirs += BUILD_LIBDIRS
    except ImportError:
        pass
    paths += [os.path.join(d, "libmoeccl.so.0") for d in dirs]
    return paths, False


def _mapped_path(name):
    """The file the loader mapped for name (it may have searched for it)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith("libmoeccl.so"):
                    return path
    except OSError:
        pass
    return name


_lib = None
_lib_lock = threading.Lock()


def library_path():
    """The path of the libmoeccl.so this package uses (loading it)."""
    lib()
    return _lib._moeccl_path


def lib():
    """The loaded library (loaded and prototyped on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            paths, forced = _candidates()
            tried = []
            for p in paths:
                if os.sep in p and not os.path.exists(p):
                    tried.append(p + " (absent)")
                    continue
                try:
                    handle = ctypes.CDLL(p)
                except OSError as e:
                    tried.append("%s (%s)" % (p, e))
                    continue
                handle._moeccl_path = _mapped_path(p)
                _prototype(handle)
                _lib = handle
                break
            if _lib is None:
                hint = ("MOECCL_LIBRARY is set: fix the path" if forced else
                        "set MOECCL_LIBRARY to the path of libmoeccl.so.0, or put its "
                        "directory on LD_LIBRARY_PATH")
                raise OSError("moeccl: cannot load libmoeccl.so.0; tried: %s; %s"
                              % ("; ".join(tried), hint))
    return _lib


def _prototype(h):
    R = ctypes.c_int
    vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    protos = {
        "moecclGetVersion": [c_int_p],
        "moecclGetUniqueId": [ctypes.POINTER(UniqueIdStruct)],
        "moecclCommInitRank": [c_void_pp, i, UniqueIdStruct, i],
        "moecclCommInitRankConfig": [c_void_pp, i, UniqueIdStruct, i,
                                     ctypes.POINTER(ConfigStruct)],
        "moecclCommSplit": [vp, i, i, c_void_pp, ctypes.POINTER(ConfigStruct)],
        "moecclCommDestroy": [vp],
        "moecclCommAbort": [vp],
        "moecclCommCount": [vp, c_int_p],
        "moecclCommUserRank": [vp, c_int_p],
        "moecclCommGetAsyncError": [vp, c_int_p],
        "moecclMemAlloc": [c_void_pp, sz],
        "moecclMemFree": [vp],
        "moecclAlltoAll": [vp, vp, sz, i, vp, vp],
        "moecclAlltoAllv": [vp, c_size_p, c_size_p, vp, c_size_p, c_size_p, i, vp, vp],
        "moecclAllReduce": [vp, vp, sz, i, i, vp, vp],
        "moecclReduceScatter": [vp, vp, sz, i, i, vp, vp],
        "moecclAllGather": [vp, vp, sz, i, vp, vp],
        "moecclBroadcast": [vp, vp, sz, i, i, vp, vp],
        "moecclReduce": [vp, vp, sz, i, i, i, vp, vp],
        "moecclGather": [vp, vp, sz, i, i, vp, vp],
        "moecclScatter": [vp, vp, sz, i, i, vp, vp],
        "moecclRedOpCreatePreMulSum": [c_int_p, vp, i, i, vp],
        "moecclRedOpDestroy": [i, vp],
        "moecclSend": [vp, sz, i, i, vp, vp],
        "moecclRecv": [vp, sz, i, i, vp, vp],
        "moecclGroupStart": [],
        "moecclGroupEnd": [],
        "moecclHostStreamCreate": [c_void_pp],
        "moecclHostStreamSynchronize": [vp],
        "moecclHostStreamQuery": [vp],
        "moecclHostStreamDestroy": [vp],
        "moecclMoePlanCreate": [c_void_pp, i, c_int_p, vp],
        "moecclMoePlanDestroy": [vp],
        "moecclMoeLocalExperts": [vp, c_int_p, c_int_p],
        "moecclMoeLayout": [vp, vp, sz, i, sz, c_size_p, c_size_p],
        "moecclMoeDispatch": [vp, vp, vp, sz, sz, i, vp],
        "moecclMoeCombine": [vp, vp, sz, vp, vp, sz, i, vp],
        "moecclMoeDispatchBackward": [vp, vp, sz, vp, sz, i, vp],
        "moecclMoeCombineBackward": [vp, vp, vp, vp, vp, sz, vp, sz, i, vp],
    }
    for name, args in protos.items():
        f = getattr(h, name)
        f.argtypes = args
        f.restype = R
    h.moecclGetErrorString.argtypes = [R]
    h.moecclGetErrorString.restype = ctypes.c_char_p
    h.moecclGetLastError.argtypes = [vp]
    h.moecclGetLastError.restype = ctypes.c_char_p


def last_error(comm_handle=None):
    """moecclGetLastError's text for a communicator handle (or this thread)."""
    s = lib().moecclGetLastError(comm_handle)
    return s.decode(errors="replace") if s else ""


def check(result, call, comm_handle=None):
    """Raises MoecclError for a failed result; returns the result otherwise."""
    if result != SUCCESS:
        detail = last_error(comm_handle)
        if not detail and comm_handle is not None:
            detail = last_error(None)
        raise MoecclError(result, call, detail)
    return result


def call(name, *args, comm=None):
    """Calls moeccl function `name`, raising MoecclError on failure."""
    r = getattr(_lib or lib(), name)(*args)
    if r != SUCCESS:
        check(r, name, comm)
    return r


def version():
    """The library's version as (major, minor, patch)."""
    v = ctypes.c_int()
    call("moecclGetVersion", ctypes.byref(v))
    return (v.value // 10000, v.value // 100 % 100, v.value % 100)
