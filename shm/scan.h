/* scan: offline listing of the extents in a segment file (`kvpool scan`).
 * Attaches the file read-only, walks it with ext_scan and prints one line
 * (or one JSON object) per live extent plus a summary. Needs no daemon and
 * changes nothing; single-threaded, no global state.
 */
#ifndef KVP_SCAN_H
#define KVP_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Lists the segment at path (a /dev/shm name or a path) on out: text, or
 * with json one JSON array of objects. verify checks every value checksum
 * (otherwise the checksum column is "-" / null and header lengths are
 * trusted). Returns 0; -EBADMSG after a complete listing that has extents
 * with bad checksums; another negative errno (nothing listed) when the file
 * cannot be attached or out fails. err receives a message on failure. */
int scan_file(const char *path, bool json, bool verify, FILE *out, char *err, size_t errlen);

#endif
