/*
 * json.c - strict RFC 8259 tokenizer, token accessors, UTF-8 helpers, the checks of a request
 * body's members (each failure a sentence for the client), and the writer.
 *
 * Invariants of the reader:
 * - It never reads outside src[0..len): every index is compared with len before the byte is
 *   read. It keeps no state outside the caller's stack and token array, and allocates only
 *   an object's list of keys while it checks them.
 * - Recursion depth is bounded by JSON_MAX_DEPTH (64), so the stack use is bounded too.
 * - Token i is written only when i < cap. Past cap the parser keeps validating and counting,
 *   so -1 (malformed) wins over -2 (too many tokens) and the -2 message says how many tokens
 *   the document needs. The one exception: duplicate keys are only detected in objects whose
 *   tokens all fit, because detection reads the key tokens back.
 * - Duplicate keys are found by sorting an object's keys by their decoded bytes (glibc's
 *   qsort_r, a merge sort), which costs O(m log m) comparisons for m members whatever the keys
 *   are (a hash table with a public hash function can be driven to O(m^2) by chosen keys).
 *
 * Invariants of the writer:
 * - Output is valid UTF-8 whatever the input. A byte sequence that is not well-formed UTF-8
 *   (Unicode table 3-7) is replaced by one U+FFFD per "maximal subpart" (The Unicode Standard,
 *   section 3.9; the W3C/WHATWG decoders do the same): a lead byte plus the continuation
 *   bytes that were still valid for it becomes one U+FFFD; every other stray byte becomes one
 *   U+FFFD each. So "\xE2\x82" is one U+FFFD, "\xED\xA0\x80" (an encoded surrogate) is
 *   three, "\xC0\xAF" is two, "\xF0\x9F\x98" (a truncated emoji) is one.
 * - struct json_buf grows by doubling, so appends are amortized O(1) and a value costs no
 *   allocation of its own; once an allocation fails, oom is set and every append is ignored.
 * - Numbers are formatted without printf's locale-dependent decimal point, and without printf:
 *   `status` writes thousands of them, and printf's %.3f made its p99 miss its budget.
 */
#include "json.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL 0 /* no key; token 0 is the root and never a key */
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* --------------------------------------------------------------------- UTF-8 */

/*
 * Length of the longest prefix of s[0..n) (n >= 1) that is a well-formed UTF-8 sequence or the
 * start of one (Unicode table 3-7), and in *need the length the sequence must have. The
 * sequence is complete and valid exactly when the result equals *need. The result is 0 when
 * s[0] cannot start a sequence (80..C1, F5..FF).
 */
static unsigned
utf8_prefix(const unsigned char *s, size_t n, unsigned *need)
{
	unsigned c = s[0], lo = 0x80, hi = 0xBF, k;

	*need = 1;
	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0;
	*need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	/* the second byte's range excludes overlongs (E0, F0), surrogates (ED), > U+10FFFF (F4) */
	lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : lo;
	hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : hi;
	for (k = 1; k < *need && k < n; k++) {
		if (s[k] < lo || s[k] > hi)
			break;
		lo = 0x80;
		hi = 0xBF;
	}
	return k;
}

/* Encode code point cp (a scalar value, not a surrogate) into out; returns the byte count. */
static int
utf8_put(uint32_t cp, unsigned char *out)
{
	static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
	int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4, i;

	for (i = n - 1; i > 0; i--, cp >>= 6)
		out[i] = (unsigned char)(0x80 | (cp & 0x3F));
	out[0] = (unsigned char)(lead[n] | cp);
	return n;
}

/*
 * The last lead byte is the only one that can start an incomplete sequence, and such a
 * sequence has at most 3 bytes, so only the last 3 bytes are examined: O(1).
 */
size_t
json_utf8_boundary(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned need;
	size_t back;

	for (back = 1; back <= 3 && back <= n; back++) {
		if ((u[n - back] & 0xC0) == 0x80)
			continue; /* continuation byte: its lead is further back */
		if (utf8_prefix(u + n - back, back, &need) == back && back < need)
			return back == n ? n : n - back;
		break;
	}
	return n;
}

size_t
json_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	unsigned need;

	while (i < n && (u[i] < 0x80 || utf8_prefix(u + i, n - i, &need) == need))
		i += u[i] < 0x80 ? 1 : need;
	return i;
}

