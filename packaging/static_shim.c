/*
 * static_shim.c - linked into every statically linked tt-device-queue (`make`, whose LINK is
 * static by default, and `make static`), never into a dynamic one (LINK=dynamic, as the
 * sanitizer build uses); tests/test_shim.c tests it.
 *
 * A fully static glibc program cannot use the parts of glibc that load shared objects at run
 * time: dlopen() and the NSS modules behind getaddrinfo() for host names. Copied onto a host
 * with another glibc they may fail or crash, and the linker warns about each. These
 * definitions stand in for them so the static binary carries no such dependency and links
 * without warnings:
 *   - ttq_static_dl*: the Makefile renames SQLite's dlopen/dlsym/dlclose/dlerror calls (in a
 *     copy of libsqlite3.a) to these. load_extension() is their only caller and tt-device-queue
 *     never loads extensions, so they simply fail.
 *   - ttq_static_*_init: the same for the built-in extensions SQLite registers on every
 *     sqlite3_open() (FTS3/4, FTS5, R*Tree with Geopoly, the sqlite_stmt and dbstat virtual
 *     tables). The daemon's SQL uses none of them; as no-ops they keep about 320 KiB of code
 *     out of the executable, and so out of every daemon's memory.
 *   - getaddrinfo: numeric IPv4/IPv6 addresses, names listed in /etc/hosts, and "localhost"
 *     (127.0.0.1 and ::1) when /etc/hosts does not list it. No DNS: any other name answers
 *     EAI_NONAME.
 * Defining getaddrinfo and freeaddrinfo together keeps libc.a's member that holds both out of
 * the link.
 *
 * The resolver, compared with glibc's: hosts(5) lines are "address name [alias...]" with '#'
 * starting a comment; a name matches the name or an alias case-insensitively; every matching
 * line counts, in file order, an address seen before is skipped, and nothing is re-sorted
 * (RFC 6724). Lines whose address column is not a plain numeric IPv4/IPv6 address (a scope
 * "%if" included) are ignored. An unreadable or missing hosts file lists no names. Flags:
 * AI_PASSIVE, AI_CANONNAME (the line's first name), AI_NUMERICHOST, AI_NUMERICSERV, and
 * AI_ADDRCONFIG (accepted, not applied); others answer EAI_BADFLAGS. The service is a decimal
 * port 0..65535 or NULL (no /etc/services). Socket types: TCP streams and UDP datagrams
 * (ai_socktype 0 gives one result of each per address); no SOCK_RAW. A NULL node gives the
 * IPv4 then the IPv6 loopback (wildcard with AI_PASSIVE) address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "static_shim.h"

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

int
ttq_static_fts3_init(struct sqlite3 *db)
{
	(void)db;
	return 0; /* SQLITE_OK: registered nothing */
}

int
ttq_static_fts5_init(struct sqlite3 *db)
{
	(void)db;
	return 0;
}

int
ttq_static_rtree_init(struct sqlite3 *db)
{
	(void)db;
	return 0;
}

int
ttq_static_stmt_vtab_init(struct sqlite3 *db)
{
	(void)db;
	return 0;
}

int
ttq_static_dbstat_init(struct sqlite3 *db)
{
	(void)db;
	return 0;
}

/* One result: the addrinfo, its address and (first result only) the canonical name in a
 * single allocation; freeaddrinfo frees each block of the list. */
struct one_ai {
	struct addrinfo ai;
	union {
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} sa;
	char canon[];
};

union addr {
	struct in_addr v4;
	struct in6_addr v6;
};

#define SHIM_FLAGS (AI_PASSIVE | AI_CANONNAME | AI_NUMERICHOST | AI_NUMERICSERV | AI_ADDRCONFIG)

static const struct {
	int socktype, protocol;
} shim_types[] = {{SOCK_STREAM, IPPROTO_TCP}, {SOCK_DGRAM, IPPROTO_UDP}};

