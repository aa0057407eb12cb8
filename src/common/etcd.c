/* etcd: v3 JSON gateway client over libcurl; see etcd.h. Requests are
 * small JSON documents built with snprintf (keys and values travel in
 * base64, so nothing needs escaping); answers are read with json.c into a
 * bounded buffer. */
#include "etcd.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Plain prototypes: the calls below go through the loaded table. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include "conf.h"
#include "json.h"

/* libcurl is loaded on first use, as the CUDA runtime is (cuda.c): only
 * etcd:// addresses and HA masters need it, so libkvpool and the daemons do
 * not carry its thirty-odd shared objects for everyone else. curl.h still
 * gives the types and constants (libcurl4-openssl-dev at build time). */
static struct {
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	void (*easy_cleanup)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_perform)(CURLM *, int *);
	CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
	CURLMcode (*multi_wakeup)(CURLM *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
	CURLMcode (*multi_cleanup)(CURLM *);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} cu;

#define curl_global_init cu.global_init
#define curl_easy_init cu.easy_init
#undef curl_easy_setopt	/* curl.h may name these as macros */
#undef curl_easy_getinfo
#define curl_easy_setopt cu.easy_setopt
#define curl_easy_getinfo cu.easy_getinfo
#define curl_easy_cleanup cu.easy_cleanup
#define curl_easy_strerror cu.easy_strerror
#define curl_multi_init cu.multi_init
#define curl_multi_add_handle cu.multi_add_handle
#define curl_multi_remove_handle cu.multi_remove_handle
#define curl_multi_perform cu.multi_perform
#define curl_multi_poll cu.multi_poll
#define curl_multi_wakeup cu.multi_wakeup
#define curl_multi_info_read cu.multi_info_read
#define curl_multi_cleanup cu.multi_cleanup
#define curl_slist_append cu.slist_append
#define curl_slist_free_all cu.slist_free_all

#define RESP_MAX (1u << 20)	/* largest answer (or watch message) kept */
#define REQ_MAX (ETCD_VALUE_MAX * 2 + 4 * ETCD_KEY_MAX + 1024)
#define NTOKS 1024
#define WATCH_EVENTS 4

struct etcd {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *hdrs;
	char ep[ETCD_MAX_ENDPOINTS][ETCD_EP_MAX];
	unsigned nep, cur;
	uint64_t timeout_ms;
	atomic_bool cancel;
	atomic_bool intr;

	char *resp;			/* answer being received, NUL-terminated */
	size_t resp_len;
	bool resp_over;			/* over RESP_MAX: dropped */
	/* watch streaming: each line of the answer is one message */
	etcd_watch_cb wcb;
	void *warg;
	int wstop;			/* what wcb returned, or a parse error */
	bool wcreated;

	char req[REQ_MAX];
	char v64[ETCD_VALUE_MAX * 4 / 3 + 8];	/* a value in base64 */
	char local_ip[64];
	char errmsg[256];
	char curl_err[CURL_ERROR_SIZE];	/* libcurl's words on the last failure */
};

/* ---- base64 ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int etcd_b64_encode(const void *src, size_t n, char *out, size_t cap)
{
	const uint8_t *s = src;
	size_t need = (n + 2) / 3 * 4, o = 0;

	if (need + 1 > cap)
		return -E2BIG;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	return (int)o;
}

static int b64_val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int etcd_b64_decode(const char *src, size_t n, void *out, size_t cap)
{
	uint8_t *o = out;
	size_t k = 0;

	if (n % 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;

		for (int d = 0; d < 4; d++) {
			char c = src[i + d];
			if (c == '=' && i + 4 == n && d >= 2) {
				pad++;
				v[d] = 0;
				continue;
			}
			if (pad || (v[d] = b64_val(c)) < 0)
				return -EINVAL;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
			     (uint32_t)v[3];
		/* canonical: the bits a padded group leaves unused are zero */
		if ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff)))
			return -EINVAL;
		size_t bytes = 3 - (size_t)pad;
		if (k + bytes > cap)
			return -E2BIG;
		o[k++] = (uint8_t)(w >> 16);
		if (bytes > 1)
			o[k++] = (uint8_t)(w >> 8);
		if (bytes > 2)
			o[k++] = (uint8_t)w;
	}
	return (int)k;
}

