/* Which kind a stream argument is (stream.h): one decision for every
 * stream, so that the kinds' own files need not know of each other. */
#include "exec/stream.h"

#include "device/device.h"

const moeccl_stream_ops_t* moeccl_stream_kind(moecclStream_t stream) {
  if (!stream) return NULL;
  if (moeccl_host_stream_valid(stream)) return &moeccl_host_stream_ops;
  const moeccl_device_ops_t* d = moeccl_device();
  return d && d->stream_valid(stream) ? &moeccl_device_stream_ops : NULL;
}

moecclResult_t moeccl_stream_check(moeccl_comm_t* comm, moecclStream_t stream) {
  if (!stream || moeccl_stream_kind(stream)) return moecclSuccess;
  return moeccl_error(comm, moecclInvalidArgument,
                      "stream %p is not NULL nor a live moeccl host stream (and this process has "
                      "no device backend, so it cannot be a device stream)",
                      stream);
}
