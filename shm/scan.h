/* scan: offline listing of the extents in a segment file (`kvpool scan`).
 * Attaches the file read-only, walks it (the commit map of a format 2 file,
 * every page of a format 1 file) and prints one line (or one JSON object)
 * per live extent plus a summary; or lists the segments of the host. Needs no daemon and
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

/* Lists the kvpool segments in dir (NULL: /dev/shm) with size, memory held,
 * owner and its state (live / kept / orphan, orphan.h): text, or one JSON
 * array. 0 or a negative errno with a message. */
int scan_host(const char *dir, bool json, FILE *out, char *err, size_t errlen);

#endif