/* ---- endpoints ---- */

bool etcd_is_url(const char *s)
{
	return strncmp(s, "etcd://", 7) == 0;
}

int etcd_endpoints_parse(const char *s, char out[][ETCD_EP_MAX], size_t max)
{
	size_t n = 0;

	if (etcd_is_url(s))
		s += 7;
	while (*s) {
		size_t l = strcspn(s, ";,");
		const char *h = s;
		size_t hl = l;

		while (hl && (*h == ' ' || *h == '\t')) {
			h++;
			hl--;
		}
		while (hl && (h[hl - 1] == ' ' || h[hl - 1] == '\t'))
			hl--;
		const char *scheme = "http://";
		if (hl >= 7 && strncmp(h, "http://", 7) == 0) {
			h += 7;
			hl -= 7;
		} else if (hl >= 8 && strncmp(h, "https://", 8) == 0) {
			scheme = "https://";
			h += 8;
			hl -= 8;
		}
		if (hl) {
			/* host:port, [v6]:port; no path, no spaces, a port */
			const char *colon = memrchr(h, ':', hl);
			if (!colon || colon == h + hl - 1 || n == max ||
			    strlen(scheme) + hl >= ETCD_EP_MAX)
				return -EINVAL;
			for (const char *c = colon + 1; c < h + hl; c++)
				if (*c < '0' || *c > '9')
					return -EINVAL;
			for (const char *c = h; c < colon; c++)
				if (*c <= ' ' || *c == '/' || *c == '@' || *c == '?' || *c == '#' ||
				    *c >= 0x7f)
					return -EINVAL;
			snprintf(out[n++], ETCD_EP_MAX, "%s%.*s", scheme, (int)hl, h);
		}
		s += l;
		if (*s)
			s++;
	}
	return n ? (int)n : -EINVAL;
}

/* ---- answer decoders ---- */

static int parse_doc(struct json *j, struct json_tok *t, const char *p, size_t n)
{
	if (json_parse(j, p, n, t, NTOKS) < 0 || !json_is(j, 0, JSON_OBJECT))
		return -EPROTO;
	return 0;
}

/* An optional int64 member: absent means 0 (the gateway omits zeros). */
static int opt_i64(const struct json *j, int obj, const char *key, int64_t *out)
{
	int t = json_get(j, obj, key);

	*out = 0;
	if (t < 0)
		return 0;
	return json_i64(j, t, out) < 0 ? -EPROTO : 0;
}

static int parse_kv(const struct json *j, int t, struct etcd_kv *kv)
{
	size_t n = 0;

	kv->value_len = 0;
	kv->value[0] = '\0';
	kv->create_rev = kv->mod_rev = kv->version = kv->lease = 0;
	if (!json_is(j, t, JSON_OBJECT))
		return -EPROTO;
	int v = json_get(j, t, "value");
	if (v >= 0) {
		size_t cap = ETCD_VALUE_MAX * 4 / 3 + 8;
		char *tmp = malloc(cap);
		if (!tmp)
			return -ENOMEM;
		int k = json_str(j, v, tmp, cap, &n) < 0 ? -1 :
			etcd_b64_decode(tmp, n, kv->value, sizeof(kv->value) - 1);
		free(tmp);
		if (k < 0)
			return -EPROTO;
		kv->value_len = (size_t)k;
	}
	kv->value[kv->value_len] = '\0';
	if (opt_i64(j, t, "create_revision", &kv->create_rev) ||
	    opt_i64(j, t, "mod_revision", &kv->mod_rev) ||
	    opt_i64(j, t, "version", &kv->version) || opt_i64(j, t, "lease", &kv->lease))
		return -EPROTO;
	return 0;
}

static int header_rev(const struct json *j, int obj, int64_t *rev)
{
	int64_t r = 0;
	int h = json_get(j, obj, "header");

	if (h >= 0 && opt_i64(j, h, "revision", &r))
		return -EPROTO;
	if (rev)
		*rev = r;
	return 0;
}

