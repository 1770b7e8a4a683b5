/*
 * test_shim.c - unit tests of the static build's stand-ins (packaging/static_shim.c): the dl*
 * calls fail and say why, the built-in extension hooks register nothing and succeed.
 */
#include <string.h>

#include "packaging/static_shim.h"
#include "tap.h"

int
main(void)
{
	ok(ttq_static_dlopen("libm.so.6", 0) == NULL && ttq_static_dlsym(NULL, "x") == NULL &&
	       ttq_static_dlclose(NULL) == 0 && strstr(ttq_static_dlerror(), "not available"),
	   "the dl* stand-ins fail and say why");
	ok(ttq_static_fts3_init(NULL) == 0 && ttq_static_fts5_init(NULL) == 0 &&
	       ttq_static_rtree_init(NULL) == 0 && ttq_static_stmt_vtab_init(NULL) == 0 &&
	       ttq_static_dbstat_init(NULL) == 0,
	   "the built-in extension hooks register nothing and succeed");
	return tap_done();
}
