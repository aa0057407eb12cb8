/* t_copy_csum: the value checksum of shm/extent.c, which runs its own
 * XXH3-64 loop fused with the copy, must equal libxxhash's XXH3_64bits()
 * for every length (each one to 4 KiB, then a spread to 9 MiB), every
 * source/destination misalignment, one-shot and streamed in random pieces
 * (hash only and copy + hash), and the copy must be exact and stay inside
 * its destination, with plain and with non-temporal stores (which are
 * assembled into aligned lines, from 8 KiB of one piece on: every
 * destination misalignment is tried there).
 * Runs once per loop (KVPOOL_CSUM_ISA=scalar, avx2, avx512, and the widest
 * this CPU has; streaming stores are AVX2's in all but the scalar and a
 * widest with AVX-512 VBMI), each in a child process since the choice is
 * made at the first call. SEED=n reproduces a run.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "extent.h"
#include "testlib.h"

#define MAXLEN (9u << 20)
#define GUARD 128

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* A piece size: mostly small and odd, sometimes large. */
static size_t piece(size_t left)
{
	size_t k;

	switch (rnd() % 4) {
	case 0: k = 1 + rnd() % 80; break;
	case 1: k = 1 + rnd() % 300; break;
	case 2: k = 64 * (1 + rnd() % 40); break;
	default: k = 1 + rnd() % 200000; break;
	}
	return k < left ? k : left;
}

static void check_len_at(const uint8_t *src, uint8_t *dbuf, size_t n, size_t dof)
{
	uint64_t want = XXH3_64bits(src, n);
	uint8_t *dst = dbuf + GUARD + dof;
	struct ext_csum c;
	size_t off;

	REQUIRE(ext_checksum(src, n) == want, "ext_checksum len %zu", n);

	memset(dbuf, 0xa5, GUARD + dof);
	memset(dst + n, 0x5a, GUARD);
	REQUIRE(ext_copy_checksum(dst, src, n) == want, "ext_copy_checksum len %zu", n);
	REQUIRE(memcmp(dst, src, n) == 0, "copy len %zu", n);
	for (size_t i = 0; i < GUARD; i++)
		REQUIRE(dst[n + i] == 0x5a && dbuf[i] == 0xa5, "wrote outside dst, len %zu", n);

	memset(dst, 0, n);
	REQUIRE(ext_copy_checksum_nt(dst, src, n) == want, "ext_copy_checksum_nt len %zu", n);
	REQUIRE(memcmp(dst, src, n) == 0, "copy nt len %zu dst+%zu", n, dof);
	for (size_t i = 0; i < GUARD; i++)
		REQUIRE(dst[n + i] == 0x5a && dbuf[i] == 0xa5, "nt wrote outside dst, len %zu", n);

	REQUIRE(ext_csum_init(&c) == 0, "init");
	for (off = 0; off < n;) {
		size_t k = piece(n - off);

		ext_csum_update(&c, src + off, k);
		off += k;
	}
	REQUIRE(ext_csum_final(&c) == want, "streamed len %zu", n);

	memset(dst, 0, n);
	REQUIRE(ext_csum_init(&c) == 0, "init");
	for (off = 0; off < n;) {
		size_t k = piece(n - off);

		ext_copy_csum(dst + off, src + off, k, &c);
		off += k;
	}
	REQUIRE(ext_csum_final(&c) == want, "copy streamed len %zu", n);
	REQUIRE(memcmp(dst, src, n) == 0, "copy streamed bytes len %zu", n);
	REQUIRE(dst[n] == 0x5a, "copy streamed wrote past dst, len %zu", n);

	memset(dst, 0, n);
	REQUIRE(ext_csum_init(&c) == 0, "init");
	for (off = 0; off < n;) {
		size_t k = piece(n - off);

		ext_copy_csum_nt(dst + off, src + off, k, &c);
		off += k;
	}
	REQUIRE(ext_csum_final(&c) == want, "copy nt streamed len %zu", n);
	REQUIRE(memcmp(dst, src, n) == 0, "copy nt streamed bytes len %zu", n);
	for (size_t i = 0; i < GUARD; i++)
		REQUIRE(dst[n + i] == 0x5a && dbuf[i] == 0xa5, "nt streamed wrote outside dst, len %zu", n);
}

static void check_len(const uint8_t *src, uint8_t *dbuf, size_t n)
{
	check_len_at(src, dbuf, n, (size_t)(rnd() % 64));
}

static int run_all(const char *isa)
{
	uint8_t *src = malloc(MAXLEN + 64), *dbuf = malloc(MAXLEN + 64 + 2 * GUARD);
	size_t tested = 0;

	REQUIRE(src && dbuf, "out of memory");
	for (size_t i = 0; i < MAXLEN + 64; i += 8) {
		uint64_t x = rnd();

		memcpy(src + i, &x, 8);
	}
	/* Every length through the short/buffered/long boundaries, at a
	 * moving source misalignment. */
	for (size_t n = 0; n <= 4096; n++, tested++)
		check_len(src + (n % 61), dbuf, n);
	/* Block (1024) and buffer (256) boundaries of longer inputs. */
	for (size_t b = 1024; b <= (1u << 20); b *= 2)
		for (long d = -65; d <= 65; d += 13, tested++)
			check_len(src + (b % 7), dbuf, (size_t)((long)b + d));
	/* Streaming stores start at 8 KiB of one piece (extent.c
	 * XH_NT_MIN): every destination misalignment there. */
	for (size_t dof = 0; dof < 64; dof++)
		for (size_t k = 0; k < 4; k++, tested++)
			check_len_at(src + dof % 7, dbuf, (size_t[]){ 8191, 8192, 8257, 20011 }[k], dof);
	for (int i = 0; i < 40; i++, tested++)
		check_len(src + rnd() % 64, dbuf, (size_t)(rnd() % MAXLEN));
	check_len(src, dbuf, MAXLEN);
	/* Distinguishes: one flipped bit changes the value. */
	{
		uint64_t a = ext_checksum(src, 1 << 20);

		src[12345] ^= 4;
		REQUIRE(ext_checksum(src, 1 << 20) != a, "bit flip not seen");
	}
	printf("t_copy_csum: %s: %zu lengths equal to XXH3_64bits\n", isa, tested + 1);
	free(src);
	free(dbuf);
	return 0;
}

int main(void)
{
	static const char *const isas[] = { "scalar", "avx2", "avx512", "best" };
	const char *seed = getenv("SEED");
	int failed = 0;

	rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) * 2654435761u + 1;
	if (!rng_state)
		rng_state = 1;
	fprintf(stderr, "t_copy_csum: SEED=%" PRIu64 "\n", rng_state);
	fflush(NULL);
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		pid_t pid = fork();
		int st;

		REQUIRE(pid >= 0, "fork");
		if (pid == 0) {
			/* A loop this CPU lacks falls back to a narrower one. */
			if (strcmp(isas[i], "best"))
				setenv("KVPOOL_CSUM_ISA", isas[i], 1);
			else
				unsetenv("KVPOOL_CSUM_ISA");
			int rc = run_all(isas[i]);

			fflush(NULL);
			_exit(rc);
		}
		REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "t_copy_csum: %s loop failed\n", isas[i]);
			failed = 1;
		}
	}
	return failed;
}