size_t
json_control_len(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	if (u[0] < 0x20 || u[0] == 0x7f)
		return 1;
	if (n >= 2 && ((u[0] == 0xC2 && u[1] >= 0x80 && u[1] <= 0x9F) ||
		       (u[0] == 0xD8 && u[1] == 0x9C)))
		return 2; /* C1, and U+061C ARABIC LETTER MARK */
	/* U+200E-U+200F, U+202A-U+202E, U+2066-U+2069: they reorder what a terminal shows after
	 * them, so a command in `status` could read as another (CVE-2021-42574) */
	if (n >= 3 && u[0] == 0xE2 &&
	    ((u[1] == 0x80 && ((u[2] >= 0x8E && u[2] <= 0x8F) || (u[2] >= 0xAA && u[2] <= 0xAE))) ||
	     (u[1] == 0x81 && u[2] >= 0xA6 && u[2] <= 0xA9)))
		return 3;
	return 0;
}

/* ------------------------------------------------------------------ escapes */

/* Read 4 hex digits at s[i..n) into *u; -1 when there are fewer. */
static int
hex4(const unsigned char *s, size_t i, size_t n, uint32_t *u)
{
	static const char hex[] = "0123456789abcdef0123456789ABCDEF"; /* digit value: index & 15 */
	const char *d;
	size_t k;

	if (n - i < 4)
		return -1;
	for (*u = 0, k = 0; k < 4; k++) {
		if (!(d = memchr(hex, s[i + k], sizeof(hex) - 1)))
			return -1;
		*u = *u << 4 | (uint32_t)((d - hex) & 15);
	}
	return 0;
}

/*
 * Decode the escape whose backslash is s[*i] (i < n): write its UTF-8 bytes to out, advance *i
 * past it and return the byte count (1..4). Malformed escapes (RFC 8259 section 7: only the
 * listed ones; \u surrogates only as a high-low pair) return -1 with *why set and *i unchanged.
 * Shared by the parser (which validates) and the decoders (which see validated text).
 */
static int
unescape(const unsigned char *s, size_t *i, size_t n, unsigned char *out, const char **why)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e;
	uint32_t hi, lo;

	*why = "unterminated escape";
	if (n - *i < 2)
		return -1;
	if (s[*i + 1] != 'u') {
		*why = "invalid escape";
		if (s[*i + 1] == 0 || (e = strchr(from, s[*i + 1])) == NULL)
			return -1;
		out[0] = (unsigned char)to[e - from];
		*i += 2;
		return 1;
	}
	*why = "invalid \\u escape";
	if (hex4(s, *i + 2, n, &hi) < 0)
		return -1;
	if (hi < 0xD800 || hi > 0xDFFF) {
		*i += 6;
		return utf8_put(hi, out);
	}
	*why = "unpaired surrogate escape";
	if (hi > 0xDBFF || n - *i < 12 || s[*i + 6] != '\\' || s[*i + 7] != 'u' ||
	    hex4(s, *i + 8, n, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
		return -1;
	*i += 12;
	return utf8_put(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00), out);
}

/* A reader of a string token's decoded bytes, one at a time: for comparisons and decoding. */
struct dec {
	const unsigned char *s;
	size_t pos, end;
	unsigned char buf[4];
	int nbuf, ibuf;
};

/* A reader of token t's decoded bytes: none when t is not a string. */
static struct dec
dec_at(const char *src, const struct json_tok *t)
{
	return (struct dec){.s = (const unsigned char *)src, .pos = t->start,
			    .end = t->type == JSON_STRING ? t->end : 0};
}

/* The next decoded byte, or -1 at the end. */
static int
dec_next(struct dec *d)
{
	const char *why;

	if (d->ibuf < d->nbuf)
		return d->buf[d->ibuf++];
	if (d->pos >= d->end)
		return -1;
	d->ibuf = 1;
	d->nbuf = d->s[d->pos] == '\\' ? unescape(d->s, &d->pos, d->end, d->buf, &why) : -1;
	return d->nbuf > 0 ? d->buf[0] : d->s[d->pos++]; /* -1: a byte as it is */
}

/* ------------------------------------------------------------------- reader */

struct parser {
	const unsigned char *s;
	size_t len;
	size_t pos;
	struct json_tok *toks;
	unsigned cap;          /* usable tokens, at most INT_MAX */
	unsigned n;            /* tokens the document needs so far; may exceed cap */
	struct json_tok spill; /* written instead of toks[i] when i >= cap */
	char *err;
	size_t errlen;
	uint32_t top_key; /* the key of the root object's member being read (NIL before one) */
	uint32_t dup;     /* a key given twice (NIL when none), and the object holding it */
	uint32_t dup_obj;
};

