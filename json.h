/*
 * json.h - a strict RFC 8259 reader, the checks of a request body's members, and a writer
 * that always emits valid UTF-8.
 *
 * Reader: a jsmn-style tokenizer. json_parse() fills a caller-owned array of tokens whose
 * offsets point into the caller's source buffer; it allocates only while it checks an object's
 * keys and keeps no state between calls. Tokens are in document order (pre-order); each token's `next` is the index of
 * the token after its whole subtree, so a consumer skips any value in O(1). An object's members
 * are a key token (JSON_STRING) followed by the value's subtree.
 *
 * Strictness (RFC 8259, no extensions): exactly one value with optional surrounding whitespace; no
 * trailing garbage, no comments, no NaN/Infinity, no leading zeros, no raw control characters
 * in strings, only the escapes of RFC 8259 section 7, surrogate escapes only as proper pairs,
 * input strings must be valid UTF-8, duplicate keys within one object are malformed (compared
 * after decoding escapes), nesting deeper than JSON_MAX_DEPTH is malformed.
 *
 * Writer: appends to a growable buffer (struct json_buf). Strings are escaped per RFC 8259;
 * bytes that are not valid UTF-8 become U+FFFD, so the output is always valid UTF-8 whatever
 * the input (job output, commands, paths). Allocation failure sets buf->oom and later appends
 * become no-ops, so a caller checks once at the end.
 */
#ifndef TTQ_JSON_H
#define TTQ_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

enum json_type {
	JSON_NONE = 0,
	JSON_OBJECT,
	JSON_ARRAY,
	JSON_STRING,
	JSON_NUMBER,
	JSON_TRUE,
	JSON_FALSE,
	JSON_NULL,
};

struct json_tok {
	uint8_t type;   /* enum json_type */
	uint32_t start; /* byte offset of the value; strings: first byte after the quote */
	uint32_t end;   /* byte offset one past the value; strings: the closing quote */
	uint32_t size;  /* object: member count; array: element count; else 0 */
	uint32_t next;  /* index of the first token after this value's subtree */
};

/*
 * Tokenize src[0..len) (len < 4 GiB) into toks[0..cap).
 * Returns the number of tokens used (>= 1; toks[0] is the root), -1 when the text is not
 * strict JSON or memory for checking an object's keys ran out (err gets a short human message
 * with the byte offset, always NUL-terminated when errlen > 0), or -2 when the document needs
 * more than cap tokens (err says so).
 * Never reads outside src[0..len); src need not be NUL-terminated. RFC 8259.
 */
int json_parse(const char *src, size_t len, struct json_tok *toks, unsigned cap, char *err,
	       size_t errlen);

/*
 * Look up `key` (a NUL-terminated UTF-8 string) among the members of the object at toks[obj].
 * Returns the index of the member's value token, or -1 when absent or when toks[obj] is not an
 * object. Keys are compared after decoding escapes. O(members).
 */
int json_obj_get(const char *src, const struct json_tok *toks, int obj, const char *key);

/*
 * Decode the string token t (escapes resolved, UTF-8 out) into out[0..cap).
 * Returns the full decoded length in bytes, which may exceed cap (then only cap bytes were
 * written, like snprintf without the NUL). No NUL terminator is added; the decoded text may
 * itself contain NUL (from \u0000), so callers that need C strings must check with memchr.
 * Returns 0 for a token that is not a string.
 */
size_t json_str_decode(const char *src, const struct json_tok *t, char *out, size_t cap);

/*
 * Read the number token t as an integer. Returns 0 and sets *out when t is a JSON number
 * without fraction or exponent that fits in long long; -1 otherwise (1.5, 1e3,
 * true, "3", overflow).
 */
int json_tok_int(const char *src, const struct json_tok *t, long long *out);

/*
 * Length of the longest prefix of s[0..n) that does not end inside a UTF-8 sequence which is
 * valid so far but incomplete (used to end /logs chunks on a character boundary).
 * Invalid bytes are not backed over (they become U+FFFD when written). When backing off would
 * leave nothing (n shorter than one character), returns n so a reader always advances.
 */
size_t json_utf8_boundary(const char *s, size_t n);

/*
 * Length of the longest prefix of s[0..n) that is well-formed UTF-8 (Unicode table 3-7): n when
 * all of it is. What a JSON text may carry (RFC 8259 section 8.1), so a client refuses
 * rather than send U+FFFD in place of its bytes.
 */
size_t json_utf8_valid(const char *s, size_t n);

/*
 * Length in bytes of the control character that starts s[0..n) (n >= 1): 1 for C0 (NUL
 * included) and DEL, 2 for a C1 control encoded in UTF-8 (U+0080..U+009F, e.g. U+009B CSI),
 * 3 (2 for U+061C) for a bidirectional formatting character (U+200E, U+200F, U+202A..U+202E,
 * U+2066..U+2069), 0 when s starts with anything else. What must not reach a log line or a
 * terminal as is.
 */
size_t json_control_len(const char *s, size_t n);

/* ------------------------------------------------------------------------ request bodies */

/*
 * A request body checked member by member, each failed check saying in one sentence what the
 * client got wrong: an unknown member and the known one it is close to, a type, a limit. The
 * text and its tokens are the caller's (not owned); toks[0] is the root object once
 * json_doc_parse succeeded. A member whose value is null counts as absent.
 */
