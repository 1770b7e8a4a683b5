/*
 * test_shim.c - unit tests of the static build's resolver (packaging/static_shim.c): numeric
 * addresses, a hosts file of the test's own (comments, aliases, both families, duplicates,
 * malformed and long lines), the localhost fallback, hints and errors.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "packaging/static_shim.h"
#include "tap.h"

#define NONAME gai_strerror(EAI_NONAME)

static char hosts[] = "/tmp/test_shim.XXXXXX";
static const char *const missing = "/nonexistent/test_shim/hosts";

/* The answer to one lookup as text: "rc" on failure, else each result as
 * "addr/port/socktype/protocol" joined by spaces, the first's ai_canonname as "(name)". */
static char got[1024];

static const char *
lookup(const char *path, const char *node, const char *service, int family, int socktype,
       int protocol, int flags)
{
	struct addrinfo h, *res = NULL, *ai;
	char a[INET6_ADDRSTRLEN];
	size_t n = 0;
	int rc;

	memset(&h, 0, sizeof h);
	h.ai_family = family;
	h.ai_socktype = socktype;
	h.ai_protocol = protocol;
	h.ai_flags = flags;
	rc = ttq_shim_getaddrinfo(path, node, service, &h, &res);
	if (rc != 0) {
		snprintf(got, sizeof got, "%s", gai_strerror(rc));
		return got;
	}
	got[0] = '\0';
	for (ai = res; ai; ai = ai->ai_next) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ai->ai_addr;
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ai->ai_addr;
		int port;

		if (ai->ai_family == AF_INET && ai->ai_addrlen == sizeof *s4 &&
		    s4->sin_family == AF_INET) {
			inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
			port = ntohs(s4->sin_port);
		} else if (ai->ai_family == AF_INET6 && ai->ai_addrlen == sizeof *s6 &&
		           s6->sin6_family == AF_INET6) {
			inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
			port = ntohs(s6->sin6_port);
		} else {
			snprintf(a, sizeof a, "bad-family-%d", ai->ai_family);
			port = -1;
		}
		n += (size_t)snprintf(got + n, sizeof got - n, "%s%s/%d/%s/%s", n ? " " : "", a,
		                      port, ai->ai_socktype == SOCK_STREAM   ? "stream"
		                            : ai->ai_socktype == SOCK_DGRAM ? "dgram"
		                                                             : "?",
		                      ai->ai_protocol == IPPROTO_TCP   ? "tcp"
		                      : ai->ai_protocol == IPPROTO_UDP ? "udp"
		                                                       : "?");
		if (ai->ai_canonname)
			n += (size_t)snprintf(got + n, sizeof got - n, "(%s)", ai->ai_canonname);
		if (n >= sizeof got)
			break;
	}
	freeaddrinfo(res);
	return got;
}

/* The common case: the CLI's hints (any family, TCP, numeric port). */
static const char *
cli(const char *path, const char *node)
{
	return lookup(path, node, "5741", AF_UNSPEC, SOCK_STREAM, 0, AI_NUMERICSERV);
}

static void
write_hosts(void)
{
	FILE *f;
	int fd = mkstemp(hosts), i;

	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		perror("test_shim: temporary hosts file");
		exit(1);
	}
	fputs("# hosts of test_shim\n"
	      "127.0.0.1\tlocalhost\n"
	      "::1     localhost ip6-localhost ip6-loopback\n"
	      "\n"
	      "   \t \n"
	      "10.1.2.3   gpu-box.lab gpu-box   # trailing comment gpu-box-commented\n"
	      "10.1.2.4   other#glued-comment\n"
	      "#10.1.2.5  commented-out\n"
	      "fd00::5    gpu-box.lab v6only\n"
	      "not-an-address  bogus\n"
	      "fe80::1%eth0  scoped\n"
	      "10.1.2.3   gpu-box\n"
	      "10.1.2.6\n"
	      "10.9.9.9 UPPER.Example\r\n",
	      f);
	fputs("10.7.7.7 ", f); /* one line longer than any fixed buffer would be */
	for (i = 0; i < 2000; i++)
		fprintf(f, "filler%d ", i);
	fputs("at-the-end-of-a-long-line\n", f);
	fputs("10.8.8.8 last-line-without-newline", f);
	if (fclose(f) != 0) {
		perror("test_shim: writing the hosts file");
		exit(1);
	}
}