int etcd_parse_error(const char *p, size_t n, int *code, char *msg, size_t msglen)
{
	struct json_tok t[NTOKS];
	struct json j;
	int64_t c = 0;

	if (msglen)
		msg[0] = '\0';
	if (parse_doc(&j, t, p, n))
		return -EPROTO;
	int ct = json_get(&j, 0, "code");
	if (ct < 0 || json_i64(&j, ct, &c) < 0 || c < 0 || c > 100)
		return -EPROTO;
	*code = (int)c;
	int m = json_get(&j, 0, "message");
	if (m < 0)
		m = json_get(&j, 0, "error");
	if (m >= 0 && msglen && json_str(&j, m, msg, msglen, NULL) == -EINVAL)
		msg[0] = '\0';
	return 0;
}

/* A range answer's first kv; -ENOENT when there is none. */
static int range_kv(const struct json *j, int obj, struct etcd_kv *kv)
{
	int kvs = json_get(j, obj, "kvs");

	if (kvs < 0)
		return -ENOENT;
	if (!json_is(j, kvs, JSON_ARRAY))
		return -EPROTO;
	if (j->t[kvs].count == 0)
		return -ENOENT;
	return parse_kv(j, json_at(j, kvs, 0), kv);
}

int etcd_parse_range(const char *p, size_t n, struct etcd_kv *kv, int64_t *rev)
{
	struct json_tok t[NTOKS];
	struct json j;

	if (parse_doc(&j, t, p, n) || header_rev(&j, 0, rev))
		return -EPROTO;
	return range_kv(&j, 0, kv);
}

int etcd_parse_txn(const char *p, size_t n, bool *succeeded, int64_t *rev, struct etcd_kv *kv)
{
	struct json_tok t[NTOKS];
	struct json j;

	if (parse_doc(&j, t, p, n) || header_rev(&j, 0, rev))
		return -EPROTO;
	int s = json_get(&j, 0, "succeeded");
	if (s >= 0 && !json_is(&j, s, JSON_TRUE) && !json_is(&j, s, JSON_FALSE))
		return -EPROTO;
	*succeeded = json_bool(&j, s, false);
	if (kv)
		memset(kv, 0, sizeof(*kv));
	if (*succeeded || !kv)
		return 0;
	/* the failure branch of our txns is one range of the key */
	int r = json_at(&j, json_get(&j, 0, "responses"), 0);
	int rr = json_get(&j, r, "response_range");
	if (rr < 0)
		return 0;
	int rc = range_kv(&j, rr, kv);
	return rc == -ENOENT ? 0 : rc;
}

int etcd_parse_grant(const char *p, size_t n, int64_t *id, int64_t *ttl)
{
	struct json_tok t[NTOKS];
	struct json j;

	if (parse_doc(&j, t, p, n))
		return -EPROTO;
	if (json_i64(&j, json_get(&j, 0, "ID"), id) < 0 || opt_i64(&j, 0, "TTL", ttl) ||
	    *ttl <= 0)
		return -EPROTO;
	return 0;
}

/* A message of a streamed answer (keepalive, watch): its "result" object,
 * or the error object the stream ends with: -ENOENT (NOT_FOUND), -EIO, or
 * -EPROTO when it is neither. */
static int stream_result(const struct json *j, const char *p, size_t n)
{
	int r = json_get(j, 0, "result"), code;
	char msg[8];

	if (r >= 0)
		return json_is(j, r, JSON_OBJECT) ? r : -EPROTO;
	if (etcd_parse_error(p, n, &code, msg, sizeof(msg)) < 0)
		return -EPROTO;
	return code == 5 ? -ENOENT : -EIO;
}

int etcd_parse_keepalive(const char *p, size_t n, int64_t *ttl)
{
	struct json_tok t[NTOKS];
	struct json j;

	if (parse_doc(&j, t, p, n))
		return -EPROTO;
	int r = stream_result(&j, p, n);
	if (r < 0)
		return r;
	if (opt_i64(&j, r, "TTL", ttl))
		return -EPROTO;
	/* an expired or unknown lease comes back with TTL 0 (omitted) */
	return *ttl > 0 ? 0 : -ENOENT;
}

