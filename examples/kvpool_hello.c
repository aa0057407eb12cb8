/* kvpool_hello.c: put a value, read it back, remove it.
 *   cc kvpool_hello.c $(pkg-config --cflags --libs kvpool) -o kvpool_hello
 *   ./kvpool_hello [MASTER]       (default: [cluster] master of kvpool.ini) */
#include <kvpool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	struct kvp_open_opts o = { .master = argc > 1 ? argv[1] : NULL };
	const char *key = "hello-from-c", *val = "hello, pool";
	char out[64];
	int err = 0;
	struct kvp *kvp = kvp_open(&o, &err);

	if (!kvp) {
		fprintf(stderr, "kvp_open: %s\n", kvp_strerror(err));
		return 1;
	}
	if ((err = kvp_put(kvp, key, val, strlen(val))) == 0) {
		int64_t n = kvp_get_into(kvp, key, out, sizeof(out));
		err = n < 0 ? (int)n : 0;
		if (n >= 0)
			printf("%s = %.*s\n", key, (int)n, out);
		kvp_remove(kvp, key, 0);
	}
	if (err)
		fprintf(stderr, "kvpool: %s (%s)\n", kvp_strerror(err), kvp_errname(err));
	kvp_close(kvp);
	return err ? 1 : 0;
}
