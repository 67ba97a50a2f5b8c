#!/usr/bin/env python3
"""The launcher's failure paths (tests/test_py_coll.sh): with `fail`, rank
1 exits 3 while the others wait in a collective for it; with `hang`, every
rank sleeps past the launcher's --deadline.  With `ok`, an all-reduce is
checked (run under torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, the id through torch's TCPStore)."""
import sys
import time

import numpy as np

import moeccl

mode = sys.argv[1]
c = moeccl.Comm.from_env()
if mode == "fail" and c.rank == 1:
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
x = np.ones(4)
c.all_reduce(x)  # the others wait here for rank 1 until it is stopped
c.destroy()
if not np.array_equal(x, np.full(4, float(c.size))):
    sys.exit(1)
print("rank %d of %d: rendezvous from the environment, all-reduce ok" % (c.rank, c.size))