int etcd_parse_watch(const char *p, size_t n, bool *created, struct etcd_event *ev, size_t max)
{
	struct json_tok t[NTOKS];
	struct json j;

	*created = false;
	if (parse_doc(&j, t, p, n))
		return -EPROTO;
	int r = stream_result(&j, p, n);
	if (r < 0)
		return r == -ENOENT ? -EIO : r;
	*created = json_bool(&j, json_get(&j, r, "created"), false);
	if (json_bool(&j, json_get(&j, r, "canceled"), false))
		return -ESTALE;
	int evs = json_get(&j, r, "events");
	if (evs < 0)
		return 0;
	if (!json_is(&j, evs, JSON_ARRAY))
		return -EPROTO;
	size_t k = 0;
	for (uint32_t i = 0; i < j.t[evs].count && k < max; i++) {
		int e = json_at(&j, evs, i);
		int ty = json_get(&j, e, "type");
		struct etcd_event *o = &ev[k];

		if (ty >= 0 && !json_str_eq(&j, ty, "PUT") && !json_str_eq(&j, ty, "DELETE"))
			return -EPROTO;
		o->deleted = ty >= 0 && json_str_eq(&j, ty, "DELETE");
		if (parse_kv(&j, json_get(&j, e, "kv"), &o->kv))
			return -EPROTO;
		o->revision = o->kv.mod_rev;
		k++;
	}
	return (int)k;
}

/* ---- transport ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static char curl_load_err[256];	/* why libcurl could not be loaded */

static void curl_init(void)
{
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define SYM(f) { "curl_" #f, offsetof(__typeof__(cu), f) }
		SYM(global_init), SYM(easy_init), SYM(easy_setopt), SYM(easy_getinfo),
		SYM(easy_cleanup), SYM(easy_strerror), SYM(multi_init),
		SYM(multi_add_handle), SYM(multi_remove_handle), SYM(multi_perform),
		SYM(multi_poll), SYM(multi_wakeup), SYM(multi_info_read),
		SYM(multi_cleanup), SYM(slist_append), SYM(slist_free_all),
#undef SYM
	};
	void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);

	curl_init_rc = CURLE_FAILED_INIT;
	if (!h) {
		snprintf(curl_load_err, sizeof(curl_load_err),
			 "etcd needs libcurl: %s (apt-get install libcurl4)", dlerror());
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(h, syms[i].name);

		if (!f) {
			snprintf(curl_load_err, sizeof(curl_load_err),
				 "libcurl.so.4 has no %s (libcurl 7.68 or newer needed)",
				 syms[i].name);
			dlclose(h);
			return;
		}
		memcpy((char *)&cu + syms[i].off, &f, sizeof(f));
	}
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (curl_init_rc != CURLE_OK)
		snprintf(curl_load_err, sizeof(curl_load_err), "libcurl: %s",
			 curl_easy_strerror(curl_init_rc));
}

static void resp_reset(struct etcd *e)
{
	e->resp_len = 0;
	e->resp_over = false;
	if (e->resp)
		e->resp[0] = '\0';
}

static bool resp_add(struct etcd *e, const char *p, size_t n)
{
	if (e->resp_len + n >= RESP_MAX) {
		e->resp_over = true;
		return false;
	}
	if (!e->resp) {
		e->resp = malloc(RESP_MAX);
		if (!e->resp)
			return false;
	}
	memcpy(e->resp + e->resp_len, p, n);
	e->resp_len += n;
	e->resp[e->resp_len] = '\0';
	return true;
}

