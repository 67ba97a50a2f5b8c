#!/usr/bin/env python3
"""PyTorch's torch.distributed, unchanged, on moeccl's NCCL drop-in.

  test_torch_dropin.py [--lib PATH] [--ranks 2,4] [--deadline 120]
  test_torch_dropin.py --gloo [--ranks 2]

The first form runs the NCCL backend with every rank a process on GPU 0 and
moeccl's libnccl.so.2 preloaded (LD_PRELOAD: libtorch_cuda.so finds its own
NCCL through an RPATH, so LD_LIBRARY_PATH would lose).  PATH is --lib, else
$MOECCL_NCCL_LIB, else build/shim/.libs/libnccl.so.2 or
build-plain/lib/libnccl.so.2 under the source tree; libmoeccl.so.0, which
it links, must be on LD_LIBRARY_PATH.  Skipped (exit 77, with the reason)
where torch is missing, has no CUDA or sees no GPU.

--gloo runs the same checks on the gloo backend with CPU tensors and no
drop-in, so that the checks themselves are exercised on machines without a
GPU.  Where gloo lacks a call (reduce_scatter_tensor, bf16, ...) the check
says so and builds the same result from calls gloo has; the NCCL run never
does that.

Each rank proves which libnccl.so.2 it mapped (/proc/self/maps) and fails
if it is not the drop-in, then checks, against references it computes
alone from every rank's seeded inputs: all_reduce (sum; float32, bf16),
broadcast, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single
(even, and uneven MoE-skewed splits at 4096 tokens x 1024 hidden in bf16),
a batch_isend_irecv ring, barrier, a new_group subset, DDP over two Linear
layers for 5 steps against one process trained on the concatenated batch,
and destroy_process_group.  Every rank has a deadline (--deadline seconds):
past it the rank prints the last step it reached and exits 124; the
launcher kills what is left a little later.  Exit status: 0 passed, 1
failed, 77 skipped.
"""
import argparse
import datetime
import faulthandler
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
TOKENS, HIDDEN = 4096, 1024  # the MoE all-to-all: tokens each rank sends, model width


# ---------------------------------------------------------------- launcher

def default_lib():
    env = os.environ.get("MOECCL_NCCL_LIB")
    if env:
        return env
    top = os.path.dirname(HERE)
    for rel in ("build/shim/.libs/libnccl.so.2", "build-plain/lib/libnccl.so.2"):
        if os.path.exists(os.path.join(top, rel)):
            return os.path.join(top, rel)
    return os.path.join(top, "build/shim/.libs/libnccl.so.2")