static int parse_value(struct parser *p, unsigned depth);

static int
fail(struct parser *p, size_t at, const char *msg)
{
	snprintf(p->err, p->errlen, "%s at byte %zu", msg, at); /* errlen 0: err may be NULL */
	return -1;
}

/* Token i, or a scratch token when it is past cap so callers need not check. */
static struct json_tok *
tok(struct parser *p, unsigned i)
{
	return i < p->cap ? &p->toks[i] : &p->spill;
}

/* The next token: a value at [start, end); a container's end, size and next come later. */
static unsigned
new_tok(struct parser *p, int type, size_t start, size_t end)
{
	unsigned i = p->n++;

	*tok(p, i) = (struct json_tok){.type = (uint8_t)type, .start = (uint32_t)start,
				       .end = (uint32_t)end, .next = i + 1};
	return i;
}

static void
skip_ws(struct parser *p)
{
	while (p->pos < p->len && memchr(" \t\n\r", p->s[p->pos], 4)) /* memchr: NUL is no space */
		p->pos++;
}

/* The byte at pos, or -1 at the end of input. */
static int
peek(const struct parser *p)
{
	return p->pos < p->len ? p->s[p->pos] : -1;
}

/* A string at pos (its opening quote): RFC 8259 section 7, and UTF-8 (section 8.1). */
static int
parse_string(struct parser *p)
{
	const unsigned char *s = p->s;
	size_t start = ++p->pos, i = start;
	unsigned char scratch[4];
	const char *why;
	unsigned need;

	while (i < p->len && s[i] != '"') {
		if (s[i] == '\\') {
			if (unescape(s, &i, p->len, scratch, &why) < 0)
				return fail(p, i, why);
		} else if (s[i] < 0x20) {
			return fail(p, i, "control character in string");
		} else if (utf8_prefix(s + i, p->len - i, &need) != need) {
			return fail(p, i, "invalid UTF-8 in string");
		} else {
			i += need;
		}
	}
	if (i >= p->len)
		return fail(p, i, "unterminated string");
	new_tok(p, JSON_STRING, start, i);
	p->pos = i + 1; /* past the closing quote */
	return 0;
}

/* Skip one or more digits; -1 when there is none. */
static int
digits(struct parser *p)
{
	size_t start = p->pos;

	while (p->pos < p->len && (unsigned)(p->s[p->pos] - '0') < 10)
		p->pos++;
	return p->pos > start ? 0 : -1;
}

/* RFC 8259 section 6: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int
parse_number(struct parser *p)
{
	size_t start = p->pos, int_start;

	if (peek(p) == '-')
		p->pos++;
	int_start = p->pos;
	if (digits(p) < 0)
		return fail(p, p->pos, p->pos > start ? "digit expected" : "unexpected character");
	if (p->s[int_start] == '0' && p->pos - int_start > 1)
		return fail(p, start, "leading zero in number");
	if (peek(p) == '.') {
		p->pos++;
		if (digits(p) < 0)
			return fail(p, p->pos, "digit expected after '.'");
	}
	if (peek(p) == 'e' || peek(p) == 'E') {
		p->pos++;
		if (peek(p) == '+' || peek(p) == '-')
			p->pos++;
		if (digits(p) < 0)
			return fail(p, p->pos, "digit expected in exponent");
	}
	new_tok(p, JSON_NUMBER, start, p->pos);
	return 0;
}

static int
parse_literal(struct parser *p, const char *word, int type)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
		return fail(p, p->pos, "invalid literal");
	new_tok(p, type, p->pos, p->pos + n);
	p->pos += n;
	return 0;
}

/* Compare the decoded bytes of key tokens a and b like memcmp, shorter first. */
static int
key_cmp(struct parser *p, unsigned a, unsigned b)
{
	struct dec x = dec_at((const char *)p->s, &p->toks[a]);
	struct dec y = dec_at((const char *)p->s, &p->toks[b]);
	int cx, cy;

	do {
		cx = dec_next(&x);
		cy = dec_next(&y);
	} while (cx == cy && cx >= 0);
	return cx - cy;
}

/* qsort_r's order of key token indices: by the keys' decoded bytes. */
static int
key_order(const void *a, const void *b, void *p)
{
	return key_cmp(p, *(const uint32_t *)a, *(const uint32_t *)b);
}

