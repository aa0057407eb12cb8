/* kvfs_ctl: the texts of the view's control directory .kvpool/ (stats,
 * nodes/NODE/info, nodes/NODE/extents) and its node names. Called from
 * libfuse worker threads at lookup, readdir and open; each call builds a
 * fresh text, no shared state besides the pool handle.
 */
#ifndef KVP_KVFS_CTL_H
#define KVP_KVFS_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "kvfs_fs.h"

/* Texts of the control files, malloc'd into *out; 0 or a negative errno. */
int kvfs_ctl_stats(struct kvfs *fs, char **out, size_t *len);
int kvfs_ctl_node_info(struct kvfs *fs, const char *node, char **out, size_t *len);
int kvfs_ctl_node_extents(struct kvfs *fs, const char *node, char **out, size_t *len);
/* The segment files of this host with their owner's state (scan_host):
 * orphans of dead processes show until a kvpool process removes them. */
int kvfs_ctl_segments(struct kvfs *fs, char **out, size_t *len);
/* Node names for .kvpool/nodes (malloc'd array of malloc'd strings). */
int kvfs_ctl_node_names(struct kvfs *fs, char ***names, size_t *n);
bool kvfs_ctl_node_exists(struct kvfs *fs, const char *node);

#endif
