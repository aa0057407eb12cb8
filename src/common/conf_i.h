/* conf_i.h: what the three files of the conf module share, and nothing
 * outside them uses: conf_table.c (the keys, sections and Mooncake aliases,
 * the example INI), conf_parse.c (values to and from text) and conf.c
 * (loading). The public interface is conf.h. Constant data and pure
 * functions; thread-safe.
 */
#ifndef KVP_CONF_I_H
#define KVP_CONF_I_H

#include "conf.h"

#include <stdbool.h>
#include <stddef.h>

struct conf_section {
	const char *name;
	const char *help;		/* the comment above [name] in the example */
};

/* A Mooncake environment variable that sets a key (read before KVPOOL_*,
 * so those win). */
struct conf_alias {
	const char *var;
	const char *section;
	const char *key;
};

/* conf_table.c */
extern const struct conf_section conf_sections[];
extern const size_t conf_sections_len;
extern const struct conf_alias conf_aliases[];
extern const size_t conf_aliases_len;
bool conf_section_known(const char *section);
/* Alias @a stands for key @k. */
bool conf_alias_of(const struct conf_alias *a, const struct conf_key *k);
/* "KVPOOL_<SECTION>_<KEY>" of @k. */
void conf_env_name(const struct conf_key *k, char *buf, size_t len);

/* conf_parse.c */
const char *conf_skip_space(const char *s);
/* "MIN..MAX" of a numeric key, in the key's own units. */
void conf_fmt_range(const struct conf_key *k, char *buf, size_t len);
/* "a, b or c" from "a|b|c", for messages and the example file. */
void conf_fmt_choices(const char *choices, char *buf, size_t len);
/* Parses and stores one value and records @src; 0 or KVP_EINVAL with a
 * message that names no location (the caller prefixes "[section] key: "). */
int conf_set_key(struct kvp_conf *c, const struct conf_key *k, const char *v,
		 enum conf_src src, char *err, size_t errlen);

#endif
