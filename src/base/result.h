/* What the public API's enums mean: result strings and datatype sizes, for
 * every layer (the device seam logs a result's text, the planner sizes
 * elements).  moecclGetErrorString itself is declared in moeccl.h. */
#ifndef MOECCL_RESULT_H_
#define MOECCL_RESULT_H_

#include <stddef.h>

#include "moeccl.h"

/* Marks a function of the public API (libmoeccl.la exports moeccl[A-Z]*). */
#define MOECCL_EXPORT __attribute__((visibility("default")))

/* Bytes per element of type; 0 for a value outside moecclDataType_t. */
size_t moeccl_type_size(moecclDataType_t type);

#endif
