"""Unique ids, communicators, collectives, point-to-point, groups and host
streams over libmoeccl (ctypes)."""
import contextlib
import ctypes
import os
import threading
import time

from . import _lib
from ._buffers import (_REDOP_NAMES, ArgumentError, as_buffer, host_pair, same_kind, same_type,
                       to_datatype, to_redop)
from ._lib import MoecclError, call

# the reductions' names as the fast paths take them (exactly these strings;
# any other spelling, RedOp or int goes through to_redop)
_FAST_OPS = {name: int(op) for name, op in _REDOP_NAMES.items()}

# ------------------------------------------------------------ unique ids


def get_unique_id():
    """A fresh unique id (128 bytes).  This process serves the rendezvous
    until every rank has joined, so it must stay alive until then."""
    uid = _lib.UniqueIdStruct()
    call("moecclGetUniqueId", ctypes.byref(uid))
    return ctypes.string_at(ctypes.addressof(uid), _lib.UNIQUE_ID_BYTES)


def _uid_struct(uid):
    if isinstance(uid, str):
        try:
            uid = bytes.fromhex(uid)
        except ValueError:
            raise ArgumentError("unique id string is not hex") from None
    if not isinstance(uid, (bytes, bytearray, memoryview)):
        raise ArgumentError("unique id must be bytes (from get_unique_id), not %s"
                            % type(uid).__name__)
    uid = bytes(uid)
    if len(uid) != _lib.UNIQUE_ID_BYTES:
        raise ArgumentError("unique id has %d bytes, want %d" % (len(uid), _lib.UNIQUE_ID_BYTES))
    s = _lib.UniqueIdStruct()
    ctypes.memmove(ctypes.addressof(s), uid, len(uid))
    return s


def unique_id_from_store(store, rank, key="moeccl/unique_id", timeout=None):
    """The unique id through a key-value store shared by the ranks (torch's
    TCPStore, FileStore, ... anything with set(key, bytes) and get(key)):
    rank 0 makes it and sets it, the others wait for it and get it."""
    if rank == 0:
        uid = get_unique_id()
        store.set(key, uid)
        return uid
    if timeout is not None and hasattr(store, "wait"):
        import datetime
        store.wait([key], datetime.timedelta(seconds=timeout))
    uid = store.get(key)
    return bytes(uid)


# ------------------------------------------------------------ streams and groups

class _GroupState(threading.local):
    """This thread's group depth and the buffers its open group keeps alive.
    Class defaults, so that reading them raises no AttributeError inside
    (getattr with a default pays about a microsecond for one)."""
    depth = 0
    refs = ()  # a list from the outermost group_start on


_group = _GroupState()


def _keep(objs):
    """Keeps buffers alive until the outermost group_end."""
    if _group.depth > 0:
        _group.refs.extend(objs)


def group_start():
    """moecclGroupStart: calls up to the matching group_end are issued together."""
    call("moecclGroupStart")
    if _group.depth == 0:
        _group.refs = []
    _group.depth += 1


def group_end():
    """moecclGroupEnd: the outermost end issues the group's calls."""
    depth = _group.depth
    if depth == 0:
        raise ArgumentError("group_end without group_start")
    _group.depth = depth - 1
    try:
        call("moecclGroupEnd")
    finally:
        if _group.depth == 0:
            _group.refs = []


@contextlib.contextmanager
def group():
    """with moeccl.group(): ...  -- group_start / group_end."""
    group_start()
    try:
        yield
    finally:
        group_end()


