/* kvpool_i: libkvpool entry points for the in-process clients of this tree
 * (the FUSE view inside kvpool-node, the Python module's embedded node, the
 * CLI); not installed. They hand over the configuration they already
 * loaded, every -c layer, environment and -o override included, instead of
 * letting the library re-read files.
 */
#ifndef KVPOOL_I_H
#define KVPOOL_I_H

#include "conf.h"
#include "kvpool.h"

/* kvp_open() with a loaded configuration (copied; conf->cluster.master
 * names the master). NULL with *err set on failure. */
struct kvp *kvp_open_conf(const struct kvp_conf *conf, int *err);

#endif
