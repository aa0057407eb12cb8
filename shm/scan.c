/* scan: see scan.h. Offline listing of a segment's extents; all bytes come
 * from the file and are escaped before they reach a terminal or a JSON
 * parser. Single-threaded, no global state.
 */
#include "scan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "extent.h"
#include "orphan.h"
#include "segmap.h"
#include "segment.h"

struct scan_out {
	FILE *out;
	bool json;
	bool verify;
	uint64_t n;
};

/* 2024-05-01T12:00:00.123Z */
static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ull);
	struct tm tm;

	if (!gmtime_r(&s, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm)) {
		snprintf(buf, len, "-");
		return;
	}
	snprintf(buf + strlen(buf), len - strlen(buf), ".%03uZ",
		 (unsigned)(ns % 1000000000ull / 1000000));
}

/* Terminal-safe: printable ASCII as is, backslash doubled, the rest \xNN. */
static void put_key_text(FILE *out, const uint8_t *k, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (k[i] == '\\')
			fputs("\\\\", out);
		else if (k[i] >= 0x20 && k[i] < 0x7f)
			fputc(k[i], out);
		else
			fprintf(out, "\\x%02x", k[i]);
	}
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static unsigned utf8_len(const uint8_t *p, uint32_t n)
{
	uint32_t cp;
	unsigned len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (unsigned i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* A JSON string of the key; bytes that are not UTF-8 become U+FFFD.
 * Returns false when any did (the caller then adds key_hex). */
static bool put_key_json(FILE *out, const uint8_t *k, uint32_t n)
{
	bool exact = true;

	fputc('"', out);
	for (uint32_t i = 0; i < n;) {
		unsigned l = utf8_len(k + i, n - i);
		uint8_t c = k[i];

		if (l == 0) {
			fputs("\\ufffd", out);
			exact = false;
			i++;
			continue;
		}
		if (l > 1) {
			fwrite(k + i, 1, l, out);
		} else if (c == '"' || c == '\\') {
			fputc('\\', out);
			fputc(c, out);
		} else if (c == '\n') {
			fputs("\\n", out);
		} else if (c == '\t') {
			fputs("\\t", out);
		} else if (c == '\r') {
			fputs("\\r", out);
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c);
		} else {
			fputc(c, out);
		}
		i += l;
	}
	fputc('"', out);
	return exact;
}

static const char *csum_word(const struct scan_out *s, const struct ext_found *f)
{
	if (!f->verified)
		return s->json ? "null" : "-";
	if (f->checksum_ok)
		return s->json ? "\"ok\"" : "ok";
	return s->json ? "\"bad\"" : "BAD";
}

static int print_one(const struct ext_found *f, void *arg)
{
	struct scan_out *s = arg;
	char t[48];

	fmt_time(f->h.put_time_ns, t, sizeof(t));
	if (s->json) {
		fprintf(s->out, "%s\n  {\"offset\": %" PRIu64 ", \"alloc_len\": %" PRIu64
			", \"value_len\": %" PRIu64 ", \"generation\": %" PRIu64
			", \"put_time_ns\": %" PRIu64 ", \"put_time\": \"%s\", \"flags\": %u"
			", \"checksum\": %s, \"key\": ", s->n ? "," : "", f->off, f->alloc_len,
			f->h.value_len, f->h.generation, f->h.put_time_ns, t,
			(unsigned)f->h.flags, csum_word(s, f));
		if (!put_key_json(s->out, f->key, f->h.key_len)) {
			fputs(", \"key_hex\": \"", s->out);
			for (uint32_t i = 0; i < f->h.key_len; i++)
				fprintf(s->out, "%02x", f->key[i]);
			fputc('"', s->out);
		}
		fputc('}', s->out);
	} else {
		fprintf(s->out, "%14" PRIu64 " %12" PRIu64 " %12" PRIu64 " %10" PRIu64 "  %-24s  %-4s  ",
			f->off, f->alloc_len, f->h.value_len, f->h.generation, t, csum_word(s, f));
		put_key_text(s->out, f->key, f->h.key_len);
		fputc('\n', s->out);
	}
	s->n++;
	return ferror(s->out) ? -EIO : 0;
}

/* "python pid 1234, orphan" */
static void put_owner(FILE *out, const struct segment_info *info, enum seg_owner_state st)
{
	if (info->version < 2) {
		fputs("format 1, no owner recorded", out);
		return;
	}
	put_key_text(out, (const uint8_t *)(info->owner[0] ? info->owner : "?"),
		     (uint32_t)strlen(info->owner[0] ? info->owner : "?"));
	fprintf(out, " pid %u%s, %s", info->owner_pid,
		info->flags & SEG_F_EPHEMERAL ? " (removes it on exit)" : "",
		orphan_state_name(st));
}

int scan_file(const char *path, bool json, bool verify, FILE *out, char *err, size_t errlen)
{
	struct scan_out s = { .out = out, .json = json, .verify = verify };
	struct ext_scan_stats st;
	struct segment_info info;
	struct segment seg;
	char t[48];
	int rc;

	rc = segment_attach(&seg, path, false, err, errlen);
	if (rc < 0)
		return rc;
	/* attach checked the header; read it again for name, time, owner */
	segment_header_check(seg.base, SEG_DATA_OFF, &info, NULL, 0);
	if (json) {
		fputc('[', out);
	} else {
		fmt_time(info.created_ns, t, sizeof(t));
		fprintf(out, "# segment %s: name ", seg.path);
		put_key_text(out, (const uint8_t *)info.name, (uint32_t)strlen(info.name));
		fprintf(out, ", uuid %016" PRIx64 ", size %" PRIu64 ", align %u, created %s\n",
			seg.uuid, seg.size, seg.align, t);
		fprintf(out, "# format %u, data from %" PRIu64 ", owner ", seg.version,
			seg.data_off);
		put_owner(out, &info, orphan_state(&info, seg.fd));
		fputc('\n', out);
		fprintf(out, "# %12s %12s %12s %10s  %-24s  %-4s  %s\n", "OFFSET", "ALLOC",
			"VALUE", "GENERATION", "PUT_TIME", "CSUM", "KEY");
	}
	/* max_value 0: the segment size already bounds every length. Format
	 * 2 lists what the commit map vouches for (puts in progress do not
	 * show); format 1 every header found page by page. */
	rc = segmap_scan(&seg, SEGMAP_REPORT_BAD | (verify ? SEGMAP_VERIFY : SEGMAP_TRUST), 0,
			 print_one, &s, &st);
	if (json)
		fputs(s.n ? "\n]\n" : "]\n", out);
	else
		fprintf(out, "# %" PRIu64 " extents, %" PRIu64 " bytes allocated, %" PRIu64
			" value bytes, %" PRIu64 " bad checksums, %" PRIu64 " tombstones\n",
			st.live, st.live_bytes, st.value_bytes, st.bad_checksum, st.tombstones);
	segment_close(&seg);
	if (rc < 0 || fflush(out) != 0 || ferror(out)) {
		snprintf(err, errlen, "%s: writing the listing failed", path);
		return -EIO;
	}
	if (st.bad_checksum) {
		snprintf(err, errlen, "%s: %" PRIu64 " extents with a bad value checksum",
			 path, st.bad_checksum);
		return -EBADMSG;
	}
	return 0;
}

struct host_out {
	FILE *out;
	bool json;
	unsigned n;
};

static int host_one(const struct orphan_entry *e, void *arg)
{
	struct host_out *h = arg;
	const struct segment_info *i = &e->info;

	if (h->json) {
		fprintf(h->out, "%s\n  {\"path\": ", h->n ? "," : "");
		put_key_json(h->out, (const uint8_t *)e->path, (uint32_t)strlen(e->path));
		fprintf(h->out, ", \"size\": %" PRIu64 ", \"held_bytes\": %" PRIu64
			", \"format\": %u, \"uuid\": \"%016" PRIx64 "\", \"owner\": ",
			i->size, e->bytes, i->version, i->uuid);
		put_key_json(h->out, (const uint8_t *)i->owner, (uint32_t)strlen(i->owner));
		fprintf(h->out, ", \"owner_pid\": %u, \"ephemeral\": %s, \"state\": \"%s\"}",
			i->owner_pid, i->flags & SEG_F_EPHEMERAL ? "true" : "false",
			orphan_state_name(e->state));
	} else {
		fprintf(h->out, "%-7s %14" PRIu64 " %14" PRIu64 "  ", orphan_state_name(e->state),
			i->size, e->bytes);
		put_owner(h->out, i, e->state);
		fputs("  ", h->out);
		put_key_text(h->out, (const uint8_t *)e->path, (uint32_t)strlen(e->path));
		fputc('\n', h->out);
	}
	h->n++;
	return ferror(h->out) ? -EIO : 0;
}

int scan_host(const char *dir, bool json, FILE *out, char *err, size_t errlen)
{
	struct host_out h = { .out = out, .json = json };
	int rc;

	if (json)
		fputc('[', out);
	else
		fprintf(out, "# %-5s %14s %14s  %s  %s\n", "STATE", "SIZE", "HELD", "OWNER", "PATH");
	rc = orphan_list(dir, host_one, &h);
	if (json)
		fputs(h.n ? "\n]\n" : "]\n", out);
	if (rc < 0 || fflush(out) != 0 || ferror(out)) {
		snprintf(err, errlen, "%s: %s", dir ? dir : "/dev/shm",
			 rc < 0 && rc != -EIO ? strerror(-rc) : "writing the listing failed");
		return rc < 0 ? rc : -EIO;
	}
	return 0;
}