/* A lookup under way: the hints in force and the list built so far. */
struct lookup {
	int family, socktype, protocol, flags, port;
	const char *canon; /* ai_canonname of the first result (with AI_CANONNAME) */
	struct addrinfo *head, **tail;
};

/* Parse a decimal port; -1 when it is not one. */
static int
parse_port(const char *service)
{
	char *end;
	long v;

	if (!service)
		return 0;
	if (*service < '0' || *service > '9') /* strtol would take a sign or blanks */
		return -1;
	errno = 0;
	v = strtol(service, &end, 10);
	if (errno || end == service || *end || v < 0 || v > 65535)
		return -1;
	return (int)v;
}

/* s as a numeric address: its family (AF_INET or AF_INET6) into *fam and *a; 0 when not one. */
static int
parse_addr(const char *s, int *fam, union addr *a)
{
	if (inet_pton(AF_INET, s, &a->v4) == 1)
		*fam = AF_INET;
	else if (inet_pton(AF_INET6, s, &a->v6) == 1)
		*fam = AF_INET6;
	else
		return 0;
	return 1;
}

static int
family_wanted(const struct lookup *l, int fam)
{
	return l->family == AF_UNSPEC || l->family == fam;
}

/* Whether the list already holds address a of family fam. */
static int
seen(const struct lookup *l, int fam, const union addr *a)
{
	const struct addrinfo *ai;

	for (ai = l->head; ai; ai = ai->ai_next) {
		const struct one_ai *r = (const struct one_ai *)ai;

		if (ai->ai_family != fam)
			continue;
		if (fam == AF_INET ? memcmp(&r->sa.in.sin_addr, &a->v4, sizeof a->v4) == 0
		                   : memcmp(&r->sa.in6.sin6_addr, &a->v6, sizeof a->v6) == 0)
			return 1;
	}
	return 0;
}

/* Append address a: one result per socket type the hints allow. 0 or EAI_MEMORY. */
static int
add(struct lookup *l, int fam, const union addr *a)
{
	size_t i, clen;
	struct one_ai *r;

	if (seen(l, fam, a))
		return 0;
	for (i = 0; i < sizeof shim_types / sizeof shim_types[0]; i++) {
		if ((l->socktype && l->socktype != shim_types[i].socktype) ||
		    (l->protocol && l->protocol != shim_types[i].protocol))
			continue;
		clen = 0;
		if (!l->head && l->canon && (l->flags & AI_CANONNAME))
			clen = strlen(l->canon) + 1;
		r = calloc(1, sizeof *r + clen);
		if (!r)
			return EAI_MEMORY;
		if (fam == AF_INET) {
			r->sa.in.sin_family = AF_INET;
			r->sa.in.sin_port = htons((unsigned short)l->port);
			r->sa.in.sin_addr = a->v4;
			r->ai.ai_addrlen = sizeof r->sa.in;
		} else {
			r->sa.in6.sin6_family = AF_INET6;
			r->sa.in6.sin6_port = htons((unsigned short)l->port);
			r->sa.in6.sin6_addr = a->v6;
			r->ai.ai_addrlen = sizeof r->sa.in6;
		}
		r->ai.ai_flags = l->flags;
		r->ai.ai_family = fam;
		r->ai.ai_socktype = shim_types[i].socktype;
		r->ai.ai_protocol = shim_types[i].protocol;
		r->ai.ai_addr = (struct sockaddr *)&r->sa;
		if (clen) {
			memcpy(r->canon, l->canon, clen);
			r->ai.ai_canonname = r->canon;
		}
		*l->tail = &r->ai;
		l->tail = &r->ai.ai_next;
	}
	return 0;
}

/* 127.0.0.1 and ::1 (the wildcard addresses when passive), as the family allows. */
static int
add_local(struct lookup *l, int passive)
{
	union addr a;
	int rc = 0;

	if (family_wanted(l, AF_INET)) {
		a.v4.s_addr = htonl(passive ? INADDR_ANY : INADDR_LOOPBACK);
		rc = add(l, AF_INET, &a);
	}
	if (rc == 0 && family_wanted(l, AF_INET6)) {
		a.v6 = passive ? in6addr_any : in6addr_loopback;
		rc = add(l, AF_INET6, &a);
	}
	return rc;
}

