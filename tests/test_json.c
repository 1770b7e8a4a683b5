/*
 * test_json.c - unit tests for json.c: the strict tokenizer, its accessors, the UTF-8 boundary
 * helper and the writer.
 *
 * Every parser input is copied so that it ends exactly where a PROT_NONE guard page begins (as
 * picohttpparser's tests do), so reading one byte past the input crashes the test. Inputs with
 * NUL or invalid UTF-8 bytes are given with explicit lengths. The writer tests compare exact
 * bytes, and a randomized test feeds the writer's output back through the parser.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "tap.h"
#include "utf8ref.h"

#define REGION (8 * 1024 * 1024) /* readable bytes before the guard page */
#include "guard.h"
#define NTOK 256

static struct json_tok T[NTOK];
static char err[128];

/* The source of the last parse, for the accessors. */
static const char *src;

static int
parse_n(const char *s, size_t n, struct json_tok *toks, unsigned cap)
{
	src = guarded(s, n);
	return json_parse(src, n, toks, cap, err, sizeof err);
}

static int
parse(const char *s)
{
	return parse_n(s, strlen(s), T, NTOK);
}

/* The decoded string token t as a C string (tests use no embedded NUL here). */
static const char *
str(const struct json_tok *t)
{
	static char out[256];
	size_t n = json_str_decode(src, t, out, sizeof out - 1);

	out[n < sizeof out - 1 ? n : sizeof out - 1] = '\0';
	return out;
}

/* s[0..n) printable on one TAP line: bytes outside printable ASCII as \xHH. */
static const char *
show(const char *s, size_t n)
{
	static char buf[4][512];
	static int k;
	char *o = buf[k++ % 4], *p = o;
	size_t i;

	for (i = 0; i < n && p < o + sizeof buf[0] - 5; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			*p++ = (char)c;
		else
			p += sprintf(p, "\\x%02x", c);
	}
	*p = '\0';
	return o;
}

/* ------------------------------------------------------------------ reader */

static void
test_scalars(void)
{
	static const struct {
		const char *in;
		int type, integer;
	} c[] = {
		{"0", JSON_NUMBER, 1},
		{"-0", JSON_NUMBER, 1},
		{"123", JSON_NUMBER, 1},
		{"-1.5e+10", JSON_NUMBER, 0},
		{"1E-2", JSON_NUMBER, 0},
		{"0.5", JSON_NUMBER, 0},
		{"1e5", JSON_NUMBER, 0},
		{"true", JSON_TRUE, 0},
		{"false", JSON_FALSE, 0},
		{"null", JSON_NULL, 0},
		{"\"\"", JSON_STRING, 0},
		{"\"abc\"", JSON_STRING, 0},
		{"\"a\\nb\"", JSON_STRING, 0},
		{" \t\r\n 42 \n\t", JSON_NUMBER, 1},
	};
	long long v;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		const char *in = show(c[i].in, strlen(c[i].in));

		is_int(parse(c[i].in), 1, "scalar '%s' parses to one token", in);
		is_int(T[0].type, c[i].type, "scalar '%s' type", in);
		is_int(json_tok_int(c[i].in, &T[0], &v) == 0, c[i].integer, "scalar '%s' integer", in);
		is_int(T[0].next, 1, "scalar '%s' next", in);
		is_int(T[0].size, 0, "scalar '%s' size", in);
	}
	parse(" -12.5e3 ");
	ok(T[0].start == 1 && T[0].end == 8, "number offsets cover the number only");
	parse(" \"ab\" ");
	ok(T[0].start == 2 && T[0].end == 4, "string offsets: after the quote, at the closing one");
	parse(" true");
	ok(T[0].start == 1 && T[0].end == 5, "literal offsets");
	is_int(parse("\"\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf\""),
	       1, "DEL and valid 2/3/4-byte UTF-8 (up to U+10FFFF) accepted");
	is_int(parse("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 \\uD83D\\uDE00 \\u00e9\""), 1,
	       "every RFC 8259 escape accepted");
}

static void
test_layout(void)
{
	const char *doc = "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}";
	static const struct {
		int type, size, next;
	} want[] = {
		{JSON_OBJECT, 2, 9}, {JSON_STRING, 0, 2}, {JSON_ARRAY, 2, 7},
		{JSON_NUMBER, 0, 4}, {JSON_OBJECT, 1, 7}, {JSON_STRING, 0, 6},
		{JSON_NULL, 0, 7},   {JSON_STRING, 0, 8}, {JSON_STRING, 0, 9},
	};
	int i, n = parse(doc);

	is_int(n, 9, "nested document: 9 tokens");
	for (i = 0; i < 9; i++) {
		is_int(T[i].type, want[i].type, "token %d type", i);
		is_int(T[i].size, want[i].size, "token %d size", i);
		is_int(T[i].next, want[i].next, "token %d next", i);
	}
	ok(T[0].start == 0 && T[0].end == strlen(doc), "object spans the whole document");
	ok(T[2].start == 5 && T[2].end == 19, "array spans [ .. ]");
	is_str(str(&T[1]), "a", "first key");
	is_str(str(&T[5]), "b", "nested key");
	is_str(str(&T[7]), "c", "second key follows the first value's subtree");
	is_str(str(&T[8]), "d", "second value");

	is_int(parse("[[],{},[[]],\"\"]"), 6, "empty containers");
	ok(T[1].size == 0 && T[1].next == 2 && T[2].size == 0 && T[2].next == 3,
	   "empty array and object: size 0, next is the following token");
	ok(T[3].size == 1 && T[3].next == 5 && T[0].size == 4, "sizes count direct children only");
	is_int(parse("[1, 2 ,\n3]"), 4, "whitespace around commas");
	is_int(T[0].size, 3, "array element count");
}

