/* fuzz_conf: arbitrary bytes as an INI file through conf_load_stream (the
 * path conf_load takes), and as text through conf_parse_size, _duration,
 * _hostport and conf_set_override. Oracles besides the sanitizers: a loaded
 * configuration formats and re-reads to the same text for every key, errors
 * are NUL-terminated and start with the stream's name, and parsed host:port
 * values fit their buffer.
 */
#include "conf.h"
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const struct kvp_conf *c)
{
	struct kvp_conf d;
	char a[CONF_STR + 8], b[CONF_STR + 8], err[512];

	conf_defaults(&d);
	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];

		conf_format(c, k, a, sizeof(a));
		if (conf_set(&d, k->section, k->key, a, CONF_SRC_FILE, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s.%s: formatted \"%s\" does not read back: %s\n",
				k->section, k->key, a, err);
			abort();
		}
		conf_format(&d, k, b, sizeof(b));
		if (strcmp(a, b) != 0) {
			fprintf(stderr, "%s.%s: \"%s\" reads back as \"%s\"\n", k->section,
				k->key, a, b);
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct kvp_conf c;
	char err[512], host[64];
	uint64_t v;
	uint16_t port;
	char *s;
	FILE *f;

	if (!quiet) {
		log_init("fuzz_conf", LOG_CRIT);
		quiet = true;
	}
	conf_defaults(&c);
	if (size > 0) {
		f = fmemopen((void *)data, size, "r");
		if (!f)
			return 0;
		memset(err, 'x', sizeof(err));
		if (conf_load_stream(&c, f, "fuzz.ini", err, sizeof(err)) == 0) {
			check_roundtrip(&c);
		} else if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz.ini:", 9) != 0) {
			fprintf(stderr, "bad error message\n");
			abort();
		}
		fclose(f);
	}

	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	conf_parse_size(s, &v);
	conf_parse_duration(s, &v);
	memset(host, 'x', sizeof(host));
	if (conf_parse_hostport(s, host, sizeof(host), &port) == 0 &&
	    !memchr(host, '\0', sizeof(host)))
		abort();
	conf_defaults(&c);
	if (conf_set_override(&c, s, err, sizeof(err)) == 0)
		check_roundtrip(&c);
	free(s);
	return 0;
}
