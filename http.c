/*
 * http.c - HTTP/1.1 heads: request and response parsers, the query reader, the head writer.
 *
 * Parsers (http_parse_request, http_parse_response):
 * - Stateless: every call scans buf from its first byte, once, left to right, and never reads
 *   at or past buf + min(len, HTTP_MAX_HEAD). All reads go through a cursor whose `end` is
 *   that bound, and every loop tests `p < end` before dereferencing.
 * - Running out of bytes is never an error by itself: a helper that reaches `end` returns 0
 *   (need more); only bytes actually seen can make a head malformed. So every prefix of a
 *   valid head yields 0, and every prefix of a malformed one yields 0 or the same error.
 * - Errors are detected as soon as the bytes in hand prove them (a bad byte, a complete bad
 *   line, a bad header field as soon as its CRLF is seen); only "HTTP/1.1 without Host" waits
 *   for the blank line. Errors are -status with a static message.
 * - Views point into buf; nothing is allocated, nothing is written outside the result struct.
 * - Leading empty lines (CRLF) before a request line are skipped (RFC 9112 2.2) and counted
 *   in the returned length and against HTTP_MAX_HEAD.
 */
#include <limits.h>
#include <string.h>

#include "http.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Reason phrases indexed by status (RFC 9110 15). */
static const char *const reasons[] = {
    [HTTP_CONTINUE] = "Continue",
    [HTTP_OK] = "OK",
    [HTTP_BAD_REQUEST] = "Bad Request",
    [HTTP_NOT_FOUND] = "Not Found",
    [HTTP_METHOD_NOT_ALLOWED] = "Method Not Allowed",
    [HTTP_REQUEST_TIMEOUT] = "Request Timeout",
    [HTTP_CONFLICT] = "Conflict",
    [HTTP_LENGTH_REQUIRED] = "Length Required",
    [HTTP_PAYLOAD_TOO_LARGE] = "Content Too Large",
    [HTTP_EXPECTATION_FAILED] = "Expectation Failed",
    [HTTP_HEADER_FIELDS_TOO_LARGE] = "Request Header Fields Too Large",
    [HTTP_INTERNAL_SERVER_ERROR] = "Internal Server Error",
    [HTTP_NOT_IMPLEMENTED] = "Not Implemented",
    [HTTP_BAD_GATEWAY] = "Bad Gateway",
    [HTTP_SERVICE_UNAVAILABLE] = "Service Unavailable",
    [HTTP_VERSION_NOT_SUPPORTED] = "HTTP Version Not Supported",
};

/* tchar (RFC 9110 5.6.2): "!#$%&'*+-.^_`|~", DIGIT, ALPHA. Bytes >= 0x80 are not tchar. */
/* clang-format off */
static const unsigned char tchar_map[128] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
	0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0,
};
/* clang-format on */

/*
 * Bytes of the head not yet read: [p, end), end never beyond buf + HTTP_MAX_HEAD; where a
 * failure's message goes; and whose head it is, for the messages.
 */
struct cursor {
	const char *p;
	const char *end;
	const char **error;
	bool response;
};

/* What the fields seen so far say, applied to *req when the head is complete. */
struct fields {
	long long content_length; /* -1 until a Content-Length is seen */
	int hosts;
	bool close;           /* Connection: close */
	bool keep_alive;      /* Connection: keep-alive */
	bool expect_continue; /* Expect: 100-continue */
};

const char *
http_reason(int status)
{
	if (status < 0 || (size_t)status >= NELEM(reasons) || !reasons[status])
		return "Unknown";
	return reasons[status];
}