static void
test_reject(void)
{
	/* S(): a literal with its length, so embedded NULs count */
#define S(lit) {lit, sizeof(lit) - 1}
	static const struct {
		const char *in;
		size_t n;
	} c[] = {
		/* empty, truncated, unbalanced */
		S(""), S(" \t\r\n"), S("[1,2"), S("{\"a\":1"), S("{\"a\""), S("{\"a\":"),
		S("\"abc"), S("\"abc\\"), S("["), S("]"), S("{"), S("}"), S(","), S(":"),
		/* trailing garbage, a second value */
		S("{} {}"), S("{}{}"), S("[1] x"), S("1 2"), S("\"a\" \"b\""), S("[1]\0"), S("1\0"),
		S("[1]//"), S("/*x*/1"),
		/* commas, colons, keys */
		S("[1,]"), S("{\"a\":1,}"), S("[,1]"), S("{,}"), S("[1 2]"), S("{\"a\" 1}"),
		S("{\"a\"::1}"), S("{1:2}"), S("{a:1}"), S("{'a':1}"), S("'a'"),
		/* bare words */
		S("tru"), S("nul"), S("fals"), S("truex"), S("True"), S("undefined"), S("NaN"),
		S("Infinity"), S("-Infinity"),
		/* escapes and raw control characters */
		S("\"\\x\""), S("\"\\U0041\""), S("\"\\u12\""), S("\"\\u12g4\""), S("\"\\\""),
		S("\"a\tb\""), S("\"a\nb\""), S("\"a\x01\""), S("\"a\0b\""), S("\"\x1f\""),
		/* numbers */
		S("01"), S("-01"), S("00"), S("[01]"), S("-"), S("--1"), S("1."), S("1.e5"), S(".5"),
		S("+1"), S("1e"), S("1e+"), S("1E-"), S("0x10"), S("1_000"),
		/* surrogate escapes: lone, reversed, low-low, high-high, high + non-surrogate */
		S("\"\\ud800\""), S("\"\\udbff\""), S("\"\\udc00\""), S("\"\\udfff\""),
		S("\"\\udc00\\ud800\""), S("\"\\udc00\\udc00\""), S("\"\\ud800\\ud800\""),
		S("\"\\ud800x\""), S("\"\\ud800\\u0041\""), S("\"\\ud800\\n\""), S("\"\\ud800\\udc0\""),
		/* invalid UTF-8 in strings: stray, truncated, overlong, surrogate, > U+10FFFF */
		S("\"\xff\""), S("\"\x80\""), S("\"\xc3\""), S("\"\xc3x\""), S("\"\xc0\xaf\""),
		S("\"\xc1\xbf\""), S("\"\xe0\x80\xaf\""), S("\"\xed\xa0\x80\""), S("\"\xed\xbf\xbf\""),
		S("\"\xf0\x80\x80\xaf\""), S("\"\xf4\x90\x80\x80\""), S("\"\xf5\x80\x80\x80\""),
		S("\"\xe2\x82\""), S("\"\xf0\x9f\x98\""), S("{\"\xff\":1}"),
		/* not JSON whitespace: form feed, NBSP, a BOM */
		S("\f1"), S("\xc2\xa0" "1"), S("\xef\xbb\xbf{}"),
	};
#undef S
	size_t i, n;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		n = c[i].n;
		err[0] = 'x';
		is_int(parse_n(c[i].in, n, T, NTOK), -1, "reject '%s'", show(c[i].in, n));
		ok(strstr(err, " at byte ") != NULL, "with a message: %s", err);
	}
	parse("[1,]");
	is_str(err, "unexpected character at byte 3", "message names the offending byte");
	parse("-01");
	is_str(err, "leading zero in number at byte 0", "leading zero named as such");
	parse("{\"a\":1} {}");
	is_str(err, "trailing garbage at byte 8", "a second object is trailing garbage");
	is_int(json_parse("x", 1, T, NTOK, NULL, 0), -1, "err may be NULL when errlen is 0");
	is_int(json_parse("[x]", 3, T, NTOK, err, 6), -1, "short error buffer");
	is_str(err, "unexp", "message truncated and NUL-terminated");
}

/* n nested arrays (or objects with key "k") around 1. */
static int
parse_nested(int n, int obj)
{
	static char buf[8192];
	size_t len = 0;
	int i;

	for (i = 0; i < n; i++)
		len += (size_t)sprintf(buf + len, "%s", obj ? "{\"k\":" : "[");
	buf[len++] = '1';
	for (i = 0; i < n; i++)
		buf[len++] = obj ? '}' : ']';
	return parse_n(buf, len, T, NTOK);
}

static void
test_depth(void)
{
	is_int(parse_nested(64, 0), 65, "64 nested arrays accepted");
	is_int(parse_nested(65, 0), -1, "65 nested arrays rejected");
	ok(strstr(err, "deep") != NULL, "depth message: %s", err);
	is_int(parse_nested(64, 1), 129, "64 nested objects accepted");
	is_int(parse_nested(65, 1), -1, "65 nested objects rejected");
	is_int(parse_nested(1000, 0), -1, "1000 nested arrays rejected without overflow");
}

/* An object of n distinct keys "k0".."k<n-1>", optionally with key dup_of repeated at the end. */
static char *
big_object(int n, int dup_of, size_t *len)
{
	char *buf = malloc((size_t)n * 24 + 64);
	size_t l = 0;
	int i;

	buf[l++] = '{';
	for (i = 0; i < n; i++)
		l += (size_t)sprintf(buf + l, "%s\"k%07d\":%d", i ? "," : "", i, i);
	if (dup_of >= 0)
		l += (size_t)sprintf(buf + l, ",\"k%07d\":0", dup_of);
	buf[l++] = '}';
	*len = l;
	return buf;
}

