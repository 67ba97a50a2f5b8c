"""python -m moeccl.run -n N [--deadline S] script.py [args...]
python -m moeccl.run -n N [--deadline S] -m module [args...]

Starts N ranks of a Python program on this machine, without MPI: makes the
communicator's unique id here (this process serves the rendezvous, as
`moe_train -n` does), then starts each rank with MOECCL_RANK,
MOECCL_NRANKS and MOECCL_UNIQUE_ID (hex) in its environment, which
moeccl.Comm.from_env() reads.  A rank that fails stops the others; past
--deadline seconds every rank is killed and the exit status is 124.  The
exit status is the first failing rank's, else 0.
"""
import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time


def _die_with_parent():
    # a launcher killed (a test's timeout) takes its ranks with it
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m moeccl.run", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, required=True, help="ranks to start (>= 1)")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds before every rank is killed (0: none)")
    p.add_argument("-m", dest="module", help="run a module as `python -m` does")
    p.add_argument("program", nargs=argparse.REMAINDER, help="script.py [args...]")
    # the launcher's options end at the program (script.py or -m module):
    # what follows is the program's, options included
    argv = list(argv)
    cut = next((i for i, x in enumerate(argv) if x == "-m" or x == "--" or
                (not x.startswith("-") and i > 0 and argv[i - 1] not in ("-n", "--nranks",
                                                                         "--deadline"))), None)
    rest = []
    if cut is not None:
        if argv[cut] == "-m" and cut + 1 < len(argv):
            argv, rest = argv[:cut + 2], argv[cut + 2:]
        elif argv[cut] == "--":
            argv, rest = argv[:cut], argv[cut + 1:]
        else:
            argv, rest = argv[:cut], argv[cut:]
    a = p.parse_args(argv)
    a.program = list(a.program) + rest
    if a.nranks < 1:
        p.error("-n must be at least 1")
    if a.module is None and not a.program:
        p.error("give a script (or -m module) to run")
    return a


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    from .comm import get_unique_id
    uid = get_unique_id()
    cmd = [sys.executable] + (["-m", a.module] if a.module else []) + a.program
    procs = []
    for r in range(a.nranks):
        env = dict(os.environ, MOECCL_RANK=str(r), MOECCL_NRANKS=str(a.nranks),
                   MOECCL_UNIQUE_ID=uid.hex())
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent))
    status, end = 0, time.monotonic() + a.deadline if a.deadline > 0 else None
    left, grace = set(range(a.nranks)), None
    try:
        while left:
            for r in sorted(left):
                rc = procs[r].poll()
                if rc is None:
                    continue
                left.discard(r)
                if rc != 0 and status == 0:
                    why = "signal %d" % -rc if rc < 0 else "exit %d" % rc
                    print("moeccl.run: rank %d failed (%s); stopping the others" % (r, why),
                          file=sys.stderr)
                    status = rc if rc > 0 else 1
                    for q in left:
                        procs[q].terminate()
                    grace = time.monotonic() + 10  # then killed: SIGTERM may be handled
            if grace is not None and time.monotonic() > grace and left:
                for q in left:
                    procs[q].kill()
                for q in left:
                    procs[q].wait()
                return status
            if end is not None and time.monotonic() > end and left:
                print("moeccl.run: deadline of %g s passed; killing ranks %s"
                      % (a.deadline, sorted(left)), file=sys.stderr)
                for q in left:
                    procs[q].kill()
                for q in left:
                    procs[q].wait()
                return 124
            time.sleep(0.01)
    except KeyboardInterrupt:
        for p in procs:
            p.kill()
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
