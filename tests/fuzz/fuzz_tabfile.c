/* fuzz_tabfile: a lone master loads a table file (mtabfile.h) from
 * arbitrary bytes, then takes it over. Byte 0 picks the shape: odd, the
 * rest is the whole file (header, frames, checksums: the decoder's own
 * checks); even, a valid header is written and the rest is records of
 * u16 length + a REPL body, each wrapped in a frame with a correct
 * checksum, so the records reach mrepl_apply() (bit 1 set: as format
 * version 1 writes them, its own checksum). master_check() must hold
 * after it, loaded or refused; nothing may read past the input (the file
 * is its own allocation).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "master.h"
#include "mtabfile.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvp_conf conf;
	static bool init;
	char err[256], why[256];
	struct wbuf f;

	if (!init) {
		conf_defaults(&conf);
		conf.cluster.max_object_size = 1 << 20;
		log_init("fuzz", LOG_CRIT);
		init = true;
	}
	if (!size)
		return 0;
	wb_init(&f);
	if (data[0] & 1) {
		wb_bytes(&f, data + 1, size - 1);
	} else {
		uint32_t ver = data[0] & 2 ? 1 : MTABFILE_VERSION;

		wb_bytes(&f, MTABFILE_MAGIC, 8);
		wb_u32(&f, ver);
		wb_cstr(&f, conf.master.cluster_id);
		data++;
		size--;
		while (size >= 2) {
			size_t len = (size_t)data[0] | (size_t)data[1] << 8;
			data += 2;
			size -= 2;
			if (len > size)
				len = size;
			size_t st = wire_begin(&f);
			wb_bytes(&f, data, len);
			wire_finish(&f, st, WIRE_OP_REPL, 0, 0, mtabfile_sum(ver, data, len), 0);
			data += len;
			size -= len;
		}
	}
	if (f.oom)
		abort();
	uint8_t *file = malloc(f.len ? f.len : 1);	/* exactly its size: ASan sees overreads */
	if (!file)
		abort();
	memcpy(file, f.p, f.len);
	struct master *m = master_create(&conf, err, sizeof(err));
	if (!m)
		abort();
	if (mtabfile_apply(m, file, f.len, why, sizeof(why)) == 0)
		master_takeover(m, 7, NULL);
	else if (!why[0])
		abort();	/* a refusal always says why */
	if (!master_check(m))
		abort();
	master_destroy(m);
	free(file);
	wb_free(&f);
	return 0;
}
