/*
 * utf8ref.h - a reference UTF-8 validator for the JSON tests and fuzzer, written from the code
 * point ranges (RFC 3629) independently of json.c, so json.c is checked against something it
 * does not share code with.
 */
#ifndef TTQ_UTF8REF_H
#define TTQ_UTF8REF_H

#include <stddef.h>

/* Is s[0..n) well-formed UTF-8? */
static int
valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0, k, len;
	unsigned long cp;

	while (i < n) {
		len = s[i] < 0x80         ? 1
		      : (s[i] >> 5) == 6  ? 2
		      : (s[i] >> 4) == 14 ? 3
		      : (s[i] >> 3) == 30 ? 4
		                          : 0;
		if (len == 0 || n - i < len)
			return 0;
		cp = len == 1 ? s[i] : s[i] & (0x7f >> len);
		for (k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
			return 0;
		i += len;
	}
	return 1;
}

#endif
