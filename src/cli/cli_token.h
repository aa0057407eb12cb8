/* cli_token: `kvpool token new [FILE]` — a fresh random cluster token
 * (32 bytes, hex) in a file created with mode 0600, and how to point every
 * process of the pool at it. Main thread only; no state.
 */
#ifndef KVP_CLI_TOKEN_H
#define KVP_CLI_TOKEN_H

#include <stddef.h>

/* argv[0] is "token"; the options after it. Returns an exit code (0 ok,
 * 1 error, 2 usage). */
int cli_token_main(int argc, char **argv);
/* Where `kvpool token new` writes without FILE: /etc/kvpool/token for
 * root, else $XDG_CONFIG_HOME/kvpool/token (~/.config/kvpool/token). */
const char *cli_token_default_path(char *buf, size_t len);

#endif
