/*
 * The one table of MOECCL_* environment variables, as an X-macro: param.h
 * makes an id and a typed accessor of each row (moeccl_param_<name>()), and
 * param.c the table moeccl_params[] with the rows' validation.  Add a
 * variable here and nowhere else, and document it in man/moeccl-env.7.md
 * in the same order with the same default (tests/test_param checks both).
 *
 *   X(NAME, name, TYPE, BAD, READ, default, min, max, choices, check, help)
 *
 * NAME    the variable without MOECCL_; name: its accessor's suffix.
 * TYPE    INT (decimal), SIZE (K, M, G suffixes), BOOL (a switch), STR.
 * BAD     what a bad value does: FAIL communicator creation with a text
 *         naming it, or WARN once and use the default.
 * READ    ONCE: the first read's value is kept for the process (the man
 *         page's rule; moeccl_param_reset forgets it).  EACH: read at every
 *         call, for variables that tests and the perf tools change in one
 *         process between communicators (algorithms, topology, bootstrap).
 * min,max INT and SIZE values must lie in [min, max] (both 0: any).
 * choices STR values must be one of these ('|'-separated, case-insensitive;
 *         NULL: any); the algorithm tables must name the same (test_param).
 * check   NULL, or a function of param.c that every value must pass.
 */
#ifndef MOECCL_PARAM_LIST_H_
#define MOECCL_PARAM_LIST_H_