static void
test_duplicates(void)
{
	static struct json_tok big[2 * 200000 + 4];
	size_t len;
	char *doc;
	clock_t t0;
	int i, restored = 1;

	is_int(parse("{\"a\":1,\"a\":2}"), -1, "duplicate key");
	is_str(err, "duplicate key at byte 7", "duplicate message points at a key");
	is_int(parse("{\"a\":1,\"\\u0061\":2}"), -1, "duplicate key written with an escape");
	is_int(parse("{\"\\u00e9\":1,\"\xc3\xa9\":2}"), -1, "duplicate: \\u00e9 and raw UTF-8");
	is_int(parse("{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}"), -1,
	       "duplicate: surrogate pair and raw UTF-8");
	is_int(parse("{\"\\/\":1,\"/\":2}"), -1, "duplicate: \\/ and /");
	is_int(parse("{\"b\":1,\"a\":2,\"c\":{},\"a\":3}"), -1, "duplicate not adjacent");
	is_int(parse("{\"a\":1,\"b\":{\"a\":2},\"c\":[{\"a\":1}]}"), 12,
	       "the same key in different objects is fine");
	is_int(parse("{\"ab\":1,\"a\":2,\"a\\u0000\":3,\"\":4,\"b\":5}"), 11,
	       "prefixes and NUL are different keys");
	for (i = 1; i < 11; i += 2)
		restored &= T[i].size == 0 && T[i].next == (uint32_t)i + 1;
	ok(restored, "key tokens keep size 0 and next i+1 after the duplicate check");
	is_int(parse("{\"a\":{\"x\":1,\"x\":2}}"), -1, "duplicate in a nested object");

	doc = big_object(200000, -1, &len);
	t0 = clock();
	is_int(parse_n(doc, len, big, sizeof big / sizeof big[0]), 400001, "200000 distinct keys");
	ok(clock() - t0 < 5 * CLOCKS_PER_SEC, "200000 keys checked in %.2f s (not O(n^2))",
	   (double)(clock() - t0) / CLOCKS_PER_SEC);
	for (restored = 1, i = 1; i < 400001; i += 2)
		restored &= big[i].size == 0 && big[i].next == (uint32_t)i + 1;
	ok(restored, "200000 key tokens restored after sorting");
	is_int(json_obj_get(src, big, 0, "k0199999"), 400000, "last of 200000 keys found");
	free(doc);
	doc = big_object(10000, 0, &len);
	is_int(parse_n(doc, len, big, sizeof big / sizeof big[0]), -1, "dup of the first of 10000");
	free(doc);
	doc = big_object(10000, 5000, &len);
	is_int(parse_n(doc, len, big, sizeof big / sizeof big[0]), -1, "dup of the middle of 10000");
	free(doc);
	doc = big_object(10000, 9999, &len);
	is_int(parse_n(doc, len, big, sizeof big / sizeof big[0]), -1, "dup of the last of 10000");
	free(doc);
}

static void
test_cap(void)
{
	struct json_tok toks[8];

	memset(toks, 0xAA, sizeof toks);
	is_int(parse_n("[1,2,3]", 7, toks, 3), -2, "cap too small: -2");
	ok(strstr(err, "needs 4 tokens") != NULL, "-2 message says how many: %s", err);
	ok(toks[3].type == 0xAA && toks[3].next == 0xAAAAAAAA, "nothing written past cap");
	is_int(parse_n("[1,2,3]", 7, toks, 4), 4, "cap exactly enough");
	is_int(parse_n("1", 1, NULL, 0), -2, "cap 0, toks NULL: -2");
	is_int(parse_n("{\"a\":[1,2,3]}", 13, toks, 2), -2, "overflow inside a nested value");
	is_int(parse_n("[1,2,3,x]", 9, toks, 2), -1, "malformed wins over too many tokens");
	is_int(parse_n("[1,2,3,", 7, toks, 2), -1, "truncated wins over too many tokens");
	is_int(parse_n("[[[[1]]]]", 9, toks, 1), -2, "deep but valid, cap 1: -2");
	is_int(parse_n("{\"a\":1,\"a\":2}", 13, toks, 4), -2,
	       "a duplicate in an object that does not fit is not detected: -2");
	is_int(parse_n("[{\"a\":1,\"a\":2},0]", 17, toks, 6), -1,
	       "a duplicate in an object that fits is found though later tokens do not");
}

static void
test_prefixes(void)
{
	const char *doc = "{\"a\":[1,\"\\u00e9\\ud83d\\ude00\xc3\xa9\",true,null,false,-2.5e3,"
			  "{\"b\":{}}],\"c\":\"d\"}";
	size_t k, n = strlen(doc);
	int all = 1;

	/* the copy ends at the guard page: any read past the prefix would crash */
	for (k = 0; k < n; k++)
		all &= parse_n(doc, k, T, NTOK) == -1;
	ok(all, "every proper prefix of a document is rejected, without over-reading");
	is_int(parse_n(doc, n, T, NTOK), 14, "the whole document parses");
}

static void
test_obj_get(void)
{
	int n = parse("{\"x\":{\"a\":0},\"a\":1,\"b\\\"c\":2,\"\\u0064\":3,\"e\":{\"f\":4},"
		      "\"\":5,\"\\u00e9\":6}");

	is_int(n, 19, "object for json_obj_get");
	is_int(json_obj_get(src, T, 0, "a"), 6, "finds a key after a nested object value");
	ok(T[6].start == 17 && src[T[6].start] == '1', "the value token of \"a\"");
	is_int(json_obj_get(src, T, 2, "a"), 4, "the nested \"a\" in the nested object");
	is_int(json_obj_get(src, T, 0, "b\"c"), 8, "key with an escaped quote");
	is_int(json_obj_get(src, T, 0, "d"), 10, "key written as \\u0064");
	is_int(json_obj_get(src, T, 0, "e"), 12, "object value");
	is_int(json_obj_get(src, T, 12, "f"), 14, "lookup in a nested object");
	is_int(json_obj_get(src, T, 0, "f"), -1, "nested keys are not members");
	is_int(json_obj_get(src, T, 0, ""), 16, "empty key");
	is_int(json_obj_get(src, T, 0, "\xc3\xa9"), 18, "key \\u00e9 matches raw UTF-8");
	is_int(json_obj_get(src, T, 0, "ab"), -1, "longer key absent");
	is_int(json_obj_get(src, T, 0, "b"), -1, "prefix of an escaped key absent");
	is_int(json_obj_get(src, T, 0, "b\"cd"), -1, "extension of an escaped key absent");
	is_int(json_obj_get(src, T, 0, "zz"), -1, "absent key");
	is_int(json_obj_get(src, T, 5, "a"), -1, "not an object: -1");
	is_int(json_obj_get(src, T, -1, "a"), -1, "negative index: -1");
	parse("{}");
	is_int(json_obj_get(src, T, 0, "a"), -1, "empty object");
}

