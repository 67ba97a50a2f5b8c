/* MOECCL_CHECK and MOECCL_CHECK_GOTO: pass a failure up (traced), for
 * every layer (the device seam uses them as much as the communicator). */
#ifndef MOECCL_CHECK_H_
#define MOECCL_CHECK_H_

#include "base/debug.h"
#include "moeccl.h"

#define MOECCL_CHECK(call)                                                                         \
  do {                                                                                             \
    moecclResult_t rc_ = (call);                                                                   \
    if (rc_ != moecclSuccess) {                                                                    \
      TRACE(ALL, "%s failed: %d", #call, (int)rc_);                                                \
      return rc_;                                                                                  \
    }                                                                                              \
  } while (0)
#define MOECCL_CHECK_GOTO(call, res, label)                                                        \
  do {                                                                                             \
    (res) = (call);                                                                                \
    if ((res) != moecclSuccess) {                                                                  \
      TRACE(ALL, "%s failed: %d", #call, (int)(res));                                              \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

#endif
