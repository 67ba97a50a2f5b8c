"""moeccl's MoE calls for PyTorch: a plan (MoePlan), dispatch and combine as
autograd Functions whose backward are the library's backward calls, and
MoELayer, an expert-parallel SwiGLU MoE layer a model can drop in.

Every call here is collective over the plan's communicator: every rank runs
the same layers in the same order, forward and backward (autograd does, as
long as every rank builds the same graph).  Tensors run on the host or on
the current CUDA stream (device tensors with a CUDA build of the library).
"""
import ctypes

import torch
import torch.nn.functional as F

from . import _lib
from ._buffers import ArgumentError, as_buffer, to_datatype
from .comm import Comm, _stream_handle

_COMBINE_TYPES = (torch.float32, torch.float16, torch.bfloat16)


class MoePlan:
    """A moecclMoePlan_t: the expert placement on comm (placement[e] = the
    rank holding expert e; None: contiguous blocks), laid out anew by each
    forward (layout()).  Free with close() (or `with`)."""

    def __init__(self, comm, num_experts, placement=None):
        if not isinstance(comm, Comm):
            raise ArgumentError("comm must be a moeccl.Comm")
        if not isinstance(num_experts, int) or num_experts < 1:
            raise ArgumentError("num_experts must be a positive int")
        self.comm, self.num_experts = comm, num_experts
        arr = None
        if placement is not None:
            placement = [int(p) for p in placement]
            if len(placement) != num_experts:
                raise ArgumentError("placement has %d entries for %d experts"
                                    % (len(placement), num_experts))
            bad = [p for p in placement if not 0 <= p < comm.size]
            if bad:
                raise ArgumentError("placement names rank %d of a %d-rank communicator"
                                    % (bad[0], comm.size))
            arr = (ctypes.c_int * num_experts)(*placement)
        h = ctypes.c_void_p()
        _lib.call("moecclMoePlanCreate", ctypes.byref(h), num_experts, arr, comm._h(),
                  comm=comm.handle)
        self.handle = h.value
        n = ctypes.c_int()
        _lib.call("moecclMoeLocalExperts", self.handle, ctypes.byref(n), None, comm=comm.handle)
        ids = (ctypes.c_int * max(n.value, 1))()
        _lib.call("moecclMoeLocalExperts", self.handle, ctypes.byref(n), ids, comm=comm.handle)
        self.local_experts = list(ids[:n.value])
        self.generation = 0
        self.num_tokens = self.topk = self.num_rows = 0
        self.recv_counts, self.num_dropped = [], 0

    def close(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            _lib.call("moecclMoePlanDestroy", h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        if self.handle is None:
            raise ArgumentError("MoE plan already closed")
        return self.handle

    def layout(self, topk_idx, capacity=0):
        """Collective: lays out this step from the top-k expert ids [T, k]
        (int32, or any integer tensor, converted; -1 for none); returns the
        rows each local expert receives."""
        if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 2:
            raise ArgumentError("topk_idx must be a 2-D tensor [tokens, topk]")
        if topk_idx.dtype.is_floating_point:
            raise ArgumentError("topk_idx must hold integers, not %s" % topk_idx.dtype)
        ids = topk_idx.detach().to("cpu", torch.int32).contiguous()
        if ids.numel() and (int(ids.max()) >= self.num_experts or int(ids.min()) < -1):
            raise ArgumentError("topk_idx holds an expert outside [-1, %d)" % self.num_experts)
        T, k = ids.shape
        if k < 1:
            raise ArgumentError("topk must be at least 1")
        if int(capacity) < 0:
            raise ArgumentError("capacity %d is negative (0: no limit)" % int(capacity))
        nl = len(self.local_experts)
        counts = (ctypes.c_size_t * max(nl, 1))()
        dropped = ctypes.c_size_t()
        _lib.call("moecclMoeLayout", self._h(), ids.data_ptr() if T else None, T, k,
                  int(capacity), counts, ctypes.byref(dropped), comm=self.comm.handle)
        self.generation += 1
        self.num_tokens, self.topk = T, k
        self.recv_counts = list(counts[:nl])
        self.num_rows = sum(self.recv_counts)
        self.num_dropped = dropped.value
        return list(self.recv_counts)


def _rows(t, n, hidden, like):
    """t if it has rows, else a one-row stand-in (the library takes no NULL
    for a buffer of a call that has rows elsewhere)."""
    return t if n else torch.empty((1, hidden), dtype=like.dtype, device=like.device)


def _check_tokens(x, plan, name):
    if not isinstance(x, torch.Tensor):
        raise ArgumentError("%s must be a torch tensor" % name)
    if x.dim() != 2:
        raise ArgumentError("%s must be 2-D [tokens, hidden], not %s" % (name, tuple(x.shape)))
    if x.shape[0] != plan.num_tokens:
        raise ArgumentError("%s has %d tokens; the plan's layout had %d"
                            % (name, x.shape[0], plan.num_tokens))
    if not x.is_contiguous():
        raise ArgumentError("%s is not contiguous (call .contiguous())" % name)


def _backward_plan(ctx):
    """The plan of ctx's forward, refused if it was laid out again since."""
    plan = ctx.plan
    if plan.generation != ctx.generation:
        raise RuntimeError("moeccl: the MoE plan was laid out again (another forward) "
                           "before this backward; run backward first or use one plan "
                           "per forward")
    return plan


def _stream(plan, *tensors):
    bufs = [as_buffer(t, "tensor") for t in tensors if t is not None]
    kinds = {b.kind for b in bufs}
    if len(kinds) > 1:
        raise ArgumentError("MoE tensors must all be on the host or all on CUDA")
    return _stream_handle(None, kinds.pop(), bufs) if kinds else None


class Dispatch(torch.autograd.Function):
    """tokens [T, H] -> expert rows [R, H] (moecclMoeDispatch); backward:
    moecclMoeDispatchBackward."""

    @staticmethod
    def forward(ctx, x, plan):
        _check_tokens(x, plan, "tokens")
        T, H = x.shape
        dt = int(to_datatype(x.dtype))
        R = plan.num_rows
        rows = torch.empty((max(R, 1), H), dtype=x.dtype, device=x.device)
        xs = _rows(x, T, H, x)
        _lib.call("moecclMoeDispatch", plan._h(), xs.data_ptr(), rows.data_ptr(), max(R, 1), H,
                  dt, _stream(plan, xs, rows), comm=plan.comm.handle)
        ctx.plan, ctx.generation, ctx.shape = plan, plan.generation, (T, H)
        return rows[:R]

    @staticmethod
    def backward(ctx, grad_rows):
        plan = _backward_plan(ctx)
        T, H = ctx.shape
        R = plan.num_rows
        g = grad_rows.contiguous()
        gx = torch.empty((max(T, 1), H), dtype=g.dtype, device=g.device)
        gr = _rows(g, R, H, g)
        _lib.call("moecclMoeDispatchBackward", plan._h(), gr.data_ptr(), max(R, 1),
                  gx.data_ptr(), H, int(to_datatype(g.dtype)), _stream(plan, gr, gx),
                  comm=plan.comm.handle)
        return gx[:T], None


class Combine(torch.autograd.Function):
    """expert rows [R, H], gate weights [T, k] (float32) -> tokens [T, H],
    weighted sums (moecclMoeCombine); backward: moecclMoeCombineBackward
    (the rows' gradient and the weights')."""

    @staticmethod
    def forward(ctx, rows, weights, plan):
        R, T = plan.num_rows, plan.num_tokens
        if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[0] != R:
            raise ArgumentError("expert rows must be [%d, hidden] (the layout's rows), not %s"
                                % (R, tuple(getattr(rows, "shape", ()))))
        if rows.dtype not in _COMBINE_TYPES:
            raise ArgumentError("combine takes float32, float16 or bfloat16 rows, not %s"
                                % rows.dtype)
        if weights.dtype != torch.float32 or tuple(weights.shape) != (T, plan.topk):
            raise ArgumentError("gate weights must be float32 [%d, %d], not %s %s"
                                % (T, plan.topk, weights.dtype, tuple(weights.shape)))
        H = rows.shape[1]
        # the gate weights where the rows are (the library copies host
        # weights at the call; device weights stay on the stream)
        rows, w = rows.contiguous(), weights.detach().to(rows.device).contiguous()
        out = torch.empty((max(T, 1), H), dtype=rows.dtype, device=rows.device)
        rs = _rows(rows, R, H, rows)
        ws = w if T else torch.zeros((1, plan.topk), dtype=torch.float32, device=rows.device)
        _lib.call("moecclMoeCombine", plan._h(), rs.data_ptr(), max(R, 1),
                  ctypes.cast(ws.data_ptr(), _lib.c_float_p), out.data_ptr(), H,
                  int(to_datatype(rows.dtype)), _stream(plan, rs, out), comm=plan.comm.handle)
        ctx.save_for_backward(rows, w)
        ctx.plan, ctx.generation, ctx.weights_device = plan, plan.generation, weights.device
        return out[:T]

    @staticmethod
    def backward(ctx, grad_out):
        plan = _backward_plan(ctx)
        rows, w = ctx.saved_tensors
        R, T, H = plan.num_rows, plan.num_tokens, rows.shape[1]
        g = grad_out.contiguous().to(rows.dtype)
        grad_rows = torch.empty((max(R, 1), H), dtype=rows.dtype, device=rows.device)
        # the weights, their gradient and the forward's rows where the rows
        # are: on a device the dot products run there, on the stream
        # (moecclMoe(3))
        grad_w = torch.empty((max(T, 1), plan.topk), dtype=torch.float32, device=rows.device)
        gs = _rows(g, T, H, g)
        ws = w if T else torch.zeros((1, plan.topk), dtype=torch.float32, device=rows.device)
        rs = _rows(rows, R, H, rows)
        _lib.call("moecclMoeCombineBackward", plan._h(), gs.data_ptr(),
                  ctypes.cast(ws.data_ptr(), _lib.c_float_p), rs.data_ptr(),
                  grad_rows.data_ptr(), max(R, 1),
                  ctypes.cast(grad_w.data_ptr(), _lib.c_float_p), H,
                  int(to_datatype(rows.dtype)), _stream(plan, gs, grad_rows),
                  comm=plan.comm.handle)
        return grad_rows[:R], grad_w[:T].to(ctx.weights_device), None


def dispatch(x, plan):
    """Dispatch.apply: tokens [T, H] -> expert rows [R, H] (differentiable)."""
    return Dispatch.apply(x, plan)


def combine(rows, weights, plan):
    """Combine.apply: expert rows and gate weights -> tokens (differentiable)."""
    return Combine.apply(rows, weights, plan)


class _GlobalSum(torch.autograd.Function):
    """The sum over the communicator's ranks of t; its gradient is this
    rank's share (identity): each rank's loss gradient flows only to its
    own tokens, so summing the replicated parameters' gradients over the
    ranks (MoELayer.allreduce_router_grads) counts every token once."""

    @staticmethod
    def forward(ctx, t, comm):
        out = t.detach().to("cpu", torch.float64).contiguous().clone()
        comm.all_reduce(out)
        return out.to(t.dtype).to(t.device)

    @staticmethod
    def backward(ctx, g):
        return g, None


class MoELayer(torch.nn.Module):
    """An expert-parallel MoE layer: router (Linear H -> E, no bias), top-k,
    softmax over the chosen logits, SwiGLU experts y = (silu(x W1) * (x W3))
    W2, the output the gate-weighted sum of each token's experts (plus x
    with residual=True).  Experts live on the ranks of comm in contiguous
    blocks (or as placement says); tokens travel with moeccl's dispatch and
    combine.  forward(x) takes this rank's tokens [T, H] (or [..., H]) and
    sets self.aux_loss, the load-balancing loss of every rank's tokens
    (aux_coef * E * sum_e f_e P_e).  The router is replicated: sum its
    gradient over the ranks (allreduce_router_grads) before the step, as a
    data-parallel wrapper would."""

    def __init__(self, comm, hidden, ffn, num_experts, topk=2, capacity=0, aux_coef=0.01,
                 residual=False, placement=None, seed=0, dtype=torch.float32):
        super().__init__()
        if not 1 <= topk <= num_experts:
            raise ArgumentError("topk %d is not in [1, num_experts=%d]" % (topk, num_experts))
        if hidden < 1 or ffn < 1:
            raise ArgumentError("hidden and ffn must be positive")
        if dtype not in _COMBINE_TYPES:
            raise ArgumentError("dtype %s: the layer computes in float32, float16 or bfloat16"
                                % dtype)
        if capacity < 0:
            raise ArgumentError("capacity %d is negative (0: no limit)" % capacity)
        self.comm, self.hidden, self.ffn = comm, hidden, ffn
        self.num_experts, self.topk, self.capacity = num_experts, topk, capacity
        self.aux_coef, self.residual = aux_coef, residual
        self.plan = MoePlan(comm, num_experts, placement)
        self.local_experts = self.plan.local_experts
        g = torch.Generator().manual_seed(seed)
        self.router = torch.nn.Linear(hidden, num_experts, bias=False)
        with torch.no_grad():  # the same router on every rank
            self.router.weight.copy_(torch.randn(num_experts, hidden, generator=g) / hidden ** 0.5)
        nl = len(self.local_experts)
        self.w1 = torch.nn.Parameter(torch.empty(nl, hidden, ffn, dtype=dtype))
        self.w3 = torch.nn.Parameter(torch.empty(nl, hidden, ffn, dtype=dtype))
        self.w2 = torch.nn.Parameter(torch.empty(nl, ffn, hidden, dtype=dtype))
        with torch.no_grad():  # expert e's weights do not depend on where it lives
            for i, e in enumerate(self.local_experts):
                ge = torch.Generator().manual_seed(seed * 1000003 + 1 + e)
                self.w1[i].copy_(torch.randn(hidden, ffn, generator=ge) / hidden ** 0.5)
                self.w3[i].copy_(torch.randn(hidden, ffn, generator=ge) / hidden ** 0.5)
                self.w2[i].copy_(torch.randn(ffn, hidden, generator=ge) / ffn ** 0.5)
        self.router.to(dtype)
        self.aux_loss = None

    @torch.no_grad()
    def load_full(self, wg, w1, w3, w2):
        """Sets the weights from the whole layer's: wg [H, E] (moe_train's
        layout: router logits = x @ wg), w1, w3 [E, H, F], w2 [E, F, H];
        this rank keeps its experts' slices."""
        self.router.weight.copy_(torch.as_tensor(wg).t())
        for i, e in enumerate(self.local_experts):
            self.w1[i].copy_(torch.as_tensor(w1[e]))
            self.w3[i].copy_(torch.as_tensor(w3[e]))
            self.w2[i].copy_(torch.as_tensor(w2[e]))

    def allreduce_router_grads(self):
        """Sums the router's gradient over the ranks (call after backward)."""
        g = self.router.weight.grad
        if g is None:
            g = torch.zeros_like(self.router.weight)
        buf = g.detach().to("cpu").contiguous().clone()
        self.comm.all_reduce(buf)
        self.router.weight.grad = buf.to(self.router.weight.device)

    def _experts(self, rows):
        outs, start = [], 0
        for i, n in enumerate(self.plan.recv_counts):
            if n:
                r = rows[start:start + n]
                h = F.silu(r @ self.w1[i]) * (r @ self.w3[i])
                outs.append(h @ self.w2[i])
            start += n
        if not outs:
            return rows * 0
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def forward(self, x):
        if not isinstance(x, torch.Tensor):
            raise ArgumentError("MoELayer takes a torch tensor")
        if x.shape[-1] != self.hidden:
            raise ArgumentError("input's last dimension is %d; the layer's hidden is %d"
                                % (x.shape[-1], self.hidden))
        if not x.dtype.is_floating_point:
            raise ArgumentError("MoELayer takes a floating-point input, not %s" % x.dtype)
        shape = x.shape
        x2 = x.reshape(-1, self.hidden).contiguous()
        logits = self.router(x2)
        top, ids = torch.topk(logits, self.topk, dim=1)
        gate = torch.softmax(top.float(), dim=1)
        self.plan.layout(ids, self.capacity)
        rows = Dispatch.apply(x2, self.plan)
        y = Combine.apply(self._experts(rows), gate, self.plan)
        self.aux_loss = self._aux(logits, ids)
        if self.residual:
            y = y + x2
        return y.reshape(shape)

    def _aux(self, logits, ids):
        E, T = self.num_experts, logits.shape[0]
        p = torch.softmax(logits.float(), dim=1)
        counts = torch.bincount(ids.reshape(-1).cpu(), minlength=E).to(torch.float64)
        stats = torch.cat([counts, torch.tensor([float(T)], dtype=torch.float64)])
        self.comm.all_reduce(stats)
        n = stats[E].item()
        if n == 0:
            return p.sum() * 0
        f = (stats[:E] / (n * self.topk)).to(p.device, p.dtype)
        psum = _GlobalSum.apply(p.sum(0), self.comm)
        return self.aux_coef * E * torch.sum(f * psum / n)

    def extra_repr(self):
        return "hidden=%d, ffn=%d, experts=%d (local %s), topk=%d, ranks=%d" % (
            self.hidden, self.ffn, self.num_experts, self.local_experts, self.topk,
            self.comm.size)