/* Watch streams: hands each complete line to the callback. */
static bool watch_lines(struct etcd *e)
{
	struct etcd_event *ev = malloc(WATCH_EVENTS * sizeof(*ev));
	char *nl;
	bool go_on = true;

	if (!ev) {
		e->wstop = -ENOMEM;
		return false;
	}
	while (go_on && (nl = memchr(e->resp, '\n', e->resp_len)) != NULL) {
		size_t len = (size_t)(nl - e->resp);
		bool created = false;
		int k = etcd_parse_watch(e->resp, len, &created, ev, WATCH_EVENTS);

		if (created)
			e->wcreated = true;
		if (k < 0) {
			e->wstop = k;
			go_on = false;
		}
		for (int i = 0; go_on && i < k; i++) {
			int r = e->wcb(e->warg, &ev[i]);
			if (r) {
				e->wstop = r;
				go_on = false;
			}
		}
		memmove(e->resp, nl + 1, e->resp_len - len - 1);
		e->resp_len -= len + 1;
		e->resp[e->resp_len] = '\0';
	}
	free(ev);
	return go_on;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg)
{
	struct etcd *e = arg;
	size_t n = size * nmemb;

	if (!resp_add(e, p, n))
		return 0;	/* CURLE_WRITE_ERROR */
	if (e->wcb && !watch_lines(e))
		return 0;
	return n;
}

void etcd_tls_from(struct etcd_tls *t, const struct kvp_conf *conf)
{
	t->required = conf->tls.enabled;
	t->ca = conf->tls.ca;
	t->cert = conf->tls.cert;
	t->key = conf->tls.key;
}

/* CURLOPT_* string options of tls: copied by libcurl. Under [tls] enabled
 * an http:// endpoint is refused: the cluster asked for encryption, and
 * etcd holds who leads it. */