static void
test_hosts_file(void)
{
	is_str(cli(hosts, "gpu-box"), "10.1.2.3/5741/stream/tcp",
	       "an alias resolves; its repeated line adds nothing");
	is_str(cli(hosts, "gpu-box.lab"), "10.1.2.3/5741/stream/tcp fd00::5/5741/stream/tcp",
	       "a name on an IPv4 and an IPv6 line: both, in file order");
	is_str(lookup(hosts, "gpu-box.lab", "5741", AF_INET, SOCK_STREAM, 0, 0),
	       "10.1.2.3/5741/stream/tcp", "AF_INET: only the IPv4 line");
	is_str(lookup(hosts, "gpu-box.lab", "5741", AF_INET6, SOCK_STREAM, 0, 0),
	       "fd00::5/5741/stream/tcp", "AF_INET6: only the IPv6 line");
	is_str(lookup(hosts, "v6only", "5741", AF_INET, SOCK_STREAM, 0, 0), NONAME,
	       "an IPv6-only name asked for IPv4: EAI_NONAME");
	is_str(cli(hosts, "localhost"), "127.0.0.1/5741/stream/tcp ::1/5741/stream/tcp",
	       "localhost as the file lists it");
	is_str(cli(hosts, "ip6-loopback"), "::1/5741/stream/tcp", "a second alias");
	is_str(cli(hosts, "upper.example"), "10.9.9.9/5741/stream/tcp",
	       "names match case-insensitively (and a CRLF line ending is blank)");
	is_str(cli(hosts, "at-the-end-of-a-long-line"), "10.7.7.7/5741/stream/tcp",
	       "a name at the end of a 20 KB line");
	is_str(cli(hosts, "last-line-without-newline"), "10.8.8.8/5741/stream/tcp",
	       "the last line without a newline");
	is_str(cli(hosts, "other"), "10.1.2.4/5741/stream/tcp", "a name glued to a comment");
	is_str(cli(hosts, "glued-comment"), NONAME, "...and the comment glued to it is not one");
	is_str(cli(hosts, "gpu-box-commented"), NONAME, "a word of a trailing comment is no name");
	is_str(cli(hosts, "commented-out"), NONAME, "a commented-out line");
	is_str(cli(hosts, "comment"), NONAME, "comment words are not names");
	is_str(cli(hosts, "bogus"), NONAME, "a line whose first column is no address is skipped");
	is_str(cli(hosts, "not-an-address"), NONAME, "the address column is never a name");
	is_str(cli(hosts, "scoped"), NONAME, "an address with a scope id is not supported");
	is_str(cli(hosts, "10.1.2.6"), "10.1.2.6/5741/stream/tcp",
	       "a numeric address (its line without names is harmless)");
	is_str(cli(hosts, "gpu"), NONAME, "no prefix matching");
	is_str(cli(hosts, ""), NONAME, "an empty name");
	is_str(cli(hosts, "no-such-host.invalid"), NONAME, "an unknown name: EAI_NONAME, no DNS");
	is_str(lookup(hosts, "gpu-box", "80", AF_UNSPEC, SOCK_STREAM, 0, AI_CANONNAME),
	       "10.1.2.3/80/stream/tcp(gpu-box.lab)", "AI_CANONNAME: the line's first name");
	is_str(lookup(hosts, "gpu-box.lab", "80", AF_UNSPEC, SOCK_STREAM, 0, AI_CANONNAME),
	       "10.1.2.3/80/stream/tcp(gpu-box.lab) fd00::5/80/stream/tcp",
	       "the canonical name on the first result only");
	is_str(lookup(hosts, "gpu-box", "80", AF_UNSPEC, SOCK_STREAM, 0, AI_NUMERICHOST),
	       NONAME, "AI_NUMERICHOST: the hosts file is not read");
}

