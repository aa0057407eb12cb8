/* errors: names of the KVP_E* codes and their Mooncake ErrorCode equivalents. */
#include "kvpool.h"

struct err_row {
	const char *sym;
	const char *msg;
	int mooncake;		/* mooncake-store/include/types.h ErrorCode */
};

static const struct err_row err_rows[] = {
	[0] = { "KVP_OK", "success", 0 },
	[1] = { "KVP_ENOTFOUND", "object not found", -704 },		/* OBJECT_NOT_FOUND */
	[2] = { "KVP_EEXIST", "object already exists", -705 },		/* OBJECT_ALREADY_EXISTS */
	[3] = { "KVP_ENOSPC", "no space left in the pool", -200 },	/* NO_AVAILABLE_HANDLE */
	[4] = { "KVP_EINVAL", "invalid argument", -600 },		/* INVALID_PARAMS */
	[5] = { "KVP_EKEY", "invalid key", -400 },			/* INVALID_KEY */
	[6] = { "KVP_ELEASED", "object has a read lease", -706 },	/* OBJECT_HAS_LEASE */
	[7] = { "KVP_ELEASE", "lease expired before the transfer completed", -707 }, /* LEASE_EXPIRED */
	[8] = { "KVP_ENOSEG", "segment not found", -101 },		/* SEGMENT_NOT_FOUND */
	[9] = { "KVP_ECHECKSUM", "checksum mismatch", -701 },		/* INVALID_READ */
	[10] = { "KVP_ETIMEDOUT", "operation timed out", -901 },	/* RPC_TIMEOUT */
	[11] = { "KVP_EAUTH", "authentication failed (cluster token)", -601 }, /* ILLEGAL_CLIENT */
	[12] = { "KVP_EPROTO", "protocol error", -900 },		/* RPC_FAIL */
	[13] = { "KVP_EINTERNAL", "internal error", -1 },		/* INTERNAL_ERROR */
	[14] = { "KVP_EIO", "transfer failed", -800 },			/* TRANSFER_FAIL */
	[15] = { "KVP_ECONN", "cannot connect or connection lost", -900 }, /* RPC_FAIL */
	[16] = { "KVP_ENOTSUP", "not supported", -1011 },		/* UNAVAILABLE_IN_CURRENT_MODE */
	[17] = { "KVP_EBUSY", "object is not complete yet", -703 },	/* REPLICA_IS_NOT_READY */
	[18] = { "KVP_ETOOBIG", "value or buffer size out of range", -10 }, /* BUFFER_OVERFLOW */
	[19] = { "KVP_ENOMEM", "out of memory", -1 },			/* INTERNAL_ERROR */
	[20] = { "KVP_EGRANT", "write not granted by the master", -700 }, /* INVALID_WRITE */
	[21] = { "KVP_ELIMIT", "resource limit reached", -1010 },	/* UNAVAILABLE_IN_CURRENT_STATUS */
	[22] = { "KVP_ESTALE", "extent was reused or the put revoked", -702 }, /* INVALID_REPLICA */
};

static const struct err_row *err_row(int err)
{
	if (err > 0 || err < KVP_ERR_MIN)
		return NULL;
	return &err_rows[-err];
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
