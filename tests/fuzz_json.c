/*
 * fuzz_json.c - libFuzzer target for json_parse, its accessors and the string writer.
 *
 * Invariants checked on arbitrary bytes:
 * - A small and a large token array agree: the same count and tokens when both fit; -1 from
 *   the small one means -1 from the large one; -2 from the small one means the large one
 *   needs more than the small cap, or it found a duplicate key the small one could not see.
 * - Every failure leaves a NUL-terminated, non-empty message.
 * - On success the token tree is consistent: offsets inside the input, `next` skips exactly
 *   `size` children (objects: key string + value), strings decode to at most their raw length
 *   (the same length whatever the cap) of valid UTF-8 (checked by an independent decoder),
 *   integers agree with strtoll, and json_obj_get finds every member's value by its decoded
 *   key (keys are unique, so it is that member's value).
 * - json_w_str of the input re-parses as one string that decodes to valid UTF-8, and to the
 *   input byte for byte when the input is valid UTF-8.
 * - json_doc_parse takes exactly the documents json_parse takes whose root is an object; its
 *   refusal, and json_doc_known's, is 400 with a sentence free of control characters
 *   (json_control_len), though it may quote a member's name.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "utf8ref.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

#define SMALL 8
#define LARGE 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dec[1 << 16];


static void
check_string(const char *src, const struct json_tok *t)
{
	size_t n = json_str_decode(src, t, dec, sizeof dec);

	CHECK(n <= t->end - t->start);
	CHECK(n > sizeof dec || valid_utf8((const unsigned char *)dec, n));
	CHECK(json_str_decode(src, t, dec, n / 2) == n);
	CHECK(json_str_decode(src, t, NULL, 0) == n);
	CHECK(json_str_decode(src, t, dec, sizeof dec) == n);
}

static void
check_number(const char *src, const struct json_tok *t)
{
	char buf[64];
	long long v, ref;
	size_t n = t->end - t->start;
	int rc = json_tok_int(src, t, &v);

	CHECK(rc == 0 || rc == -1);
	if (n >= sizeof buf) {
		CHECK(rc == -1); /* no leading zeros: 64 characters is far out of range */
		return;
	}
	memcpy(buf, src + t->start, n);
	buf[n] = '\0';
	if (strpbrk(buf, ".eE")) {
		CHECK(rc == -1); /* a fraction or an exponent: no integer */
		return;
	}
	errno = 0;
	ref = strtoll(buf, NULL, 10);
	CHECK((rc == 0) == (errno == 0));
	CHECK(rc != 0 || v == ref);
}

/* Each member's decoded key must lead json_obj_get to that member's value. */
static void
check_object(const char *src, const struct json_tok *toks, int obj)
{
	char key[256];
	uint32_t j, k;
	size_t n;

	CHECK(json_obj_get(src, toks, obj, "\xff") == -1); /* never a valid key */
	for (j = 0, k = (uint32_t)obj + 1; j < toks[obj].size; j++, k = toks[k + 1].next) {
		n = json_str_decode(src, &toks[k], key, sizeof key - 1);
		if (n >= sizeof key - 1 || memchr(key, 0, n))
			continue;
		key[n] = '\0';
		CHECK(json_obj_get(src, toks, obj, key) == (int)k + 1);
	}
}

static void
check_tree(const char *src, size_t len, const struct json_tok *toks, int n)
{
	uint32_t i, j, c;

	CHECK(toks[0].next == (uint32_t)n);
	for (i = 0; i < (uint32_t)n; i++) {
		const struct json_tok *t = &toks[i];

		CHECK(t->start <= t->end && t->end <= len);
		CHECK(t->next > i && t->next <= (uint32_t)n);
		if (t->type == JSON_OBJECT || t->type == JSON_ARRAY) {
			for (j = i + 1, c = 0; c < t->size; c++) {
				if (t->type == JSON_OBJECT) {
					CHECK(toks[j].type == JSON_STRING);
					j++;
				}
				j = toks[j].next;
			}
			CHECK(j == t->next);
			if (t->type == JSON_OBJECT)
				check_object(src, toks, (int)i);
			continue;
		}
		CHECK(t->size == 0 && t->next == i + 1);
		if (t->type == JSON_STRING)
			check_string(src, t);
		else if (t->type == JSON_NUMBER)
			check_number(src, t);
		else
			CHECK(t->type >= JSON_TRUE && t->type <= JSON_NULL);
	}
}

/* Write s[0..n) as a string; it must parse, and decode to s when s is valid UTF-8. */
static void
check_writer(const char *s, size_t n, int valid)
{
	struct json_buf b;
	struct json_w w;
	struct json_tok t[2];
	size_t m;

	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_str(&w, s, n);
	CHECK(!b.oom);
	CHECK(json_parse(b.p, b.len, t, 2, NULL, 0) == 1 && t[0].type == JSON_STRING);
	m = json_str_decode(b.p, &t[0], dec, sizeof dec);
	CHECK(m > sizeof dec || valid_utf8((const unsigned char *)dec, m));
	if (valid)
		CHECK(m == n && (m > sizeof dec || memcmp(dec, s, n) == 0));
	json_buf_free(&b);
}

/* The body check agrees with json_parse (rl, from the large array) and quotes names safely. */
static void
check_doc(const char *src, size_t size, int rl)
{
	static const char *const known[] = {"cmd", "env", NULL};
	static struct json_tok toks[LARGE];
	struct json_doc d = {0};
	size_t i, n;
	int r = json_doc_parse(&d, src, size, toks, LARGE);

	CHECK(r == 0 || r == -1);
	CHECK((r == 0) == (rl > 0 && toks[0].type == JSON_OBJECT));
	if (r == 0 && (r = json_doc_known(&d, known)) == 0)
		return;
	CHECK(d.status == 400 && memchr(d.why, 0, sizeof d.why) && d.why[0]);
	for (i = 0, n = strlen(d.why); i < n; i++)
		CHECK(json_control_len(d.why + i, n - i) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct json_tok small[SMALL], large[LARGE];
	const char *src = (const char *)data;
	char err[80];
	int rs, rl;

	rs = json_parse(src, size, small, SMALL, err, sizeof err);
	CHECK(rs >= -2 && rs != 0 && rs <= SMALL);
	CHECK(rs > 0 || (memchr(err, 0, sizeof err) && err[0]));
	rl = json_parse(src, size, large, LARGE, err, sizeof err);
	CHECK(rl >= -2 && rl != 0 && rl <= LARGE);
	CHECK(rl > 0 || (memchr(err, 0, sizeof err) && err[0]));
	if (rs > 0)
		CHECK(rl == rs && memcmp(small, large, (size_t)rs * sizeof small[0]) == 0);
	if (rs == -1)
		CHECK(rl == -1);
	if (rs == -2)
		CHECK(rl == -2 || rl == -1 || rl > SMALL);
	if (rl > 0)
		check_tree(src, size, large, rl);
	check_writer(src, size, valid_utf8(data, size));
	check_doc(src, size, rl);
	return 0;
}
