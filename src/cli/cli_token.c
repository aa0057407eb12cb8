/* cli_token: a new cluster token file; see cli_token.h. */
#include "cli_token.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"

#define TOKEN_BYTES 32

const char *cli_token_default_path(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

	if (geteuid() == 0)
		snprintf(buf, len, "/etc/kvpool/token");
	else if (xdg && *xdg)
		snprintf(buf, len, "%s/kvpool/token", xdg);
	else
		snprintf(buf, len, "%s/.config/kvpool/token", home && *home ? home : ".");
	return buf;
}

/* The default path's directory, made when missing (only that last level:
 * ~/.config or /etc must exist). */
static int make_parent(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');

	if (!slash || slash == path)
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (mkdir(dir, geteuid() == 0 ? 0755 : 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int usage(void)
{
	return cli_usage_error("token", "expected: token new [FILE] [--force]");
}

int cli_token_main(int argc, char **argv)
{
	const char *path = NULL;
	char def[4096], hex[2 * TOKEN_BYTES + 2];
	uint8_t raw[TOKEN_BYTES];
	bool force = false, dflt = false;

	if (argc < 2 || strcmp(argv[1], "new") != 0)
		return usage();
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f"))
			force = true;
		else if (argv[i][0] == '-' && argv[i][1])
			return usage();
		else if (!path)
			path = argv[i];
		else
			return usage();
	}
	if (!path) {
		path = cli_token_default_path(def, sizeof(def));
		dflt = true;
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		cli_errorx("token", "getrandom: %s", strerror(errno));
		return CLI_EXIT_ERR;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	hex[2 * TOKEN_BYTES] = '\n';
	hex[2 * TOKEN_BYTES + 1] = '\0';
	if (dflt && make_parent(path) < 0) {
		cli_errorx("token", "%s: cannot make its directory: %s", path, strerror(errno));
		return CLI_EXIT_ERR;
	}
	/* A new file, 0600 from its creation: never a moment readable by
	 * others. --force replaces an existing one (a rotation) the same way. */
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.new-%d", path, (int)getpid());
	int fd = open(force ? tmp : path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		cli_errorx("token", "%s: %s%s", path, strerror(e),
			   e == EEXIST ? " (a token is there already; --force replaces it)" : "");
		return CLI_EXIT_ERR;
	}
	size_t n = strlen(hex);
	bool ok = fchmod(fd, 0600) == 0 && write(fd, hex, n) == (ssize_t)n && fsync(fd) == 0;
	int e = errno;
	if (close(fd) < 0 && ok) {
		ok = false;
		e = errno;
	}
	if (ok && force && rename(tmp, path) < 0) {
		ok = false;
		e = errno;
	}
	if (!ok) {
		unlink(force ? tmp : path);
		cli_errorx("token", "%s: %s", path, strerror(e));
		return CLI_EXIT_ERR;
	}
	char abs[4096];
	if (realpath(path, abs))
		path = abs;
	printf("New cluster token in %s (mode 0600).\n"
	       "Copy it to every host of the pool, keeping the mode (scp -p), and point\n"
	       "every process at it, then they listen beyond loopback:\n"
	       "  kvpool.ini:       [cluster]\n"
	       "                    token_file = %s\n"
	       "  or the env:       KVPOOL_CLUSTER_TOKEN_FILE=%s\n"
	       "  kvpool-master:    --cluster_token_file=%s (with Mooncake's flags)\n"
	       "  Python engines:   the same variable, or the INI the store loads\n",
	       path, path, path, path);
	return CLI_EXIT_OK;
}