static int setup_tls(struct etcd *e, const struct etcd_tls *tls, char *err, size_t errlen)
{
	bool https = false;

	for (unsigned i = 0; i < e->nep; i++) {
		if (strncmp(e->ep[i], "https://", 8) == 0) {
			https = true;
		} else if (tls && tls->required) {
			snprintf(err, errlen, "etcd endpoint %s is not TLS but [tls] enabled = true: "
				 "write https://%s", e->ep[i], e->ep[i] + 7);
			return -EINVAL;
		}
	}
	curl_easy_setopt(e->easy, CURLOPT_PROTOCOLS_STR, https ? "http,https" : "http");
	if (!https || !tls)
		return 0;
	if (tls->ca && tls->ca[0] && curl_easy_setopt(e->easy, CURLOPT_CAINFO, tls->ca) != CURLE_OK)
		goto out_nomem;
	if (tls->cert && tls->cert[0]) {
		if (curl_easy_setopt(e->easy, CURLOPT_SSLCERT, tls->cert) != CURLE_OK ||
		    curl_easy_setopt(e->easy, CURLOPT_SSLCERTTYPE, "PEM") != CURLE_OK)
			goto out_nomem;
		if (tls->key && tls->key[0] &&
		    curl_easy_setopt(e->easy, CURLOPT_SSLKEY, tls->key) != CURLE_OK)
			goto out_nomem;
	}
	curl_easy_setopt(e->easy, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	return 0;

out_nomem:
	snprintf(err, errlen, "libcurl: cannot set the TLS files (out of memory?)");
	return -ENOMEM;
}

struct etcd *etcd_create(const char *endpoints, uint64_t timeout_ms, const struct etcd_tls *tls,
			 char *err, size_t errlen)
{
	struct etcd *e;
	int n;

	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		snprintf(err, errlen, "%s", curl_load_err);
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	n = etcd_endpoints_parse(endpoints, e->ep, ETCD_MAX_ENDPOINTS);
	if (n < 0) {
		snprintf(err, errlen, "bad etcd endpoints \"%s\" (expected host:port;host:port, "
			 "at most %d)", endpoints, ETCD_MAX_ENDPOINTS);
		goto out_free;
	}
	e->nep = (unsigned)n;
	e->timeout_ms = timeout_ms ? timeout_ms : 1000;
	e->multi = curl_multi_init();
	e->easy = curl_easy_init();
	e->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (e->hdrs)
		e->hdrs = curl_slist_append(e->hdrs, "Expect:");
	if (!e->multi || !e->easy || !e->hdrs) {
		snprintf(err, errlen, "libcurl: out of memory");
		goto out_curl;
	}
	curl_easy_setopt(e->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->easy, CURLOPT_HTTPHEADER, e->hdrs);
	curl_easy_setopt(e->easy, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e->easy, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(e->easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e->easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e->easy, CURLOPT_ERRORBUFFER, e->curl_err);
	/* No proxy from the environment: etcd is reached directly. */
	curl_easy_setopt(e->easy, CURLOPT_NOPROXY, "*");
	if (setup_tls(e, tls, err, errlen) < 0)
		goto out_curl;
	return e;

out_curl:
	curl_slist_free_all(e->hdrs);
	if (e->easy)
		curl_easy_cleanup(e->easy);
	if (e->multi)
		curl_multi_cleanup(e->multi);
out_free:
	free(e);
	return NULL;
}

void etcd_destroy(struct etcd *e)
{
	if (!e)
		return;
	curl_easy_cleanup(e->easy);
	curl_multi_cleanup(e->multi);
	curl_slist_free_all(e->hdrs);
	free(e->resp);
	free(e);
}

void etcd_set_timeout(struct etcd *e, uint64_t timeout_ms)
{
	e->timeout_ms = timeout_ms ? timeout_ms : 1000;
}

void etcd_cancel(struct etcd *e)
{
	atomic_store(&e->cancel, true);
	curl_multi_wakeup(e->multi);
}

void etcd_interrupt(struct etcd *e)
{
	atomic_store(&e->intr, true);
	curl_multi_wakeup(e->multi);
}

const char *etcd_endpoint(const struct etcd *e)
{
	return e->ep[e->cur];
}

const char *etcd_local_ip(const struct etcd *e)
{
	return e->local_ip;
}

const char *etcd_last_error(const struct etcd *e)
{
	return e->errmsg;
}

/* Drives one transfer on the multi handle so that etcd_cancel and
 * etcd_interrupt can break its wait. */
static int run(struct etcd *e)
{
	CURLcode res = CURLE_OK;
	int running = 1, rc = 0;

	e->curl_err[0] = '\0';
	if (curl_multi_add_handle(e->multi, e->easy) != CURLM_OK)
		return -ENOMEM;
	while (running) {
		if (atomic_load(&e->cancel)) {
			rc = -ECANCELED;
			break;
		}
		if (atomic_exchange(&e->intr, false)) {
			rc = -EINTR;
			break;
		}
		if (curl_multi_perform(e->multi, &running) != CURLM_OK) {
			rc = -EIO;
			break;
		}
		if (running && curl_multi_poll(e->multi, NULL, 0, 1000, NULL) != CURLM_OK) {
			rc = -EIO;
			break;
		}
	}
	if (!rc) {
		CURLMsg *m;
		int q;
		while ((m = curl_multi_info_read(e->multi, &q)) != NULL)
			if (m->msg == CURLMSG_DONE && m->easy_handle == e->easy)
				res = m->data.result;
	}
	curl_multi_remove_handle(e->multi, e->easy);
	if (rc)
		return rc;
	switch (res) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_WRITE_ERROR:
		return e->resp_over ? -EMSGSIZE : -ECONNABORTED;	/* the callback stopped */
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_USE_SSL_FAILED:
		/* another endpoint may do better; the reason is kept */
		snprintf(e->errmsg, sizeof(e->errmsg), "%.64s: TLS: %.180s", e->ep[e->cur],
			 e->curl_err[0] ? e->curl_err : curl_easy_strerror(res));
		return -ECONNRESET;
	default:
		return -ECONNRESET;
	}
}

static bool transport_error(int rc)
{
	return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -EHOSTUNREACH ||
	       rc == -ECONNRESET || rc == -EAGAIN;
}

/* gRPC status codes in the gateway's error answers. */
static int grpc_errno(int code)
{
	switch (code) {
	case 5: return -ENOENT;		/* NOT_FOUND: e.g. lease not found */
	case 4: return -ETIMEDOUT;	/* DEADLINE_EXCEEDED */
	case 14: return -EAGAIN;	/* UNAVAILABLE: no leader, no quorum */
	case 9: return -ESTALE;		/* FAILED_PRECONDITION */
	case 11: return -ESTALE;	/* OUT_OF_RANGE: compacted */
	default: return -EIO;
	}
}

/* POSTs body to path at each endpoint in turn until one answers; the
 * answer is in e->resp. max_ms > 0 overrides the timeout (watches). */
static int call(struct etcd *e, const char *path, const char *body, uint64_t max_ms)
{
	int rc = -ECONNREFUSED;
	uint64_t tmo = max_ms ? max_ms : e->timeout_ms;
	uint64_t ctmo = e->timeout_ms < 1000 ? e->timeout_ms : 1000;

	e->errmsg[0] = '\0';
	for (unsigned a = 0; a < e->nep; a++) {
		char url[ETCD_EP_MAX + 32];
		long code = 0;

		snprintf(url, sizeof(url), "%s%s", e->ep[e->cur], path);
		resp_reset(e);
		curl_easy_setopt(e->easy, CURLOPT_URL, url);
		curl_easy_setopt(e->easy, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e->easy, CURLOPT_TIMEOUT_MS, (long)tmo);
		curl_easy_setopt(e->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)ctmo);
		rc = run(e);
		if (rc == 0) {
			char *ip = NULL;
			curl_easy_getinfo(e->easy, CURLINFO_RESPONSE_CODE, &code);
			if (curl_easy_getinfo(e->easy, CURLINFO_LOCAL_IP, &ip) == CURLE_OK && ip)
				snprintf(e->local_ip, sizeof(e->local_ip), "%s", ip);
			if (code == 200)
				return 0;
			int gc;
			if (etcd_parse_error(e->resp, e->resp_len, &gc, e->errmsg,
					     sizeof(e->errmsg)) == 0)
				rc = grpc_errno(gc);
			else
				rc = -EPROTO;
		}
		if (rc == -ETIMEDOUT && e->wcb && e->wcreated)
			return rc;	/* a watch that ran its course */
		if (!transport_error(rc))
			return rc;
		if (!e->errmsg[0])
			snprintf(e->errmsg, sizeof(e->errmsg), "%s: %s", e->ep[e->cur],
				 strerror(-rc));
		e->cur = (e->cur + 1) % e->nep;
	}
	return rc;
}

