/*
 * NCCL 2.28's application binary interface as the drop-in libnccl.so.2
 * implements it: the handle and id types, the enum values (moeccl's are
 * the same, include/moeccl.h), and ncclConfig_t's leading size, magic and
 * version fields by which a caller's configuration is read.  Written from
 * the documented interface; the shim's test compiles NCCL's own nccl.h
 * against the library where it is installed (tests/test_nccl_abi.c).
 */
#ifndef MOECCL_NCCL_ABI_H_
#define MOECCL_NCCL_ABI_H_

#include <stddef.h>

#include "moeccl.h"

#define NCCL_ABI_VERSION_CODE 22809 /* 2.28.9 */
#define NCCL_ABI_CONFIG_MAGIC 0xcafebeefu

typedef moecclComm_t ncclComm_t;
typedef void* ncclWindow_t;
typedef moecclUniqueId ncclUniqueId;
typedef moecclResult_t ncclResult_t;
typedef moecclDataType_t ncclDataType_t;
typedef moecclRedOp_t ncclRedOp_t;
typedef moecclScalarResidence_t ncclScalarResidence_t;
typedef moecclConfig_t ncclConfig_t; /* the same fields in the same order */

typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

/* The device API's host side: handles only (the shim does not implement it). */
typedef struct {
  int nRanks, rank, stride;
} ncclTeam_t;

#endif
