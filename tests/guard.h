/*
 * guard.h - test inputs placed right before an inaccessible page, so a parser that reads one
 * byte past the end of its input crashes the test (picohttpparser's test habit). Define REGION
 * (the readable bytes before the guard page) before including; call guard_init() once.
 */
#ifndef TTQ_GUARD_H
#define TTQ_GUARD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *region;

static void
guard_init(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	region = mmap(NULL, REGION + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		      0);
	if (region == MAP_FAILED || mprotect(region + REGION, page, PROT_NONE) != 0) {
		perror("mmap");
		exit(2);
	}
}

/* A copy of s[0..n) ending at the guard page. Overwrites the previous copy. */
static char *
guarded(const char *s, size_t n)
{
	char *p = region + REGION - n;

	memmove(p, s, n);
	return p;
}

#endif
