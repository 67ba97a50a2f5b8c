/* What pp_sched.c and pp_sched_sim.c share: op names and the neighbour rule. */
#ifndef MOE_PP_SCHED_INT_H_
#define MOE_PP_SCHED_INT_H_

#include <stddef.h>

#include "pp_sched.h"

/* "F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"; "?" out of range. */
const char* pp_kind_name(int kind);

/* The stage that communication op `kind` of (stage, chunk) talks to, or -1
 * when it has no such op: no neighbouring virtual stage that way, or the
 * neighbour is on this stage itself (S = 1, where the driver hands the tensor
 * over locally). */
int pp_comm_peer(const pp_sched_t* s, int stage, int kind, int chunk);

/* One op as pp_sched_print writes it ("F 3.0", "SEND_F 3.0 ->1 g7"). */
void pp_op_describe(const pp_sched_t* s, int stage, int index, char* buf, size_t len);

#endif
