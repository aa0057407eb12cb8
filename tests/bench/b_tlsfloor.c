/* b_tlsfloor: the best TLS / plain-TCP throughput ratio this machine can
 * give, from same-run figures (client_bench.sh prints it next to the
 * measured ratio):
 *  - AES-128-GCM (TLS 1.3's suite) encrypt and decrypt of 16 KiB records
 *    with OpenSSL's EVP, on one core;
 *  - plain loopback TCP: one thread sends 1 MiB writes, another receives,
 *    each timing its own CPU (CLOCK_THREAD_CPUTIME_ID).
 * TLS adds the encryption to the sender's CPU per byte and the decryption
 * plus one copy out of the record buffer (SSL_read) to the receiver's; the
 * pipeline runs at its slower end, and both ends share the machine's cores:
 *   floor = 1 / max(send + 1/enc, recv + 1/dec + 1/memcpy,
 *                   (send + recv + 1/enc + 1/dec + 1/memcpy) / cores)
 * over the plain rate measured the same way. The same with the sender
 * writing 16 KiB at a time (one write per record, OpenSSL without kTLS)
 * bounds what coalescing records into larger writes can win. Prints
 * "name value" lines.
 * Usage: b_tlsfloor [-t SECONDS per measurement] [-c CORES]
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define REC (16u * 1024)		/* a TLS record's payload */
#define CHUNK (1u << 20)		/* one write / read of the TCP copy */

static double now_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bytes per CPU second of AES-128-GCM over 16 KiB records, one way. */
static double gcm_rate(int enc, double secs)
{
	static unsigned char key[16], iv[12], tag[16];
	unsigned char *in = calloc(1, REC), *out = malloc(REC + 32);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	uint64_t bytes = 0;
	int n;

	if (!in || !out || !c) {
		fprintf(stderr, "b_tlsfloor: out of memory\n");
		exit(1);
	}
	/* a decryption needs a valid tag: make one record to decrypt */
	EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), NULL, key, iv);
	EVP_EncryptUpdate(c, out, &n, in, REC);
	EVP_EncryptFinal_ex(c, out + n, &n);
	EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag);
	memcpy(in, out, REC);
	double t0 = now_s(CLOCK_THREAD_CPUTIME_ID), t;
	do {
		for (int i = 0; i < 64; i++) {
			if (enc) {
				EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv);
				EVP_EncryptUpdate(c, out, &n, in, REC);
				EVP_EncryptFinal_ex(c, out + n, &n);
				EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag);
			} else {
				if (i == 0 && bytes == 0)
					EVP_DecryptInit_ex(c, EVP_aes_128_gcm(), NULL, key, iv);
				EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv);
				EVP_DecryptUpdate(c, out, &n, in, REC);
				EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag);
				if (EVP_DecryptFinal_ex(c, out + n, &n) != 1) {
					fprintf(stderr, "b_tlsfloor: GCM tag mismatch\n");
					exit(1);
				}
			}
			bytes += REC;
		}
		t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
	} while (t < secs);
	EVP_CIPHER_CTX_free(c);
	free(in);
	free(out);
	return (double)bytes / t;
}

/* Bytes per CPU second of memcpy of 16 KiB (SSL_read's copy out). */
static double memcpy_rate(double secs)
{
	unsigned char *a = calloc(1, 64 * REC), *b = calloc(1, REC);
	uint64_t bytes = 0;
	double t0 = now_s(CLOCK_THREAD_CPUTIME_ID), t;

	do {
		for (unsigned i = 0; i < 64; i++) {
			memcpy(b, a + i * REC, REC);
			__asm__ volatile("" : : "r"(b) : "memory");
			bytes += REC;
		}
		t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
	} while (t < secs);
	free(a);
	free(b);
	return (double)bytes / t;
}

struct side {
	int fd;
	size_t chunk;		/* bytes per write() */
	double secs;
	uint64_t bytes;
	double cpu;		/* CPU seconds of this thread */
};

static void *sender(void *arg)
{
	struct side *s = arg;
	char *buf = calloc(1, CHUNK);
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID), w0 = now_s(CLOCK_MONOTONIC);

	while (now_s(CLOCK_MONOTONIC) - w0 < s->secs) {
		ssize_t w = write(s->fd, buf, s->chunk);
		if (w <= 0)
			break;
		s->bytes += (uint64_t)w;
	}
	s->cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	shutdown(s->fd, SHUT_WR);
	free(buf);
	return NULL;
}