/*
 * Object obj (all of its tokens stored) with count > 1 members: -1 on a duplicate key, which
 * sorting the keys puts next to its twin; p->dup is the later of the two in the document.
 */
static int
check_dup_keys(struct parser *p, unsigned obj, unsigned count)
{
	uint32_t *keys = malloc(count * sizeof(*keys)), k, j;

	if (!keys)
		return fail(p, p->toks[obj].start, "out of memory");
	for (k = obj + 1, j = 0; j < count; j++, k = p->toks[k + 1].next)
		keys[j] = k; /* a member's value token knows where the next key is */
	qsort_r(keys, count, sizeof(*keys), key_order, p);
	for (j = 1; j < count && key_cmp(p, keys[j - 1], keys[j]) != 0; j++)
		;
	p->dup = j == count ? NIL : keys[j - 1] > keys[j] ? keys[j - 1] : keys[j];
	free(keys);
	if (p->dup == NIL)
		return 0;
	p->dup_obj = obj;
	return fail(p, p->toks[p->dup].start - 1, "duplicate key");
}

/* "key": value, starting at (or before whitespace before) the key. */
static int
parse_member(struct parser *p, unsigned depth)
{
	skip_ws(p);
	if (peek(p) != '"')
		return fail(p, p->pos, "expected a string key");
	if (depth == 1)
		p->top_key = p->n; /* the token parse_string is about to take */
	if (parse_string(p) < 0)
		return -1;
	skip_ws(p);
	if (peek(p) != ':')
		return fail(p, p->pos, "expected ':'");
	p->pos++;
	return parse_value(p, depth);
}

/* An object or array at pos; depth counts this container. */
static int
parse_container(struct parser *p, unsigned depth, int type)
{
	int close = type == JSON_OBJECT ? '}' : ']', c, rc;
	unsigned i = new_tok(p, type, p->pos, p->pos), count = 0;

	if (depth > JSON_MAX_DEPTH)
		return fail(p, p->pos, "nesting too deep");
	p->pos++;
	skip_ws(p);
	if (peek(p) == close) {
		p->pos++;
	} else {
		do {
			rc = type == JSON_OBJECT ? parse_member(p, depth) : parse_value(p, depth);
			if (rc < 0)
				return -1;
			count++;
			skip_ws(p);
			if ((c = peek(p)) != ',' && c != close)
				return fail(p, p->pos,
				            c < 0 ? "unterminated container"
				                  : "expected ',' or closing bracket");
			p->pos++;
		} while (c == ',');
	}
	tok(p, i)->end = (uint32_t)p->pos;
	tok(p, i)->size = count;
	tok(p, i)->next = p->n;
	if (type == JSON_OBJECT && count > 1 && p->n <= p->cap)
		return check_dup_keys(p, i, count);
	return 0;
}

static int
parse_value(struct parser *p, unsigned depth)
{
	skip_ws(p);
	switch (peek(p)) {
	case -1:
		return fail(p, p->pos, "unexpected end of input");
	case '{':
		return parse_container(p, depth + 1, JSON_OBJECT);
	case '[':
		return parse_container(p, depth + 1, JSON_ARRAY);
	case '"':
		return parse_string(p);
	case 't':
		return parse_literal(p, "true", JSON_TRUE);
	case 'f':
		return parse_literal(p, "false", JSON_FALSE);
	case 'n':
		return parse_literal(p, "null", JSON_NULL);
	default:
		return parse_number(p);
	}
}

/* json_parse's work, its state left in *p: on a key given twice, p->dup and p->dup_obj. */
static int
tokenize(struct parser *p, const char *src, size_t len, struct json_tok *toks, unsigned cap,
	 char *err, size_t errlen)
{
	/* cap: the count is returned as an int; top_key, dup and dup_obj start NIL (0) */
	*p = (struct parser){.s = (const unsigned char *)src, .len = len, .toks = toks,
			     .cap = cap > INT_MAX ? INT_MAX : cap, .err = err, .errlen = errlen};
	if (errlen > 0)
		err[0] = '\0';
	if (len > UINT32_MAX - 1) /* offsets are uint32_t */
		return fail(p, 0, "document too large");
	if (parse_value(p, 0) < 0)
		return -1;
	skip_ws(p);
	if (p->pos != len)
		return fail(p, p->pos, "trailing garbage");
	if (p->n > p->cap) {
		snprintf(err, errlen, "document needs %u tokens, only %u available", p->n, p->cap);
		return -2;
	}
	return (int)p->n;
}