def why_skip(gloo):
    """None when this mode can run here, else the reason it cannot."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        return "torch is not installed for %s (%s)" % (sys.executable, e)
    if not dist.is_available():
        return "torch %s was built without torch.distributed" % torch.__version__
    if gloo:
        return None if dist.is_gloo_available() else "torch %s has no gloo backend" % torch.__version__
    if torch.version.cuda is None:
        return "torch %s lacks CUDA (a CPU-only build)" % torch.__version__
    if not dist.is_nccl_available():
        return "torch %s has no NCCL backend" % torch.__version__
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return "no GPU is visible to torch %s (CUDA %s)" % (torch.__version__, torch.version.cuda)
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_step(path):
    step = "(none: the rank printed no step)"
    for line in open(path, errors="replace"):
        head, _, rest = line.partition(": step ")
        if rest and head.startswith("rank "):
            step = rest.strip()
    return step


def launch(n, args, lib):
    """Runs n ranks of this script; True when every rank passed."""
    port = free_port()
    env = dict(os.environ)
    if not args.gloo:
        env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    logs = tempfile.mkdtemp(prefix="torch-dropin.")
    procs = []
    for r in range(n):
        log = os.path.join(logs, "rank%d.log" % r)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--world", str(n),
               "--port", str(port), "--deadline", str(args.deadline), "--lib", lib]
        if args.gloo:
            cmd.append("--gloo")
        with open(log, "w") as f:
            procs.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT), log))
    # the ranks keep their own deadline; this one only catches a rank that cannot
    kill_at = time.time() + args.deadline + 15
    failed_at = None
    while any(p.poll() is None for p, _ in procs):
        now = time.time()
        if failed_at is None and any(p.poll() not in (None, 0) for p, _ in procs):
            failed_at = now  # give the others a moment to say where they are, then stop them
        if now > kill_at or (failed_at and now > failed_at + 10):
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.2)
    ok = True
    for r, (p, log) in enumerate(procs):
        rc = p.wait()
        for line in open(log, errors="replace"):
            sys.stdout.write("[%d/%d] %s" % (r, n, line))
        if rc != 0:
            ok = False
            what = "killed by signal %d" % -rc if rc < 0 else "exit status %d" % rc
            print("rank %d of %d: %s; last step: %s" % (r, n, what, last_step(log)))
        os.unlink(log)
    os.rmdir(logs)
    sys.stdout.flush()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gloo", action="store_true", help="gloo backend, CPU tensors, no drop-in")
    ap.add_argument("--lib", default=None, help="moeccl's libnccl.so.2 (default: $MOECCL_NCCL_LIB, the build)")
    ap.add_argument("--ranks", default=None, help="rank counts, comma-separated (default 2,4; --gloo: 2)")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds each rank may take")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    mode = "gloo (CPU)" if args.gloo else "nccl (GPU 0, moeccl's drop-in preloaded)"
    why = why_skip(args.gloo)
    if why:
        print("SKIP: torch.distributed on %s: %s" % (mode, why))
        return SKIP
    lib = os.path.abspath(args.lib or default_lib())
    if not args.gloo and not os.path.exists(lib):
        print("FAIL: no drop-in at %s (build it, or give --lib / MOECCL_NCCL_LIB)" % lib)
        return 1
    ranks = [int(x) for x in (args.ranks or ("2" if args.gloo else "2,4")).split(",")]
    bad = []
    for n in ranks:
        print("== torch.distributed on %s, %d ranks%s" % (mode, n, "" if args.gloo else ": " + lib))
        sys.stdout.flush()
        t0 = time.time()
        ok = launch(n, args, lib)
        print("== %d ranks: %s in %.1fs" % (n, "passed" if ok else "FAILED", time.time() - t0))
        if not ok:
            bad.append(n)
    if bad:
        print("FAIL: %s ranks" % ",".join(map(str, bad)))
        return 1
    print("PASS: torch.distributed on %s, ranks %s" % (mode, ",".join(map(str, ranks))))
    return 0


# ---------------------------------------------------------------- one rank

class Rank:
    """What a rank needs: who it is, where its tensors live, the step it is at."""

    def __init__(self, args):
        self.r, self.n, self.gloo = args.rank, args.world, args.gloo
        self.step_name = "start"
        self.deadline = args.deadline

    def say(self, text):
        sys.stdout.write("rank %d: %s\n" % (self.r, text))
        sys.stdout.flush()

    def step(self, name):
        self.step_name = name
        self.say("step " + name)

    def watchdog(self):
        """Past the deadline: say the last step and leave, whatever the main thread is stuck in."""
        def fire():
            self.say("DEADLINE: %gs passed; last step: %s" % (self.deadline, self.step_name))
            os._exit(124)
        t = threading.Timer(self.deadline, fire)
        t.daemon = True
        t.start()
        # and should that thread never get the interpreter: tracebacks, then exit
        faulthandler.dump_traceback_later(self.deadline + 5, exit=True)


def gen(seed, shape, dtype, lo=-8, hi=9):
    """Integer-valued tensors: sums of a few ranks are exact in float32 and bf16."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def check_equal(what, got, want):
    import torch
    got = got.detach().cpu()
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError("%s: got %s %s, want %s %s" % (what, tuple(got.shape), got.dtype,
                                                             tuple(want.shape), want.dtype))
    if torch.equal(got, want):
        return
    bad = (got != want).nonzero()
    first = tuple(bad[0].tolist())
    raise AssertionError("%s: %d of %d elements wrong; first at %s: got %s, want %s" % (
        what, bad.shape[0], want.numel(), first, got[first].item(), want[first].item()))


def gloo_lacks(rk, call, err):
    """gloo has no such call: say so; the result is then built from calls gloo has."""
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    rk.say("note: gloo lacks %s (%s); checked through other calls" % (call, msg[:120]))


def proof_of_drop_in(rk, lib):
    """The libnccl.so.2 this process mapped must be the drop-in: print it and torch's view."""
    import torch
    mapped = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "libnccl" in os.path.basename(path) or "libmoeccl" in os.path.basename(path):
                mapped.add(path)
    for p in sorted(mapped):
        rk.say("mapped %s" % p)
    rk.say("torch %s, torch.cuda.nccl.version() = %s" % (torch.__version__, torch.cuda.nccl.version()))
    ncc = [p for p in mapped if os.path.basename(p).startswith("libnccl")]
    want = os.path.realpath(lib)
    if not ncc:
        raise AssertionError("no libnccl is mapped (torch loaded none yet?)")
    others = [p for p in ncc if os.path.realpath(p) != want]
    if others or want not in {os.path.realpath(p) for p in ncc}:
        raise AssertionError("the mapped libnccl is not the drop-in %s: %s" % (want, " ".join(sorted(ncc))))
    rk.say("drop-in loaded: %s" % want)


