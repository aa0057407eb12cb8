/* mflags: the command-line flags of Mooncake's mooncake_master (every
 * gflags definition in mooncake-store/src/master.cpp at 3b5a59413) and
 * kvpool-master's own flag spellings, in one table: each is mapped onto a
 * kvpool key or accepted with a one-line notice that it has no effect
 * here. gflags syntax: -flag or --flag, =value or the next argument,
 * booleans also --flag alone, --noflag, --flag=false. --config_path reads
 * a flat JSON or YAML file of the same names. Main thread only.
 */
#ifndef KVP_MFLAGS_H
#define KVP_MFLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "conf.h"

#define MFLAGS_MAX 512

struct mflag;

/* The flags given, in order (the file's first), applied after the INI. */
struct mflags {
	struct {
		const struct mflag *f;
		char *value;		/* owned */
		bool file;		/* from --config_path */
	} v[MFLAGS_MAX];
	size_t n;
};

/* argv[*i] starts with '-' and is not one of kvpool-master's own options:
 * parses it (and its value, advancing *i) as a Mooncake flag into f. 0,
 * or 2 (a usage error, message printed on stderr). A flag without effect
 * prints its notice on stderr once. */
int mflags_parse(int argc, char **argv, int *i, struct mflags *f);
/* Applies the flags to c (after the files, the environment and -o). 0 or
 * KVP_EINVAL with the message in err. */
int mflags_apply(struct kvp_conf *c, const struct mflags *f, char *err, size_t errlen);
/* The flags that must be set before the files load (--cluster_token_file:
 * the token is read with them) as "section.key=value" overrides written
 * into buf, pointers in out (at most max): their number, or -1 when buf is
 * too small. */
int mflags_preload(const struct mflags *f, char *buf, size_t cap, const char **out, size_t max);
void mflags_free(struct mflags *f);
/* The --help section: every flag and what it becomes. */
void mflags_usage(FILE *out);

#endif
