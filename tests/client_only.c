/*
 * client_only.c - the client linked with http.o and json.o alone: `make test` builds it, so a
 * call from cli.c into the daemon's modules (sched, store, proc, ttq) fails the build.
 */
#include "cli.h"

int
main(int argc, char **argv)
{
	return cli_main(argc, argv);
}