struct json_doc {
	const char *src;
	struct json_tok *toks;
	const char *const (*synonyms)[2]; /* words no misspelling of the member they mean, as
					     {word, member} pairs ending in {NULL}; NULL for none */
	int status;    /* of the last failed check: 400, or 500 when memory ran out */
	char why[512]; /* its message, NUL-terminated */
};

/*
 * Tokenize src[0..len) into toks[0..cap) and require an object at the root. 0, or -1 with
 * d->status and d->why set (not JSON, too many values, not an object, or a member given twice:
 * named, as `Field "cmd" is given twice` or, in an object further down, `Member "A" is given
 * twice in field "env"`; control characters in a name shown as '?', a name cut past 60 bytes).
 */
int json_doc_parse(struct json_doc *d, const char *src, size_t len, struct json_tok *toks,
		   unsigned cap);

/* The value token of the root's member key, or -1 when it is absent or null. */
int json_doc_field(const struct json_doc *d, const char *key);

/*
 * Every member of the root must be named in known (NULL-terminated): 0, or -1 with why naming
 * the first unknown member, the known member it most likely meant (as json_unknown_name, with
 * d->synonyms: deviceId, Device-ID, device and devcie_id all mean device_id) and the known
 * list.
 */
int json_doc_known(struct json_doc *d, const char *const *known);

/*
 * Write into out[0..cap) the sentence refusing a `what` ("field", "query parameter") named
 * name (n bytes long; name holds at least its first 63 bytes) that is not in known: it names
 * it (cut past 60 bytes, control characters shown as '?'), the known one it most likely meant
 * and the known list ("none" when empty). Most likely meant: compared without case, '_' and
 * '-', a prefix of one another, a slip of one or two edits, or else the member of a {word,
 * member} pair of synonyms (ending in {NULL}; NULL for none) whose word name is close to.
 */
void json_unknown_name(char *out, size_t cap, const char *what, const char *name, size_t n,
		       const char *const *known, const char *const (*synonyms)[2]);

/* Member key, when present, an integer in [min, max] into *out (else *out is kept). 0 or -1. */
int json_doc_int(struct json_doc *d, const char *key, long long min, long long max,
		 long long *out);

/*
 * Member key, when present, a string of at most max_chars characters without NUL, into *out
 * (heap, the caller frees it); absent leaves *out NULL and returns 0. -1 on a failed check
 * (*out NULL).
 */
int json_doc_str(struct json_doc *d, const char *key, size_t max_chars, char **out);

/*
 * String token t decoded into a fresh heap C string (the caller frees it); *has_nul tells
 * whether the text held a NUL (\u0000), which a C string cannot carry. NULL when out of memory
 * (*has_nul then unset).
 */
char *json_str_dup(const char *src, const struct json_tok *t, int *has_nul);

/* ------------------------------------------------------------------------ writer */

struct json_buf {
	char *p;    /* heap, owned by the buffer; not NUL-terminated */
	size_t len; /* bytes in use */
	size_t cap; /* bytes allocated */
	int oom;    /* set once an allocation failed; appends are then ignored */
};

/* Zero the buffer (no allocation). */
void json_buf_init(struct json_buf *b);
/* Release the buffer's memory and zero it. */
void json_buf_free(struct json_buf *b);
/* Ensure room for n more bytes; returns 0, or -1 (and sets oom) when allocation fails. */
int json_buf_reserve(struct json_buf *b, size_t n);
/* Append n raw bytes (no escaping). */
void json_buf_add(struct json_buf *b, const void *s, size_t n);
/* Append printf-formatted raw text. */
void json_buf_printf(struct json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A writer over a json_buf that inserts the commas and colons. Nesting deeper than 63 levels
 * is a programming error (the output would be wrong; asserts in debug builds).
 */
struct json_w {
	struct json_buf *b;
	unsigned depth;
	uint64_t need_comma; /* bit d set: the container at depth d already holds a value */
	int after_key;       /* the next value follows a key: no comma */
};

/* Start writing values into b (appended after what it holds; b stays the caller's). */
void json_w_init(struct json_w *w, struct json_buf *b);
/* Open ({, [) or close (}, ]) an object or an array, with the comma before it if one is due. */
void json_w_obj(struct json_w *w);
void json_w_obj_end(struct json_w *w);
void json_w_arr(struct json_w *w);
void json_w_arr_end(struct json_w *w);
/* An object key (NUL-terminated); escaped like any string. */
void json_w_key(struct json_w *w, const char *key);
/* A string value from n bytes; invalid UTF-8 becomes U+FFFD; s may contain NUL (\u0000). */
void json_w_str(struct json_w *w, const char *s, size_t n);
/* A string value from a C string, or null when s is NULL. */
void json_w_cstr(struct json_w *w, const char *s);
/* An integer value, in decimal. */
void json_w_int(struct json_w *w, long long v);
/* A number with at most 3 decimals, trailing zeros dropped ("1.5", "2"); NaN/Inf become null. */
void json_w_num(struct json_w *w, double v);
/* true when v is not 0, else false; and null. */
void json_w_bool(struct json_w *w, int v);
void json_w_null(struct json_w *w);
/* Append already-serialized JSON (trusted, e.g. a stored env object) as one value. */
void json_w_raw(struct json_w *w, const char *json, size_t n);

#endif