static void *receiver(void *arg)
{
	struct side *s = arg;
	char *buf = malloc(CHUNK);
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	ssize_t r;

	while ((r = read(s->fd, buf, CHUNK)) > 0)
		s->bytes += (uint64_t)r;
	s->cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	free(buf);
	return NULL;
}

/* Plain loopback TCP: wall rate, and CPU seconds per byte of each end. */
static void tcp_copy(double secs, size_t chunk, double *rate, double *send_cpb, double *recv_cpb)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	struct side s = { .secs = secs, .chunk = chunk }, r = { 0 };
	pthread_t ts, tr;

	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 || (r.fd = accept(l, NULL, NULL)) < 0) {
		fprintf(stderr, "b_tlsfloor: loopback TCP: %s\n", strerror(errno));
		exit(1);
	}
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	s.fd = c;
	double w0 = now_s(CLOCK_MONOTONIC);
	pthread_create(&tr, NULL, receiver, &r);
	pthread_create(&ts, NULL, sender, &s);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	double wall = now_s(CLOCK_MONOTONIC) - w0;
	close(c);
	close(r.fd);
	close(l);
	*rate = (double)r.bytes / wall;
	*send_cpb = s.cpu / (double)s.bytes;
	*recv_cpb = r.cpu / (double)r.bytes;
}

static double max3(double a, double b, double c)
{
	double m = a > b ? a : b;
	return m > c ? m : c;
}

int main(int argc, char **argv)
{
	double secs = 1.0, cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
	int opt;

	while ((opt = getopt(argc, argv, "t:c:")) != -1) {
		if (opt == 't')
			secs = atof(optarg);
		else if (opt == 'c')
			cores = atof(optarg);
		else {
			fprintf(stderr, "usage: b_tlsfloor [-t SECONDS] [-c CORES]\n");
			return 2;
		}
	}
	if (secs <= 0 || cores < 1) {
		fprintf(stderr, "b_tlsfloor: -t > 0 and -c >= 1\n");
		return 2;
	}
	double enc = gcm_rate(1, secs), dec = gcm_rate(0, secs), cp = memcpy_rate(secs);
	double plain, s_cpb, r_cpb, plain16, s16_cpb, r16_cpb;
	tcp_copy(secs, CHUNK, &plain, &s_cpb, &r_cpb);
	/* one write() per 16 KiB record, as OpenSSL does without kTLS: what
	 * coalescing records into larger writes could win at most */
	tcp_copy(secs, REC, &plain16, &s16_cpb, &r16_cpb);

	/* the plain rate the same model gives (CPU-bound ends), for the ratio */
	double plain_model = 1.0 / max3(s_cpb, r_cpb, (s_cpb + r_cpb) / cores);
	double tls_send = s_cpb + 1.0 / enc, tls_recv = r_cpb + 1.0 / dec + 1.0 / cp;
	double tls_model = 1.0 / max3(tls_send, tls_recv, (tls_send + tls_recv) / cores);
	double tls16_send = s16_cpb + 1.0 / enc;
	double tls16_model = 1.0 / max3(tls16_send, tls_recv, (tls16_send + tls_recv) / cores);

	printf("aes128gcm_encrypt_gbps %.3f\n", enc / 1e9);
	printf("aes128gcm_decrypt_gbps %.3f\n", dec / 1e9);
	printf("memcpy_16k_gbps %.3f\n", cp / 1e9);
	printf("tcp_loopback_gbps %.3f\n", plain / 1e9);
	printf("tcp_send_cpu_gbps %.3f\n", 1.0 / s_cpb / 1e9);
	printf("tcp_recv_cpu_gbps %.3f\n", 1.0 / r_cpb / 1e9);
	printf("cores %.0f\n", cores);
	printf("tls_floor_gbps %.3f\n", tls_model / 1e9);
	printf("tls_floor_ratio %.3f\n", tls_model / plain_model);
	printf("tcp_loopback_16k_gbps %.3f\n", plain16 / 1e9);
	printf("tcp_send_16k_cpu_gbps %.3f\n", 1.0 / s16_cpb / 1e9);
	printf("tls_floor_16k_writes_ratio %.3f\n", tls16_model / plain_model);
	return 0;
}