/* Every address the hosts file at path lists for name. 0 or EAI_MEMORY. */
static int
hosts_lookup(struct lookup *l, const char *path, const char *name)
{
	static const char blank[] = " \t\r\n\v\f";
	char *line = NULL, *save, *tok, *first;
	size_t cap = 0;
	FILE *f = fopen(path, "re");
	int rc = 0, fam;
	union addr a;

	if (!f)
		return 0;
	while (rc == 0 && getline(&line, &cap, f) >= 0) {
		line[strcspn(line, "#")] = '\0';
		tok = strtok_r(line, blank, &save);
		if (!tok || !parse_addr(tok, &fam, &a) || !family_wanted(l, fam))
			continue;
		first = NULL;
		while ((tok = strtok_r(NULL, blank, &save)) != NULL) {
			if (!first)
				first = tok;
			if (strcasecmp(tok, name) == 0) {
				if (!l->head)
					l->canon = first;
				rc = add(l, fam, &a);
				break;
			}
		}
	}
	free(line);
	fclose(f);
	return rc;
}

int
ttq_shim_getaddrinfo(const char *hosts_path, const char *node, const char *service,
                     const struct addrinfo *hints, struct addrinfo **res)
{
	struct lookup l = {0};
	union addr a;
	size_t i;
	int fam, rc;

	if (!res)
		return EAI_SYSTEM;
	*res = NULL;
	l.tail = &l.head;
	if (hints) {
		l.family = hints->ai_family;
		l.socktype = hints->ai_socktype;
		l.protocol = hints->ai_protocol;
		l.flags = hints->ai_flags;
	}
	if (l.flags & ~SHIM_FLAGS)
		return EAI_BADFLAGS;
	if (l.family != AF_UNSPEC && l.family != AF_INET && l.family != AF_INET6)
		return EAI_FAMILY;
	for (i = 0; i < sizeof shim_types / sizeof shim_types[0]; i++)
		if ((!l.socktype || l.socktype == shim_types[i].socktype) &&
		    (!l.protocol || l.protocol == shim_types[i].protocol))
			break;
	if (i == sizeof shim_types / sizeof shim_types[0])
		return l.socktype ? EAI_SOCKTYPE : EAI_SERVICE;
	if (!node && !service)
		return EAI_NONAME;
	l.port = parse_port(service);
	if (l.port < 0)
		return l.flags & AI_NUMERICSERV ? EAI_NONAME : EAI_SERVICE;

	if (!node) {
		rc = add_local(&l, l.flags & AI_PASSIVE);
	} else if (parse_addr(node, &fam, &a)) {
		if (!family_wanted(&l, fam))
			return EAI_ADDRFAMILY;
		l.canon = node;
		rc = add(&l, fam, &a);
	} else if (l.flags & AI_NUMERICHOST) {
		return EAI_NONAME;
	} else {
		rc = hosts_lookup(&l, hosts_path, node);
		if (rc == 0 && !l.head && strcasecmp(node, "localhost") == 0) {
			l.canon = "localhost";
			rc = add_local(&l, 0);
		}
	}
	if (rc == 0 && !l.head)
		rc = EAI_NONAME;
	if (rc != 0) {
		freeaddrinfo(l.head);
		return rc;
	}
	*res = l.head;
	return 0;
}

int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
            struct addrinfo **res)
{
	return ttq_shim_getaddrinfo("/etc/hosts", node, service, hints, res);
}

void
freeaddrinfo(struct addrinfo *ai)
{
	while (ai) {
		struct addrinfo *next = ai->ai_next;

		free(ai); /* ai is the first member of its struct one_ai */
		ai = next;
	}
}