int
json_parse(const char *src, size_t len, struct json_tok *toks, unsigned cap, char *err,
           size_t errlen)
{
	struct parser p;

	return tokenize(&p, src, len, toks, cap, err, errlen);
}

/* ---------------------------------------------------------------- accessors */

/* Decoded key token k equals the C string key? */
static int
key_eq(const char *src, const struct json_tok *k, const char *key)
{
	struct dec d = dec_at(src, k);
	int c;

	while ((c = dec_next(&d)) >= 0 && *key && c == (unsigned char)*key)
		key++;
	return c < 0 && !*key;
}

int
json_obj_get(const char *src, const struct json_tok *toks, int obj, const char *key)
{
	uint32_t j, k;

	if (obj < 0 || toks[obj].type != JSON_OBJECT)
		return -1;
	for (j = 0, k = (uint32_t)obj + 1; j < toks[obj].size; j++, k = toks[k + 1].next)
		if (key_eq(src, &toks[k], key))
			return (int)k + 1;
	return -1;
}

size_t
json_str_decode(const char *src, const struct json_tok *t, char *out, size_t cap)
{
	struct dec d = dec_at(src, t);
	size_t len = 0;
	int c;

	for (; (c = dec_next(&d)) >= 0; len++)
		if (len < cap)
			out[len] = (char)c;
	return len;
}

/*
 * A valid integer token has no leading zero: one of more than 20 bytes cannot fit. A fraction
 * or an exponent stops strtoll short of the end.
 */
