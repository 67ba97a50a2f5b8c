"""moeccl from Python: communicators, collectives, all-to-all(v),
point-to-point, groups and host streams over libmoeccl.so (ctypes), on
numpy arrays and torch tensors (host, or CUDA on the current stream).
The MoE autograd functions and MoELayer are in moeccl.torch; the launcher
is `python -m moeccl.run -n N script.py`."""
from ._buffers import DataType, RedOp, numpy_dtype, to_datatype, torch_dtype
from ._lib import ArgumentError, MoecclError, library_path, version
from .comm import (Comm, HostStream, env_rendezvous, get_unique_id, group, group_end,
                   group_start, unique_id_from_store)

SUM, PROD, MAX, MIN, AVG = RedOp.SUM, RedOp.PROD, RedOp.MAX, RedOp.MIN, RedOp.AVG

__all__ = ["ArgumentError", "AVG", "Comm", "DataType", "HostStream", "MAX", "MIN",
           "MoecclError", "PROD", "RedOp", "SUM", "env_rendezvous", "get_unique_id", "group",
           "group_end", "group_start", "library_path", "numpy_dtype", "to_datatype",
           "torch_dtype", "unique_id_from_store", "version"]
__version__ = "0.1.0"
