/*
 * fuzz_query.c - libFuzzer target for http_query_uint.
 *
 * The first input byte picks a bound, the rest is the query. For a few names the result must
 * be -1, 0 or 1, a 1 must give a value <= max, *out must be untouched otherwise, and result
 * and value must match a deliberately naive reference that indexes the query byte by byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

static int
reference(const char *q, size_t n, const char *name, unsigned long long max,
          unsigned long long *out)
{
	size_t nl = strlen(name), i = 0, start, j, matches = 0, vs = 0, ve = 0;
	unsigned long long v = 0;

	while (i <= n) {
		start = i;
		while (i < n && q[i] != '&')
			i++;
		for (j = start; j < i && q[j] != '='; j++)
			;
		if (i > start && j - start == nl && memcmp(q + start, name, nl) == 0) {
			matches++;
			vs = j < i ? j + 1 : i;
			ve = i;
		}
		i++;
	}
	if (matches != 1)
		return matches ? -1 : 0;
	if (ve == vs || ve - vs > 19)
		return -1;
	for (j = vs; j < ve; j++) {
		if (q[j] < '0' || q[j] > '9')
			return -1;
		v = v * 10 + (unsigned)(q[j] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"offset", "limit", "wait", "device", "a", ""};
	static const unsigned long long maxes[] = {
	    0, 1, 60, 1000, 18446744073709551615ULL, 9999999999999999999ULL, 4294967295ULL, 9};
	unsigned long long max, v, rv;
	char *q;
	size_t i, n;
	int r;

	if (size == 0)
		return 0;
	max = maxes[data[0] % (sizeof(maxes) / sizeof(maxes[0]))];
	n = size - 1;
	q = malloc(n ? n : 1); /* exact size so ASan catches any over-read */
	CHECK(q != NULL);
	memcpy(q, data + 1, n);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		v = rv = 12345;
		r = http_query_uint(q, n, names[i], max, &v);
		CHECK(r >= -1 && r <= 1);
		CHECK(r == 1 ? v <= max : v == 12345);
		CHECK(r == reference(q, n, names[i], max, &rv) && v == rv);
	}
	free(q);
	return 0;
}