class HostStream:
    """A library-owned host stream: calls issued on it return at once and
    run in order on a library thread.  The stream keeps the buffers of its
    calls alive until synchronize()."""

    def __init__(self):
        h = ctypes.c_void_p()
        call("moecclHostStreamCreate", ctypes.byref(h))
        self.handle = h.value
        self._refs = []

    def _check_live(self):
        if self.handle is None:
            raise ArgumentError("host stream already destroyed")

    def synchronize(self):
        """Waits for the stream's calls; raises the first error they met."""
        self._check_live()
        try:
            call("moecclHostStreamSynchronize", self.handle)
        finally:
            self._refs = []

    def query(self):
        """True when idle, False while work runs; raises a met error."""
        self._check_live()
        r = _lib.lib().moecclHostStreamQuery(self.handle)
        if r == _lib.IN_PROGRESS:
            return False
        _lib.check(r, "moecclHostStreamQuery")
        return True

    def destroy(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            try:
                call("moecclHostStreamDestroy", h)
            finally:
                self._refs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()


def _stream_handle(stream, kind, bufs):
    """The moecclStream_t of a call's stream argument."""
    if kind == "cuda":
        if stream is None:
            for b in bufs:
                if b is not None and b.stream is not None:
                    return b.stream
            raise ArgumentError("CUDA buffers without torch: pass stream= (a CUDA stream handle)")
        if isinstance(stream, HostStream):
            raise ArgumentError("CUDA buffers cannot go on a host stream")
        if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
            return stream.cuda_stream
        if hasattr(stream, "ptr"):  # cupy
            return stream.ptr
        if isinstance(stream, int):
            return stream
        raise ArgumentError("stream %r is not a CUDA stream" % (stream,))
    if stream is None:
        return None
    if isinstance(stream, HostStream):
        stream._check_live()
        stream._refs.extend(b.obj for b in bufs if b is not None)
        return stream.handle
    raise ArgumentError("host buffers take stream=None or a moeccl.HostStream, not %s"
                        % type(stream).__name__)


def _same_count(sb, rb):
    if rb.count != sb.count:
        raise ArgumentError("recv has %d elements, send %d: they must match"
                            % (rb.count, sb.count))


def _size_array(values, n, name):
    try:
        vals = [int(v) for v in values]
    except TypeError:
        raise ArgumentError("%s must be a sequence of %d counts" % (name, n)) from None
    if len(vals) != n:
        raise ArgumentError("%s has %d entries, want %d (one per rank)" % (name, len(vals), n))
    if any(v < 0 for v in vals):
        raise ArgumentError("%s has a negative entry" % name)
    return (ctypes.c_size_t * n)(*vals), vals


# ------------------------------------------------------------ communicator


def _config(comm_name=None, net_name=None, split_share=None):
    """A moecclConfig_t, or None when nothing is set.  (blocking is not
    offered: every call here waits for its result.)"""
    if comm_name is None and net_name is None and split_share is None:
        return None
    c = _lib.ConfigStruct()
    for f, _ in c._fields_:
        if f not in ("size", "magic", "version", "netName", "commName"):
            setattr(c, f, _lib.CONFIG_UNDEF_INT)
    c.size = ctypes.sizeof(c)
    c.magic = _lib.CONFIG_MAGIC
    c.version = 100  # MOECCL_VERSION_CODE of 0.1.0
    if split_share is not None:
        c.splitShare = int(bool(split_share))
    c.commName = comm_name.encode() if comm_name else None
    c.netName = net_name.encode() if net_name else None
    return c


class Comm:
    """A moeccl communicator.

    Comm(nranks, unique_id, rank) joins (collective over nranks processes);
    Comm.from_env() takes the rank and id from `python -m moeccl.run` or
    torchrun.  Methods raise ArgumentError (a ValueError) for arguments
    refused before the call and MoecclError, carrying moecclGetLastError's
    text, when the library fails.  `with Comm(...) as c:` destroys it on
    exit (aborts it when an exception leaves the block)."""

    def __init__(self, nranks, unique_id, rank, **config):
        if not isinstance(nranks, int) or nranks < 1:
            raise ArgumentError("nranks must be a positive int, not %r" % (nranks,))
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise ArgumentError("rank %r is not in [0, %d)" % (rank, nranks))
        uid = _uid_struct(unique_id)
        h = ctypes.c_void_p()
        cfg = _config(**config)
        if cfg is None:
            call("moecclCommInitRank", ctypes.byref(h), nranks, uid, rank)
        else:
            call("moecclCommInitRankConfig", ctypes.byref(h), nranks, uid, rank,
                 ctypes.byref(cfg))
        self._init_handle(h.value)

    @classmethod
    def _wrap(cls, handle):
        c = cls.__new__(cls)
        c._init_handle(handle)
        return c

    def _init_handle(self, handle):
        self.handle = handle
        n, r = ctypes.c_int(), ctypes.c_int()
        call("moecclCommCount", handle, ctypes.byref(n), comm=handle)
        call("moecclCommUserRank", handle, ctypes.byref(r), comm=handle)
        self.size, self.rank = n.value, r.value
        lib = _lib.lib()  # the fast paths' functions
        self._alltoall, self._allreduce = lib.moecclAlltoAll, lib.moecclAllReduce
        self._reducescatter, self._allgather = lib.moecclReduceScatter, lib.moecclAllGather
        self._premul = []

    @classmethod
    def from_env(cls, timeout=300, **config):
        """The communicator of this process's job: MOECCL_UNIQUE_ID (hex),
        MOECCL_RANK and MOECCL_NRANKS as `python -m moeccl.run` sets them;
        else torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the
        id through torch's TCPStore)."""
        nranks, uid, rank = env_rendezvous(timeout)
        return cls(nranks, uid, rank, **config)

    # -- lifetime

    def _h(self):
        if self.handle is None:
            raise ArgumentError("communicator already destroyed or aborted")
        return self.handle

    def destroy(self):
        """Collective: waits for this rank's calls, frees the communicator."""
        if self.handle is not None:
            h, self.handle = self.handle, None
            call("moecclCommDestroy", h)

    def abort(self):
        """Local: abandons outstanding calls and frees the communicator."""
        if self.handle is not None:
            h, self.handle = self.handle, None
            call("moecclCommAbort", h)

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is None:
            self.destroy()
        else:
            self.abort()

    def __repr__(self):
        state = "rank %d of %d" % (self.rank, self.size) if self.handle else "destroyed"
        return "<moeccl.Comm %s>" % state

    @property
    def last_error(self):
        """moecclGetLastError's text for this communicator."""
        return _lib.last_error(self.handle)

    def async_error(self):
        """None, or the MoecclError that broke the communicator asynchronously."""
        r = ctypes.c_int()
        call("moecclCommGetAsyncError", self._h(), ctypes.byref(r), comm=self.handle)
        if r.value in (_lib.SUCCESS, _lib.IN_PROGRESS):
            return None
        return MoecclError(r.value, "moecclCommGetAsyncError", self.last_error)

    def split(self, color, key=None, **config):
        """Collective: a new Comm of the ranks with the same color (ordered
        by key, default this rank), or None for color None / -1."""
        color = -1 if color is None else int(color)
        if color < -1:
            raise ArgumentError("color must be >= 0, or -1/None for no communicator")
        key = self.rank if key is None else int(key)
        h = ctypes.c_void_p()
        cfg = _config(**config)
        call("moecclCommSplit", self._h(), color, key, ctypes.byref(h),
             ctypes.byref(cfg) if cfg is not None else None, comm=self.handle)
        return Comm._wrap(h.value) if h.value else None

    # -- helpers

    def _run(self, name, bufs, stream, *args):
        kind = same_kind(bufs)
        s = None if stream is None and kind == "host" else _stream_handle(stream, kind, bufs)
        if _group.depth:
            _keep([b.obj for b in bufs if b is not None])
        call(name, *args, s, comm=self.handle)

    def _pair(self, send, recv, dtype):
        """The handle and the Buffers of send and recv (written), of one
        datatype."""
        h = self._h()
        sb = as_buffer(send, "send", dtype=dtype)
        rb = as_buffer(recv, "recv", writable=True, dtype=dtype)
        same_type([sb, rb], ["send", "recv"])
        return h, sb, rb

    def _nranks_times(self, big, big_name, small, small_name):
        """Refuses buffers unless big holds nranks x small's elements."""
        if big.count != small.count * self.size:
            raise ArgumentError("%s has %d elements; want nranks (%d) x %s's %d"
                                % (big_name, big.count, self.size, small_name, small.count))

    def _root(self, root):
        if not isinstance(root, int) or not 0 <= root < self.size:
            raise ArgumentError("root %r is not a rank of this %d-rank communicator"
                                % (root, self.size))
        return root

    def _op(self, op):
        return to_redop(op)

    # -- all-to-all

    def all_to_all(self, send, recv, stream=None, dtype=None):
        """Block j of send (send.size / nranks elements) to rank j; block i of
        recv from rank i.  send and recv have the same size and type."""
        h = self.handle
        if stream is None and dtype is None and h is not None:
            # the fast path: two host buffers that pass every check as they
            # are go straight to the library; anything else, refusals
            # included, takes the general path below
            f = host_pair(send, recv)
            if f is not None and not f[2] % self.size:
                if _group.depth:
                    _keep([send, recv])
                rc = self._alltoall(f[0], f[1], f[2] // self.size, f[3], h, None)
                if rc:
                    _lib.check(rc, "moecclAlltoAll", h)
                return
        h, sb, rb = self._pair(send, recv, dtype)
        if sb.count % self.size:
            raise ArgumentError("send has %d elements, not a multiple of %d ranks"
                                % (sb.count, self.size))
        _same_count(sb, rb)
        self._run("moecclAlltoAll", [sb, rb], stream, sb.ptr, rb.ptr, sb.count // self.size,
                  int(sb.datatype), h)

    def all_to_allv(self, send, send_counts, recv, recv_counts, send_displs=None,
                    recv_displs=None, stream=None, dtype=None):
        """send_counts[j] elements at send_displs[j] to rank j, received at
        its recv_displs[i]; displacements default to the counts' prefix sums.
        Counts and displacements are in elements."""
        n = self.size
        h, sb, rb = self._pair(send, recv, dtype)
        sc, scv = _size_array(send_counts, n, "send_counts")
        rc, rcv = _size_array(recv_counts, n, "recv_counts")
        sd, sdv = self._displs(send_displs, scv, "send_displs")
        rd, rdv = self._displs(recv_displs, rcv, "recv_displs")
        for name, cnt, dis, buf in (("send", scv, sdv, sb), ("recv", rcv, rdv, rb)):
            for j in range(n):
                if cnt[j] and dis[j] + cnt[j] > buf.count:
                    raise ArgumentError("%s block %d (%d elements at %d) is past the end of "
                                        "%s (%d elements)" % (name, j, cnt[j], dis[j], name,
                                                              buf.count))
        self._run("moecclAlltoAllv", [sb, rb], stream, sb.ptr, sc, sd, rb.ptr, rc, rd,
                  int(sb.datatype), h)

    def _displs(self, displs, counts, name):
        if displs is None:
            acc, out = 0, []
            for c in counts:
                out.append(acc)
                acc += c
            displs = out
        return _size_array(displs, self.size, name)

    # -- reductions and gathers

    def all_reduce(self, send, recv=None, op="sum", stream=None, dtype=None):
        """recv = op over ranks of send (in place when recv is None or send)."""
        h = self.handle
        if stream is None and dtype is None and h is not None and op.__class__ is str:
            # the fast path, as all_to_all's
            o = _FAST_OPS.get(op)
            f = host_pair(send, send if recv is None else recv) if o is not None else None
            if f is not None:
                if _group.depth:
                    _keep([send, recv])
                rc = self._allreduce(f[0], f[1], f[2], f[3], o, h, None)
                if rc:
                    _lib.check(rc, "moecclAllReduce", h)
                return
        if recv is None:
            h = self._h()
            sb = rb = as_buffer(send, "send", writable=True, dtype=dtype)
        else:
            h, sb, rb = self._pair(send, recv, dtype)
            _same_count(sb, rb)
        self._run("moecclAllReduce", [sb, rb], stream, sb.ptr, rb.ptr, sb.count,
                  int(sb.datatype), self._op(op), h)

    def reduce_scatter(self, send, recv, op="sum", stream=None, dtype=None):
        """Rank i gets block i (recv.size elements) of op over ranks of send
        (nranks * recv.size elements)."""
        h = self.handle
        if stream is None and dtype is None and h is not None and op.__class__ is str:
            o = _FAST_OPS.get(op)
            f = host_pair(send, recv, self.size, 1) if o is not None else None
            if f is not None:
                if _group.depth:
                    _keep([send, recv])
                rc = self._reducescatter(f[0], f[1], f[2] // self.size, f[3], o, h, None)
                if rc:
                    _lib.check(rc, "moecclReduceScatter", h)
                return
        h, sb, rb = self._pair(send, recv, dtype)
        self._nranks_times(sb, "send", rb, "recv")
        self._run("moecclReduceScatter", [sb, rb], stream, sb.ptr, rb.ptr, rb.count,
                  int(sb.datatype), self._op(op), h)

    def all_gather(self, send, recv, stream=None, dtype=None):
        """recv (nranks * send.size elements) = every rank's send in rank order."""
        h = self.handle
        if stream is None and dtype is None and h is not None:
            f = host_pair(send, recv, 1, self.size)
            if f is not None:
                if _group.depth:
                    _keep([send, recv])
                rc = self._allgather(f[0], f[1], f[2], f[3], h, None)
                if rc:
                    _lib.check(rc, "moecclAllGather", h)
                return
        h, sb, rb = self._pair(send, recv, dtype)
        self._nranks_times(rb, "recv", sb, "send")
        self._run("moecclAllGather", [sb, rb], stream, sb.ptr, rb.ptr, sb.count,
                  int(sb.datatype), h)

    def broadcast(self, send, recv=None, root=0, stream=None, dtype=None):
        """recv = the root's send on every rank.  In place when recv is None;
        send is read on the root only (None elsewhere, with recv given)."""
        h, root = self._h(), self._root(root)
        if recv is None:
            if send is None:
                raise ArgumentError("broadcast needs send (in place) or recv")
            rb = as_buffer(send, "buffer", writable=True, dtype=dtype)
            sb = rb
        else:
            rb = as_buffer(recv, "recv", writable=True, dtype=dtype)
            sb = as_buffer(send, "send", dtype=dtype) if send is not None else None
            if sb is None and self.rank == root:
                raise ArgumentError("the root (rank %d) needs send" % root)
        if sb is not None:
            same_type([sb, rb], ["send", "recv"])
            if sb.count != rb.count:
                raise ArgumentError("send has %d elements, recv %d: they must match"
                                    % (sb.count, rb.count))
        self._run("moecclBroadcast", [sb, rb], stream, sb.ptr if sb else None, rb.ptr,
                  rb.count, int(rb.datatype), root, h)

    def reduce(self, send, recv=None, op="sum", root=0, stream=None, dtype=None):
        """The root's recv = op over ranks of send (in place when recv is
        None; other ranks may pass recv None)."""
        h, root = self._h(), self._root(root)
        sb = as_buffer(send, "send", writable=recv is None and self.rank == root, dtype=dtype)
        rb = None
        if recv is not None:
            rb = as_buffer(recv, "recv", writable=True, dtype=dtype)
            same_type([sb, rb], ["send", "recv"])
            _same_count(sb, rb)
        rptr = rb.ptr if rb is not None else (sb.ptr if self.rank == root else None)
        self._run("moecclReduce", [sb, rb], stream, sb.ptr, rptr, sb.count, int(sb.datatype),
                  self._op(op), root, h)

    def gather(self, send, recv=None, root=0, stream=None, dtype=None):
        """The root's recv (nranks * send.size elements) = every send in rank
        order; recv is needed on the root only."""
        h, root = self._h(), self._root(root)
        sb = as_buffer(send, "send", dtype=dtype)
        rb = None
        if recv is not None:
            rb = as_buffer(recv, "recv", writable=True, dtype=dtype)
            same_type([sb, rb], ["send", "recv"])
        if self.rank == root:
            if rb is None:
                raise ArgumentError("the root (rank %d) needs recv" % root)
            self._nranks_times(rb, "recv", sb, "send")
        self._run("moecclGather", [sb, rb], stream, sb.ptr, rb.ptr if rb else None, sb.count,
                  int(sb.datatype), root, h)

    def scatter(self, send, recv, root=0, stream=None, dtype=None):
        """Block i (recv.size elements) of the root's send to rank i's recv;
        send is needed on the root only."""
        h, root = self._h(), self._root(root)
        rb = as_buffer(recv, "recv", writable=True, dtype=dtype)
        sb = None
        if send is not None:
            sb = as_buffer(send, "send", dtype=dtype)
            same_type([sb, rb], ["send", "recv"])
        if self.rank == root:
            if sb is None:
                raise ArgumentError("the root (rank %d) needs send" % root)
            self._nranks_times(sb, "send", rb, "recv")
        self._run("moecclScatter", [sb, rb], stream, sb.ptr if sb else None, rb.ptr, rb.count,
                  int(rb.datatype), root, h)

    def premul_sum(self, scalar, dtype):
        """A reduction op (an int usable as op=) that sums inputs multiplied
        by scalar first; valid for collectives of dtype until destroy_op or
        the communicator's end."""
        dt = to_datatype(dtype)
        from ._buffers import numpy_dtype
        import numpy as np
        value = np.array([scalar], dtype=numpy_dtype(dt))
        op = ctypes.c_int()
        call("moecclRedOpCreatePreMulSum", ctypes.byref(op),
             ctypes.c_void_p(value.__array_interface__["data"][0]), int(dt), 1, self._h(),
             comm=self.handle)
        return op.value

    def destroy_op(self, op):
        """Frees an op made by premul_sum."""
        call("moecclRedOpDestroy", int(op), self._h(), comm=self.handle)

    # -- point-to-point

    def send(self, buf, peer, stream=None, dtype=None):
        """Sends buf to rank peer (matched in order with its recv)."""
        h = self._h()
        b = as_buffer(buf, "buf", dtype=dtype)
        self._peer(peer)
        self._run("moecclSend", [b], stream, b.ptr, b.count, int(b.datatype), peer, h)

    def recv(self, buf, peer, stream=None, dtype=None):
        """Receives buf.size elements from rank peer into buf."""
        h = self._h()
        b = as_buffer(buf, "buf", writable=True, dtype=dtype)
        self._peer(peer)
        self._run("moecclRecv", [b], stream, b.ptr, b.count, int(b.datatype), peer, h)

    def _peer(self, peer):
        if not isinstance(peer, int) or not 0 <= peer < self.size:
            raise ArgumentError("peer %r is not a rank of this %d-rank communicator"
                                % (peer, self.size))


# ------------------------------------------------------------ environment

_STORES = []  # torchrun stores kept alive: rank 0's may be the others' server


def env_rendezvous(timeout=300):
    """(nranks, unique id, rank) of this process from the environment:
    moeccl.run's MOECCL_* variables, else torchrun's (TCPStore)."""
    env = os.environ
    if "MOECCL_UNIQUE_ID" in env:
        try:
            return int(env["MOECCL_NRANKS"]), bytes.fromhex(env["MOECCL_UNIQUE_ID"]), \
                int(env["MOECCL_RANK"])
        except (KeyError, ValueError) as e:
            raise ArgumentError("MOECCL_UNIQUE_ID is set but MOECCL_RANK/MOECCL_NRANKS are "
                                "missing or bad (%s)" % e) from None
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        import datetime
        from torch.distributed import TCPStore
        rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
        port = int(env.get("MASTER_PORT", "29500"))
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        store = TCPStore(env["MASTER_ADDR"], port, size, rank == 0 and not agent,
                         datetime.timedelta(seconds=timeout))
        # one id per launch: torchrun's restart count keeps keys apart
        key = "moeccl/unique_id/%s" % env.get("TORCHELASTIC_RESTART_COUNT", "0")
        uid = unique_id_from_store(store, rank, key)
        # rank 0's store may be the server the others still read from: it
        # lives until every rank has the id, and with the process after that
        _STORES.append(store)
        store.add(key + "/got", 1)
        if rank == 0 and not agent:
            deadline = time.monotonic() + timeout
            while store.add(key + "/got", 0) < size:
                if time.monotonic() > deadline:
                    raise ArgumentError("torchrun rendezvous: not every rank took the unique id "
                                        "within %g s" % timeout)
                time.sleep(0.01)
        return size, uid, rank
    raise ArgumentError("no rendezvous in the environment: run under `python -m moeccl.run "
                        "-n N` or torchrun, or build Comm(nranks, unique_id, rank) yourself")