/* "key" and optional "value" members, base64 encoded, into dst. */
static int b64_field(char *dst, size_t cap, const void *p, size_t n)
{
	return etcd_b64_encode(p, n, dst, cap) < 0 ? -E2BIG : 0;
}

static int key64(char *dst, size_t cap, const char *key)
{
	size_t n = strlen(key);

	if (!n || n > ETCD_KEY_MAX)
		return -EINVAL;
	return b64_field(dst, cap, key, n);
}

#define K64 (ETCD_KEY_MAX * 4 / 3 + 8)

int etcd_get(struct etcd *e, const char *key, struct etcd_kv *kv, int64_t *rev)
{
	char k[K64];
	int rc = key64(k, sizeof(k), key);

	if (rc)
		return rc;
	snprintf(e->req, sizeof(e->req), "{\"key\":\"%s\"}", k);
	rc = call(e, "/v3/kv/range", e->req, 0);
	return rc ? rc : etcd_parse_range(e->resp, e->resp_len, kv, rev);
}

int etcd_put(struct etcd *e, const char *key, const void *val, size_t n, int64_t lease)
{
	char k[K64], *v = e->v64;
	int rc = key64(k, sizeof(k), key);

	if (rc || (rc = b64_field(v, sizeof(e->v64), val, n)))
		return rc;
	snprintf(e->req, sizeof(e->req), "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}",
		 k, v, (long long)lease);
	return call(e, "/v3/kv/put", e->req, 0);
}

