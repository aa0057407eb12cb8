/* kvfs_name: the key <-> path mapping of the FUSE view (docs/fuse.md, "Names").
 * A '/' in a key is a directory level; each component is escaped
 * (kvfs_escape); a component whose escaped form is longer than
 * KVFS_FIT bytes becomes a chain of directories "PIECE%/PIECE%/.../LAST".
 * Pure functions over caller-owned memory: no state, no locks, any thread.
 */
#ifndef KVP_KVFS_NAME_H
#define KVP_KVFS_NAME_H

#include <stdbool.h>
#include <stddef.h>

/* Longest escaped component shown as one name; longer ones are split into
 * pieces of at most KVFS_FIT escaped bytes plus the '%' continuation marker.
 * KVFS_FIT + 2 ("%%", the directory alias) is still <= NAME_MAX (255). */
#define KVFS_FIT 253
#define KVFS_NAME_MAX 255
/* Longest path kvfs_key_to_path can produce for a KVP_MAX_KEY key, with NUL. */
#define KVFS_PATH_MAX 4096

/* Escaped length of a component (whole-name rules included), or 0 when it
 * holds a NUL (not a valid key byte). */
size_t kvfs_escaped_len(const char *comp, size_t n);

/* Where the chain of a component (n raw bytes) has a boundary at raw offset
 * c: the raw length of the piece that starts there (*len) and whether it is
 * the last one (*last). -EINVAL when c is not a boundary of the chain. */
int kvfs_piece_at(const char *comp, size_t n, size_t c, size_t *len, bool *last);

/* Writes the name of the piece [c, c + len) of a component: the escaped
 * bytes plus '%' for a continuation piece, the full escape of the tail for
 * the last one. 0 or -ENAMETOOLONG / -EINVAL. */
int kvfs_piece_name(const char *comp, size_t n, size_t c, size_t len, bool last,
		    char *out, size_t cap);

/* Decodes a continuation piece name ("...%"): raw bytes into out.
 * -EINVAL unless it is a plausible piece (escaped length and marker). */
int kvfs_piece_decode(const char *name, char *out, size_t cap, size_t *outlen);

/* The relative path (no leading '/') of a key; 0 or -ENAMETOOLONG/-EINVAL. */
int kvfs_key_to_path(const char *key, size_t n, char *out, size_t cap);
/* The key of a relative path, accepting only the canonical form that
 * kvfs_key_to_path writes. 0 or -EINVAL / -ENAMETOOLONG. */
int kvfs_path_to_key(const char *path, char *out, size_t cap, size_t *outlen);

/* True for a name ending with the "%%" directory alias (the directory NAME/
 * when an object NAME exists too). */
bool kvfs_is_alias(const char *name, size_t n);
/* True for a continuation piece name (ends with a lone '%'). */
bool kvfs_is_piece(const char *name, size_t n);

#endif
