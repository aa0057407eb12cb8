/* errors: the one error convention of kvpool, and its one table (errors.c).
 *
 * Two domains exist and never mix in one variable:
 *  - KVP_E* codes (kvpool.h, -5001..-5024): what every kvpool function
 *    returns (0 or a negative KVP_E*, or a documented non-negative value).
 *    On the wire they travel in the wire's own encoding (wire.h
 *    wire_status_encode/decode). Variables holding one are named rc (or
 *    ret, status).
 *  - negative errno values: only inside code that talks to the kernel
 *    (shm/, the spill tier, sockets, the event loop), saved at once as
 *    `int err = -errno;`. Variables holding one are named err.
 * A value crosses from errno into KVP_E* only through err_from_errno(), and
 * from KVP_E* into errno (a FUSE reply, an OSError) only through
 * kvp_to_errno(); both read the table in errors.c, which also gives each
 * code's name, message and Mooncake ErrorCode. No other translator exists.
 * Configuration parsing (src/common/conf*.c) returns KVP_EINVAL with the
 * message in a caller's buffer. Thread-safe: the table is constant.
 */
#ifndef KVP_ERRORS_H
#define KVP_ERRORS_H

#include "kvpool.h"

/* The KVP_E* code for a negative errno (0 stays 0; a KVP_E* code, which
 * cannot be an errno, is returned as is). Unknown errnos become KVP_EIO. */
int err_from_errno(int err);

#endif
