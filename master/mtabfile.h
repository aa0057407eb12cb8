/* mtabfile: a lone master's table on disk (docs/ha.md "Lone restart").
 * The master is its own warm standby: the stream mrepl.c sends a standby
 * (SEG records, a snapshot of ADDs in key order a slice per tick, SYNCED,
 * then every change) goes to [master] table_file, written once per tick;
 * when the changes outgrow the snapshot a fresh one goes to FILE.new,
 * renamed over FILE once SYNCED. At start-up mtabfile_load() applies a
 * complete file with mrepl_apply() and the master takes it over warm,
 * as a standby that won an election. No fsync: the file must survive the
 * master's death, not the host's (the nodes' /dev/shm does not either).
 * Loop thread only; no locks.
 */
#ifndef KVP_MTABFILE_H
#define KVP_MTABFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master_i.h"

#define MTABFILE_MAGIC "KVPTABL\n"	/* 8 bytes */
/* 2: frames summed with XXH3; 1 (read still): a slower sum of its own */
#define MTABFILE_VERSION 2u

/* Applies a table file's bytes to m (a fresh master): 0 when a SYNCED
 * record was reached and every frame before the end decodes and checks
 * (a frame cut short at the end, a write the master died in, is left
 * out), else -EINVAL with why set (m then holds a partial table: throw
 * it away). Never trusts a length. */
int mtabfile_apply(struct master *m, const uint8_t *p, size_t len, char *why, size_t cap);
/* Reads path and applies it (above); -ENOENT: no file. */
int mtabfile_load(struct master *m, const char *path, char *why, size_t cap);
/* Starts writing m's table to path (a snapshot to path.new first, begun
 * delay_ms from now): 0 or < 0 (logged; the master runs without the
 * file). */
int mtabfile_start(struct master *m, const char *path, uint64_t delay_ms);
/* Per tick, after mrepl_tick(): writes what was recorded, renames a
 * complete snapshot over the file, starts a new one when due. */
void mtabfile_tick(struct master *m);
/* Writes what is left and closes (a clean stop keeps the file). */
void mtabfile_stop(struct master *m);

/* A frame body's checksum (its header's reqid) in a file of that version
 * (tests, fuzz); the changes' size past which a new
 * snapshot starts, at least (64 MiB; tests lower it). */
uint64_t mtabfile_sum(uint32_t version, const uint8_t *p, size_t n);
extern uint64_t mtabfile_rotate_min;

#endif
