/* Result strings and datatype sizes (result.h): the meaning of the public
 * enums, kept below every layer that reports or sizes them. */
#include "base/result.h"

MOECCL_EXPORT const char* moecclGetErrorString(moecclResult_t result) {
  switch (result) {
    case moecclSuccess: return "no error";
    case moecclUnhandledCudaError:
      return "unhandled cuda error (run with MOECCL_DEBUG=INFO for details)";
    case moecclSystemError:
      return "unhandled system error (run with MOECCL_DEBUG=INFO for details)";
    case moecclInternalError:
      return "internal error - please report this issue to the moeccl developers";
    case moecclInvalidArgument: return "invalid argument (see moecclGetLastError for details)";
    case moecclInvalidUsage: return "invalid usage (see moecclGetLastError for details)";
    case moecclRemoteError: return "remote process exited or there was a network error";
    case moecclInProgress: return "operation in progress";
    case moecclTimeout: return "operation timed out (see MOECCL_TIMEOUT)";
    default: return "unknown result code";
  }
}

size_t moeccl_type_size(moecclDataType_t type) {
  static const size_t sizes[moecclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return ((int)type >= 0 && type < moecclNumTypes) ? sizes[type] : 0;
}