static void
test_str_decode(void)
{
	char out[32];
	size_t n;

	parse("\"a\\u0000b\"");
	n = json_str_decode(src, &T[0], out, sizeof out);
	ok(n == 3 && memcmp(out, "a\0b", 3) == 0, "\\u0000 decodes to a NUL byte");
	parse("\"\\ud83d\\ude00|\\uDBFF\\uDFFF\"");
	n = json_str_decode(src, &T[0], out, sizeof out);
	ok(n == 9 && memcmp(out, "\xf0\x9f\x98\x80|\xf4\x8f\xbf\xbf", 9) == 0,
	   "surrogate pairs decode to 4-byte UTF-8 (upper-case hex too)");
	parse("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\u007f\"");
	n = json_str_decode(src, &T[0], out, sizeof out);
	ok(n == 14 && memcmp(out, "\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\x7f", 14) == 0,
	   "short escapes and 2/3-byte \\u escapes");
	parse("\"x\\u20acy\"");
	memset(out, '#', sizeof out);
	n = json_str_decode(src, &T[0], out, 2);
	ok(n == 5 && memcmp(out, "x\xe2##", 4) == 0, "truncated: full length, cap bytes written");
	is_int(json_str_decode(src, &T[0], NULL, 0), 5, "cap 0: length only");
	parse("\"plain text\"");
	memset(out, '#', sizeof out);
	n = json_str_decode(src, &T[0], out, 5);
	ok(n == 10 && memcmp(out, "plain#", 6) == 0, "unescaped string truncated too");
	parse("[\"ab\\n\",1]");
	ok(json_str_decode(src, &T[2], out, sizeof out) == 0, "not a string: 0");
	ok(json_str_decode(src, &T[1], out, sizeof out) == 3 && memcmp(out, "ab\n", 3) == 0,
	   "string inside an array");
}

static void
test_tok_int(void)
{
	static const struct {
		const char *in;
		int rc;
		long long v;
	} c[] = {
		{"0", 0, 0},
		{"-0", 0, 0},
		{"42", 0, 42},
		{"-17", 0, -17},
		{"9223372036854775807", 0, LLONG_MAX},
		{"-9223372036854775808", 0, LLONG_MIN},
		{"9223372036854775808", -1, 0},
		{"-9223372036854775809", -1, 0},
		{"18446744073709551616", -1, 0},
		{"99999999999999999999999", -1, 0},
		{"1.5", -1, 0},
		{"1.0", -1, 0},
		{"1e3", -1, 0},
		{"true", -1, 0},
		{"null", -1, 0},
		{"\"3\"", -1, 0},
		{"[3]", -1, 0},
	};
	long long v;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		v = 12345;
		parse(c[i].in);
		is_int(json_tok_int(src, &T[0], &v), c[i].rc, "json_tok_int(%s) status", c[i].in);
		is_int(v, c[i].rc == 0 ? c[i].v : 12345, "json_tok_int(%s) value", c[i].in);
	}
}

static void
test_utf8_boundary(void)
{
	static const struct {
		const char *s;
		size_t n, want;
	} c[] = {
		{"", 0, 0},
		{"abc", 3, 3},
		{"\xc3\xa9\xc3\xa9\xc3\xa9", 5, 4},      /* 2-byte chars cut at 5 */
		{"abc\xc3\xa9", 4, 3},                  /* 2-byte char cut after its lead */
		{"abc\xc3\xa9", 5, 5},                  /* whole */
		{"a\xe2\x82\xac", 2, 1},                /* 3-byte cut after 1 */
		{"a\xe2\x82\xac", 3, 1},                /* 3-byte cut after 2 */
		{"a\xe2\x82\xac", 4, 4},                /* whole */
		{"a\xf0\x9f\x98\x80", 2, 1},            /* 4-byte cut after 1 */
		{"a\xf0\x9f\x98\x80", 3, 1},            /* 4-byte cut after 2 */
		{"a\xf0\x9f\x98\x80", 4, 1},            /* 4-byte cut after 3 */
		{"a\xf0\x9f\x98\x80", 5, 5},            /* whole */
		{"\xc3\xa9", 1, 1},                     /* shorter than one char: n */
		{"\xe2\x82\xac", 2, 2},                 /* ditto */
		{"\xf0\x9f\x98\x80", 3, 3},             /* ditto */
		{"a\xff", 2, 2},                        /* invalid byte kept */
		{"a\x80", 2, 2},                        /* stray continuation kept */
		{"a\xc0", 2, 2},                        /* C0 can never be valid */
		{"a\xc1", 2, 2},                        /* nor C1 */
		{"a\xf5", 2, 2},                        /* nor F5 */
		{"a\xe0\x80", 3, 3},                    /* overlong prefix: invalid already */
		{"a\xed\xa0", 3, 3},                    /* surrogate prefix: invalid already */
		{"a\xf4\x90", 3, 3},                    /* > U+10FFFF prefix: invalid already */
		{"a\xf0\x80", 3, 3},                    /* overlong 4-byte prefix */
		{"a\xe0\xa0", 3, 1},                    /* valid E0 prefix */
		{"a\xed\x9f", 3, 1},                    /* valid ED prefix */
		{"a\xf4\x8f\xbf", 4, 1},                /* valid F4 prefix */
		{"ab\xc3\xa9\x80", 5, 5},               /* stray after a complete char */
		{"a\x80\x80\x80", 4, 4},                /* only continuation bytes */
		{"\xe2\x82\xac\xe2\x82\xac\xe2", 7, 6}, /* after complete chars */
	};
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++)
		is_int(json_utf8_boundary(guarded(c[i].s, c[i].n), c[i].n), c[i].want,
		       "utf8_boundary case %zu (n=%zu)", i, c[i].n);
}