def coll_checks(rk, dev):
    import torch
    import torch.distributed as dist
    r, n = rk.r, rk.n
    count = (1 << 18) + 3  # not a multiple of anything a kernel likes

    rk.step("all_reduce sum float32")
    x = gen(100 + r, (count,), torch.float32).to(dev)
    dist.all_reduce(x)
    check_equal("all_reduce float32", x, sum(gen(100 + s, (count,), torch.float32) for s in range(n)))

    rk.step("all_reduce sum bf16")
    if hasattr(torch, "bfloat16") and (rk.gloo or torch.cuda.is_bf16_supported()):
        x = gen(200 + r, (count,), torch.bfloat16).to(dev)
        want = sum(gen(200 + s, (count,), torch.float32) for s in range(n)).to(torch.bfloat16)
        try:
            dist.all_reduce(x)
        except RuntimeError as e:
            if not rk.gloo:
                raise
            gloo_lacks(rk, "bf16 all_reduce", e)
            y = x.float()
            dist.all_reduce(y)
            x = y.to(torch.bfloat16)
        check_equal("all_reduce bf16", x, want)
    else:
        rk.say("no bf16 here: skipped")

    for root, dtype in ((n - 1, torch.float32), (0, torch.bfloat16)):
        rk.step("broadcast %s from rank %d" % (str(dtype).split(".")[-1], root))
        x = gen(300 + r, (count,), dtype).to(dev)
        try:
            dist.broadcast(x, src=root)
        except RuntimeError as e:
            if not rk.gloo:
                raise
            gloo_lacks(rk, "%s broadcast" % dtype, e)
            y = gen(300 + r, (count,), torch.float32).to(dev)
            dist.broadcast(y, src=root)
            x = y.to(dtype)
        check_equal("broadcast", x, gen(300 + root, (count,), dtype))

    rk.step("all_gather_into_tensor float32")
    x = gen(400 + r, (count,), torch.float32).to(dev)
    out = torch.empty(n * count, dtype=torch.float32, device=dev)
    try:
        dist.all_gather_into_tensor(out, x)
    except RuntimeError as e:
        if not rk.gloo:
            raise
        gloo_lacks(rk, "all_gather_into_tensor", e)
        parts = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(parts, x)
        out = torch.cat(parts)
    check_equal("all_gather_into_tensor", out, torch.cat([gen(400 + s, (count,), torch.float32) for s in range(n)]))

    rk.step("reduce_scatter_tensor sum float32")
    x = gen(500 + r, (n * count,), torch.float32).to(dev)
    out = torch.empty(count, dtype=torch.float32, device=dev)
    try:
        dist.reduce_scatter_tensor(out, x)
    except RuntimeError as e:
        if not rk.gloo:
            raise
        gloo_lacks(rk, "reduce_scatter_tensor", e)
        dist.all_reduce(x)
        out = x[r * count:(r + 1) * count]
    want = sum(gen(500 + s, (n * count,), torch.float32) for s in range(n))[r * count:(r + 1) * count]
    check_equal("reduce_scatter_tensor", out, want)

    rk.step("all_to_all_single even float32")
    x = gen(600 + r, (n * 1024,), torch.float32).to(dev)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    want = torch.cat([gen(600 + s, (n * 1024,), torch.float32)[r * 1024:(r + 1) * 1024] for s in range(n)])
    check_equal("all_to_all_single even", out, want)


def moe_splits(n):
    """Tokens rank s sends to rank d: skewed toward hot experts, one zero block, rows sum to TOKENS."""
    rows = []
    for s in range(n):
        w = [1.0 / (1 + (d + s) % n) ** 2 for d in range(n)]
        if n > 2:
            w[(s + 1) % n] = 0.0  # an expert rank this one routes nothing to
        c = [int(TOKENS * x / sum(w)) for x in w]
        c[s % n] += TOKENS - sum(c)
        rows.append(c)
    return rows


