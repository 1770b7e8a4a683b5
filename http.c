/*
 * http.c - HTTP/1.1 on the wire: request and response heads, the query reader, the head writer,
 * and the server side of client connections (struct http_conn), accepted on the listening
 * socket within a cap.
 *
 * Parsers (http_parse_request, http_parse_response):
 * - Stateless: every call scans buf from its first byte, once, left to right, and never reads
 *   at or past buf + min(len, HTTP_MAX_HEAD). All reads go through a cursor whose `end` is
 *   that bound, and every loop tests `p < end` before dereferencing.
 * - Running out of bytes is never an error by itself: a helper that reaches `end` returns 0
 *   (need more); only bytes actually seen can make a head malformed. So every prefix of a
 *   valid head yields 0, and every prefix of a malformed one yields 0 or the same error.
 * - Errors are detected as soon as the bytes in hand prove them (a bad byte, a complete bad
 *   line, a bad header field as soon as its CRLF is seen, an absolute-form target's authority
 *   as soon as the target's end is); only "HTTP/1.1 without Host" waits for the blank line.
 *   Errors are -status with a static message.
 * - Views point into buf; nothing is allocated, nothing is written outside the result struct.
 * - Leading empty lines (CRLF) before a request line are skipped (RFC 9112 2.2) and counted
 *   in the returned length and against HTTP_MAX_HEAD.
 *
 * Connections:
 * - No poll and no timers here: a connection tells its owner (callbacks.watch) the poll events
 *   and the one deadline its phase needs, and the owner calls back in (http_conn_event,
 *   http_conn_timeout). Requests go up through callbacks.request; nothing here knows what a
 *   path means.
 * - A connection's phase is one enum (enum http_conn_state) changed only by set_state, whose
 *   table says which change may follow which.
 * - Answers are in order: a connection reads on (pipelining, up to a bound) but parses its next
 *   request only once the answer before it was written whole.
 * - Nothing is written to a socket but by http_server_flush (and a 100 Continue, which answers
 *   nothing): the owner calls it after its commit, so no answer goes out before what it says
 *   is durable, and an answer may still be taken back (http_conn_retract) until then.
 * - A complete request is answered in the turn it is read: nothing bounds the requests in
 *   flight but the connections (max_conns). A client that does not read its answer
 *   holds only its own buffer, until HTTP_WRITE_TIMEOUT; the others go on being served.
 * - The listening socket is a connection too (HTTP_CONN_LISTENING), watched and timed through
 *   the same callbacks: it asks for POLLIN while connections may be accepted (max_conns served,
 *   HTTP_BUSY_SLOTS more only to be answered the busy 503), and for a deadline instead while
 *   accept is out of descriptors, since a readable backlog polled again at once would spin.
 * - A closed connection is only marked (HTTP_CONN_CLOSED) and freed at http_server_sweep, so
 *   pointers held during one turn of the owner's loop stay valid.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "json.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define BARE_LF "bare LF in the head (lines must end in CRLF)"

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
    [HTTP_UNPROCESSABLE_CONTENT] = "Unprocessable Content",
    [HTTP_HEADER_FIELDS_TOO_LARGE] = "Request Header Fields Too Large",
    [HTTP_INTERNAL_SERVER_ERROR] = "Internal Server Error",
    [HTTP_NOT_IMPLEMENTED] = "Not Implemented",
    [HTTP_BAD_GATEWAY] = "Bad Gateway",
    [HTTP_SERVICE_UNAVAILABLE] = "Service Unavailable",
    [HTTP_VERSION_NOT_SUPPORTED] = "HTTP Version Not Supported",
};

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

/* Byte classes take plain char and compare it with ASCII ranges: bytes >= 0x80 are in none. */
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

static bool
is_alnum(char c)
{
	return is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'z');
}