static void
test_utf8_valid(void)
{
	static const struct {
		const char *s;
		size_t n, want;
	} c[] = {
		{"", 0, 0},
		{"abc", 3, 3},
		{"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10, 10}, /* 1-4 byte chars */
		{"ab\xff", 3, 2},                                    /* never a UTF-8 byte */
		{"ab\xc3", 3, 2},                                    /* cut inside a char */
		{"a\x80" "b", 3, 1},                                 /* stray continuation */
		{"a\xc0\x80", 3, 1},                                 /* overlong NUL */
		{"a\xed\xa0\x80", 4, 1},                             /* encoded surrogate */
		{"a\xf4\x90\x80\x80", 5, 1},                         /* above U+10FFFF */
		{"\xef\xbf\xbd", 3, 3},                              /* U+FFFD itself */
	};
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++)
		is_int(json_utf8_valid(guarded(c[i].s, c[i].n), c[i].n), c[i].want,
		       "utf8_valid case %zu", i);
}

static void
test_control_len(void)
{
	is_int(json_control_len("a", 1), 0, "control_len: a letter is none");
	is_int(json_control_len("\x1b[", 2), 1, "control_len: ESC is C0");
	is_int(json_control_len("", 1), 1, "control_len: NUL is C0");
	is_int(json_control_len("\x7f", 1), 1, "control_len: DEL");
	is_int(json_control_len("\xc2\x9b", 2), 2, "control_len: U+009B is C1, 2 bytes");
	is_int(json_control_len("\xc2\x9b", 1), 0, "control_len: C1 cut after its lead is none");
	is_int(json_control_len("\xc2\xa0", 2), 0, "control_len: U+00A0 is not a control");
	is_int(json_control_len("\xc3\xa9", 2), 0, "control_len: e-acute is not a control");
	is_int(json_control_len("\xe2\x80\xae", 3), 3, "control_len: U+202E RIGHT-TO-LEFT OVERRIDE");
	is_int(json_control_len("\xe2\x81\xa6", 3), 3, "control_len: U+2066 LEFT-TO-RIGHT ISOLATE");
	is_int(json_control_len("\xe2\x80\x8f", 3), 3, "control_len: U+200F RIGHT-TO-LEFT MARK");
	is_int(json_control_len("\xd8\x9c", 2), 2, "control_len: U+061C ARABIC LETTER MARK");
	is_int(json_control_len("\xe2\x80\xae", 2), 0, "control_len: an override cut short is none");
	is_int(json_control_len("\xe2\x80\x94", 3), 0, "control_len: an em dash is not a control");
	is_int(json_control_len("\xd7\xa9", 2), 0, "control_len: a Hebrew letter is not a control");
}

/* ------------------------------------------------------------------ writer */

/* Writer output so far as a C string (the buffer is not NUL-terminated). */
static const char *
out(struct json_buf *b)
{
	json_buf_add(b, "", 1);
	b->len--;
	return b->p;
}

/* json_w_str(s[0..n)) alone; compares the exact bytes with want[0..wn). */
static int
wrote(const char *s, size_t n, const char *want)
{
	struct json_buf b;
	struct json_w w;
	int same;

	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_str(&w, s, n);
	same = b.len == strlen(want) && memcmp(b.p, want, b.len) == 0;
	if (!same)
		printf("#   wrote \"%.*s\"\n", (int)b.len, b.p);
	json_buf_free(&b);
	return same;
}

#define FFFD "\xef\xbf\xbd"

static void
test_write_strings(void)
{
	ok(wrote("a\"b\\c/", 6, "\"a\\\"b\\\\c/\""), "quote and backslash escaped, / not");
	ok(wrote("\n\t\r\b\f", 5, "\"\\n\\t\\r\\b\\f\""), "short escapes");
	ok(wrote("\x01\x1f\0\x7f", 4, "\"\\u0001\\u001f\\u0000\x7f\""),
	   "other controls as \\u00XX, NUL too, DEL raw");
	ok(wrote("", 0, "\"\""), "empty string");
	ok(wrote("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 13,
		 "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\""),
	   "valid UTF-8 passes unchanged");
	ok(wrote("\xff", 1, "\"" FFFD "\""), "FF -> U+FFFD (EF BF BD)");
	ok(wrote("a\x80" "b", 3, "\"a" FFFD "b\""), "stray continuation byte");
	ok(wrote("\x80\x80", 2, "\"" FFFD FFFD "\""), "one U+FFFD per stray byte");
	ok(wrote("a\xc3", 2, "\"a" FFFD "\""), "truncated 2-byte sequence at the end");
	ok(wrote("\xe2\x82", 2, "\"" FFFD "\""), "truncated 3-byte: one U+FFFD (maximal subpart)");
	ok(wrote("\xf0\x9f\x98x", 4, "\"" FFFD "x\""), "truncated 4-byte before ASCII");
	ok(wrote("\xc3\xc3\xa9", 3, "\"" FFFD "\xc3\xa9\""), "truncated before a valid char");
	ok(wrote("\xc0\xaf", 2, "\"" FFFD FFFD "\""), "overlong C0 AF: two");
	ok(wrote("\xe0\x80\xaf", 3, "\"" FFFD FFFD FFFD "\""), "overlong E0 80 AF: three");
	ok(wrote("\xed\xa0\x80", 3, "\"" FFFD FFFD FFFD "\""), "encoded surrogate ED A0 80: three");
	ok(wrote("\xf4\x90\x80\x80", 4, "\"" FFFD FFFD FFFD FFFD "\""), "above U+10FFFF: four");
	ok(wrote("\xf5\xfe\xff", 3, "\"" FFFD FFFD FFFD "\""), "F5, FE, FF");
	ok(wrote("ok\xe2\x82\xac\xe2\x82\xe2\x82\xac", 10,
		 "\"ok\xe2\x82\xac" FFFD "\xe2\x82\xac\""),
	   "an invalid subpart between valid characters");
}

