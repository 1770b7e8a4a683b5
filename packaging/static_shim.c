/*
 * static_shim.c - linked only into `make static` (tt-device-queue-static), never into `make`.
 *
 * A fully static glibc program cannot use the parts of glibc that load shared objects at run
 * time: dlopen() and the NSS modules behind getaddrinfo() for host names. Copied onto a host
 * with another glibc they may fail or crash, and the linker warns about each. These
 * definitions stand in for them so the static binary carries no such dependency and links
 * without warnings:
 *   - ttq_static_dl*: the Makefile renames SQLite's dlopen/dlsym/dlclose/dlerror calls (in a
 *     copy of libsqlite3.a) to these. load_extension() is their only caller and tt-device-queue
 *     never loads extensions, so they simply fail.
 *   - getaddrinfo: numeric IPv4/IPv6 addresses and "localhost" (127.0.0.1) only, which is all
 *     the client needs for a daemon that listens on loopback. A host name answers EAI_NONAME;
 *     the dynamically linked build resolves names as usual.
 * Defining getaddrinfo and freeaddrinfo together keeps libc.a's member that holds both out of
 * the link.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

void *ttq_static_dlopen(const char *file, int mode);
void *ttq_static_dlsym(void *handle, const char *name);
int ttq_static_dlclose(void *handle);
char *ttq_static_dlerror(void);

void *
ttq_static_dlopen(const char *file, int mode)
{
	(void)file;
	(void)mode;
	return NULL;
}

void *
ttq_static_dlsym(void *handle, const char *name)
{
	(void)handle;
	(void)name;
	return NULL;
}

int
ttq_static_dlclose(void *handle)
{
	(void)handle;
	return 0;
}

char *
ttq_static_dlerror(void)
{
	return "dynamic loading is not available in the static tt-device-queue";
}

/* One result: the addrinfo and its address in a single allocation (freeaddrinfo frees it). */
struct one_ai {
	struct addrinfo ai;
	union {
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} sa;
};

/* Parse a decimal port (the client always passes AI_NUMERICSERV); -1 when it is not one. */
static int
parse_port(const char *service)
{
	char *end;
	long v;

	if (!service)
		return 0;
	errno = 0;
	v = strtol(service, &end, 10);
	if (errno || end == service || *end || v < 0 || v > 65535)
		return -1;
	return (int)v;
}

int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
            struct addrinfo **res)
{
	int family = hints ? hints->ai_family : AF_UNSPEC, port = parse_port(service);
	struct one_ai *r;
	struct in_addr v4;
	struct in6_addr v6;

	if (!res)
		return EAI_SYSTEM;
	*res = NULL;
	if (port < 0)
		return EAI_SERVICE;
	if (!node || strcasecmp(node, "localhost") == 0)
		node = "127.0.0.1";
	r = calloc(1, sizeof(*r));
	if (!r)
		return EAI_MEMORY;
	if ((family == AF_UNSPEC || family == AF_INET) && inet_pton(AF_INET, node, &v4) == 1) {
		r->sa.in.sin_family = AF_INET;
		r->sa.in.sin_port = htons((unsigned short)port);
		r->sa.in.sin_addr = v4;
		r->ai.ai_addrlen = sizeof(r->sa.in);
	} else if ((family == AF_UNSPEC || family == AF_INET6) &&
	           inet_pton(AF_INET6, node, &v6) == 1) {
		r->sa.in6.sin6_family = AF_INET6;
		r->sa.in6.sin6_port = htons((unsigned short)port);
		r->sa.in6.sin6_addr = v6;
		r->ai.ai_addrlen = sizeof(r->sa.in6);
	} else {
		free(r);
		return EAI_NONAME;
	}
	r->ai.ai_family = r->sa.in.sin_family;
	r->ai.ai_socktype = hints && hints->ai_socktype ? hints->ai_socktype : SOCK_STREAM;
	r->ai.ai_protocol = hints ? hints->ai_protocol : 0;
	r->ai.ai_addr = (struct sockaddr *)&r->sa;
	*res = &r->ai;
	return 0;
}

void
freeaddrinfo(struct addrinfo *ai)
{
	free(ai); /* ai is the first member of its struct one_ai: one result, one block */
}
