/* errors: the table behind kvpool's error convention (errors.h): for each
 * KVP_E* code its name, message, Mooncake ErrorCode, the errno a POSIX
 * caller sees, and the errnos that mean it. */
#include "errors.h"

#include <errno.h>

#define ERRNOS_MAX 6

struct err_row {
	const char *sym;
	const char *msg;
	int mooncake;		/* mooncake-store/include/types.h ErrorCode */
	int to_errno;		/* what a POSIX caller sees (FUSE, OSError) */
	int from[ERRNOS_MAX];	/* errnos that mean this code; 0 ends the list */
};

static const struct err_row err_rows[] = {
	[0] = { "KVP_OK", "success", 0, 0, { 0 } },
	[1] = { "KVP_ENOTFOUND", "object not found", -704, ENOENT, { ENOENT } },	/* OBJECT_NOT_FOUND */
	[2] = { "KVP_EEXIST", "object already exists", -705, EEXIST, { EEXIST } },	/* OBJECT_ALREADY_EXISTS */
	[3] = { "KVP_ENOSPC", "no space left in the pool", -200, ENOSPC, { ENOSPC, EDQUOT } }, /* NO_AVAILABLE_HANDLE */
	[4] = { "KVP_EINVAL", "invalid argument", -600, EINVAL, { EINVAL, ERANGE, EDOM } }, /* INVALID_PARAMS */
	[5] = { "KVP_EKEY", "invalid key", -400, EINVAL, { ENAMETOOLONG } },		/* INVALID_KEY */
	/* a reader holds a lease: retry later */
	[6] = { "KVP_ELEASED", "object has a read lease", -706, EBUSY, { 0 } },	/* OBJECT_HAS_LEASE */
	[7] = { "KVP_ELEASE", "lease expired before the transfer completed", -707, EIO, { 0 } }, /* LEASE_EXPIRED */
	[8] = { "KVP_ENOSEG", "segment not found", -101, EIO, { ENODEV, ENXIO } },	/* SEGMENT_NOT_FOUND */
	[9] = { "KVP_ECHECKSUM", "checksum mismatch", -701, EIO, { EBADMSG } },	/* INVALID_READ */
	[10] = { "KVP_ETIMEDOUT", "operation timed out", -901, ETIMEDOUT, { ETIMEDOUT, ETIME } }, /* RPC_TIMEOUT */
	[11] = { "KVP_EAUTH", "authentication failed (cluster token)", -601, EACCES, { EACCES, EPERM } }, /* ILLEGAL_CLIENT */
	[12] = { "KVP_EPROTO", "protocol error", -900, EIO, { EPROTO } },		/* RPC_FAIL */
	[13] = { "KVP_EINTERNAL", "internal error", -1, EIO, { EFAULT } },		/* INTERNAL_ERROR */
	[14] = { "KVP_EIO", "transfer failed", -800, EIO, { EIO } },			/* TRANSFER_FAIL */
	[15] = { "KVP_ECONN", "cannot connect or connection lost", -900, EIO,	/* RPC_FAIL */
		 { ECONNREFUSED, ECONNRESET, EPIPE, ENOTCONN, EHOSTUNREACH, ENETUNREACH } },
	[16] = { "KVP_ENOTSUP", "not supported", -1011, ENOTSUP, { ENOTSUP, ENOSYS } }, /* UNAVAILABLE_IN_CURRENT_MODE */
	/* a put of it is in progress */
	[17] = { "KVP_EBUSY", "object is not complete yet", -703, EBUSY, { EBUSY } }, /* REPLICA_IS_NOT_READY */
	[18] = { "KVP_ETOOBIG", "value or buffer size out of range", -10, EFBIG,	/* BUFFER_OVERFLOW */
		 { EFBIG, EMSGSIZE, E2BIG, EOVERFLOW } },
	[19] = { "KVP_ENOMEM", "out of memory", -1, ENOMEM, { ENOMEM } },		/* INTERNAL_ERROR */
	[20] = { "KVP_EGRANT", "write not granted by the master", -700, EIO, { 0 } }, /* INVALID_WRITE */
	[21] = { "KVP_ELIMIT", "resource limit reached", -1010, EAGAIN,		/* UNAVAILABLE_IN_CURRENT_STATUS */
		 { EAGAIN, EMFILE, ENFILE, ENOBUFS } },
	[22] = { "KVP_ESTALE", "extent was reused or the put revoked", -702, EIO, { ESTALE } }, /* INVALID_REPLICA */
	/* HA: a standby answered, or the new leader is still rebuilding */
	[23] = { "KVP_ENOTLEADER", "no leader master (failover in progress); retry", -1010, EAGAIN,
		 { 0 } },	/* UNAVAILABLE_IN_CURRENT_STATUS */
	/* a namespace's model fingerprint differs (docs/client.md "Namespaces") */
	[24] = { "KVP_ENSMISMATCH", "namespace declared with another model fingerprint", -600,
		 EACCES, { 0 } },	/* INVALID_PARAMS */
	/* tenants (docs/reliability.md "Threat model") */
	[25] = { "KVP_EPERM", "not permitted for this token's tenant", -601, EACCES,
		 { 0 } },	/* ILLEGAL_CLIENT */
};

#define NROWS (sizeof(err_rows) / sizeof(err_rows[0]))

_Static_assert(NROWS == 1 + KVP_ERR_BASE - KVP_ERR_MIN, "one row per KVP_E* code");
_Static_assert(KVP_ERR_MAX == KVP_ERR_BASE - 1, "the codes start right below KVP_ERR_BASE");
/* The kernel's -errno values are -1..-4095 (MAX_ERRNO), Mooncake's
 * ErrorCode values -1..-1702: the codes keep clear of both (kvpool.h). */
_Static_assert(KVP_ERR_MAX < -4095, "KVP_E* codes meet the errno range");

static const struct err_row *err_row(int err)
{
	if (err == KVP_OK)
		return &err_rows[0];
	if (!kvp_is_err(err))
		return NULL;
	return &err_rows[KVP_ERR_BASE - err];
}

const char *kvp_strerror(int err)
{
	const struct err_row *r = err_row(err);

	return r ? r->msg : "unknown error";
}

const char *kvp_errname(int err)
{
	const struct err_row *r = err_row(err);

	return r ? r->sym : "KVP_E?";
}

int kvp_to_mooncake(int err)
{
	const struct err_row *r = err_row(err);

	return r ? r->mooncake : -1;
}

int kvp_to_errno(int err)
{
	const struct err_row *r = err_row(err);

	return r ? r->to_errno : EIO;
}

int err_from_errno(int err)
{
	if (err >= 0)
		return 0;
	if (kvp_is_err(err))	/* already converted: the ranges are disjoint */
		return err;
	for (size_t i = 1; i < NROWS; i++)
		for (int j = 0; j < ERRNOS_MAX && err_rows[i].from[j]; j++)
			if (err_rows[i].from[j] == -err)
				return KVP_ERR_BASE - (int)i;
	return KVP_EIO;
}