static void
test_write_structure(void)
{
	struct json_buf b;
	struct json_w w;

	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_obj(&w);
	json_w_key(&w, "a");
	json_w_int(&w, 1);
	json_w_key(&w, "b");
	json_w_arr(&w);
	json_w_int(&w, 1);
	json_w_int(&w, -2);
	json_w_obj(&w);
	json_w_obj_end(&w);
	json_w_arr(&w);
	json_w_arr_end(&w);
	json_w_arr_end(&w);
	json_w_key(&w, "c\"\n");
	json_w_obj(&w);
	json_w_key(&w, "d");
	json_w_null(&w);
	json_w_key(&w, "e");
	json_w_bool(&w, 1);
	json_w_key(&w, "f");
	json_w_bool(&w, 0);
	json_w_key(&w, "g");
	json_w_cstr(&w, NULL);
	json_w_key(&w, "h");
	json_w_cstr(&w, "x");
	json_w_obj_end(&w);
	json_w_key(&w, "env");
	json_w_raw(&w, "{\"A\":\"1\"}", 9);
	json_w_key(&w, "z");
	json_w_arr(&w);
	json_w_raw(&w, "[]", 2);
	json_w_raw(&w, "3", 1);
	json_w_arr_end(&w);
	json_w_obj_end(&w);
	is_str(out(&b),
	       "{\"a\":1,\"b\":[1,-2,{},[]],\"c\\\"\\n\":{\"d\":null,\"e\":true,\"f\":false,"
	       "\"g\":null,\"h\":\"x\"},\"env\":{\"A\":\"1\"},\"z\":[[],3]}",
	       "nested commas and colons");
	ok(!b.oom && w.depth == 0, "balanced, no oom");
	ok(parse_n(b.p, b.len, T, NTOK) > 0, "the output parses");
	json_buf_free(&b);
	ok(b.p == NULL && b.len == 0 && b.cap == 0, "json_buf_free zeroes the buffer");

	json_w_init(&w, &b);
	json_w_arr(&w);
	json_w_int(&w, LLONG_MIN);
	json_w_int(&w, LLONG_MAX);
	json_w_int(&w, 0);
	json_w_arr_end(&w);
	is_str(out(&b), "[-9223372036854775808,9223372036854775807,0]", "json_w_int extremes");
	json_buf_free(&b);
}

static void
test_write_num(void)
{
	static const struct {
		double v;
		const char *want;
	} c[] = {
		{1.5, "1.5"},         {2, "2"},          {0, "0"},           {-0.0, "0"},
		{0.1, "0.1"},         {1.05, "1.05"},    {1.005, "1.005"},   {-1.25, "-1.25"},
		{0.0001, "0"},        {-0.0001, "0"},    {-0.0004, "0"},     {0.0006, "0.001"},
		{0.999, "0.999"},     {0.9999, "1"},     {1.2346, "1.235"},  {-0.5, "-0.5"},
		{100, "100"},         {10.1, "10.1"},    {123456.789, "123456.789"},
		{-2.0, "-2"},         {1e15, "1000000000000000"},       {1e20, "100000000000000000000"},
		{-1e20, "-100000000000000000000"},       {NAN, "null"},     {INFINITY, "null"},
		{-INFINITY, "null"},  {0.020, "0.02"},   {3.100, "3.1"},
	};
	struct json_buf b;
	struct json_w w;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		json_buf_init(&b);
		json_w_init(&w, &b);
		json_w_num(&w, c[i].v);
		is_str(out(&b), c[i].want, "json_w_num(%.17g)", c[i].v);
		json_buf_free(&b);
	}
	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_arr(&w);
	json_w_num(&w, 1.5);
	json_w_num(&w, NAN);
	json_w_num(&w, -0.0);
	json_w_arr_end(&w);
	is_str(out(&b), "[1.5,null,0]", "numbers take commas like any value");
	json_buf_free(&b);
}

static void
test_buf(void)
{
	struct json_buf b;
	char big[1000];
	size_t i;

	json_buf_init(&b);
	ok(b.p == NULL && b.len == 0 && b.cap == 0 && !b.oom, "init zeroes without allocating");
	json_buf_printf(&b, "%d-%s", 12, "ab");
	is_str(out(&b), "12-ab", "printf into an empty buffer");
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	json_buf_printf(&b, "[%s]", big);
	ok(b.len == 5 + 1001 && b.p[5] == '[' && b.p[1005] == ']', "printf that must grow");
	for (i = 0; i < 100000; i++)
		json_buf_add(&b, "y", 1);
	ok(b.len == 101006 && b.cap >= b.len && b.cap < 2 * b.len + 512, "growth by doubling");
	ok(json_buf_reserve(&b, 10) == 0 && b.cap - b.len >= 10, "reserve");
	ok(json_buf_reserve(&b, SIZE_MAX) == -1 && b.oom, "impossible reserve sets oom");
	i = b.len;
	json_buf_add(&b, "z", 1);
	json_buf_printf(&b, "%s", "z");
	ok(b.len == i, "appends are ignored after oom");
	json_buf_free(&b);
	ok(b.p == NULL && !b.oom, "free resets oom");
}