static void
test_no_hosts_file(void)
{
	is_str(cli(missing, "localhost"), "127.0.0.1/5741/stream/tcp ::1/5741/stream/tcp",
	       "no hosts file: localhost is still the loopback, IPv4 first");
	is_str(lookup(missing, "LocalHost", "1", AF_INET6, SOCK_STREAM, 0, AI_CANONNAME),
	       "::1/1/stream/tcp(localhost)", "the fallback honours the family");
	is_str(cli(missing, "gpu-box"), NONAME, "other names: EAI_NONAME");
	is_str(cli(missing, "192.0.2.1"), "192.0.2.1/5741/stream/tcp", "numeric IPv4");
	is_str(cli(missing, "2001:db8::1"), "2001:db8::1/5741/stream/tcp", "numeric IPv6");
	is_str(cli(missing, "127.1"), NONAME,
	       "only the dotted-quad IPv4 form is numeric");
	is_str(cli(hosts, "localhost.localdomain"), NONAME,
	       "only localhost itself falls back");
}

static void
test_hints(void)
{
	struct addrinfo *res = (struct addrinfo *)&res;

	is_str(lookup(missing, "192.0.2.1", NULL, AF_UNSPEC, 0, 0, 0),
	       "192.0.2.1/0/stream/tcp 192.0.2.1/0/dgram/udp",
	       "socktype 0: a TCP and a UDP result, port 0 without a service");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, 0, IPPROTO_UDP, 0),
	       "192.0.2.1/53/dgram/udp", "protocol UDP alone selects datagrams");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, SOCK_DGRAM, 0, 0),
	       "192.0.2.1/53/dgram/udp", "SOCK_DGRAM");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, SOCK_STREAM, IPPROTO_TCP, 0),
	       "192.0.2.1/53/stream/tcp", "SOCK_STREAM with IPPROTO_TCP");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, SOCK_STREAM, IPPROTO_UDP, 0),
	       gai_strerror(EAI_SOCKTYPE), "SOCK_STREAM with IPPROTO_UDP: EAI_SOCKTYPE");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, SOCK_RAW, 0, 0),
	       gai_strerror(EAI_SOCKTYPE), "SOCK_RAW: EAI_SOCKTYPE");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, 0, IPPROTO_SCTP, 0),
	       gai_strerror(EAI_SERVICE), "an unknown protocol: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNIX, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_FAMILY), "AF_UNIX: EAI_FAMILY");
	is_str(lookup(missing, "192.0.2.1", "53", AF_INET6, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_ADDRFAMILY), "an IPv4 address asked for IPv6: EAI_ADDRFAMILY");
	is_str(lookup(missing, "::1", "53", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_ADDRFAMILY), "an IPv6 address asked for IPv4: EAI_ADDRFAMILY");
	is_str(lookup(missing, "192.0.2.1", "53", AF_UNSPEC, SOCK_STREAM, 0, AI_V4MAPPED),
	       gai_strerror(EAI_BADFLAGS), "AI_V4MAPPED: EAI_BADFLAGS");
	is_str(lookup(missing, "192.0.2.1", "80", AF_UNSPEC, SOCK_STREAM, 0,
	              AI_NUMERICHOST | AI_NUMERICSERV | AI_ADDRCONFIG | AI_CANONNAME),
	       "192.0.2.1/80/stream/tcp(192.0.2.1)", "numeric: the canonical name is the address");
	is_str(lookup(missing, "192.0.2.1", "65535", AF_INET, SOCK_STREAM, 0, 0),
	       "192.0.2.1/65535/stream/tcp", "the highest port");
	is_str(lookup(missing, "192.0.2.1", "65536", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "port 65536: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "-1", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "a negative port: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "80x", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "a port with trailing text: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "+80", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "a port with a sign: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", " 80", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "a port after a blank: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "an empty service: EAI_SERVICE");
	is_str(lookup(missing, "192.0.2.1", "http", AF_INET, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_SERVICE), "a service name: EAI_SERVICE (no /etc/services)");
	is_str(lookup(missing, "192.0.2.1", "http", AF_INET, SOCK_STREAM, 0, AI_NUMERICSERV),
	       gai_strerror(EAI_NONAME), "a service name with AI_NUMERICSERV: EAI_NONAME");
	is_str(lookup(missing, NULL, "80", AF_UNSPEC, SOCK_STREAM, 0, 0),
	       "127.0.0.1/80/stream/tcp ::1/80/stream/tcp", "no node: the loopback addresses");
	is_str(lookup(missing, NULL, "80", AF_INET6, SOCK_STREAM, 0, AI_PASSIVE),
	       "::/80/stream/tcp", "no node, AI_PASSIVE: the wildcard address");
	is_str(lookup(missing, NULL, NULL, AF_UNSPEC, SOCK_STREAM, 0, 0),
	       gai_strerror(EAI_NONAME), "neither node nor service: EAI_NONAME");

	is_int(ttq_shim_getaddrinfo(missing, "192.0.2.1", "80", NULL, &res), 0, "hints NULL");
	ok(res && res->ai_family == AF_INET && res->ai_socktype == SOCK_STREAM && res->ai_next &&
	       res->ai_next->ai_socktype == SOCK_DGRAM && !res->ai_next->ai_next,
	   "hints NULL: any family, both socket types");
	freeaddrinfo(res);
	res = (struct addrinfo *)&res;
	is_int(ttq_shim_getaddrinfo(hosts, "no-such-host", "80", NULL, &res), EAI_NONAME,
	       "a failure");
	ok(res == NULL, "a failure sets *res to NULL");
	freeaddrinfo(NULL);
	ok(1, "freeaddrinfo(NULL) is a no-op");
}