/* Byte classes take plain char and look at it as unsigned: bytes >= 0x80 are never tokens. */
static bool
is_tchar(char c)
{
	unsigned char u = (unsigned char)c;

	return u < 128 && tchar_map[u];
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char
lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

/* ASCII case-insensitive equality of a view and a NUL-terminated string. */
static bool
ieq(const char *a, size_t alen, const char *b)
{
	size_t i;

	for (i = 0; i < alen; i++)
		if (b[i] == '\0' || lower(a[i]) != lower(b[i]))
			return false;
	return b[alen] == '\0';
}

static int
fail(struct cursor *c, int status, const char *msg)
{
	*c->error = msg;
	return -status;
}

static const char *
msg_bare_lf(const struct cursor *c)
{
	return c->response ? "bare LF in response head (lines must end in CRLF)"
	                   : "bare LF in request head (lines must end in CRLF)";
}

/* At a CR: consume CRLF (RFC 9112 2.2: a CR not followed by LF is invalid). */
static int
parse_crlf(struct cursor *c)
{
	if (c->end - c->p < 2)
		return 0;
	if (c->p[1] != '\n')
		return fail(c, HTTP_BAD_REQUEST,
		            c->response ? "bare CR in response head" : "bare CR in request head");
	c->p += 2;
	return 1;
}

/* RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request line. */
static int
skip_empty_lines(struct cursor *c)
{
	int rc;

	while (c->p < c->end && *c->p == '\r')
		if ((rc = parse_crlf(c)) <= 0)
			return rc;
	if (c->p < c->end && *c->p == '\n')
		return fail(c, HTTP_BAD_REQUEST, msg_bare_lf(c));
	return 1;
}

/* method = token, then exactly one SP (RFC 9112 3). */
static int
parse_method(struct cursor *c, struct http_request *req)
{
	const char *s = c->p;

	while (c->p < c->end && is_tchar(*c->p))
		c->p++;
	if (c->p == c->end)
		return 0;
	if (*c->p != ' ' || c->p == s)
		return fail(c, HTTP_BAD_REQUEST, "invalid method");
	req->method = s;
	req->method_len = (size_t)(c->p - s);
	c->p++;
	return 1;
}

/* origin-form target (RFC 9112 3.2.1): '/' then visible ASCII up to SP; split at first '?'. */
static int
parse_target(struct cursor *c, struct http_request *req)
{
	const char *s = c->p, *q = NULL;

	if (c->p == c->end)
		return 0;
	if (*c->p != '/')
		return fail(c, HTTP_BAD_REQUEST, "request target must start with '/'");
	for (; c->p < c->end && *c->p != ' '; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if (ch < 0x21 || ch > 0x7e)
			return fail(c, HTTP_BAD_REQUEST, "invalid byte in request target");
		if (ch == '?' && !q)
			q = c->p;
	}
	if (c->p == c->end)
		return 0;
	req->path = s;
	req->path_len = (size_t)((q ? q : c->p) - s);
	req->query = q ? q + 1 : c->p;
	req->query_len = (size_t)(c->p - req->query);
	c->p++;
	return 1;
}

/*
 * HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3). Sets the two digits.
 * Nothing after it is read.
 */
static int
parse_http_version(struct cursor *c, int *major, int *minor)
{
	static const char pat[] = "HTTP/d.d";
	size_t i;

	for (i = 0; i < sizeof(pat) - 1; i++, c->p++) {
		if (c->p == c->end)
			return 0;
		if (pat[i] == 'd' ? !is_digit(*c->p) : *c->p != pat[i])
			return fail(c, HTTP_BAD_REQUEST, "invalid HTTP version");
	}
	*major = c->p[-3] - '0';
	*minor = c->p[-1] - '0';
	return 1;
}

/*
 * The request line's version, then CRLF. A later minor version of 1 is processed as 1.1, the
 * highest we conform to (RFC 9110 2.5).
 */
static int
parse_version(struct cursor *c, struct http_request *req)
{
	int major, rc;

	if ((rc = parse_http_version(c, &major, &req->minor_version)) <= 0)
		return rc;
	if (c->p == c->end)
		return 0;
	if (*c->p == '\n')
		return fail(c, HTTP_BAD_REQUEST, msg_bare_lf(c));
	if (*c->p != '\r')
		return fail(c, HTTP_BAD_REQUEST, "invalid HTTP version");
	if ((rc = parse_crlf(c)) <= 0)
		return rc;
	if (major != 1)
		return fail(c, HTTP_VERSION_NOT_SUPPORTED, "only HTTP/1.x is supported");
	if (req->minor_version > 1)
		req->minor_version = 1;
	return 1;
}

/* request-line = method SP request-target SP HTTP-version CRLF (RFC 9112 3). */
static int
parse_request_line(struct cursor *c, struct http_request *req)
{
	int rc;

	if ((rc = parse_method(c, req)) <= 0)
		return rc;
	if ((rc = parse_target(c, req)) <= 0)
		return rc;
	return parse_version(c, req);
}

/* field-name = token, then ':' with no whitespace before it (RFC 9112 5.1). */
static int
parse_field_name(struct cursor *c, struct http_header *h)
{
	const char *s = c->p;

	while (c->p < c->end && is_tchar(*c->p))
		c->p++;
	if (c->p == c->end)
		return 0;
	if (*c->p == ' ' || *c->p == '\t')
		return fail(c, HTTP_BAD_REQUEST, "whitespace before colon in header field");
	if (*c->p != ':')
		return fail(c, HTTP_BAD_REQUEST, "invalid header field name");
	if (c->p == s)
		return fail(c, HTTP_BAD_REQUEST, "empty header field name");
	h->name = s;
	h->name_len = (size_t)(c->p - s);
	c->p++;
	return 1;
}

/*
 * OWS field-value OWS CRLF (RFC 9110 5.5, RFC 9112 5): value bytes are VCHAR, SP, HTAB or
 * obs-text (0x80-0xFF); NUL, DEL and other controls are rejected. The view excludes the OWS.
 */
static int
parse_field_value(struct cursor *c, struct http_header *h)
{
	const char *s, *last;
	int rc;

	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	s = last = c->p;
	for (; c->p < c->end && *c->p != '\r'; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if (ch == ' ' || ch == '\t')
			continue;
		if (ch < 0x20 || ch == 0x7f)
			return fail(c, HTTP_BAD_REQUEST,
			            ch == '\n' ? msg_bare_lf(c) : "invalid byte in header field value");
		last = c->p + 1;
	}
	if (c->p == c->end)
		return 0;
	if ((rc = parse_crlf(c)) <= 0)
		return rc;
	h->value = s;
	h->value_len = (size_t)(last - s);
	return 1;
}

/* Content-Length = 1*DIGIT (RFC 9110 8.6); repeats must agree. Over 18 digits cannot fit. */
static int
parse_content_length(struct cursor *c, const struct http_header *h, struct fields *f)
{
	unsigned long long n;
	size_t i = 0;

	while (i < h->value_len && is_digit(h->value[i]))
		i++;
	if (i == 0 || i < h->value_len)
		return fail(c, HTTP_BAD_REQUEST, "invalid Content-Length");
	if (i > 18 || http_parse_uint(h->value, i, ULLONG_MAX, &n) < 0)
		return fail(c, HTTP_PAYLOAD_TOO_LARGE, "Content-Length too large");
	if (f->content_length >= 0 && f->content_length != (long long)n)
		return fail(c, HTTP_BAD_REQUEST, "conflicting Content-Length headers");
	f->content_length = (long long)n;
	return 1;
}

/*
 * Next element of a #list (RFC 9110 5.6.1) in [*p, end): OWS trimmed, empty elements skipped.
 * Returns false when there is none left.
 */
static bool
next_element(const char **p, const char *end, const char **e, size_t *elen)
{
	const char *s, *t;

	while (*p < end && (**p == ' ' || **p == '\t' || **p == ','))
		(*p)++;
	if (*p == end)
		return false;
	s = *p;
	while (*p < end && **p != ',')
		(*p)++;
	for (t = *p; t[-1] == ' ' || t[-1] == '\t'; t--)
		; /* stops above s: *s is neither SP nor HTAB */
	*e = s;
	*elen = (size_t)(t - s);
	return true;
}

/* Connection = #token (RFC 9110 7.6.1), options case-insensitive. */
static int
parse_connection(struct cursor *c, const struct http_header *h, struct fields *f)
{
	const char *p = h->value, *end = h->value + h->value_len, *e;
	size_t n, i;

	while (next_element(&p, end, &e, &n)) {
		for (i = 0; i < n; i++)
			if (!is_tchar(e[i]))
				return fail(c, HTTP_BAD_REQUEST, "invalid Connection header");
		if (ieq(e, n, "close"))
			f->close = true;
		else if (ieq(e, n, "keep-alive"))
			f->keep_alive = true;
	}
	return 1;
}

/* Expect = #expectation; 100-continue is the only one defined (RFC 9110 10.1.1). */
static int
parse_expect(struct cursor *c, const struct http_header *h, struct fields *f)
{
	const char *p = h->value, *end = h->value + h->value_len, *e;
	size_t n;

	while (next_element(&p, end, &e, &n)) {
		if (!ieq(e, n, "100-continue"))
			return fail(c, HTTP_EXPECTATION_FAILED, "unsupported expectation");
		f->expect_continue = true;
	}
	return 1;
}

/*
 * The header fields whose meaning this parser enforces; the rest are the caller's. Host and
 * Expect mean something in a request only.
 */
static int
apply_field(struct cursor *c, const struct http_header *h, struct fields *f)
{
	if (ieq(h->name, h->name_len, "Content-Length"))
		return parse_content_length(c, h, f);
	if (ieq(h->name, h->name_len, "Transfer-Encoding"))
		return fail(c, HTTP_LENGTH_REQUIRED,
		            c->response ? "Transfer-Encoding is not supported"
		                        : "Transfer-Encoding is not supported; send Content-Length");
	if (ieq(h->name, h->name_len, "Connection"))
		return parse_connection(c, h, f);
	if (c->response)
		return 1;
	if (ieq(h->name, h->name_len, "Host") && ++f->hosts > 1)
		return fail(c, HTTP_BAD_REQUEST, "more than one Host header"); /* RFC 9112 3.2 */
	if (ieq(h->name, h->name_len, "Expect"))
		return parse_expect(c, h, f);
	return 1;
}

/* *( field-line CRLF ) CRLF (RFC 9112 2.1, 5) into hs[*n..]. Returns 1 after the blank line. */
static int
parse_fields(struct cursor *c, struct http_header *hs, size_t *n, struct fields *f)
{
	struct http_header *h;
	int rc;

	for (;;) {
		if (c->p == c->end)
			return 0;
		if (*c->p == '\r')
			return parse_crlf(c);
		if (*c->p == '\n')
			return fail(c, HTTP_BAD_REQUEST, msg_bare_lf(c));
		if (*c->p == ' ' || *c->p == '\t') /* obs-fold, or whitespace after the start line */
			return fail(c, HTTP_BAD_REQUEST, "header line folding is not allowed");
		if (*n == HTTP_MAX_HEADERS)
			return fail(c, HTTP_HEADER_FIELDS_TOO_LARGE, "too many header fields");
		h = &hs[*n];
		if ((rc = parse_field_name(c, h)) <= 0)
			return rc;
		if ((rc = parse_field_value(c, h)) <= 0)
			return rc;
		++*n;
		if ((rc = apply_field(c, h, f)) < 0)
			return rc;
	}
}

/* Whether the connection persists after this message (RFC 9112 9.3). */
static bool
persists(int minor_version, const struct fields *f)
{
	return minor_version >= 1 ? !f->close : f->keep_alive && !f->close;
}

/* Checks that need the whole head, and the connection's fate. */
static int
finish_request(struct cursor *c, struct http_request *req, const struct fields *f)
{
	if (req->minor_version == 1 && f->hosts == 0)
		return fail(c, HTTP_BAD_REQUEST, "missing Host header"); /* RFC 9112 3.2 */
	req->content_length = f->content_length;
	req->keep_alive = persists(req->minor_version, f);
	/* RFC 9110 10.1.1: ignore it from HTTP/1.0 */
	req->expect_continue = req->minor_version == 1 && f->expect_continue;
	return 1;
}

static void
reset_request(struct http_request *req)
{
	req->method = req->path = req->query = NULL;
	req->method_len = req->path_len = req->query_len = 0;
	req->minor_version = 0;
	req->num_headers = 0;
	req->content_length = -1;
	req->keep_alive = false;
	req->expect_continue = false;
	req->error = NULL;
}

/* A cursor over buf[0..min(len, HTTP_MAX_HEAD)) whose failures go to *error. */
static struct cursor
cursor_at(const char *buf, size_t len, const char **error, bool response)
{
	struct cursor c = {buf, buf + (len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD), error, response};

	return c;
}

int
http_parse_request(const char *buf, size_t len, struct http_request *req)
{
	struct fields f = {-1, 0, false, false, false};
	struct cursor c;
	int rc;

	reset_request(req);
	if (len == 0)
		return 0;
	c = cursor_at(buf, len, &req->error, false);
	if ((rc = skip_empty_lines(&c)) <= 0 || (rc = parse_request_line(&c, req)) <= 0 ||
	    (rc = parse_fields(&c, req->headers, &req->num_headers, &f)) <= 0) {
		/* out of bytes: more may come, unless the window is already full (431) */
		if (rc == 0 && len >= HTTP_MAX_HEAD)
			return fail(&c, HTTP_HEADER_FIELDS_TOO_LARGE, "request head too large");
		return rc;
	}
	if ((rc = finish_request(&c, req, &f)) < 0)
		return rc;
	return (int)(c.p - buf);
}

/*
 * status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF (RFC 9112 4); a line
 * that ends right after the status code is taken too, as most clients do.
 */
static int
parse_status_line(struct cursor *c, struct http_response *res)
{
	int major, i, rc;

	if ((rc = parse_http_version(c, &major, &res->minor_version)) <= 0)
		return rc;
	if (major != 1)
		return fail(c, HTTP_BAD_GATEWAY, "not HTTP/1.x");
	for (i = 0; i < 4; i++, c->p++) {
		if (c->p == c->end)
			return 0;
		if (i == 0 ? *c->p != ' ' : !is_digit(*c->p))
			return fail(c, HTTP_BAD_GATEWAY, "invalid status line");
		if (i > 0)
			res->status = res->status * 10 + (*c->p - '0');
	}
	if (res->status < 100 || res->status > 599) /* RFC 9110 15 */
		return fail(c, HTTP_BAD_GATEWAY, "invalid status code");
	if (c->p == c->end)
		return 0;
	if (*c->p == ' ')
		c->p++;
	else if (*c->p != '\r')
		return fail(c, HTTP_BAD_GATEWAY, "invalid status line");
	res->reason = c->p;
	for (; c->p < c->end && *c->p != '\r'; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return fail(c, HTTP_BAD_GATEWAY,
			            ch == '\n' ? msg_bare_lf(c) : "invalid byte in reason phrase");
	}
	if (c->p == c->end)
		return 0;
	res->reason_len = (size_t)(c->p - res->reason);
	return parse_crlf(c);
}

static void
reset_response(struct http_response *res)
{
	res->minor_version = 0;
	res->status = 0;
	res->reason = NULL;
	res->reason_len = 0;
	res->num_headers = 0;
	res->content_length = -1;
	res->keep_alive = false;
	res->error = NULL;
}

int
http_parse_response(const char *buf, size_t len, struct http_response *res)
{
	struct fields f = {-1, 0, false, false, false};
	struct cursor c;
	int rc;

	reset_response(res);
	if (len == 0)
		return 0;
	c = cursor_at(buf, len, &res->error, true);
	if ((rc = parse_status_line(&c, res)) <= 0 ||
	    (rc = parse_fields(&c, res->headers, &res->num_headers, &f)) <= 0) {
		if (rc == 0 && len >= HTTP_MAX_HEAD)
			rc = fail(&c, HTTP_BAD_GATEWAY, "response head too large");
		return rc < 0 ? -HTTP_BAD_GATEWAY : rc;
	}
	res->content_length = f.content_length;
	res->keep_alive = persists(res->minor_version, &f);
	return (int)(c.p - buf);
}

const struct http_header *
http_header_get(const struct http_request *req, const char *name)
{
	size_t i;

	for (i = 0; i < req->num_headers; i++)
		if (ieq(req->headers[i].name, req->headers[i].name_len, name))
			return &req->headers[i];
	return NULL;
}

int
http_parse_uint(const char *s, size_t n, unsigned long long max, unsigned long long *out)
{
	unsigned long long v = 0;
	size_t i;

	if (n == 0 || n > 19) /* 19 digits cannot overflow 64 bits */
		return -1;
	for (i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

int
http_query_uint(const char *query, size_t query_len, const char *name, unsigned long long max,
                unsigned long long *out)
{
	const char *p = query, *end, *amp, *eq, *pe, *val = NULL;
	size_t nlen = strlen(name), vlen = 0;

	if (query_len == 0)
		return 0;
	for (end = query + query_len; p < end; p = amp ? amp + 1 : end) {
		amp = memchr(p, '&', (size_t)(end - p));
		pe = amp ? amp : end;
		eq = memchr(p, '=', (size_t)(pe - p));
		if (p == pe || (size_t)((eq ? eq : pe) - p) != nlen || memcmp(p, name, nlen) != 0)
			continue;
		if (val)
			return -1; /* the same name twice is ambiguous */
		val = eq ? eq + 1 : pe;
		vlen = (size_t)(pe - val);
	}
	if (!val)
		return 0;
	return http_parse_uint(val, vlen, max, out) < 0 ? -1 : 1;
}

/* Appends to out[0..cap); `len` keeps counting past cap so overflow is seen once at the end. */
struct out {
	char *buf;
	size_t cap;
	size_t len;
};

static void
put(struct out *o, const char *s, size_t n)
{
	if (o->len <= o->cap && n <= o->cap - o->len)
		memcpy(o->buf + o->len, s, n);
	o->len += n;
}

static void
put_str(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void
put_uint(struct out *o, unsigned long long v)
{
	char d[20];
	size_t i = sizeof(d);

	do
		d[--i] = (char)('0' + v % 10);
	while (v /= 10);
	put(o, d + i, sizeof(d) - i);
}

/* Status lines are always HTTP/1.1 (RFC 9110 6.2); a status outside 100..999 gives 0. */
size_t
http_format_head(char *out, size_t cap, int status, const char *content_type, size_t content_length,
                 bool keep_alive, int minor_version, const char *extra)
{
	struct out o = {out, cap, 0};

	if (status < 100 || status > 999)
		return 0;
	put_str(&o, "HTTP/1.1 ");
	put_uint(&o, (unsigned)status);
	put_str(&o, " ");
	put_str(&o, http_reason(status));
	put_str(&o, "\r\n");
	if (content_type) {
		put_str(&o, "Content-Type: ");
		put_str(&o, content_type);
		put_str(&o, "\r\n");
	}
	put_str(&o, "Content-Length: ");
	put_uint(&o, content_length);
	put_str(&o, "\r\nCache-Control: no-store\r\n");
	if (!keep_alive)
		put_str(&o, "Connection: close\r\n");
	else if (minor_version == 0)
		put_str(&o, "Connection: keep-alive\r\n");
	if (extra)
		put_str(&o, extra);
	put_str(&o, "\r\n");
	return o.len <= cap ? o.len : 0;
}