/* Random bytes, biased toward UTF-8 lead/continuation bytes and the ones that need escapes. */
static size_t
random_bytes(char *s, size_t max)
{
	static const unsigned char pick[] = {0x00, 0x01, 0x1f, '"',  '\\', 'a',  0x7f, 0x80,
					     0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0,
					     0xf4, 0xf5, 0xff, 0xa0, 0x9f, 0x8f, 0x90, '\n'};
	size_t i, n = (size_t)rand() % max;

	for (i = 0; i < n; i++)
		s[i] = (char)(rand() % 2 ? pick[rand() % sizeof pick] : rand() % 256);
	return n;
}

/* Random well-formed UTF-8: code points from every encoded length, controls and quotes. */
static size_t
random_utf8(char *s, size_t max)
{
	static const unsigned long top[] = {0x80, 0x800, 0x10000, 0x110000};
	size_t n = 0, want = (size_t)rand() % (max - 3);
	unsigned long cp;

	while (n < want) {
		cp = (unsigned long)rand() % top[rand() % 4];
		if (cp >= 0xd800 && cp < 0xe000)
			continue;
		if (cp < 0x80) {
			s[n++] = (char)cp;
		} else if (cp < 0x800) {
			s[n++] = (char)(0xc0 | cp >> 6);
			s[n++] = (char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			s[n++] = (char)(0xe0 | cp >> 12);
			s[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
			s[n++] = (char)(0x80 | (cp & 0x3f));
		} else {
			s[n++] = (char)(0xf0 | cp >> 18);
			s[n++] = (char)(0x80 | (cp >> 12 & 0x3f));
			s[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
			s[n++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	return n;
}

static void
test_write_roundtrip(void)
{
	char s[64], dec[64];
	struct json_buf b;
	struct json_w w;
	int i, parsed = 1, same = 1, fffd = 1, nvalid = 0;
	size_t n;

	srand(20240611);
	json_buf_init(&b);
	for (i = 0; i < 20000; i++) {
		n = i % 2 ? random_bytes(s, sizeof s) : random_utf8(s, sizeof s);
		b.len = 0;
		json_w_init(&w, &b);
		json_w_obj(&w);
		json_w_key(&w, "k");
		json_w_str(&w, s, n);
		json_w_obj_end(&w);
		if (parse_n(b.p, b.len, T, NTOK) != 3) {
			parsed = 0;
			printf("#   did not parse: %s\n", err);
			continue;
		}
		/* well-formed input comes back byte for byte; anything else gained a U+FFFD */
		if (valid_utf8((unsigned char *)s, n)) {
			nvalid++;
			if (json_str_decode(src, &T[2], dec, sizeof dec) != n || memcmp(dec, s, n)) {
				same = 0;
				printf("#   not round-tripped: %s\n", show(s, n));
			}
		} else {
			fffd &= memmem(b.p, b.len, FFFD, 3) != NULL;
		}
	}
	json_buf_free(&b);
	ok(parsed, "writer output of 20000 random byte strings always parses");
	ok(same && nvalid > 10000, "valid UTF-8 round-trips exactly (%d cases)", nvalid);
	ok(fffd, "invalid input always shows a U+FFFD");
}

/* ------------------------------------------------------------- regressions */

static void
test_regressions(void)
{
	/* none found by the fuzzers so far; crashes found later go here */
}

/* Body text s parsed as a request body: the sentence refusing it, or "" when it parses. */
static const char *
doc_why(const char *s)
{
	static struct json_tok toks[64];
	static struct json_doc d;
	size_t n = strlen(s);

	d.why[0] = '\0';
	if (json_doc_parse(&d, guarded(s, n), n, toks, 64) < 0 && d.status != 400)
		return "(not a 400)";
	return d.why;
}

/* A member given twice is named, not pointed at by a byte offset. */
static void
test_doc_duplicates(void)
{
	char body[300], want[128];

	is_str(doc_why("{\"cmd\":\"a\",\"cmd\":\"b\"}"), "Field \"cmd\" is given twice",
	       "doc: a member given twice is named");
	is_str(doc_why("{\"cmd\":\"a\",\"\\u0063md\":\"b\"}"), "Field \"cmd\" is given twice",
	       "doc: a member given twice is named decoded, whatever its escapes");
	is_str(doc_why("{\"cmd\":\"a\",\"env\":{\"A\":\"1\",\"A\":\"2\"}}"),
	       "Member \"A\" is given twice in field \"env\"",
	       "doc: a member given twice in an object value is named with its field");
	is_str(doc_why("{\"x\":1,\"device_ids\":[0,{\"a\":{\"b\":1,\"b\":2}}]}"),
	       "Member \"b\" is given twice in field \"device_ids\"",
	       "doc: deeper down, the root's field it is in is named");
	is_str(doc_why("{\"a\\u001b[2J\\n\\u202e\\u0085\":1,\"a\\u001b[2J\\n\\u202e\\u0085\":2}"),
	       "Field \"a?[2J???\" is given twice",
	       "doc: control characters of a name given twice are shown as '?'");
	snprintf(body, sizeof(body), "{\"%0100d\":1,\"%0100d\":2}", 0, 0);
	snprintf(want, sizeof(want), "Field \"%060d...\" is given twice", 0);
	is_str(doc_why(body), want, "doc: a long name given twice is cut after 60 bytes");
	snprintf(body, sizeof(body), "{\"e\":{\"%0100d\":1,\"%0100d\":2}}", 0, 0);
	snprintf(want, sizeof(want), "Member \"%060d...\" is given twice in field \"e\"", 0);
	is_str(doc_why(body), want, "doc: a long nested name given twice is cut too");
	ok(strncmp(doc_why("[{\"a\":1,\"a\":2}]"), "Invalid JSON: duplicate key", 27) == 0,
	   "doc: a duplicate under an array root stays invalid JSON");
}

/* The checks of a request body's members: what a client sent wrong is named, near misses too. */
static void
test_doc(void)
{
	static const char *const known[] = {"cmd", "device_id", "timeout", NULL};
	static const char *const syn[][2] = {{"card", "device_id"}, {NULL, NULL}};
	struct json_tok toks[64];
	struct json_doc d = {.synonyms = syn};
	long long v = 7;
	char *s = NULL;
	const char *body;

	ok(json_doc_parse(&d, "[1]", 3, toks, 64) < 0 && d.status == 400, "doc: array root refused");
	is_str(d.why, "Request body must be a JSON object", "doc: array root message");
	ok(json_doc_parse(&d, "{", 1, toks, 64) < 0 && strncmp(d.why, "Invalid JSON: ", 14) == 0,
	   "doc: malformed body says Invalid JSON");
	ok(json_doc_parse(&d, "[1,2,3]", 7, toks, 2) < 0 &&
		   strcmp(d.why, "Invalid JSON: document too complex (over 2 values)") == 0,
	   "doc: too many values named with the limit");

	body = "{\"devcie_id\":1}";
	ok(json_doc_parse(&d, body, strlen(body), toks, 64) == 0, "doc: object parses");
	ok(json_doc_known(&d, known) < 0, "doc: unknown member refused");
	is_str(d.why, "Unknown field \"devcie_id\"; did you mean \"device_id\"? (known fields: cmd, "
		      "device_id, timeout)", "doc: a swapped pair suggests the member meant");
	body = "{\"Device-ID\":1,\"card\":2}";
	json_doc_parse(&d, body, strlen(body), toks, 64);
	ok(json_doc_known(&d, known) < 0 && strstr(d.why, "\"Device-ID\"; did you mean \"device_id\""),
	   "doc: case and dashes do not hide the member meant");
	body = "{\"card\":2}";
	json_doc_parse(&d, body, strlen(body), toks, 64);
	ok(json_doc_known(&d, known) < 0 && strstr(d.why, "did you mean \"device_id\""),
	   "doc: card is a synonym of device_id, as the caller says");
	d.synonyms = NULL;
	ok(json_doc_known(&d, known) < 0 && !strstr(d.why, "did you mean"),
	   "doc: without synonyms card means nothing");
	d.synonyms = syn;
	body = "{\"zzzzzz\":2}";
	json_doc_parse(&d, body, strlen(body), toks, 64);
	ok(json_doc_known(&d, known) < 0 && !strstr(d.why, "did you mean"),
	   "doc: nothing close, nothing suggested");

	body = "{\"cmd\":\"ab\\u00e9\",\"timeout\":null,\"device_id\":\"x\"}";
	json_doc_parse(&d, body, strlen(body), toks, 64);
	ok(json_doc_known(&d, known) == 0, "doc: known members pass");
	ok(json_doc_field(&d, "timeout") < 0, "doc: a null member counts as absent");
	ok(json_doc_int(&d, "timeout", 1, 9, &v) == 0 && v == 7, "doc: absent int keeps its default");
	ok(json_doc_str(&d, "cmd", 3, &s) == 0 && s && strcmp(s, "ab\xc3\xa9") == 0,
	   "doc: string decoded; the limit counts characters, not bytes");
	free(s);
	ok(json_doc_str(&d, "cmd", 2, &s) < 0 && !s && d.status == 400, "doc: over the limit refused");
	is_str(d.why, "cmd is longer than 2 characters", "doc: the limit is named");
	ok(json_doc_int(&d, "device_id", 0, 9, &v) < 0, "doc: a string is no integer");
	is_str(d.why, "device_id must be an integer from 0 to 9", "doc: the range is named");
	body = "{\"cmd\":\"a\\u0000b\",\"timeout\":12}";
	json_doc_parse(&d, body, strlen(body), toks, 64);
	ok(json_doc_str(&d, "cmd", 100, &s) < 0 && !s, "doc: NUL in a string refused");
	is_str(d.why, "cmd must not contain NUL", "doc: the NUL is named");
	ok(json_doc_int(&d, "timeout", 1, 9, &v) < 0 && v == 7, "doc: out of range leaves the value");
	ok(json_doc_int(&d, "timeout", 1, 12, &v) == 0 && v == 12, "doc: in range read");
	ok(json_doc_str(&d, "timeout", 100, &s) < 0 && strcmp(d.why, "timeout must be a string") == 0,
	   "doc: a number is no string");
	test_doc_duplicates();
	{
		static const char *const none[] = {NULL}, *const logs[] = {"offset", "limit", NULL};
		char why[256], lng[80];

		json_unknown_name(why, sizeof(why), "query parameter", "ofset=3", 5, logs, NULL);
		is_str(why, "Unknown query parameter \"ofset\"; did you mean \"offset\"? (known query "
			    "parameters: offset, limit)", "unknown name: the near miss and the list");
		json_unknown_name(why, sizeof(why), "query parameter", "x", 1, none, NULL);
		is_str(why, "Unknown query parameter \"x\" (known query parameters: none)",
		       "unknown name where none is known: none");
		memset(lng, 'z', sizeof(lng));
		json_unknown_name(why, sizeof(why), "field", lng, sizeof(lng), logs, NULL);
		ok(strstr(why, "\"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz...\"") != NULL,
		   "a long name is cut after 60 bytes");
		json_unknown_name(why, sizeof(why), "field", "x\x1b[2J\n\xe2\x80\xae", 9, none, NULL);
		is_str(why, "Unknown field \"x?[2J??\" (known fields: none)",
		       "an unknown name shows its control characters as '?'");
	}
}

int
main(void)
{
	guard_init();
	test_scalars();
	test_layout();
	test_reject();
	test_depth();
	test_duplicates();
	test_cap();
	test_prefixes();
	test_obj_get();
	test_str_decode();
	test_tok_int();
	test_utf8_boundary();
	test_utf8_valid();
	test_control_len();
	test_write_strings();
	test_write_structure();
	test_write_num();
	test_buf();
	test_write_roundtrip();
	test_regressions();
	test_doc();
	return tap_done();
}
