/* t_master_notify: systemd notification — READY=1 only once the RPC port
 * accepts, STATUS= lines, WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1
 * on SIGTERM — through a private NOTIFY_SOCKET. */
#include "testlib.h"

#include <sys/un.h>

/* Receives one datagram (NUL-terminated) within ms; false on timeout. */
static bool recv_msg(int fd, char *buf, size_t cap, unsigned ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, (int)ms) <= 0)
		return false;
	ssize_t n = recv(fd, buf, cap - 1, 0);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return true;
}

int main(void)
{
	const char *dir = tl_tmpdir("notify");
	char sock[160], ini[512], path[200], log[200], bin[256], msg[4096];
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	tl_fmt(sock, sizeof(sock), "%s/notify.sock", dir);
	REQUIRE(strlen(sock) < sizeof(a.sun_path), "socket path too long");
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "notify socket");

	int port = tl_free_port(), hport = tl_free_port();
	tl_fmt(path, sizeof(path), "%s/m.ini", dir);
	tl_fmt(log, sizeof(log), "%s/m.log", dir);
	snprintf(ini, sizeof(ini), "[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n",
		 port, hport);
	tl_write_file(path, ini);
	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	setenv("NOTIFY_SOCKET", sock, 1);
	setenv("WATCHDOG_USEC", "200000", 1);	/* 200 ms: pings every 100 ms */
	char *argv[] = { bin, "-c", path, NULL };
	pid_t pid = tl_spawn(argv, log);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");

	bool ready = false, status = false;
	int watchdogs = 0;
	uint64_t end = tl_now_ms() + 5000;
	while (tl_now_ms() < end && !(ready && watchdogs >= 3)) {
		if (!recv_msg(fd, msg, sizeof(msg), 1000))
			continue;
		if (strstr(msg, "READY=1")) {
			/* the port accepts by the time READY=1 is sent */
			int c = tl_connect(port);
			CHECK(c >= 0, "RPC port accepts at READY=1");
			if (c >= 0)
				close(c);
			ready = true;
		}
		status |= strstr(msg, "STATUS=") && strstr(msg, "keys") != NULL;
		watchdogs += strstr(msg, "WATCHDOG=1") != NULL;
	}
	CHECK(ready, "READY=1 received");
	CHECK(status, "STATUS= line with the key count");
	CHECK(watchdogs >= 3, "WATCHDOG=1 pings (%d)", watchdogs);

	kill(pid, SIGTERM);
	bool stopping = false;
	end = tl_now_ms() + 5000;
	while (tl_now_ms() < end && !stopping && recv_msg(fd, msg, sizeof(msg), 1000))
		stopping = strstr(msg, "STOPPING=1") != NULL;
	CHECK(stopping, "STOPPING=1 on SIGTERM");
	int st = tl_wait_exit(pid, 5000);
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	close(fd);
	if (tl_failures)
		tl_dump_log(log);
	return tl_done();
}