def moe_all_to_all(rk, dev):
    import torch
    import torch.distributed as dist
    r, n = rk.r, rk.n
    splits = moe_splits(n)
    dtype = torch.bfloat16
    rk.step("all_to_all_single uneven %dx%d bf16 splits %s" % (TOKENS, HIDDEN, splits[r]))
    tokens = lambda s: gen(700 + s, (TOKENS, HIDDEN), dtype, -100, 101)
    x = tokens(r).to(dev)
    recv = [splits[s][r] for s in range(n)]
    out = torch.empty(sum(recv), HIDDEN, dtype=dtype, device=dev)
    try:
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=splits[r])
    except RuntimeError as e:
        if not rk.gloo:
            raise
        gloo_lacks(rk, "bf16 all_to_all_single", e)
        y = torch.empty(sum(recv), HIDDEN, dtype=torch.float32, device=dev)
        dist.all_to_all_single(y, x.float(), output_split_sizes=recv, input_split_sizes=splits[r])
        out = y.to(dtype)
    want = []
    for s in range(n):
        off = sum(splits[s][:r])
        want.append(tokens(s)[off:off + splits[s][r]])
    check_equal("all_to_all_single uneven", out, torch.cat(want))


def p2p_and_groups(rk, dev):
    import torch
    import torch.distributed as dist
    r, n = rk.r, rk.n
    rk.step("batch_isend_irecv ring")
    x = gen(800 + r, (65537,), torch.float32).to(dev)
    got = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (r + 1) % n), dist.P2POp(dist.irecv, got, (r - 1) % n)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    check_equal("batch_isend_irecv ring", got, gen(800 + (r - 1) % n, (65537,), torch.float32))

    rk.step("barrier")
    dist.barrier()

    members = list(range(0, n, 2)) if n >= 4 else list(range(n))
    rk.step("new_group %s: all_reduce, broadcast" % members)
    group = dist.new_group(ranks=members)
    if r in members:
        x = gen(900 + r, (4099,), torch.float32).to(dev)
        dist.all_reduce(x, group=group)
        check_equal("new_group all_reduce", x, sum(gen(900 + s, (4099,), torch.float32) for s in members))
        x = gen(950 + r, (4099,), torch.float32).to(dev)
        dist.broadcast(x, src=members[-1], group=group)
        check_equal("new_group broadcast", x, gen(950 + members[-1], (4099,), torch.float32))
    dist.barrier()


def ddp_check(rk, dev):
    """DDP for 5 steps equals one process trained on every rank's batch at once."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    r, n, steps, batch = rk.r, rk.n, 5, 8

    def model():
        torch.manual_seed(1234)
        return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))

    def data(step, s):
        g = torch.Generator().manual_seed(10000 + 100 * step + s)
        return torch.randn(batch, 64, generator=g), torch.randn(batch, 16, generator=g)

    rk.step("DDP construction (broadcast of rank 0's parameters)")
    # small buckets: several bucketed all-reduces per step, on torch's own stream
    ddp = DDP(model().to(dev), device_ids=None if rk.gloo else [0], bucket_cap_mb=0.02)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref = model().to(dev)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        rk.step("DDP step %d of %d" % (step + 1, steps))
        x, y = data(step, r)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.to(dev)), y.to(dev)).backward()
        opt.step()
        xs, ys = zip(*(data(step, s) for s in range(n)))
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(torch.cat(xs).to(dev)), torch.cat(ys).to(dev)).backward()
        ref_opt.step()
    rk.step("DDP parameters against the single-process reference")
    worst = 0.0
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        diff = (p.detach().cpu() - q.detach().cpu()).abs().max().item()
        worst = max(worst, diff)
        if not torch.allclose(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5):
            raise AssertionError("DDP parameter %s differs from the reference by up to %g" % (name, diff))
    rk.say("DDP: %d steps, largest difference from the reference %.3g" % (steps, worst))
    del ddp


def worker(args):
    rk = Rank(args)
    rk.watchdog()
    try:
        import torch
        import torch.distributed as dist
        rk.say("pid %d, torch %s, python %s" % (os.getpid(), torch.__version__, sys.version.split()[0]))
        if rk.gloo:
            dev = torch.device("cpu")
        else:
            torch.cuda.set_device(0)
            dev = torch.device("cuda", 0)
            rk.step("drop-in check")
            proof_of_drop_in(rk, args.lib)
        rk.step("init_process_group")
        dist.init_process_group("gloo" if rk.gloo else "nccl", init_method="tcp://127.0.0.1:%d" % args.port,
                                rank=rk.r, world_size=rk.n,
                                timeout=datetime.timedelta(seconds=max(30, args.deadline - 10)))
        coll_checks(rk, dev)
        moe_all_to_all(rk, dev)
        p2p_and_groups(rk, dev)
        ddp_check(rk, dev)
        if not rk.gloo:
            torch.cuda.synchronize()
            rk.step("drop-in check after the run")
            proof_of_drop_in(rk, args.lib)
        rk.step("destroy_process_group")
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 -- any failure is reported with its step
        rk.say("FAIL at step %s: %s: %s" % (rk.step_name, type(e).__name__, e))
        sys.stdout.flush()
        os._exit(1)
    rk.say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
