/* ui: the status page (ui/status.html, compiled in by tools/embed.sh) that
 * kvpool-master and kvpool-node serve on their HTTP port at / and /ui; its
 * data comes from their api/status. Pure functions; any thread.
 */
#ifndef KVP_UI_H
#define KVP_UI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_req;
struct http_resp;

extern const unsigned char ui_status_html[];
extern const size_t ui_status_html_len;

/* Answers GET/HEAD / and /ui with the page: true (resp filled), false
 * for any other request. */
bool ui_serve(const struct http_req *req, struct http_resp *resp);

/* The since= argument of api/status: true and *since_ms when present
 * (a malformed number reads as 0: every sample). */
bool ui_since(const struct http_req *req, uint64_t *since_ms);

#endif
