/*
 * fuzz_utf8.c - libFuzzer target for json_utf8_boundary and json_utf8_valid.
 *
 * json_utf8_valid's result v must be a prefix utf8ref.h calls valid, all of the input exactly
 * when the reference says the input is valid.
 *
 * Invariants, for the input and for its last few cut points: the result r is <= n, r > 0 when
 * n > 0, n - r <= 3, and r equals a reference computed independently: decode forward from the
 * start (by code point arithmetic, not json.c's tables); the prefix must stop exactly at the
 * start of a trailing sequence that is incomplete but could still be completed to a valid
 * character, and nowhere else (unless that sequence starts at 0: then r = n).
 */
#include <stdint.h>
#include <stdlib.h>

#include "json.h"
#include "utf8ref.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Encoded length announced by lead byte c (0: not a lead byte by its bit pattern). */
static size_t
lead_len(uint8_t c)
{
	return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
}

/*
 * s[0..n) holds the first n < len bytes of a len-byte sequence: can continuation bytes complete
 * it to a scalar value of that length? The completions cover a contiguous code point range.
 */
static int
completable(const uint8_t *s, size_t n, size_t len)
{
	static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
	uint32_t lo, hi;
	size_t k;

	lo = s[0] & (0x7f >> len);
	for (k = 1; k < n; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		lo = lo << 6 | (s[k] & 0x3f);
	}
	hi = lo;
	for (; k < len; k++) {
		lo = lo << 6;
		hi = hi << 6 | 0x3f;
	}
	if (lo < min[len])
		lo = min[len];
	if (hi > 0x10ffff)
		hi = 0x10ffff;
	return lo <= hi && !(lo >= 0xd800 && hi <= 0xdfff);
}

/* s[0..len) is one well-formed sequence of that length? */
static int
complete(const uint8_t *s, size_t len)
{
	static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
	uint32_t cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
	size_t k;

	for (k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	return cp >= min[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
}

static size_t
reference(const uint8_t *s, size_t n)
{
	size_t i = 0, len;

	while (i < n) {
		len = lead_len(s[i]);
		if (len > 0 && len <= n - i && complete(s + i, len)) {
			i += len;
		} else if (len > 1 && n - i < len && completable(s + i, n - i, len)) {
			return i > 0 ? i : n; /* the tail could still become a character */
		} else {
			i++; /* an invalid byte: it stays, to become U+FFFD when written */
		}
	}
	return n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	size_t cut, n, r;

	for (cut = 0; cut < 5 && cut <= size; cut++) {
		n = size - cut;
		r = json_utf8_boundary(s, n);
		CHECK(r <= n);
		CHECK(n == 0 || r > 0);
		CHECK(n - r <= 3);
		CHECK(r == reference(data, n));
		r = json_utf8_valid(s, n);
		CHECK(r <= n && valid_utf8(data, r));
		CHECK((r == n) == valid_utf8(data, n));
	}
	return 0;
}
