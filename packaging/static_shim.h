/*
 * static_shim.h - what packaging/static_shim.c defines besides getaddrinfo/freeaddrinfo: the
 * stand-ins SQLite's dl* calls and built-in extension hooks are renamed to, and the resolver
 * with its hosts file as a parameter (getaddrinfo passes "/etc/hosts"; tests/test_shim.c
 * passes a file of its own).
 */
#ifndef TTQ_STATIC_SHIM_H
#define TTQ_STATIC_SHIM_H

#include <netdb.h>

void *ttq_static_dlopen(const char *file, int mode);
void *ttq_static_dlsym(void *handle, const char *name);
int ttq_static_dlclose(void *handle);
char *ttq_static_dlerror(void);

struct sqlite3;
int ttq_static_fts3_init(struct sqlite3 *db);
int ttq_static_fts5_init(struct sqlite3 *db);
int ttq_static_rtree_init(struct sqlite3 *db);
int ttq_static_stmt_vtab_init(struct sqlite3 *db);
int ttq_static_dbstat_init(struct sqlite3 *db);

int ttq_shim_getaddrinfo(const char *hosts_path, const char *node, const char *service,
                         const struct addrinfo *hints, struct addrinfo **res);

#endif