int
json_tok_int(const char *src, const struct json_tok *t, long long *out)
{
	char buf[24], *end;
	size_t n = t->end - t->start;
	long long v;

	if (t->type != JSON_NUMBER || n >= sizeof(buf))
		return -1;
	memcpy(buf, src + t->start, n);
	buf[n] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* ------------------------------------------------------------------- request bodies */

static int __attribute__((format(printf, 3, 4)))
doc_fail(struct json_doc *d, int status, const char *fmt, ...)
{
	va_list ap;

	d->status = status;
	va_start(ap, fmt);
	vsnprintf(d->why, sizeof(d->why), fmt, ap);
	va_end(ap);
	return -1;
}

/*
 * name (n bytes long; name holds at least its first 63 bytes) as a message quotes it, into
 * out[0..64): cut past 60 bytes (at a character boundary) with "...", and each control
 * character (json_control_len) shown as '?'. The name is the client's: as is, it could forge a
 * log line or reorder what a terminal shows of the message.
 */
static void
name_shown(char *out, const char *name, size_t n)
{
	size_t cut = n < 63 ? n : json_utf8_boundary(name, 60), i = 0, k = 0, c;

	while (i < cut) {
		c = json_control_len(name + i, cut - i);
		out[k++] = c ? '?' : name[i];
		i += c ? c : 1;
	}
	snprintf(out + k, 64 - k, "%s", n > cut ? "..." : "");
}

/*
 * The sentence refusing the key p->dup given twice in the object p->dup_obj: a root member is
 * a "Field", a member further down is named with the root's field that holds it. -1.
 */
static int
doc_given_twice(struct json_doc *d, const struct parser *p)
{
	char key[64], name[64], top[64];
	size_t n = json_str_decode(d->src, &d->toks[p->dup], key, sizeof(key));

	name_shown(name, key, n);
	if (p->dup_obj == 0)
		return doc_fail(d, 400, "Field \"%s\" is given twice", name);
	n = json_str_decode(d->src, &d->toks[p->top_key], key, sizeof(key));
	name_shown(top, key, n);
	return doc_fail(d, 400, "Member \"%s\" is given twice in field \"%s\"", name, top);
}

int
json_doc_parse(struct json_doc *d, const char *src, size_t len, struct json_tok *toks,
	       unsigned cap)
{
	char err[160];
	struct parser p;
	int n = tokenize(&p, src, len, toks, cap, err, sizeof(err));

	d->src = src;
	d->toks = toks;
	if (n == -2)
		return doc_fail(d, 400, "Invalid JSON: document too complex (over %u values)", cap);
	/* a duplicate is found only in an object whose tokens, and all before, were stored */
	if (n < 0 && p.dup != NIL && toks[0].type == JSON_OBJECT)
		return doc_given_twice(d, &p);
	if (n < 0)
		return doc_fail(d, 400, "Invalid JSON: %s", err);
	if (toks[0].type != JSON_OBJECT)
		return doc_fail(d, 400, "Request body must be a JSON object");
	return 0;
}

int
json_doc_field(const struct json_doc *d, const char *key)
{
	int i = json_obj_get(d->src, d->toks, 0, key);

	return i >= 0 && d->toks[i].type == JSON_NULL ? -1 : i;
}

/*
 * A member name as compared for suggestions: lowercase, without '_' and '-' (deviceId,
 * Device-ID and device_id are one name), cut to cap - 1 bytes. Returns its length.
 */
static size_t
name_norm(const char *s, size_t n, char *out, size_t cap)
{
	size_t i, k = 0;

	for (i = 0; i < n && k + 1 < cap; i++)
		if (s[i] != '_' && s[i] != '-')
			out[k++] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
	out[k] = '\0';
	return k;
}

/* Edits (insert, delete, replace, swap two neighbours) from a to b; both under 40 bytes. */
static int
edit_distance(const char *a, const char *b)
{
	int d[40][40], i, j, na = (int)strlen(a), nb = (int)strlen(b);

	for (i = 0; i <= na; i++)
		for (j = 0; j <= nb; j++) {
			d[i][j] = i + j;
			if (i > 0 && j > 0)
				d[i][j] = MIN(MIN(d[i - 1][j], d[i][j - 1]) + 1,
					      d[i - 1][j - 1] + (a[i - 1] != b[j - 1]));
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
				d[i][j] = MIN(d[i][j], d[i - 2][j - 2] + 1);
		}
	return d[na][nb];
}

/*
 * How far key (n bytes) is from the member name known: 0 when one is the other's start
 * (device, timeout_sec, repeats), else the edit distance (devcie_id), or INT_MAX when the two
 * are not close enough to suggest one for the other.
 */
static int
name_distance(const char *key, size_t n, const char *known)
{
	char a[40], b[40];
	size_t na = name_norm(key, n, a, sizeof(a));
	size_t nb = name_norm(known, strlen(known), b, sizeof(b));
	int d;

	if (na >= 3 && nb >= 3 && strncmp(a, b, na < nb ? na : nb) == 0)
		return 0;
	d = edit_distance(a, b);
	return d <= (nb > 4 ? 2 : 1) ? d : INT_MAX;
}

/* The name of known that key (n bytes) most likely meant, or NULL (json_unknown_name). */
static const char *
name_meant(const char *key, size_t n, const char *const *known, const char *const (*synonyms)[2])
{
	const char *meant = NULL;
	int best = INT_MAX, d;
	unsigned i, j;

	for (i = 0; known[i]; i++)
		if ((d = name_distance(key, n, known[i])) < best)
			best = d, meant = known[i];
	for (i = 0; !meant && synonyms && synonyms[i][0]; i++)
		for (j = 0; known[j] && name_distance(key, n, synonyms[i][0]) != INT_MAX; j++)
			if (strcmp(known[j], synonyms[i][1]) == 0)
				meant = known[j];
	return meant;
}

void
json_unknown_name(char *out, size_t cap, const char *what, const char *name, size_t n,
		  const char *const *known, const char *const (*synonyms)[2])
{
	char shown[64], list[256];
	size_t cut = n < 63 ? n : json_utf8_boundary(name, 60), len = 0;
	const char *meant = name_meant(name, cut, known, synonyms);
	unsigned j;

	name_shown(shown, name, n);
	list[0] = '\0';
	for (j = 0; known[j]; j++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", j ? ", " : "",
					known[j]);
	snprintf(out, cap, "Unknown %s \"%s\"%s%s%s (known %ss: %s)", what, shown,
		 meant ? "; did you mean \"" : "", meant ? meant : "", meant ? "\"?" : "", what,
		 len ? list : "none");
}

int
json_doc_known(struct json_doc *d, const char *const *known)
{
	const struct json_tok *toks = d->toks;
	char key[64];
	unsigned j;
	size_t n;
	int k, m;

	for (k = 1, m = 0; m < (int)toks[0].size; m++, k = (int)toks[k + 1].next) {
		/* decoded once, compared with each known name */
		n = json_str_decode(d->src, &toks[k], key, sizeof(key));
		for (j = 0; known[j] && (n != strlen(known[j]) || memcmp(key, known[j], n)); j++)
			;
		if (known[j])
			continue;
		d->status = 400;
		json_unknown_name(d->why, sizeof(d->why), "field", key, n, known, d->synonyms);
		return -1;
	}
	return 0;
}

int
json_doc_int(struct json_doc *d, const char *key, long long min, long long max, long long *out)
{
	int i = json_doc_field(d, key);
	long long v;

	if (i < 0)
		return 0;
	if (json_tok_int(d->src, &d->toks[i], &v) < 0 || v < min || v > max)
		return doc_fail(d, 400, "%s must be an integer from %lld to %lld", key, min, max);
	*out = v;
	return 0;
}

int
json_doc_str(struct json_doc *d, const char *key, size_t max_chars, char **out)
{
	int i = json_doc_field(d, key), nul;
	size_t chars;
	const char *c;

	*out = NULL;
	if (i < 0)
		return 0;
	if (d->toks[i].type != JSON_STRING)
		return doc_fail(d, 400, "%s must be a string", key);
	if (!(*out = json_str_dup(d->src, &d->toks[i], &nul)))
		return doc_fail(d, 500, "out of memory");
	for (chars = 0, c = *out; *c; c++)
		chars += ((unsigned char)*c & 0xC0) != 0x80; /* not a continuation byte */
	if (nul || chars > max_chars) {
		free(*out);
		*out = NULL;
		return nul ? doc_fail(d, 400, "%s must not contain NUL", key)
			   : doc_fail(d, 400, "%s is longer than %zu characters", key, max_chars);
	}
	return 0;
}

char *
json_str_dup(const char *src, const struct json_tok *t, int *has_nul)
{
	size_t n = json_str_decode(src, t, NULL, 0);
	char *s = malloc(n + 1);

	if (!s)
		return NULL;
	json_str_decode(src, t, s, n);
	s[n] = '\0';
	*has_nul = memchr(s, '\0', n) != NULL;
	return s;
}

/* ------------------------------------------------------------------- writer */

void
json_buf_init(struct json_buf *b)
{
	*b = (struct json_buf){0};
}

void
json_buf_free(struct json_buf *b)
{
	free(b->p);
	json_buf_init(b);
}

int
json_buf_reserve(struct json_buf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (b->oom)
		return -1;
	if (b->cap - b->len >= n)
		return 0;
	while (cap - b->len < n && cap <= SIZE_MAX / 2)
		cap *= 2; /* doubling: amortized O(1) */
	if (cap - b->len < n || (p = realloc(b->p, cap)) == NULL) {
		b->oom = 1;
		return -1;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void
json_buf_add(struct json_buf *b, const void *s, size_t n)
{
	if (n == 0 || json_buf_reserve(b, n) < 0)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void
json_buf_printf(struct json_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	/* vsnprintf needs room for its NUL, which is not kept */
	if (n < 0 || json_buf_reserve(b, (size_t)n + 1) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/*
 * Append the quoted, escaped string s[0..n). Runs of bytes that need no escape (printable
 * ASCII and well-formed UTF-8) are copied with one memcpy each.
 */
static void
put_str(struct json_buf *b, const unsigned char *s, size_t n)
{
	static const char from[] = "\"\\\b\f\n\r\t", to[] = "\"\\bfnrt";
	const char *e;
	size_t i, run = 0;
	unsigned k, need = 1;

	json_buf_reserve(b, n + 2); /* the common case: nothing to escape */
	json_buf_add(b, "\"", 1);
	for (i = 0; i < n; i += k) {
		k = 1;
		if (s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\')
			continue; /* part of the run: printable ASCII */
		if (s[i] >= 0x80 && (k = utf8_prefix(s + i, n - i, &need)) == need)
			continue; /* well-formed UTF-8 */
		json_buf_add(b, s + run, i - run);
		if (s[i] >= 0x80)
			json_buf_add(b, "\xEF\xBF\xBD", 3); /* one U+FFFD per maximal subpart */
		else if ((e = memchr(from, s[i], sizeof(from) - 1))) /* memchr: s[i] may be NUL */
			json_buf_add(b, (const char[2]){'\\', to[e - from]}, 2);
		else
			json_buf_printf(b, "\\u%04x", s[i]);
		k = k > 0 ? k : 1;
		run = i + k;
	}
	if (run < n) /* also keeps s + run from being computed for s == NULL */
		json_buf_add(b, s + run, n - run);
	json_buf_add(b, "\"", 1);
}

void
json_w_init(struct json_w *w, struct json_buf *b)
{
	*w = (struct json_w){.b = b};
}

/* Before every key and value: a comma unless first in its container or right after a key. */
static void
sep(struct json_w *w)
{
	uint64_t bit = (uint64_t)1 << (w->depth & 63);

	if (!w->after_key && (w->need_comma & bit))
		json_buf_add(w->b, ",", 1);
	w->need_comma |= bit; /* after a key: set already, by the key */
	w->after_key = 0;
}

static void
open_container(struct json_w *w, const char *bracket)
{
	sep(w);
	json_buf_add(w->b, bracket, 1);
	assert(w->depth < 63);
	w->depth++;
	w->need_comma &= ~((uint64_t)1 << (w->depth & 63));
}

static void
close_container(struct json_w *w, const char *bracket)
{
	assert(w->depth > 0 && !w->after_key);
	json_buf_add(w->b, bracket, 1);
	w->depth--;
}

void
json_w_obj(struct json_w *w)
{
	open_container(w, "{");
}

void
json_w_obj_end(struct json_w *w)
{
	close_container(w, "}");
}

void
json_w_arr(struct json_w *w)
{
	open_container(w, "[");
}

void
json_w_arr_end(struct json_w *w)
{
	close_container(w, "]");
}

void
json_w_key(struct json_w *w, const char *key)
{
	sep(w);
	put_str(w->b, (const unsigned char *)key, strlen(key));
	json_buf_add(w->b, ":", 1);
	w->after_key = 1;
}

void
json_w_str(struct json_w *w, const char *s, size_t n)
{
	sep(w);
	put_str(w->b, (const unsigned char *)s, n);
}

void
json_w_cstr(struct json_w *w, const char *s)
{
	if (s)
		json_w_str(w, s, strlen(s));
	else
		json_w_null(w);
}

/* Round x to the nearest integer, halves away from zero; |x| < 2^63. No libm needed. */
static long long
round_ll(double x)
{
	long long m = (long long)x; /* truncates toward zero */
	double f = x - (double)m;   /* exact for the magnitudes that have fractions */

	return m + (f >= 0.5) - (f <= -0.5);
}

/*
 * The integer m in decimal, or when milli m thousandths: at most three decimals, trailing zeros
 * dropped, no point when there is no fraction. Digits are written from the end of buf back.
 */
static void
put_number(struct json_w *w, long long m, int milli)
{
	char buf[32], *p = buf + sizeof buf;
	/* the magnitude in unsigned arithmetic, so LLONG_MIN does not overflow */
	unsigned long long a = m < 0 ? 0 - (unsigned long long)m : (unsigned long long)m;
	unsigned frac = milli ? (unsigned)(a % 1000) : 0, nd = milli ? 3 : 0, k;

	for (; nd > 0 && frac % 10 == 0; nd--)
		frac /= 10; /* trailing zeros dropped */
	for (k = 0; k < nd; k++, frac /= 10)
		*--p = (char)('0' + frac % 10); /* the leading zeros of 1.05 kept */
	if (nd > 0)
		*--p = '.';
	a = milli ? a / 1000 : a;
	do
		*--p = (char)('0' + a % 10);
	while (a /= 10);
	if (m < 0)
		*--p = '-'; /* m == 0 prints "0", never "-0" */
	sep(w);
	json_buf_add(w->b, p, (size_t)(buf + sizeof buf - p));
}

void
json_w_int(struct json_w *w, long long v)
{
	put_number(w, v, 0);
}

void
json_w_num(struct json_w *w, double v)
{
	if (!isfinite(v)) {
		json_w_null(w);
	} else if (v >= 9e15 || v <= -9e15) {
		/* every double this large is an integer; %.0f has no decimal point to localize */
		sep(w);
		json_buf_printf(w->b, "%.0f", v);
	} else {
		put_number(w, round_ll(v * 1000), 1); /* thousandths; |m| < 9e18 fits */
	}
}

void
json_w_bool(struct json_w *w, int v)
{
	sep(w);
	json_buf_add(w->b, v ? "true" : "false", v ? 4 : 5);
}

void
json_w_null(struct json_w *w)
{
	sep(w);
	json_buf_add(w->b, "null", 4);
}

void
json_w_raw(struct json_w *w, const char *json, size_t n)
{
	sep(w);
	json_buf_add(w->b, json, n);
}