int etcd_create_key(struct etcd *e, const char *key, const void *val, size_t n, int64_t lease,
		    int64_t *rev, struct etcd_kv *cur)
{
	char k[K64], *v = e->v64;
	int rc = key64(k, sizeof(k), key);
	bool ok;
	int64_t r = 0;

	if (rc || (rc = b64_field(v, sizeof(e->v64), val, n)))
		return rc;
	snprintf(e->req, sizeof(e->req),
		 "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\",\"create_revision\":\"0\"}],"
		 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}}],"
		 "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
		 k, k, v, (long long)lease, k);
	rc = call(e, "/v3/kv/txn", e->req, 0);
	if (rc)
		return rc;
	rc = etcd_parse_txn(e->resp, e->resp_len, &ok, &r, cur);
	if (rc)
		return rc;
	if (!ok)
		return -EEXIST;
	/* the txn's revision is the one that created the key */
	if (rev)
		*rev = r;
	return r > 0 ? 0 : -EPROTO;
}

int etcd_put_guarded(struct etcd *e, const char *guard_key, int64_t guard_rev,
		     const char *key, const void *val, size_t n, int64_t lease)
{
	char g[K64], k[K64], *v = e->v64;
	int rc = key64(g, sizeof(g), guard_key);
	bool ok;

	if (rc || (rc = key64(k, sizeof(k), key)) || (rc = b64_field(v, sizeof(e->v64), val, n)))
		return rc;
	snprintf(e->req, sizeof(e->req),
		 "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\",\"create_revision\":\"%lld\"}],"
		 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}}]}",
		 g, (long long)guard_rev, k, v, (long long)lease);
	rc = call(e, "/v3/kv/txn", e->req, 0);
	if (rc || (rc = etcd_parse_txn(e->resp, e->resp_len, &ok, NULL, NULL)))
		return rc;
	return ok ? 0 : -ESTALE;
}

int etcd_delete_if(struct etcd *e, const char *key, int64_t rev)
{
	char k[K64];
	int rc = key64(k, sizeof(k), key);
	bool ok;

	if (rc)
		return rc;
	snprintf(e->req, sizeof(e->req),
		 "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\",\"create_revision\":\"%lld\"}],"
		 "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}}]}",
		 k, (long long)rev, k);
	rc = call(e, "/v3/kv/txn", e->req, 0);
	if (rc || (rc = etcd_parse_txn(e->resp, e->resp_len, &ok, NULL, NULL)))
		return rc;
	return ok ? 0 : -ESTALE;
}

int etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t *id, int64_t *granted)
{
	snprintf(e->req, sizeof(e->req), "{\"TTL\":\"%lld\"}", (long long)ttl);
	int rc = call(e, "/v3/lease/grant", e->req, 0);
	return rc ? rc : etcd_parse_grant(e->resp, e->resp_len, id, granted);
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl)
{
	snprintf(e->req, sizeof(e->req), "{\"ID\":\"%lld\"}", (long long)id);
	int rc = call(e, "/v3/lease/keepalive", e->req, 0);
	if (rc)
		return rc;
	/* a stream of one message: the first line */
	char *nl = memchr(e->resp, '\n', e->resp_len);
	return etcd_parse_keepalive(e->resp, nl ? (size_t)(nl - e->resp) : e->resp_len, ttl);
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
	snprintf(e->req, sizeof(e->req), "{\"ID\":\"%lld\"}", (long long)id);
	return call(e, "/v3/lease/revoke", e->req, 0);
}

int etcd_watch(struct etcd *e, const char *key, int64_t start_rev, uint64_t max_ms,
	       etcd_watch_cb cb, void *arg)
{
	char k[K64];
	int rc = key64(k, sizeof(k), key);

	if (rc)
		return rc;
	if (start_rev > 0)
		snprintf(e->req, sizeof(e->req),
			 "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%lld\"}}", k,
			 (long long)start_rev);
	else
		snprintf(e->req, sizeof(e->req), "{\"create_request\":{\"key\":\"%s\"}}", k);
	e->wcb = cb;
	e->warg = arg;
	e->wstop = 0;
	e->wcreated = false;
	rc = call(e, "/v3/watch", e->req, max_ms ? max_ms : 1000);
	e->wcb = NULL;
	if (e->wstop)
		return e->wstop;	/* the callback's value, or a bad message */
	if (rc == -ETIMEDOUT && e->wcreated)
		return 0;		/* ran its course */
	if (rc == 0 && e->wcreated)
		return 0;		/* the server ended the stream */
	return rc ? rc : -EPROTO;
}