/* tchar (RFC 9110 5.6.2): "!#$%&'*+-.^_`|~", DIGIT, ALPHA. */
static bool
is_tchar(char c)
{
	return is_alnum(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
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

/* At a CR: consume CRLF (RFC 9112 2.2: a CR not followed by LF is invalid). */
static int
parse_crlf(struct cursor *c)
{
	if (c->end - c->p < 2)
		return 0;
	if (c->p[1] != '\n')
		return fail(c, HTTP_BAD_REQUEST, "bare CR in the head");
	c->p += 2;
	return 1;
}

/*
 * The fixed text pat at the cursor, 'd' standing for a DIGIT and letters matching in any case
 * when fold: 1 past it, 0 when the bytes run out first, else -400 with msg.
 */
static int
match(struct cursor *c, const char *pat, bool fold, const char *msg)
{
	for (; *pat; pat++, c->p++) {
		if (c->p == c->end)
			return 0;
		if (*pat == 'd' ? !is_digit(*c->p) : (fold ? lower(*c->p) : *c->p) != *pat)
			return fail(c, HTTP_BAD_REQUEST, msg);
	}
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
		return fail(c, HTTP_BAD_REQUEST, BARE_LF);
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

/* ------------------------------------------------ authorities (RFC 3986 3.2.2-3.2.3) */

#define SUB_DELIMS "!$&'()*+,;=" /* RFC 3986 2.2 */

static bool
is_hex(char c)
{
	return is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'f');
}

/*
 * Whether s[0..n) is all unreserved characters (RFC 3986 2.3), bytes of `more`, and, when pct,
 * pct-encoded triplets ("%" HEXDIG HEXDIG, RFC 3986 2.1).
 */
static bool
uri_chars(const char *s, size_t n, const char *more, bool pct)
{
	size_t i;

	for (i = 0; i < n; i++) {
		char c = s[i];

		if (is_alnum(c) || (c != '\0' && (strchr("-._~", c) || strchr(more, c))))
			continue;
		if (!pct || c != '%' || n - i < 3 || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
			return false;
		i += 2;
	}
	return true;
}

/*
 * What is between an IP-literal's brackets (RFC 3986 3.2.2): IPvFuture ("v" 1*HEXDIG "."
 * 1*( unreserved / sub-delims / ":" )), or IPv6address with an optional zone (RFC 6874: "%25"
 * then the zone; its section 4 asks to take a bare "%" too, which is what a client given
 * "fe80::1%eth0" sends). inet_pton takes the text forms of RFC
 * 4291 2.2, which are RFC 3986's IPv6address; the longest has INET6_ADDRSTRLEN - 1 bytes.
 */
static bool
ip_literal_ok(const char *s, size_t n)
{
	char text[INET6_ADDRSTRLEN];
	struct in6_addr addr;
	const char *zone;
	size_t i = 1;

	if (n > 0 && lower(s[0]) == 'v') {
		while (i < n && is_hex(s[i]))
			i++;
		return i > 1 && i + 1 < n && s[i] == '.' &&
		       uri_chars(s + i + 1, n - i - 1, SUB_DELIMS ":", false);
	}
	if ((zone = memchr(s, '%', n)) &&
	    (zone + 1 == s + n || !uri_chars(zone + 1, (size_t)(s + n - zone - 1), "", true)))
		return false;
	n = zone ? (size_t)(zone - s) : n;
	if (n >= sizeof(text))
		return false;
	memcpy(text, s, n);
	text[n] = '\0';
	return inet_pton(AF_INET6, text, &addr) == 1;
}

/*
 * uri-host [ ":" port ] (RFC 9110 7.2; RFC 3986 3.2.2-3.2.3) at s[0..n): an IP-literal in
 * brackets, or a reg-name (which IPv4address is too; it may be empty), then an optional port
 * of *DIGIT. *host_len gets the host's length.
 */
static bool
host_port_ok(const char *s, size_t n, size_t *host_len)
{
	const char *end = s + n, *h;

	if (n > 0 && s[0] == '[') {
		h = memchr(s, ']', n);
		if (!h || !ip_literal_ok(s + 1, (size_t)(h - s - 1)))
			return false;
		h++;
	} else {
		h = memchr(s, ':', n); /* a reg-name holds no ':' */
		h = h ? h : end;
		if (!uri_chars(s, (size_t)(h - s), SUB_DELIMS, true))
			return false;
	}
	*host_len = (size_t)(h - s);
	if (h < end && *h++ != ':')
		return false;
	while (h < end && is_digit(*h))
		h++;
	return h == end;
}

/*
 * request-target (RFC 9112 3.2), visible ASCII up to SP: origin-form ('/' first), or
 * absolute-form, which is served as its path and query. Its authority (up to '/' or '?') is
 * host [ ":" port ] (RFC 3986 3.2) with no userinfo (RFC 9110 4.2.4: treat it as an error) and
 * not an empty host (RFC 9110 4.2.1: reject the URI as invalid); it wins over Host (RFC 9112
 * 3.2.2), which nothing here reads, so the two are not compared. The path is split at the
 * first '?'; an empty one, which only an absolute-form target has, means "/" (RFC 9110 4.2.3):
 * the view is then a '/' of "://".
 */
static int
parse_target(struct cursor *c, struct http_request *req)
{
	const char *slash = c->p, *s, *t, *q;
	bool absolute;
	size_t host_len;
	int rc;

	if (c->p == c->end)
		return 0;
	/* "http://" in any case (RFC 3986 3.1): not https (this is no TLS connection), not
	 * asterisk-form (OPTIONS *) nor authority-form (CONNECT), which no route takes */
	if ((absolute = *c->p != '/')) {
		rc = match(c, "http://", true, "request target must be a path or an http:// URI");
		if (rc <= 0)
			return rc;
		slash = c->p - 1;
	}
	for (t = c->p; t < c->end && *t != ' '; t++)
		if ((unsigned char)*t < 0x21 || (unsigned char)*t > 0x7e)
			return fail(c, HTTP_BAD_REQUEST, "invalid byte in request target");
	if (t == c->end)
		return 0;
	for (s = c->p; absolute && c->p < t && *c->p != '/' && *c->p != '?'; c->p++)
		; /* the authority */
	if (memchr(s, '@', (size_t)(c->p - s)))
		return fail(c, HTTP_BAD_REQUEST, "userinfo in the request target is not allowed");
	if (absolute && (!host_port_ok(s, (size_t)(c->p - s), &host_len) || host_len == 0))
		return fail(c, HTTP_BAD_REQUEST, "invalid host in the request target");
	q = memchr(c->p, '?', (size_t)(t - c->p));
	req->path = c->p;
	req->path_len = (size_t)((q ? q : t) - c->p);
	if (req->path_len == 0) {
		req->path = slash;
		req->path_len = 1;
	}
	req->query = q ? q + 1 : t;
	req->query_len = (size_t)(t - req->query);
	c->p = t + 1;
	return 1;
}

/*
 * HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3). Sets the two digits.
 * Nothing after it is read.
 */
static int
parse_http_version(struct cursor *c, int *major, int *minor)
{
	int rc = match(c, "HTTP/d.d", false, "invalid HTTP version");

	if (rc > 0) {
		*major = c->p[-3] - '0';
		*minor = c->p[-1] - '0';
	}
	return rc;
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
		return fail(c, HTTP_BAD_REQUEST, BARE_LF);
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
 * The rest of a line, then its CRLF: HTAB, SP, VCHAR or obs-text (0x80-0xFF), what a field
 * value and a reason phrase hold (RFC 9110 5.5, RFC 9112 4); NUL, DEL and other controls are
 * msg. *last is set past the last byte that is neither SP nor HTAB.
 */
static int
parse_line_end(struct cursor *c, const char *msg, const char **last)
{
	for (*last = c->p; c->p < c->end && *c->p != '\r'; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if (ch == ' ' || ch == '\t')
			continue;
		if (ch < 0x20 || ch == 0x7f)
			return fail(c, HTTP_BAD_REQUEST, ch == '\n' ? BARE_LF : msg);
		*last = c->p + 1;
	}
	return c->p == c->end ? 0 : parse_crlf(c);
}

/* OWS field-value OWS CRLF (RFC 9110 5.5, RFC 9112 5): the view excludes the OWS. */
static int
parse_field_value(struct cursor *c, struct http_header *h)
{
	const char *s, *last;
	int rc;

	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	s = c->p;
	if ((rc = parse_line_end(c, "invalid byte in header field value", &last)) <= 0)
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
 * Host = uri-host [ ":" port ] (RFC 9110 7.2), possibly empty; one only. RFC 9112 3.2: a
 * server MUST answer 400 to more than one Host line or an invalid value.
 */
static int
parse_host(struct cursor *c, const struct http_header *h, struct fields *f)
{
	size_t host_len;

	if (++f->hosts > 1)
		return fail(c, HTTP_BAD_REQUEST, "more than one Host header");
	if (!host_port_ok(h->value, h->value_len, &host_len))
		return fail(c, HTTP_BAD_REQUEST, "invalid Host header");
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
		return fail(c, HTTP_LENGTH_REQUIRED, "Transfer-Encoding is not supported: a body "
						     "needs Content-Length");
	if (ieq(h->name, h->name_len, "Connection"))
		return parse_connection(c, h, f);
	if (c->response)
		return 1;
	if (ieq(h->name, h->name_len, "Host"))
		return parse_host(c, h, f);
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
			return fail(c, HTTP_BAD_REQUEST, BARE_LF);
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

int
http_parse_request(const char *buf, size_t len, struct http_request *req)
{
	struct fields f = {-1, 0, false, false, false};
	struct cursor c;
	int rc;

	*req = (struct http_request){.content_length = -1};
	if (len == 0)
		return 0;
	/* nothing at or past HTTP_MAX_HEAD is read */
	c = (struct cursor){buf, buf + (len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD), &req->error,
			    false};
	/* request-line = method SP request-target SP HTTP-version CRLF (RFC 9112 3), fields */
	if ((rc = skip_empty_lines(&c)) <= 0 || (rc = parse_method(&c, req)) <= 0 ||
	    (rc = parse_target(&c, req)) <= 0 || (rc = parse_version(&c, req)) <= 0 ||
	    (rc = parse_fields(&c, req->headers, &req->num_headers, &f)) <= 0) {
		/* out of bytes: more may come, unless the window is already full (431) */
		if (rc == 0 && len >= HTTP_MAX_HEAD)
			return fail(&c, HTTP_HEADER_FIELDS_TOO_LARGE, "request head too large");
		return rc;
	}
	if (req->minor_version == 1 && f.hosts == 0)
		return fail(&c, HTTP_BAD_REQUEST, "missing Host header"); /* RFC 9112 3.2 */
	req->content_length = f.content_length;
	req->keep_alive = persists(req->minor_version, &f);
	/* RFC 9110 10.1.1: ignore it from HTTP/1.0 */
	req->expect_continue = req->minor_version == 1 && f.expect_continue;
	return (int)(c.p - buf);
}

/*
 * status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF (RFC 9112 4); a line
 * that ends right after the status code is taken too, as most clients do.
 */
static int
parse_status_line(struct cursor *c, struct http_response *res)
{
	const char *last;
	int major, rc;

	if ((rc = parse_http_version(c, &major, &res->minor_version)) <= 0)
		return rc;
	if (major != 1)
		return fail(c, HTTP_BAD_GATEWAY, "not HTTP/1.x");
	if ((rc = match(c, " ddd", false, "invalid status line")) <= 0)
		return rc;
	res->status = (c->p[-3] - '0') * 100 + (c->p[-2] - '0') * 10 + (c->p[-1] - '0');
	if (res->status < 100 || res->status > 599) /* RFC 9110 15 */
		return fail(c, HTTP_BAD_GATEWAY, "invalid status code");
	if (c->p == c->end)
		return 0;
	if (*c->p == ' ')
		c->p++;
	else if (*c->p != '\r')
		return fail(c, HTTP_BAD_GATEWAY, "invalid status line");
	return parse_line_end(c, "invalid byte in reason phrase", &last);
}

int
http_parse_response(const char *buf, size_t len, struct http_response *res)
{
	struct fields f = {-1, 0, false, false, false};
	struct cursor c;
	int rc;

	*res = (struct http_response){.content_length = -1};
	if (len == 0)
		return 0;
	c = (struct cursor){buf, buf + (len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD), &res->error,
			    true};
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

/* Status lines are always HTTP/1.1 (RFC 9110 6.2). */
size_t
http_format_head(char *out, size_t cap, int status, const char *content_type, size_t content_length,
                 bool keep_alive, int minor_version, const char *extra)
{
	const char *conn = !keep_alive ? "Connection: close\r\n"
			   : minor_version == 0 ? "Connection: keep-alive\r\n" : "";
	int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\n%s%s%sContent-Length: %zu\r\n"
			 "Cache-Control: no-store\r\n%s%s\r\n", status, http_reason(status),
			 content_type ? "Content-Type: " : "", content_type ? content_type : "",
			 content_type ? "\r\n" : "", content_length, conn, extra ? extra : "");
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* ------------------------------------------------------------------------ connections */

#define IN_SLACK 65536 /* bytes read beyond a maximal request, so pipelining is not throttled */
#define OUT_KEEP 65536 /* an output buffer bigger than this is freed once written */
#define ACCEPT_RETRY 0.25 /* s the listener rests after accept ran out of descriptors */

struct http_conn {
	struct http_server *srv;
	void *owner;
	int fd;
	enum http_conn_state state;
	struct json_buf in;   /* request bytes: the one being read, then pipelined ones */
	struct json_buf out;  /* the answer, written from out_off on */
	size_t out_off;
	double deadline;      /* monotonic s, 0 for none: what this state waits for at most */
	bool keep_alive;      /* of the request being answered */
	int minor;            /* its HTTP minor version */
	bool continue_sent;   /* 100 Continue already sent for it */
	bool peer_eof;        /* the client closed its side (half-close): nothing more comes */
	bool ready, flush;    /* to run at http_server_process, to write at http_server_flush */
	bool over; /* accepted beyond max_conns: its request is answered the busy 503 */
};

/*
 * The connections, open or CLOSED (until the sweep), in one array: a turn's work (process,
 * flush, sweep) walks it for the flags, as the owner's poll walks every descriptor anyway.
 */
struct http_server {
	struct http_server_config cfg;
	struct http_callbacks cb;
	struct http_conn **conns;
	size_t n, cap;
	long long open; /* connections not CLOSED, the listener aside */
	/* of them accepted beyond max_conns (conn_new): a connection accepted while max_conns are
	 * served is over for its life, even when a served one closes meanwhile, so the served ones
	 * are open - over, and one test of open guards both limits (conn_events) */
	long long over;
	long long busy;  /* http_server_busy */
	double next_log; /* when accept's failure may be logged again */
	struct http_conn *listener; /* NULL when none */
	bool ready;     /* some connection is ready */
};

/*
 * The connection's phases: which change may follow which. Everything that moves a connection
 * goes through set_state, so a change that is not here is a bug seen in one place.
 */
#define TO(s) (1u << (s))
static const unsigned legal[] = {
	[HTTP_CONN_IDLE] = TO(HTTP_CONN_READING) | TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_READING] = TO(HTTP_CONN_ANSWERING) | TO(HTTP_CONN_CLOSING) |
			      TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_ANSWERING] = TO(HTTP_CONN_WRITING) | TO(HTTP_CONN_CLOSING) |
				TO(HTTP_CONN_HELD) | TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_HELD] = TO(HTTP_CONN_WRITING) | TO(HTTP_CONN_CLOSING) | TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_WRITING] = TO(HTTP_CONN_IDLE) | TO(HTTP_CONN_READING) | TO(HTTP_CONN_ANSWERING) |
			      TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_CLOSING] = TO(HTTP_CONN_ANSWERING) | TO(HTTP_CONN_CLOSED),
	[HTTP_CONN_CLOSED] = 0,
	[HTTP_CONN_LISTENING] = TO(HTTP_CONN_CLOSED),
};

/* The poll events c needs in its state. */
static short
conn_events(const struct http_conn *c)
{
	/* POLLRDHUP is level-triggered: once the peer's EOF was read, asking again would spin. */
	short ev = c->peer_eof ? 0 : POLLRDHUP;

	if (c->state == HTTP_CONN_LISTENING) /* not paused (a deadline) nor at the limits */
		return !c->deadline && c->srv->open < c->srv->cfg.max_conns + HTTP_BUSY_SLOTS
			       ? POLLIN : 0;
	if (c->out.len > c->out_off)
		ev |= POLLOUT;
	/* Stop reading when a client piles up requests we have not answered yet. */
	if (!c->peer_eof && c->in.len < HTTP_MAX_HEAD + c->srv->cfg.max_body + IN_SLACK)
		ev |= POLLIN;
	return ev;
}

/* Tell the owner what c waits for now (the same again costs it nothing). */
static void
tell_owner(struct http_conn *c)
{
	if (c->state != HTTP_CONN_CLOSED)
		c->srv->cb.watch(c, conn_events(c), c->deadline);
}

static void
set_state(struct http_conn *c, enum http_conn_state to)
{
	if (!(legal[c->state] & TO(to))) {
		fprintf(stderr, "tt-device-queue: connection state %d cannot become %d\n", c->state,
			to);
		abort();
	}
	c->state = to;
	/* idle and reading: the idle timeout; held: the owner's (http_conn_hold); answering: none;
	 * writing: the write timeout, once a write must wait (conn_flush) */
	if (to == HTTP_CONN_IDLE || to == HTTP_CONN_READING)
		c->deadline = *c->srv->cfg.now + HTTP_IDLE_TIMEOUT;
	else if (to != HTTP_CONN_HELD)
		c->deadline = 0;
	tell_owner(c);
}

static void conn_close(struct http_conn *c);
static void accept_all(struct http_conn *l);

/* ---- answers */

void
http_conn_error(struct http_conn *c, int status, const char *extra, const char *fmt, ...)
{
	struct json_buf b = {0};
	struct json_w w;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_w_init(&w, &b);
	json_w_obj(&w);
	json_w_key(&w, "error");
	json_w_cstr(&w, msg);
	json_w_obj_end(&w);
	if (b.oom)
		conn_close(c);
	else
		http_conn_respond(c, status, "application/json; charset=utf-8", b.p, b.len, extra);
	json_buf_free(&b);
}

void
http_conn_respond(struct http_conn *c, int status, const char *content_type, const void *body,
		  size_t len, const char *extra)
{
	char head[1024];

	if (c->state == HTTP_CONN_CLOSED)
		return;
	json_buf_add(&c->out, head, http_format_head(head, sizeof(head), status, content_type, len,
						     c->keep_alive, c->minor, extra));
	json_buf_add(&c->out, body, len);
	if (c->out.oom) {
		conn_close(c);
		return;
	}
	set_state(c, c->keep_alive ? HTTP_CONN_WRITING : HTTP_CONN_CLOSING);
	c->flush = true;
}

struct http_conn *
http_conn_busy(struct http_conn *c)
{
	c->srv->busy++;
	c->keep_alive = false; /* http_conn_respond: Connection: close, then CLOSING */
	return c;
}

void
http_conn_hold(struct http_conn *c, double until)
{
	c->deadline = until; /* the state's deadline (set_state) */
	set_state(c, HTTP_CONN_HELD);
}

void
http_conn_retract(struct http_conn *c)
{
	if (c->state == HTTP_CONN_CLOSED)
		return;
	c->out.len = c->out_off = 0;
	set_state(c, HTTP_CONN_ANSWERING);
}

/* ---- reading and running requests */

/* The answered request's bytes go; pipelined bytes move to the front. */
static void
consume(struct http_conn *c, size_t n)
{
	memmove(c->in.p, c->in.p + n, c->in.len - n);
	c->in.len -= n;
	c->continue_sent = false;
}

/* A request whose framing is lost or refused: answer and close (its bytes are dropped). */
static void
refuse(struct http_conn *c, int status, const char *why)
{
	c->keep_alive = false;
	c->in.len = 0;
	http_conn_error(c, status, NULL, "%s", why);
}

/* RFC 9110 10.1.1: the client waits for this before it sends the body. */
static void
send_continue(struct http_conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

	c->continue_sent = true;
	if (send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
		conn_close(c);
}

/* Answer the request buffered on c when READING: one per write cycle keeps answers in order. */
static void
process(struct http_conn *c)
{
	struct http_request req;
	char why[80];
	size_t need;
	int r;

	if (c->state != HTTP_CONN_READING)
		return;
	/* an incomplete request has no Content-Length nor Expect yet: need is 0, no 413, no 100 */
	r = http_parse_request(c->in.p, c->in.len, &req);
	need = (size_t)r + (size_t)(req.content_length > 0 ? req.content_length : 0);
	if (r < 0) {
		refuse(c, -r, req.error);
		return;
	}
	if (req.content_length > (long long)c->srv->cfg.max_body) {
		snprintf(why, sizeof(why), "Request body over %zu bytes", c->srv->cfg.max_body);
		refuse(c, HTTP_PAYLOAD_TOO_LARGE, why);
		return;
	}
	if (r == 0 || c->in.len < need) {
		if (req.expect_continue && !c->continue_sent)
			send_continue(c);
		if (c->peer_eof)
			conn_close(c); /* what is here can never be answered */
		return;
	}
	/* HEAD is never served, and its refusal has a body a HEAD client does not read (RFC 9110
	 * 9.3.2): close after it, or that body would be taken for the next answer's start. */
	c->keep_alive = req.keep_alive && !(req.method_len == 4 && !memcmp(req.method, "HEAD", 4));
	c->minor = req.minor_version;
	set_state(c, HTTP_CONN_ANSWERING);
	if (!c->over) {
		c->srv->cb.request(c, &req, c->in.p + r, need - (size_t)r);
	} else {
		http_conn_error(http_conn_busy(c), HTTP_SERVICE_UNAVAILABLE, "Retry-After: 1\r\n",
				"All %lld connections are in use (%s)", c->srv->cfg.max_conns,
				c->srv->cfg.max_conns_name);
	}
	if (c->state == HTTP_CONN_CLOSED)
		return;
	consume(c, need);
	if (c->state == HTTP_CONN_ANSWERING) /* the handler broke its contract: say so */
		http_conn_error(c, HTTP_INTERNAL_SERVER_ERROR, NULL, "No answer was made");
}

/* Read what the socket holds; false when the connection was closed. */
static bool
conn_read(struct http_conn *c)
{
	for (;;) {
		ssize_t n;

		if (json_buf_reserve(&c->in, 4096) < 0)
			break;
		n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			break;
		if (n > 0)
			c->in.len += (size_t)n;
		else if (n == 0)
			c->peer_eof = true;
		if (n <= 0 || !(conn_events(c) & POLLIN))
			return true;
	}
	conn_close(c);
	return false;
}

void
http_conn_event(void *conn, short revents)
{
	struct http_conn *c = conn;

	if (c->state == HTTP_CONN_CLOSED)
		return;
	if (c->state == HTTP_CONN_LISTENING) {
		accept_all(c);
	} else if (revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) {
		if (!conn_read(c))
			return;
		if (c->peer_eof && (c->state == HTTP_CONN_HELD || c->in.len == 0)) {
			conn_close(c); /* gone: a waiting client costs nothing more */
			return;
		}
		if (c->state == HTTP_CONN_IDLE && c->in.len > 0)
			set_state(c, HTTP_CONN_READING);
		process(c);
	}
	if (c->state != HTTP_CONN_CLOSED && (revents & POLLOUT))
		c->flush = true;
	tell_owner(c);
}

/* Only IDLE, READING, HELD, WRITING, CLOSING and a paused LISTENING have a deadline (set_state,
 * conn_flush, accept_pause). */
void
http_conn_timeout(void *conn)
{
	struct http_conn *c = conn;

	if (c->state == HTTP_CONN_LISTENING) {
		c->deadline = 0; /* the pause ends */
	} else if (c->state == HTTP_CONN_HELD) {
		c->srv->cb.hold_expired(c);
	} else if (c->state == HTTP_CONN_READING) {
		c->keep_alive = false;
		http_conn_error(c, HTTP_REQUEST_TIMEOUT, NULL,
				"Request not completed within %.0f seconds", HTTP_IDLE_TIMEOUT);
	} else {
		conn_close(c); /* an idle keep-alive connection, or a reader that stalled */
	}
	tell_owner(c);
}

/* ---- writing */

/* An answer was written whole: the next request, or idle, or the end. */
static void
answered(struct http_conn *c)
{
	c->out.len = c->out_off = 0;
	if (c->out.cap > OUT_KEEP)
		json_buf_free(&c->out); /* do not keep a big answer's buffer per idle connection */
	if (c->state == HTTP_CONN_CLOSING) {
		conn_close(c);
		return;
	}
	if (c->in.len > 0) {
		set_state(c, HTTP_CONN_READING);
		c->ready = c->srv->ready = true;
	} else if (c->peer_eof) {
		conn_close(c); /* answered a client that half-closed (nc -N): nothing more comes */
	} else {
		set_state(c, HTTP_CONN_IDLE);
	}
}

/* Write what c has to say; after a complete answer, go on with its next request. */
static void
conn_flush(struct http_conn *c)
{
	if (c->state != HTTP_CONN_WRITING && c->state != HTTP_CONN_CLOSING)
		return;
	while (c->out.len > c->out_off) {
		ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			c->out_off += (size_t)n;
		} else if (n < 0 && errno == EAGAIN) {
			c->deadline = *c->srv->cfg.now + HTTP_WRITE_TIMEOUT;
			tell_owner(c);
			return;
		} else if (n == 0 || errno != EINTR) {
			conn_close(c);
			return;
		}
	}
	answered(c);
}

void
http_server_flush(struct http_server *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->conns[i]->flush) {
			s->conns[i]->flush = false;
			conn_flush(s->conns[i]);
		}
}

/* Only a written answer (http_server_flush) makes a connection ready, never a handler. */
void
http_server_process(struct http_server *s)
{
	size_t i;

	s->ready = false;
	for (i = 0; i < s->n; i++)
		if (s->conns[i]->ready) {
			s->conns[i]->ready = false;
			process(s->conns[i]);
			tell_owner(s->conns[i]);
		}
}

bool
http_server_ready(const struct http_server *s)
{
	return s->ready;
}

/* ---- a connection's life */

static void
conn_close(struct http_conn *c)
{
	struct http_server *s = c->srv;

	if (c->state == HTTP_CONN_CLOSED)
		return;
	if (c == s->listener)
		s->listener = NULL;
	else
		s->open--;
	s->over -= c->over;
	set_state(c, HTTP_CONN_CLOSED);
	s->cb.closed(c);
	close(c->fd);
	c->fd = -1;
	if (s->listener) /* room again: take connections from the backlog, a pause or not */
		http_conn_timeout(s->listener);
}

/* http_conn_new, and the listener and what it accepts (their owner's pointer from `opened`). */
static struct http_conn *
conn_new(struct http_server *s, int fd, void *owner, enum http_conn_state state)
{
	struct http_conn *c = malloc(sizeof(*c)), **v = s->conns;
	size_t cap = s->n < s->cap ? s->cap : s->cap * 2 + 32;
	bool listener = state == HTTP_CONN_LISTENING;

	if (!c || (cap > s->cap && !(v = realloc(s->conns, cap * sizeof(*v))))) {
		free(c);
		return NULL;
	}
	s->conns = v;
	s->cap = cap;
	*c = (struct http_conn){.srv = s, .fd = fd, .state = state, .keep_alive = true, .minor = 1,
				.over = !listener && s->open - s->over >= s->cfg.max_conns,
				.deadline = listener ? 0 : *s->cfg.now + HTTP_IDLE_TIMEOUT};
	if (!(c->owner = owner ? owner : s->cb.opened(c, fd))) {
		free(c);
		return NULL;
	}
	s->conns[s->n++] = c;
	if (listener)
		s->listener = c;
	else
		s->open++;
	s->over += c->over;
	tell_owner(c);
	return c;
}

struct http_conn *
http_conn_new(struct http_server *s, int fd, void *owner)
{
	return conn_new(s, fd, owner, HTTP_CONN_IDLE);
}

int
http_server_listen(struct http_server *s, int fd)
{
	if (s->listener)
		conn_close(s->listener);
	return fd < 0 || conn_new(s, fd, NULL, HTTP_CONN_LISTENING) ? 0 : -1;
}

/*
 * Out of descriptors or memory: the backlog waits ACCEPT_RETRY s (the listener's deadline, or a
 * connection closing), and the owner's log hears of it at most once a minute.
 */
static void
accept_pause(struct http_conn *l, int err)
{
	struct http_server *s = l->srv;

	if (*s->cfg.now >= s->next_log) {
		s->next_log = *s->cfg.now + 60.0;
		s->cb.log("tt-device-queue: accept: %s; new connections wait in the listen backlog",
			  strerror(err));
	}
	l->deadline = *s->cfg.now + ACCEPT_RETRY;
}

/* Take connections from the listener's backlog while there is room (conn_events). */
static void
accept_all(struct http_conn *l)
{
	int one = 1, fd;

	while (conn_events(l) & POLLIN) {
		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		/* the pending connection failed and was consumed (accept(2)): take the next */
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EPROTO ||
			       errno == EPERM))
			continue;
		if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			accept_pause(l, errno); /* EMFILE, ENFILE, ENOBUFS, ENOMEM */
		if (fd < 0)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!conn_new(l->srv, fd, NULL, HTTP_CONN_IDLE)) {
			close(fd);
			accept_pause(l, ENOMEM);
		}
	}
}

long long
http_server_busy(const struct http_server *s)
{
	return s->busy;
}

void *
http_conn_owner(const struct http_conn *c)
{
	return c->owner;
}

enum http_conn_state
http_conn_state(const struct http_conn *c)
{
	return c->state;
}

long long
http_server_connections(const struct http_server *s)
{
	return s->open;
}

void
http_server_sweep(struct http_server *s)
{
	size_t i, k;

	for (i = k = 0; i < s->n; i++) {
		struct http_conn *c = s->conns[i];

		if (c->state != HTTP_CONN_CLOSED) {
			s->conns[k++] = c;
			continue;
		}
		json_buf_free(&c->in);
		json_buf_free(&c->out);
		free(c);
	}
	s->n = k;
}

struct http_server *
http_server_new(const struct http_server_config *cfg, const struct http_callbacks *cb)
{
	struct http_server *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->cfg = *cfg;
	s->cb = *cb;
	return s;
}

void
http_server_free(struct http_server *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->n; i++)
		conn_close(s->conns[i]);
	http_server_sweep(s);
	free(s->conns);
	free(s);
}