/* getaddrinfo itself: the same resolver over /etc/hosts (numeric here: the host's file is
 * not the test's to know), and the dl* and extension stand-ins. */
static void
test_entry_points(void)
{
	struct addrinfo h, *res = NULL;

	memset(&h, 0, sizeof h);
	h.ai_socktype = SOCK_STREAM;
	h.ai_flags = AI_NUMERICSERV;
	is_int(getaddrinfo("127.0.0.1", "5741", &h, &res), 0, "getaddrinfo: a numeric address");
	ok(res && res->ai_family == AF_INET && !res->ai_next &&
	       ((struct sockaddr_in *)res->ai_addr)->sin_port == htons(5741),
	   "getaddrinfo: one IPv4 result with the port");
	freeaddrinfo(res);
	res = NULL;
	is_int(getaddrinfo("localhost", "5741", &h, &res), 0, "getaddrinfo: localhost");
	ok(res && (res->ai_family == AF_INET || res->ai_family == AF_INET6),
	   "getaddrinfo: localhost is an address");
	freeaddrinfo(res);
	ok(ttq_static_dlopen("libm.so.6", 0) == NULL && ttq_static_dlsym(NULL, "x") == NULL &&
	       ttq_static_dlclose(NULL) == 0 && strstr(ttq_static_dlerror(), "not available"),
	   "the dl* stand-ins fail and say why");
	ok(ttq_static_fts3_init(NULL) == 0 && ttq_static_fts5_init(NULL) == 0 &&
	       ttq_static_rtree_init(NULL) == 0 && ttq_static_stmt_vtab_init(NULL) == 0 &&
	       ttq_static_dbstat_init(NULL) == 0,
	   "the built-in extension hooks register nothing and succeed");
}

int
main(void)
{
	write_hosts();
	test_hosts_file();
	test_no_hosts_file();
	test_hints();
	test_entry_points();
	unlink(hosts);
	return tap_done();
}