/* clang-format off */
#define MOECCL_PARAM_LIST(X)                                                                       \
  X(DEBUG, debug, STR, FAIL, ONCE, "WARN", 0, 0, "NONE|VERSION|WARN|INFO|TRACE", NULL,             \
    "log level: NONE, VERSION, WARN, INFO or TRACE")                                               \
  X(DEBUG_SUBSYS, debug_subsys, STR, FAIL, ONCE, "ALL", 0, 0, NULL, check_subsys,                  \
    "subsystems to log: INIT,BOOT,SHM,COLL,P2P,ALGO,ENV,NET,ALL; a leading ^ inverts")             \
  X(DEBUG_FILE, debug_file, STR, WARN, ONCE, "", 0, 0, NULL, check_log_file,                       \
    "log to this file instead of stderr; %h host, %p pid")                                         \
  X(TIMEOUT, timeout, INT, FAIL, EACH, "300", 1LL, 604800LL, NULL, NULL,                           \
    "seconds any wait may last before moecclTimeout")                                              \
  X(COMM_ID, comm_id, STR, FAIL, EACH, "", 0, 0, NULL, check_comm_id,                              \
    "host:port of the root bootstrap socket")                                                      \
  X(SOCKET_IFNAME, socket_ifname, STR, FAIL, EACH, "", 0, 0, NULL, check_ifname,                   \
    "bootstrap interfaces: prefix list, ^ excludes, = exact; unset: loopback only")                \
  X(HOSTID, hostid, STR, FAIL, EACH, "", 0, 0, NULL, check_hostid,                                 \
    "node identity; ranks with different ids act as separate nodes")                               \
  X(ALGO, algo, STR, WARN, EACH, "", 0, 0,                                                         \
    "direct|pairwise|bruck|hier2|hier3|rail|hier2p|railp|hier3p", NULL,                            \
    "force the all-to-all algorithm: direct, pairwise, bruck, hier2, hier3, rail, hier2p, railp "  \
    "or hier3p")                                                                                   \
  X(ALLREDUCE_ALGO, allreduce_algo, STR, WARN, EACH, "", 0, 0, "ring|rhd|rd|tree|direct|hier",     \
    NULL,                                                                                          \
    "force the AllReduce algorithm: ring, rhd, rd, tree, direct or hier")                          \
  X(REDUCESCATTER_ALGO, reducescatter_algo, STR, WARN, EACH, "", 0, 0, "ring|rhd|direct", NULL,    \
    "force the ReduceScatter algorithm: ring, rhd or direct")                                      \
  X(ALLGATHER_ALGO, allgather_algo, STR, WARN, EACH, "", 0, 0, "ring|rhd|direct", NULL,            \
    "force the AllGather algorithm: ring, rhd or direct")                                          \
  X(BROADCAST_ALGO, broadcast_algo, STR, WARN, EACH, "", 0, 0, "tree|direct", NULL,                \
    "force the Broadcast algorithm: tree or direct")                                               \
  X(REDUCE_ALGO, reduce_algo, STR, WARN, EACH, "", 0, 0, "tree|direct", NULL,                      \
    "force the Reduce algorithm: tree or direct")                                                  \
  X(GATHER_ALGO, gather_algo, STR, WARN, EACH, "", 0, 0, "direct", NULL,                           \
    "force the Gather algorithm: direct")                                                          \
  X(SCATTER_ALGO, scatter_algo, STR, WARN, EACH, "", 0, 0, "direct", NULL,                         \
    "force the Scatter algorithm: direct")                                                         \
  X(MOE_ALGO, moe_algo, STR, WARN, EACH, "", 0, 0, "flat|hier", NULL,                              \
    "force the MoE dispatch/combine path across nodes: flat or hier")                              \
  X(A2A_WINDOW, a2a_window, INT, FAIL, ONCE, "64", 0, 1048576LL, NULL, NULL,                       \
    "peers the direct algorithm exchanges with per step (0: all at once)")                         \
  X(A2A_CHUNKS, a2a_chunks, INT, FAIL, ONCE, "0", 0, 64LL, NULL, NULL,                             \
    "chunks of the pipelined all-to-alls (hier2p, railp, hier3p); 0: the tuner picks")             \
  X(MOE_CHUNKS, moe_chunks, INT, FAIL, EACH, "0", 0, 64LL, NULL, NULL,                             \
    "chunks of the pipelined MoE node-dedup path (hier); 0: the tuner picks, 1: none")             \
  X(TOPO_FILE, topo_file, STR, FAIL, EACH, "", 0, 0, NULL, NULL,                                   \
    "load the topology (nodes, groups, rails, link costs) from this file")                         \
  X(TOPO_DUMP_FILE, topo_dump_file, STR, FAIL, EACH, "", 0, 0, NULL, NULL,                         \
    "rank 0 writes the topology it found to this file")                                            \
  X(TOPO_GROUP_SIZE, topo_group_size, INT, FAIL, EACH, "0", 0, 65536LL, NULL, NULL,                \
    "nodes per group (switch or dragonfly group); 0: one group")                                   \
  X(TOPO_RAILS, topo_rails, INT, FAIL, EACH, "0", 0, 64LL, NULL, NULL,                             \
    "NICs (rails) per node; 0: as hwloc finds")                                                    \
  X(TUNE_V_BYTES, tune_v_bytes, SIZE, FAIL, ONCE, "65536", 1LL, 1099511627776LL, NULL, NULL,       \
    "per-peer bytes at which the tuner prices alltoallv calls")                                    \
  X(TUNE_FILE, tune_file, STR, FAIL, EACH, "", 0, 0, NULL, check_cost_file,                        \
    "link and copy costs for the tuner's cost model, over the defaults")                           \
  X(TUNE_PROBE, tune_probe, STR, FAIL, EACH, "all", 0, 0, "all|host|device|none", NULL,            \
    "costs measured at communicator creation where no file gives them: all, host, device or none") \
  X(NET, net, STR, FAIL, EACH, "auto", 0, 0, "auto|ofi|ucx", NULL,                                 \
    "network transport between nodes: ofi, ucx or auto")                                           \
  X(PLUGIN_PATH, plugin_path, STR, WARN, EACH, "", 0, 0, NULL, check_plugin_path,                  \
    "directories (colon-separated) searched first for moeccl's modules (moeccl_net_ofi.so, "       \
    "moeccl_net_ucx.so)")                                                                          \
  X(SHM_DISABLE, shm_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,                             \
    "1: no shared memory; ranks of one node use the network too")                                  \
  X(OFI_PROVIDER, ofi_provider, STR, FAIL, EACH, "", 0, 0, NULL, NULL,                             \
    "libfabric provider to use (e.g. tcp, verbs;ofi_rxm, cxi); unset: the best available")         \
  X(OFI_RMA_DISABLE, ofi_rma_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,                     \
    "1: large ofi messages go as tagged pieces instead of RMA writes")                             \
  X(OFI_WRITEDATA_DISABLE, ofi_writedata_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,         \
    "1: ofi RMA writes end with a FIN message instead of carrying remote CQ data")                 \
  X(NET_NCHANNELS, net_nchannels, INT, FAIL, ONCE, "1", 1LL, 16LL, NULL, NULL,                     \
    "endpoints (channels) per network peer")                                                       \
  X(NET_EAGER_SIZE, net_eager_size, SIZE, FAIL, ONCE, "65536", 64LL, 16777216LL, NULL, NULL,       \
    "network messages up to this size are sent eagerly; larger ones by RMA or rendezvous")         \
  X(NET_CHUNK_SIZE, net_chunk_size, SIZE, FAIL, ONCE, "1048576", 4096LL, 1073741824LL, NULL, NULL, \
    "large network messages move in pieces of this size")                                          \
  X(SHM_EAGER_SIZE, shm_eager_size, SIZE, FAIL, ONCE, "16384", 64LL, 4194304LL, NULL, NULL,        \
    "messages up to this size go through shared-memory slots; larger ones are copied once")        \
  X(SHM_MAP_SMALL_DISABLE, shm_map_small_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,         \
    "1: messages that fit a slot go through the slots even from moecclMemAlloc memory (by "        \
    "default those from 4097 bytes are copied once by the receiver)")                              \
  X(SHM_SLOTS, shm_slots, INT, FAIL, ONCE, "16", 2LL, 1024LL, NULL, NULL,                          \
    "shared-memory slots per ordered pair of local ranks")                                         \
  X(SHM_CHUNK_SIZE, shm_chunk_size, SIZE, FAIL, ONCE, "1048576", 4096LL, 1073741824LL, NULL,       \
    check_cacheline_multiple,                                                                      \
    "bytes a single-copy transfer moves before the executor looks at other work (a multiple of "   \
    "64)")                                                                                         \
  X(CMA_DISABLE, cma_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,                             \
    "1: no cross-memory attach; large messages are pipelined through the slots")                   \
  X(SHM_MAP_DISABLE, shm_map_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,                     \
    "1: never map peers' moecclMemAlloc memory; read it by cross-memory attach")                   \
  X(NT_COPY_SIZE, nt_copy_size, SIZE, FAIL, ONCE, "32M", 0, 1125899906842624LL, NULL, NULL,        \
    "operations receiving at least this many bytes per rank copy with streaming stores (0: "       \
    "never)")                                                                                      \
  X(SPIN_COUNT, spin_count, INT, FAIL, ONCE, "2000", 0, 100000000LL, NULL, NULL,                   \
    "polls before a waiting rank yields the core; oversubscribed nodes spin less")                 \
  X(DEVICE, device, STR, FAIL, EACH, "auto", 0, 0, "auto|cuda|emu|none", NULL,                     \
    "device backend: auto (CUDA when a driver and device are found), cuda, emu or none")           \
  X(DEVICE_EMU_DELAY_US, device_emu_delay_us, INT, FAIL, ONCE, "0", 0, 1000000LL, NULL, NULL,      \
    "emu backend: a random delay of up to this many microseconds before each stream operation")    \
  X(DEVICE_EMU_LEGACY, device_emu_legacy, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,                 \
    "emu backend: allocations export only legacy IPC handles, as cudaMalloc memory does")          \
  X(DEVICE_EMU_NO_KERNELS, device_emu_no_kernels, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,         \
    "emu backend: the kernels do not load, as on CUDA without a fatbin (the fallbacks run)")      \
  X(DEVICE_STREAM_DISABLE, device_stream_disable, BOOL, FAIL, ONCE, "0", 0, 0, NULL, NULL,         \
    "device calls run by the host (a library thread per stream) instead of lowered onto the "      \
    "caller's stream by the ipc transport")                                                        \
  X(NCCL_VERSION, nccl_version, INT, WARN, EACH, "22809", 1000LL, 999999LL, NULL, NULL,            \
    "the NCCL drop-in (libnccl.so.2) reports this version code from ncclGetVersion")
/* clang-format on */

#endif
