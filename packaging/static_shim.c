/*
 * static_shim.c - linked into every statically linked tt-device-queue (`make`, whose LINK is
 * static by default, and `make static`), never into a dynamic one (LINK=dynamic, as the
 * sanitizer build uses); tests/test_shim.c tests it.
 *
 * A fully static glibc program cannot use the parts of glibc that load shared objects at run
 * time, such as dlopen(): copied onto a host with another glibc it may fail or crash, and the
 * linker warns. These definitions stand in for what SQLite's static library calls, so the
 * static binary carries no such dependency and links without warnings:
 *   - ttq_static_dl*: the Makefile renames SQLite's dlopen/dlsym/dlclose/dlerror calls (in a
 *     copy of libsqlite3.a) to these. load_extension() is their only caller and tt-device-queue
 *     never loads extensions, so they simply fail.
 *   - ttq_static_*_init: the same for the built-in extensions SQLite registers on every
 *     sqlite3_open() (FTS3/4, FTS5, R*Tree with Geopoly, the sqlite_stmt and dbstat virtual
 *     tables). The daemon's SQL uses none of them; as no-ops they keep about 320 KiB of code
 *     out of the executable, and so out of every daemon's memory.
 * Names are never resolved (the client takes an IPv4 address or localhost, the daemon an IPv4
 * address, and users are read from /etc/passwd by hand), so no NSS function is linked.
 */

#include <stddef.h>

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
