/*
 * static_shim.h - what packaging/static_shim.c defines: the stand-ins SQLite's dl* calls and
 * built-in extension hooks are renamed to in the static build.
 */
#ifndef TTQ_STATIC_SHIM_H
#define TTQ_STATIC_SHIM_H

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

#endif
