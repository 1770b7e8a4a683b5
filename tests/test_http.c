/*
 * test_http.c - unit tests for http.c: request and response heads, query parameters, the head
 * writer, and the connection's phases over a socketpair.
 *
 * Every input is parsed from a copy that ends exactly where a PROT_NONE guard page begins (as
 * picohttpparser's tests do), so reading one byte past the input crashes the test. Each table
 * case is also fed as every one of its prefixes: a prefix must give 0 (need more) or, for a
 * malformed head, the same error as the whole; never a different error or a length.
 *
 * The connection tests play the owner: a clock they move by hand, the watch and closed
 * callbacks recorded, and the client's end of a socketpair read and written directly.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http.h"
#include "tap.h"

#define REGION (64 * 1024) /* readable bytes before the guard page; > HTTP_MAX_HEAD */
#define ALL INT_MAX        /* expected result: the whole input is the head */
#include "guard.h"

static int
parse(const char *s, size_t n, struct http_request *req)
{
	return http_parse_request(guarded(s, n), n, req);
}

/* Parse a whole NUL-terminated head; its length when complete, else the parser's result. */
static int
parse_str(const char *s, struct http_request *req)
{
	int r = parse(s, strlen(s), req);

	return r == (int)strlen(s) ? r : r > 0 ? -1 : r;
}

static bool
view_is(const char *v, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(v, want, n) == 0;
}

struct pcase {
	const char *name;
	const char *in;
	size_t len;
	int want; /* head length, ALL, 0, or -status */
};

#define C(name, lit, want)                                                                         \
	{                                                                                          \
		name, lit, sizeof(lit) - 1, want                                                   \
	}
#define RL "GET / HTTP/1.1\r\n"
#define HOST "Host: x\r\n"

static const struct pcase cases[] = {
    /* valid */
    C("GET 1.1", RL HOST "\r\n", ALL),
    C("GET 1.0 without Host", "GET / HTTP/1.0\r\n\r\n", ALL),
    C("POST with Content-Length",
      "POST /queue HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n"
      "Content-Length: 12\r\n\r\n",
      ALL),
    C("POST head followed by its body",
      "POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"cmd\":\"ls\"}", 53),
    C("pipelined: first head only", "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n", 28),
    C("leading empty lines skipped and counted", "\r\n\r\n" RL HOST "\r\n", ALL),
    C("query string", "GET /logs/abc?offset=5&limit=10 HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("method is any token", "M-SEARCH /x HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("lowercase method token", "get / HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("OWS around value", RL HOST "X:   v w \t\r\n\r\n", ALL),
    C("empty value", RL HOST "X:\r\n\r\n", ALL),
    C("empty value with OWS", RL HOST "X: \t \r\n\r\n", ALL),
    C("obs-text value (not UTF-8)", RL HOST "X: \xff\xfe\x80 caf\xc3\xa9\r\n\r\n", ALL),
    C("HTAB inside value", RL HOST "X: a\tb\r\n\r\n", ALL),
    C("Host name case-insensitive", RL "hOsT: x\r\n\r\n", ALL),
    C("empty Host value", RL "Host:\r\n\r\n", ALL),
    C("Connection close", RL HOST "Connection: close\r\n\r\n", ALL),
    C("1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", ALL),
    C("Connection list", RL HOST "Connection: , upgrade ,  CLOSE,\r\n\r\n", ALL),
    C("Expect 100-continue", RL HOST "Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n", ALL),
    C("Content-Length 0", RL HOST "Content-Length: 0\r\n\r\n", ALL),
    C("Content-Length repeated, same", RL HOST "Content-Length: 5\r\ncontent-length: 05\r\n\r\n",
      ALL),
    C("Content-Length 18 digits", RL HOST "Content-Length: 999999999999999999\r\n\r\n", ALL),
    C("visible ASCII target", "GET /a/b;c=d?x=%20&y=~!$'()*+,:@[]{}| HTTP/1.1\r\n" HOST "\r\n",
      ALL),
    C("target split at first '?'", "GET /a?b?c HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("unknown header kept", RL HOST "X-Request-Id: 7\r\n\r\n", ALL),

    /* incomplete */
    C("empty", "", 0),
    C("one byte", "G", 0),
    C("lone CR", "\r", 0),
    C("empty line only", "\r\n", 0),
    C("method only", "GET", 0),
    C("method and target", "GET /", 0),
    C("no CRLF after version", "GET / HTTP/1.1", 0),
    C("CR after version", "GET / HTTP/1.1\r", 0),
    C("version 2 still incomplete", "GET / HTTP/2.0", 0),
    C("no blank line", RL HOST, 0),
    C("blank line half there", RL HOST "\r", 0),
    C("inside a value", RL "Host: xyz", 0),

    /* line ends: bare LF / bare CR (RFC 9112 2.2) */
    C("bare LF after request line", "GET / HTTP/1.1\nHost: x\n\n", -400),
    C("bare LF after field", RL "Host: x\n\r\n", -400),
    C("bare LF as blank line", RL HOST "\n", -400),
    C("bare LF before request line", "\nGET / HTTP/1.1\r\n" HOST "\r\n", -400),
    C("bare LF in target", "GET /\n", -400),
    C("bare CR in value", RL "Host: x\ry\r\n\r\n", -400),
    C("bare CR after version", "GET / HTTP/1.1\rX", -400),
    C("bare CR as blank line", RL HOST "\rX", -400),
    C("bare CR in leading empty line", "\r\r\n", -400),

    /* NUL and control bytes, detected before the head ends */
    C("NUL in value", RL HOST "X: a\0b\r\n\r\n", -400),
    C("NUL in value, head unfinished", RL HOST "X: a\0", -400),
    C("NUL in method", "GE\0T / HTTP/1.1\r\n", -400),
    C("NUL in target", "GET /\0 HTTP/1.1\r\n", -400),
    C("NUL in field name", RL "Ho\0st: x\r\n\r\n", -400),
    C("NUL first", "\0", -400),
    C("DEL in value", RL HOST "X: a\x7f\r\n\r\n", -400),
    C("control byte in value", RL HOST "X: \x01\r\n\r\n", -400),
    C("ESC in value", RL HOST "X: \x1b[0m\r\n\r\n", -400),

    /* request line */
    C("empty method", " / HTTP/1.1\r\n" HOST "\r\n", -400),
    C("non-token method, early", "G(", -400),
    C("two spaces after method", "GET  / HTTP/1.1\r\n" HOST "\r\n", -400),
    C("HTAB after method", "GET\t/ HTTP/1.1\r\n", -400),
    C("asterisk-form target", "OPTIONS * HTTP/1.1\r\n" HOST "\r\n", -400),
    C("non-ASCII in target", "GET /caf\xc3\xa9 HTTP/1.1\r\n" HOST "\r\n", -400),
    C("HTAB in target", "GET /a\tb HTTP/1.1\r\n", -400),
    C("HTTP/0.9 request line", "GET /\r\n", -400),
    C("lowercase version", "GET / http/1.1\r\n" HOST "\r\n", -400),
    C("version without minor", "GET / HTTP/1\r\n" HOST "\r\n", -400),
    C("two-digit minor", "GET / HTTP/1.10\r\n" HOST "\r\n", -400),
    C("two-digit major", "GET / HTTP/11.1\r\n" HOST "\r\n", -400),
    C("space after version", "GET / HTTP/1.1 \r\n" HOST "\r\n", -400),
    C("garbage request line", "hello world\r\n\r\n", -400),
    C("no version", "GET / \r\n", -400),

    /* absolute-form (RFC 9112 3.2.2): http only; no userinfo, a host (RFC 9110 4.2.1, 4.2.4) */
    C("absolute-form target", "GET http://x/ HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("absolute-form, scheme in capitals", "GET HTTP://127.0.0.1:5741/status?x=1 HTTP/1.1\r\n"
      HOST "\r\n", ALL),
    C("absolute-form, empty path", "GET http://x HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("absolute-form, empty path and a query", "GET http://x?a=1 HTTP/1.1\r\n" HOST "\r\n", ALL),
    C("absolute-form, IPv6 authority", "GET http://[::1]:5741/status HTTP/1.1\r\n" HOST "\r\n",
      ALL),
    C("absolute-form, Host other than the authority", "GET http://x/ HTTP/1.1\r\nHost: y\r\n\r\n",
      ALL),
    C("absolute-form, empty Host", "GET http://x/ HTTP/1.1\r\nHost:\r\n\r\n", ALL),
    C("absolute-form in 1.0 without Host", "GET http://x/ HTTP/1.0\r\n\r\n", ALL),
    C("absolute-form, 1.1 without Host", "GET http://x/ HTTP/1.1\r\n\r\n", -400),
    C("absolute-form, invalid Host", "GET http://x/ HTTP/1.1\r\nHost: a b\r\n\r\n", -400),
    C("absolute-form, https", "GET https://x/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, other scheme", "GET ftp://x/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, scheme early", "GET hx", -400),
    C("absolute-form, no //", "GET http:x/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, userinfo", "GET http://u@x/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, empty host", "GET http:///status HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, port without host", "GET http://:80/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, bad port", "GET http://x:8a/ HTTP/1.1\r\n" HOST "\r\n", -400),
    C("absolute-form, control byte in authority", "GET http://x\x01", -400),
    C("absolute-form, non-ASCII in authority", "GET http://caf\xc3\xa9/ HTTP/1.1\r\n" HOST
      "\r\n", -400),
    C("absolute-form, space after the scheme", "GET http:// HTTP/1.1\r\n" HOST "\r\n", -400),
    C("authority-form target", "CONNECT x:80 HTTP/1.1\r\n" HOST "\r\n", -400),

    /* versions (RFC 9110 6.2; a later 1.x is served as 1.1, RFC 9110 2.5) */
    C("HTTP/2.0", "GET / HTTP/2.0\r\n" HOST "\r\n", -505),
    C("HTTP/1.2", "GET / HTTP/1.2\r\n" HOST "\r\n", ALL),
    C("HTTP/1.9 without Host, as 1.1", "GET / HTTP/1.9\r\n\r\n", -400),
    C("HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", -505),
    C("HTTP/3.0, before the headers", "GET / HTTP/3.0\r\n", -505),

    /* field syntax (RFC 9112 5) */
    C("space before colon", RL "Host : x\r\n\r\n", -400),
    C("HTAB before colon", RL "Host\t: x\r\n\r\n", -400),
    C("field without colon", RL "Host x\r\n\r\n", -400),
    C("field without colon or space", RL "Hostx\r\n\r\n", -400),
    C("empty field name", RL HOST ": x\r\n\r\n", -400),
    C("non-token field name", RL HOST "X(y): 1\r\n\r\n", -400),
    C("non-ASCII field name", RL HOST "X\xc3\xa9: 1\r\n\r\n", -400),
    C("obs-fold", RL HOST "X: a\r\n b\r\n\r\n", -400),
    C("obs-fold with HTAB", RL HOST "X: a\r\n\tb\r\n\r\n", -400),
    C("whitespace before first field", RL " Host: x\r\n\r\n", -400),

    /* Host (RFC 9112 3.2) */
    C("1.1 without Host", RL "\r\n", -400),
    C("1.1 without Host, other fields", RL "X: 1\r\n\r\n", -400),
    C("two Host fields", RL HOST "Host: y\r\n\r\n", -400),
    C("two Host fields in 1.0", "GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n", -400),

    /* Host = uri-host [ ":" port ] (RFC 9110 7.2, RFC 3986 3.2.2-3.2.3) */
    C("Host reg-name and port", RL "Host: tt-host.lab_1~:5741\r\n\r\n", ALL),
    C("Host IPv4 and port", RL "Host: 127.0.0.1:5741\r\n\r\n", ALL),
    C("Host sub-delims and pct-encoded", RL "Host: a!$&'()*+,;=%2Db\r\n\r\n", ALL),
    C("Host empty port", RL "Host: x:\r\n\r\n", ALL),
    C("Host port only", RL "Host: :80\r\n\r\n", ALL),
    C("Host IPv6 loopback and port", RL "Host: [::1]:5741\r\n\r\n", ALL),
    C("Host IPv6 eight pieces", RL "Host: [1:2:3:4:5:6:7:abcd]\r\n\r\n", ALL),
    C("Host IPv6 gap at the end", RL "Host: [1:2:3:4:5:6:7::]\r\n\r\n", ALL),
    C("Host IPv6 with IPv4", RL "Host: [::ffff:192.0.2.1]:80\r\n\r\n", ALL),
    C("Host IPv6 six pieces and IPv4", RL "Host: [1:2:3:4:5:6:1.2.3.4]\r\n\r\n", ALL),
    C("Host IPv6 zone, RFC 6874", RL "Host: [fe80::1%25eth0]:80\r\n\r\n", ALL),
    C("Host IPv6 bare zone", RL "Host: [fe80::1%eth0]:80\r\n\r\n", ALL),
    C("Host IPvFuture", RL "Host: [v1F.a:b!]\r\n\r\n", ALL),
    C("Host IPv6 longest text", RL "Host: [0000:0000:0000:0000:0000:ffff:255.255.255.255]\r\n\r\n",
      ALL),
    C("Host with a space", RL "Host: a b\r\n\r\n", -400),
    C("Host with a path", RL "Host: x/y\r\n\r\n", -400),
    C("Host with userinfo", RL "Host: u@x\r\n\r\n", -400),
    C("Host port not digits", RL "Host: x:80a\r\n\r\n", -400),
    C("Host two ports", RL "Host: x:80:81\r\n\r\n", -400),
    C("Host bad pct-encoding", RL "Host: a%zz\r\n\r\n", -400),
    C("Host cut pct-encoding", RL "Host: a%2\r\n\r\n", -400),
    C("Host not ASCII", RL "Host: caf\xc3\xa9\r\n\r\n", -400),
    C("Host IPv6 unbracketed", RL "Host: ::1\r\n\r\n", -400),
    C("Host IPv6 unclosed", RL "Host: [::1\r\n\r\n", -400),
    C("Host IPv6 text after bracket", RL "Host: [::1]x\r\n\r\n", -400),
    C("Host IPv6 nine pieces", RL "Host: [1:2:3:4:5:6:7:8:9]\r\n\r\n", -400),
    C("Host IPv6 seven pieces", RL "Host: [1:2:3:4:5:6:7]\r\n\r\n", -400),
    C("Host IPv6 two gaps", RL "Host: [1::2::3]\r\n\r\n", -400),
    C("Host IPv6 gap and eight pieces", RL "Host: [1:2:3:4::5:6:7:8]\r\n\r\n", -400),
    C("Host IPv6 five hex digits", RL "Host: [12345::]\r\n\r\n", -400),
    C("Host IPv6 trailing colon", RL "Host: [1::2:]\r\n\r\n", -400),
    C("Host IPv6 leading colon", RL "Host: [:1::2]\r\n\r\n", -400),
    C("Host IPv6 five digits, longest text",
      RL "Host: [00000:0000:0000:0000:0000:ffff:1.2.3.4]\r\n\r\n", -400),
    C("Host IPv6 IPv4 octet over 255", RL "Host: [::1.2.3.256]\r\n\r\n", -400),
    C("Host IPv6 IPv4 leading zero", RL "Host: [::1.2.3.04]\r\n\r\n", -400),
    C("Host IPv6 IPv4 not last", RL "Host: [::1.2.3.4:1]\r\n\r\n", -400),
    C("Host IPv6 empty zone", RL "Host: [fe80::1%]\r\n\r\n", -400),
    C("Host empty brackets", RL "Host: []\r\n\r\n", -400),
    C("Host IPvFuture without text", RL "Host: [v1.]\r\n\r\n", -400),
    C("Host IPvFuture without hex", RL "Host: [vx.a]\r\n\r\n", -400),
    C("Host invalid in 1.0", "GET / HTTP/1.0\r\nHost: a b\r\n\r\n", -400),

    /* Content-Length (RFC 9110 8.6, RFC 9112 6.3) */
    C("Content-Length negative", RL HOST "Content-Length: -1\r\n\r\n", -400),
    C("Content-Length plus sign", RL HOST "Content-Length: +1\r\n\r\n", -400),
    C("Content-Length inner space", RL HOST "Content-Length: 1 2\r\n\r\n", -400),
    C("Content-Length hex", RL HOST "Content-Length: 0x10\r\n\r\n", -400),
    C("Content-Length empty", RL HOST "Content-Length:\r\n\r\n", -400),
    C("Content-Length non-numeric", RL HOST "Content-Length: abc\r\n\r\n", -400),
    C("Content-Length decimal point", RL HOST "Content-Length: 1.5\r\n\r\n", -400),
    C("Content-Length list", RL HOST "Content-Length: 5, 5\r\n\r\n", -400),
    C("Content-Length list no space", RL HOST "Content-Length: 5,5\r\n\r\n", -400),
    C("Content-Length conflicting", RL HOST "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", -400),
    C("Content-Length 19 digits", RL HOST "Content-Length: 1000000000000000000\r\n\r\n", -413),
    C("Content-Length huge", RL HOST "Content-Length: 99999999999999999999999999999\r\n\r\n", -413),
    C("Content-Length huge and not digits", RL HOST "Content-Length: 9999999999999999999x\r\n\r\n",
      -400),

    /* Transfer-Encoding: bodies need a length */
    C("Transfer-Encoding chunked", RL HOST "Transfer-Encoding: chunked\r\n\r\n", -411),
    C("Transfer-Encoding identity", RL HOST "transfer-encoding: identity\r\n\r\n", -411),
    C("Transfer-Encoding and Content-Length",
      RL HOST "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", -411),
    C("Transfer-Encoding in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -411),

    /* Expect (RFC 9110 10.1.1) */
    C("Expect unknown", RL HOST "Expect: 200-ok\r\n\r\n", -417),
    C("Expect 100-continue with suffix", RL HOST "Expect: 100-continue-x\r\n\r\n", -417),
    C("Expect list with unknown", RL HOST "Expect: 100-continue, foo\r\n\r\n", -417),
    C("Expect with parameter", RL HOST "Expect: 100-continue;a=b\r\n\r\n", -417),

    /* Connection = #token */
    C("Connection quoted", RL HOST "Connection: \"close\"\r\n\r\n", -400),
    C("Connection with space inside", RL HOST "Connection: keep alive\r\n\r\n", -400),
};

/* Every prefix gives 0, or the whole input's result: its length once k reaches it, or its error. */
static int
prefix_result_ok(const struct pcase *t, int whole)
{
	struct http_request req;
	size_t k;
	int r;

	for (k = 0; k < t->len; k++) {
		r = parse(t->in, k, &req);
		if (whole > 0 && (size_t)whole <= k ? r != whole
		                                    : r != 0 && (whole >= 0 || r != whole))
			break;
		if ((r < 0) != (req.error != NULL))
			break;
	}
	if (k < t->len)
		printf("# %s: prefix of %zu bytes gave %d\n", t->name, k, r);
	return k == t->len;
}

static void
test_table(void)
{
	struct http_request req;
	size_t i, n = sizeof(cases) / sizeof(cases[0]), bad_msg = 0, bad_prefix = 0;
	int r, want;

	for (i = 0; i < n; i++) {
		const struct pcase *t = &cases[i];

		want = t->want == ALL ? (int)t->len : t->want;
		r = parse(t->in, t->len, &req);
		is_int(r, want, "%s", t->name);
		if ((r < 0) != (req.error != NULL)) {
			printf("# %s: error message %s\n", t->name,
			       req.error ? req.error : "(null)");
			bad_msg++;
		}
		bad_prefix += !prefix_result_ok(t, want);
	}
	ok(bad_msg == 0, "req->error set exactly on failure, all %zu cases", n);
	ok(bad_prefix == 0, "every prefix of all %zu cases gives 0 or the whole result", n);
}

/* An absolute-form target is served as its path and query (RFC 9112 3.2.2). */
static void
test_absolute_form(void)
{
	static const char empty[] = "GET hTtP://x HTTP/1.1\r\nHost: y\r\n\r\n";
	struct http_request req;
	const char *in;
	int r;

	r = parse_str("GET http://127.0.0.1:5741/status?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && view_is(req.path, req.path_len, "/status") &&
	   view_is(req.query, req.query_len, "x=1"), "absolute-form: path and query views");
	r = parse_str("GET http://[::1]/a/b? HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && view_is(req.path, req.path_len, "/a/b") && req.query_len == 0,
	   "absolute-form: IPv6 authority, '?' alone");
	in = guarded(empty, sizeof(empty) - 1);
	r = http_parse_request(in, sizeof(empty) - 1, &req);
	ok(r > 0 && view_is(req.path, req.path_len, "/") && req.query_len == 0 &&
	   req.path >= in && req.path < in + r, "absolute-form: an empty path is \"/\", in buf");
	r = parse_str("GET http://x?a=b HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && view_is(req.path, req.path_len, "/") && view_is(req.query, req.query_len, "a=b"),
	   "absolute-form: an empty path before a query is \"/\"");
	r = parse_str("GET https://x/ HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r == -400 && req.error && strstr(req.error, "http://"), "https refused naming http://: %s",
	   req.error ? req.error : "(null)");
	r = parse_str("GET http://u@x/ HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r == -400 && req.error && strstr(req.error, "userinfo"), "userinfo refused saying so: %s",
	   req.error ? req.error : "(null)");
}

static void
test_fields(void)
{
	static const char post[] = "POST /queue?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n"
	                           "X-Y:  a b \r\nExpect: 100-continue\r\n\r\n{\"cmd\":\"ls\"}";
	struct http_request req;
	const struct http_header *h;
	int r;

	r = parse(post, sizeof(post) - 1, &req);
	is_int(r, (int)sizeof(post) - 1 - 12, "POST head length excludes the body");
	ok(view_is(req.method, req.method_len, "POST"), "method view");
	ok(view_is(req.path, req.path_len, "/queue"), "path view");
	ok(view_is(req.query, req.query_len, "x=1"), "query view");
	is_int(req.minor_version, 1, "minor version");
	is_int(req.num_headers, 4, "header count");
	is_int(req.content_length, 12, "content length");
	ok(req.keep_alive, "1.1 defaults to keep-alive");
	ok(req.expect_continue, "Expect: 100-continue seen");
	h = http_header_get(&req, "x-y");
	ok(h && view_is(h->value, h->value_len, "a b"),
	   "header_get is case-insensitive, OWS trimmed");
	ok(http_header_get(&req, "X-Y-Z") == NULL, "header_get: longer name absent");
	ok(http_header_get(&req, "X-") == NULL, "header_get: prefix of a name absent");
	h = http_header_get(&req, "HOST");
	ok(h && view_is(h->value, h->value_len, "h"), "header_get Host");

	r = parse_str("GET / HTTP/1.2\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && req.minor_version == 1 && req.keep_alive, "HTTP/1.2 is served as HTTP/1.1");

	r = parse_str(RL HOST "\r\n", &req);
	ok(r > 0 && req.content_length == -1, "no Content-Length is -1");
	ok(r > 0 && req.query_len == 0 && req.query == req.path + 1,
	   "no query: empty view after path");
	ok(r > 0 && !req.expect_continue, "no Expect");

	r = parse_str("GET /? HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && view_is(req.path, req.path_len, "/") && req.query_len == 0, "'?' alone");
	r = parse_str("GET /a?b?c HTTP/1.1\r\nHost: x\r\n\r\n", &req);
	ok(r > 0 && view_is(req.query, req.query_len, "b?c"), "query keeps later '?'");
	r = parse_str("GET / HTTP/1.1\r\nHost: x\r\nX:\r\n\r\n", &req);
	ok(r > 0 && req.headers[1].value_len == 0, "empty value view");
	test_absolute_form();
}

static void
conn(const char *in, bool want_keep, bool want_expect, const char *name)
{
	struct http_request req;
	int r = parse_str(in, &req);

	ok(r > 0 && req.keep_alive == want_keep && req.expect_continue == want_expect, "%s", name);
}

static void
test_connection(void)
{
	conn("GET / HTTP/1.1\r\nHost: x\r\n\r\n", true, false, "1.1 default keep-alive");
	conn("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false, false, "1.1 close");
	conn("GET / HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n", false, false, "1.1 CLOSE");
	conn("GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade, close\r\n\r\n", false, false,
	     "1.1 close in a list");
	conn("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
	     false, false, "1.1 close in a second field");
	conn("GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n", true, false,
	     "1.1 'closed' is not close");
	conn("GET / HTTP/1.0\r\n\r\n", false, false, "1.0 default close");
	conn("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true, false, "1.0 keep-alive");
	conn("GET / HTTP/1.0\r\nConnection: Keep-Alive, TE\r\n\r\n", true, false,
	     "1.0 Keep-Alive in a list");
	conn("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false, false,
	     "1.0 keep-alive and close: close wins");
	conn("GET / HTTP/1.0\r\nConnection: keep-alive-x\r\n\r\n", false, false,
	     "1.0 keep-alive-x is not keep-alive");
	conn("GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", true, true,
	     "1.1 Expect 100-continue");
	conn("GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-CONTINUE\r\nConnection: close\r\n\r\n",
	     false, true, "Expect case-insensitive with close");
	conn("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false, false,
	     "1.0 Expect 100-continue ignored (RFC 9110 10.1.1)");
}

static void
test_pipelined(void)
{
	static const char two[] = "POST /q HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
	                          "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct http_request req;
	size_t off;
	int r;

	r = parse(two, sizeof(two) - 1, &req);
	ok(r > 0 && req.content_length == 2, "pipelined: first head");
	off = (size_t)r + 2;
	r = parse(two + off, sizeof(two) - 1 - off, &req);
	is_int(r, (int)(sizeof(two) - 1 - off), "pipelined: second head at its offset");
	ok(view_is(req.path, req.path_len, "/status") && !req.keep_alive,
	   "pipelined: second fields");
}

/* A head of exactly n bytes: request line, Host, one X field padded to size, blank line. */
static size_t
big_head(char *buf, size_t n)
{
	static const char pre[] = RL HOST "X: ";
	size_t pad = n - (sizeof(pre) - 1) - 4;

	memcpy(buf, pre, sizeof(pre) - 1);
	memset(buf + sizeof(pre) - 1, 'a', pad);
	memcpy(buf + n - 4, "\r\n\r\n", 4);
	return n;
}

static void
test_limits(void)
{
	static char buf[HTTP_MAX_HEAD + 64];
	struct http_request req;
	size_t n, i;
	int r;

	n = big_head(buf, HTTP_MAX_HEAD);
	is_int(parse(buf, n, &req), HTTP_MAX_HEAD, "head of exactly HTTP_MAX_HEAD bytes");
	memcpy(buf + n, "GET", 3);
	is_int(parse(buf, n + 3, &req), HTTP_MAX_HEAD, "limit-sized head with more bytes after it");
	is_int(parse(buf, n - 1, &req), 0, "limit-sized head missing its last byte");
	n = big_head(buf, HTTP_MAX_HEAD + 1);
	is_int(parse(buf, n, &req), -431, "head one byte over HTTP_MAX_HEAD");
	ok(req.error != NULL, "431 has a message");
	is_int(parse(buf, HTTP_MAX_HEAD, &req), -431, "unfinished head at HTTP_MAX_HEAD bytes");
	is_int(parse(buf, HTTP_MAX_HEAD - 1, &req), 0, "unfinished head one byte under the limit");
	for (i = 0; i + 1 < HTTP_MAX_HEAD; i += 2)
		memcpy(buf + i, "\r\n", 2);
	is_int(parse(buf, HTTP_MAX_HEAD, &req), -431, "16 KiB of empty lines is 431");
	memset(buf, 'a', sizeof(buf));
	is_int(parse(buf, sizeof(buf), &req), -431, "16 KiB method is 431");
	memcpy(buf, "GET /", 5);
	is_int(parse(buf, sizeof(buf), &req), -431, "16 KiB target is 431");
	r = parse(buf, HTTP_MAX_HEAD + 1, &req);
	ok(r == -431, "limit applies before the bytes past it are looked at");
}

/* A request with n header fields (Host first), optionally a partial next field. */
static size_t
many_fields(char *buf, int n, const char *tail)
{
	size_t len = 0;
	int i;

	len += (size_t)sprintf(buf, RL HOST);
	for (i = 1; i < n; i++)
		len += (size_t)sprintf(buf + len, "X-%d: %d\r\n", i, i);
	len += (size_t)sprintf(buf + len, "%s", tail);
	return len;
}

static void
test_field_count(void)
{
	static char buf[4096];
	struct http_request req;
	size_t n;

	n = many_fields(buf, HTTP_MAX_HEADERS, "\r\n");
	is_int(parse(buf, n, &req), (int)n, "64 header fields");
	is_int(req.num_headers, HTTP_MAX_HEADERS, "64 fields recorded");
	ok(view_is(req.headers[63].name, req.headers[63].name_len, "X-63"), "last field view");
	n = many_fields(buf, HTTP_MAX_HEADERS + 1, "\r\n");
	is_int(parse(buf, n, &req), -431, "65 header fields");
	n = many_fields(buf, HTTP_MAX_HEADERS, "X");
	is_int(parse(buf, n, &req), -431, "65th field detected as it starts");
	n = many_fields(buf, HTTP_MAX_HEADERS, "");
	is_int(parse(buf, n, &req), 0, "64 fields, blank line not yet there");
}

static void
test_misc(void)
{
	struct http_request req;

	is_int(http_parse_request(NULL, 0, &req), 0, "NULL, 0 needs more");
	ok(req.error == NULL && req.num_headers == 0 && req.content_length == -1, "reset on entry");
	is_str(http_reason(200), "OK", "reason 200");
	is_str(http_reason(404), "Not Found", "reason 404");
	is_str(http_reason(431), "Request Header Fields Too Large", "reason 431");
	is_str(http_reason(505), "HTTP Version Not Supported", "reason 505");
	is_str(http_reason(402), "Unknown", "reason 402");
	is_str(http_reason(-400), "Unknown", "reason negative");
	is_str(http_reason(100000), "Unknown", "reason huge");
}

static int
query(const char *q, const char *name, unsigned long long max, unsigned long long *out)
{
	size_t n = strlen(q);

	return http_query_uint(guarded(q, n), n, name, max, out);
}

static void
test_query(void)
{
	unsigned long long v = 77;

	is_int(query("", "limit", 100, &v), 0, "query: empty query");
	is_int(http_query_uint(NULL, 0, "limit", 100, &v), 0, "query: NULL, 0");
	is_int(query("offset=5", "limit", 100, &v), 0, "query: absent");
	is_int(v, 77, "query: absent leaves *out");
	ok(query("limit=42", "limit", 100, &v) == 1 && v == 42, "query: present");
	ok(query("offset=1&limit=7&wait=3", "limit", 100, &v) == 1 && v == 7, "query: middle");
	ok(query("a&b=x&limit=0&c=%zz", "limit", 100, &v) == 1 && v == 0,
	   "query: other params ignored");
	ok(query("limit=007", "limit", 100, &v) == 1 && v == 7, "query: leading zeros");
	ok(query("&&limit=3&", "limit", 100, &v) == 1 && v == 3, "query: empty params ignored");
	is_int(query("limit=", "limit", 100, &v), -1, "query: empty value");
	is_int(query("limit", "limit", 100, &v), -1, "query: no '='");
	is_int(query("limit&x=1", "limit", 100, &v), -1, "query: no '=' then more");
	is_int(query("limit=-1", "limit", 100, &v), -1, "query: -1");
	is_int(query("limit=1.5", "limit", 100, &v), -1, "query: 1.5");
	is_int(query("limit=+1", "limit", 100, &v), -1, "query: +1");
	is_int(query("limit= 1", "limit", 100, &v), -1, "query: leading space");
	is_int(query("limit=1 ", "limit", 100, &v), -1, "query: trailing space");
	is_int(query("limit=%31", "limit", 100, &v), -1, "query: percent escape not decoded");
	is_int(query("limit=1a", "limit", 100, &v), -1, "query: trailing letter");
	is_int(query("limit=0x1", "limit", 100, &v), -1, "query: hex");
	is_int(query("limit=1=2", "limit", 100, &v), -1, "query: second '='");
	ok(query("limit=100", "limit", 100, &v) == 1 && v == 100, "query: max boundary");
	is_int(query("limit=101", "limit", 100, &v), -1, "query: max + 1");
	ok(query("wait=18446744073709551615", "wait", ULLONG_MAX, &v) == -1,
	   "query: 20 digits rejected");
	ok(query("wait=9999999999999999999", "wait", ULLONG_MAX, &v) == 1 &&
	       v == 9999999999999999999ULL,
	   "query: 19 digits accepted");
	is_int(query("wait=99999999999999999999999", "wait", ULLONG_MAX, &v), -1,
	       "query: overflow");
	is_int(query("limit=1&limit=1", "limit", 100, &v), -1, "query: duplicate");
	is_int(query("limit=1&limit", "limit", 100, &v), -1, "query: duplicate without '='");
	is_int(query("Limit=1", "limit", 100, &v), 0, "query: names are case-sensitive");
	is_int(query("limits=1&xlimit=2", "limit", 100, &v), 0, "query: similar names ignored");
	is_int(query("=5", "limit", 100, &v), 0, "query: empty name ignored");
}

static void
head_is(size_t got, const char *out, const char *want, const char *name)
{
	ok(got == strlen(want) && memcmp(out, want, got) == 0, "%s", name);
	if (got != strlen(want) || memcmp(out, want, got) != 0)
		printf("#   got \"%.*s\"\n", (int)got, out);
}

static void
test_format(void)
{
	static const char ct[] = "application/json; charset=utf-8";
	static const char want_ka[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json; "
	                              "charset=utf-8\r\nContent-Length: 12\r\n"
	                              "Cache-Control: no-store\r\n\r\n";
	char buf[512], *g;
	size_t n, len = sizeof(want_ka) - 1;

	n = http_format_head(buf, sizeof(buf), 200, ct, 12, true, 1, NULL);
	head_is(n, buf, want_ka, "format: 1.1 keep-alive");
	n = http_format_head(buf, sizeof(buf), 404, ct, 0, false, 1, NULL);
	head_is(n, buf,
	        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\n"
	        "Content-Length: 0\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
	        "format: close");
	n = http_format_head(buf, sizeof(buf), 200, ct, 2, true, 0, NULL);
	head_is(n, buf,
	        "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
	        "Content-Length: 2\r\nCache-Control: no-store\r\nConnection: keep-alive\r\n\r\n",
	        "format: 1.0 keep-alive");
	n = http_format_head(buf, sizeof(buf), 200, ct, 2, false, 0, NULL);
	head_is(n, buf,
	        "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
	        "Content-Length: 2\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
	        "format: 1.0 close");
	n = http_format_head(buf, sizeof(buf), 405, NULL, 18446744073709551615ULL, true, 1,
	                     "Allow: GET, POST\r\n");
	head_is(n, buf,
	        "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 18446744073709551615\r\n"
	        "Cache-Control: no-store\r\nAllow: GET, POST\r\n\r\n",
	        "format: no Content-Type, extra lines, largest length");
	n = http_format_head(buf, sizeof(buf), 299, NULL, 0, true, 1, NULL);
	head_is(n, buf,
	        "HTTP/1.1 299 Unknown\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\r\n",
	        "format: unknown status");

	/* head and NUL fit exactly, and one short, writing right up to the guard page */
	g = region + REGION - (len + 1);
	n = http_format_head(g, len + 1, 200, ct, 12, true, 1, NULL);
	head_is(n, g, want_ka, "format: head and NUL fit exactly");
	g = region + REGION - len;
	is_int(http_format_head(g, len, 200, ct, 12, true, 1, NULL), 0,
	       "format: one byte short (no room for the NUL)");
	is_int(http_format_head(region + REGION, 0, 200, ct, 12, true, 1, NULL), 0,
	       "format: cap 0");
}


/* ---- response heads (the client's parser) */

static int
parse_resp(const char *s, size_t n, struct http_response *res)
{
	return http_parse_response(guarded(s, n), n, res);
}

/* A whole NUL-terminated response head: its length when that is the result, else -1 or the error. */
static int
parse_resp_str(const char *s, struct http_response *res)
{
	int r = parse_resp(s, strlen(s), res);

	return r == (int)strlen(s) ? r : r > 0 ? -1 : r;
}

#define OK200 "HTTP/1.1 200 OK\r\n"

static const struct pcase rcases[] = {
    C("200 with length", OK200 "Content-Length: 2\r\n\r\n", ALL),
    C("no reason phrase", "HTTP/1.1 204\r\n\r\n", ALL),
    C("empty reason phrase", "HTTP/1.1 204 \r\n\r\n", ALL),
    C("reason with spaces and tab", "HTTP/1.1 503 Service \tUnavailable\r\n\r\n", ALL),
    C("1.0 answer", "HTTP/1.0 200 OK\r\n\r\n", ALL),
    C("599", "HTTP/1.1 599 X\r\n\r\n", ALL),
    C("body bytes after the head", OK200 "Content-Length: 2\r\n\r\n{}", 38),
    C("100 Continue then the answer", "HTTP/1.1 100 Continue\r\n\r\n" OK200 "\r\n", 25),
    C("incomplete", OK200 "Content-Length: 2\r\n", 0),
    C("not HTTP", "SSH-2.0-OpenSSH_9.2\r\n", -502),
    C("HTTP/2", "HTTP/2.0 200 OK\r\n\r\n", -502),
    C("lower-case version", "http/1.1 200 OK\r\n\r\n", -502),
    C("two-digit status", "HTTP/1.1 20 OK\r\n\r\n", -502),
    C("four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", -502),
    C("status 099", "HTTP/1.1 099 X\r\n\r\n", -502),
    C("status 600", "HTTP/1.1 600 X\r\n\r\n", -502),
    C("no space after version", "HTTP/1.1200 OK\r\n\r\n", -502),
    C("bare LF after status line", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", -502),
    C("bare LF after field", OK200 "Content-Length: 0\n\r\n", -502),
    C("control byte in reason", "HTTP/1.1 200 O\001K\r\n\r\n", -502),
    C("Transfer-Encoding", OK200 "Transfer-Encoding: chunked\r\n\r\n", -502),
    C("bad Content-Length", OK200 "Content-Length: 1x\r\n\r\n", -502),
    C("conflicting Content-Length", OK200 "Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
      -502),
    C("19-digit Content-Length", OK200 "Content-Length: 1000000000000000000\r\n\r\n", -502),
    C("space before colon", OK200 "Content-Length : 1\r\n\r\n", -502),
    C("folded field", OK200 "X: a\r\n b\r\n\r\n", -502),
};

static int
rprefix_result_ok(const struct pcase *t, int whole)
{
	struct http_response res;
	size_t k;
	int r;

	for (k = 0; k < t->len; k++) {
		r = parse_resp(t->in, k, &res);
		if (whole > 0 && (size_t)whole <= k ? r != whole
		                                    : r != 0 && (whole >= 0 || r != whole))
			break;
		if ((r < 0) != (res.error != NULL))
			break;
	}
	if (k < t->len)
		printf("# %s: prefix of %zu bytes gave %d\n", t->name, k, r);
	return k == t->len;
}

static void
test_response_table(void)
{
	struct http_response res;
	size_t i, n = sizeof(rcases) / sizeof(rcases[0]), bad_msg = 0, bad_prefix = 0;
	int r, want;

	for (i = 0; i < n; i++) {
		const struct pcase *t = &rcases[i];

		want = t->want == ALL ? (int)t->len : t->want;
		r = parse_resp(t->in, t->len, &res);
		is_int(r, want, "response: %s", t->name);
		if ((r < 0) != (res.error != NULL)) {
			printf("# %s: error message %s\n", t->name, res.error ? res.error : "(null)");
			bad_msg++;
		}
		bad_prefix += !rprefix_result_ok(t, want);
	}
	ok(bad_msg == 0, "response: res->error set exactly on failure, all %zu cases", n);
	ok(bad_prefix == 0, "response: every prefix of all %zu cases gives 0 or the whole result",
	   n);
}

static void
test_response_fields(void)
{
	static char big[HTTP_MAX_HEAD + 16];
	struct http_response res;
	int r;

	r = parse_resp_str(OK200 "Content-Length: 12\r\nX-Y: a\r\n\r\n", &res);
	ok(r > 0 && res.status == 200 && res.minor_version == 1, "response: status and version");
	ok(res.content_length == 12 && res.num_headers == 2, "response: length and fields");
	ok(view_is(res.headers[1].name, res.headers[1].name_len, "X-Y") &&
	       view_is(res.headers[1].value, res.headers[1].value_len, "a"),
	   "response: field views");
	ok(res.keep_alive, "response: 1.1 keeps the connection");
	r = parse_resp_str("HTTP/1.1 204\r\n\r\n", &res);
	ok(r > 0 && res.status == 204 && res.content_length == -1,
	   "response: no reason, no length is -1");
	r = parse_resp_str(OK200 "Connection: close\r\n\r\n", &res);
	ok(r > 0 && !res.keep_alive, "response: Connection: close");
	r = parse_resp_str("HTTP/1.0 200 OK\r\n\r\n", &res);
	ok(r > 0 && !res.keep_alive, "response: 1.0 closes by default");
	r = parse_resp_str("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", &res);
	ok(r > 0 && res.keep_alive, "response: 1.0 with keep-alive");
	r = parse_resp_str("HTTP/1.1 100 Continue\r\n\r\n", &res);
	ok(r > 0 && res.status == 100, "response: a 1xx head is returned for the caller to skip");
	r = parse_resp("HTTP/1.1 2x", 11, &res);
	ok(r == -502 && res.error != NULL, "response: a bad status is seen before the line ends");

	memcpy(big, OK200 "X: ", 20);
	memset(big + 20, 'a', sizeof(big) - 20);
	is_int(parse_resp(big, HTTP_MAX_HEAD, &res), -502, "response: unfinished at HTTP_MAX_HEAD");
	is_int(parse_resp(big, HTTP_MAX_HEAD - 1, &res), 0, "response: one byte under, need more");
	is_int(http_parse_response(NULL, 0, &res), 0, "response: NULL, 0 needs more");
}

static void
test_parse_uint(void)
{
	unsigned long long v = 77;

	ok(http_parse_uint("0", 1, 0, &v) == 0 && v == 0, "uint: 0");
	ok(http_parse_uint("65535x", 5, 65535, &v) == 0 && v == 65535, "uint: a view, max");
	is_int(http_parse_uint("65536", 5, 65535, &v), -1, "uint: over max");
	is_int(v, 65535, "uint: failure leaves *out");
	is_int(http_parse_uint("", 0, 9, &v), -1, "uint: empty");
	is_int(http_parse_uint("-1", 2, 9, &v), -1, "uint: sign");
	is_int(http_parse_uint("1 ", 2, 9, &v), -1, "uint: space");
	ok(http_parse_uint("9999999999999999999", 19, ULLONG_MAX, &v) == 0 &&
	       v == 9999999999999999999ULL,
	   "uint: 19 digits");
	is_int(http_parse_uint("00000000000000000001", 20, 9, &v), -1, "uint: 20 digits");
}

/* ---- the connection: the tests are its owner */

static double clock_now = 1000.0;

/* What the owner saw of one connection. */
struct owned {
	struct http_conn *c;
	int peer;        /* the client's end */
	short events;    /* last watch */
	double deadline;
	int watches, requests, closed, expired;
	enum { ANSWER, HOLD, NOTHING, TWICE, LAST } on_request;
	char path[64];
};

static void
on_request(struct http_conn *c, const struct http_request *req, const char *body, size_t len)
{
	struct owned *o = http_conn_owner(c);

	(void)body;
	o->requests++;
	snprintf(o->path, sizeof(o->path), "%.*s", (int)req->path_len, req->path);
	if (o->on_request == HOLD)
		http_conn_hold(c, clock_now + 5);
	if (o->on_request == LAST)
		http_conn_busy(c);
	if (o->on_request == ANSWER || o->on_request == TWICE || o->on_request == LAST)
		http_conn_respond(c, 200, "text/plain", o->path, strlen(o->path), NULL);
	if (o->on_request == TWICE)
		http_conn_respond(c, 200, "text/plain", "x", 1, NULL);
	(void)len;
}

static void
on_expired(struct http_conn *c)
{
	struct owned *o = http_conn_owner(c);

	o->expired++;
	http_conn_respond(c, 200, "text/plain", "late", 4, NULL);
}

static void
on_watch(struct http_conn *c, short events, double deadline)
{
	struct owned *o = http_conn_owner(c);

	o->watches++;
	o->events = events;
	o->deadline = deadline;
}

static void
on_closed(struct http_conn *c)
{
	struct owned *o = http_conn_owner(c);

	o->closed++;
}

static struct http_server *
server(void)
{
	static const struct http_callbacks cb = {.request = on_request, .hold_expired = on_expired,
						 .watch = on_watch, .closed = on_closed};
	struct http_server_config cfg = {.max_body = 100, .now = &clock_now, .max_conns = 8};

	return http_server_new(&cfg, &cb);
}

/* A connection over a socketpair, its owner record o. */
static void
open_conn(struct http_server *s, struct owned *o)
{
	int sv[2];

	memset(o, 0, sizeof(*o));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
		perror("socketpair");
		exit(2);
	}
	o->peer = sv[1];
	o->c = http_conn_new(s, sv[0], o);
}

static void
client_send(struct owned *o, const char *req)
{
	if (write(o->peer, req, strlen(req)) != (ssize_t)strlen(req))
		exit(2);
}

/* What the client has received so far (NUL-terminated). */
static char *
client_read(struct owned *o)
{
	static char buf[4096];
	ssize_t n = read(o->peer, buf, sizeof(buf) - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: x\r\n\r\n"

static void
test_conn_exchange(void)
{
	struct http_server *s = server();
	struct owned o;

	open_conn(s, &o);
	ok(o.c && http_conn_state(o.c) == HTTP_CONN_IDLE, "conn: new is IDLE");
	ok(o.watches == 1 && (o.events & POLLIN) && o.deadline == clock_now + HTTP_IDLE_TIMEOUT,
	   "conn: the owner is told to read, and the idle deadline");
	client_send(&o, GET("/a"));
	http_conn_event(o.c, POLLIN);
	ok(o.requests == 1 && strcmp(o.path, "/a") == 0, "conn: the request reaches the handler");
	is_int(http_conn_state(o.c), HTTP_CONN_WRITING, "conn: answered, WRITING");
	ok(strcmp(client_read(&o), "") == 0, "conn: nothing is written before the flush");
	http_server_flush(s);
	ok(strstr(client_read(&o), "200 OK") != NULL, "conn: the flush writes the answer");
	is_int(http_conn_state(o.c), HTTP_CONN_IDLE, "conn: IDLE again (keep-alive)");

	client_send(&o, GET("/b") GET("/c"));
	http_conn_event(o.c, POLLIN);
	ok(o.requests == 2 && strcmp(o.path, "/b") == 0, "conn: pipelined: the first runs");
	http_server_flush(s);
	ok(http_server_ready(s), "conn: pipelined: the second waits for the next process pass");
	http_server_process(s);
	ok(o.requests == 3 && strcmp(o.path, "/c") == 0, "conn: pipelined: then runs, in order");
	http_server_flush(s);
	ok(strstr(client_read(&o), "/c") != NULL, "conn: pipelined answers written in order");

	client_send(&o, "GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	http_conn_event(o.c, POLLIN);
	is_int(http_conn_state(o.c), HTTP_CONN_CLOSING, "conn: Connection: close is CLOSING");
	http_server_flush(s);
	ok(http_conn_state(o.c) == HTTP_CONN_CLOSED && o.closed == 1,
	   "conn: closed once written, the owner told once");
	ok(strstr(client_read(&o), "Connection: close") != NULL, "conn: the answer says close");
	ok(http_server_connections(s) == 0, "conn: counted out");
	http_server_sweep(s);
	close(o.peer);
	http_server_free(s);
}

/* http_conn_busy: a keep-alive request's answer is the connection's last, held or not. */
static void
test_conn_last(void)
{
	struct http_server *s = server();
	struct owned o;
	char *got;

	open_conn(s, &o);
	o.on_request = LAST;
	client_send(&o, GET("/a"));
	http_conn_event(o.c, POLLIN);
	is_int(http_conn_state(o.c), HTTP_CONN_CLOSING,
	       "last: a keep-alive request's answer is CLOSING");
	http_server_flush(s);
	got = client_read(&o);
	ok(strstr(got, "200 OK") && strstr(got, "Connection: close"), "last: it says close");
	ok(http_conn_state(o.c) == HTTP_CONN_CLOSED && o.closed == 1, "last: closed once written");
	http_server_sweep(s);
	close(o.peer);

	open_conn(s, &o);
	o.on_request = HOLD;
	client_send(&o, GET("/h"));
	http_conn_event(o.c, POLLIN);
	is_int(http_conn_state(o.c), HTTP_CONN_HELD, "last: a long-poll is held");
	http_conn_busy(o.c);
	http_conn_respond(o.c, 503, "text/plain", "busy", 4, "Retry-After: 1\r\n");
	http_server_flush(s);
	got = client_read(&o);
	ok(strstr(got, "503 ") && strstr(got, "Connection: close") && strstr(got, "Retry-After: 1"),
	   "last: a held request's answer too, with its extra header");
	ok(http_conn_state(o.c) == HTTP_CONN_CLOSED, "last: and the held connection is closed");
	http_server_sweep(s);
	close(o.peer);
	http_server_free(s);
}

static void
test_conn_deadlines(void)
{
	struct http_server *s = server();
	struct owned o;

	open_conn(s, &o);
	clock_now += 3;
	client_send(&o, "GET / HTTP/1.1\r\n");
	http_conn_event(o.c, POLLIN);
	ok(http_conn_state(o.c) == HTTP_CONN_READING && o.deadline == clock_now + HTTP_IDLE_TIMEOUT,
	   "conn: a request begun is READING, its deadline from its first byte");
	clock_now = o.deadline;
	http_conn_timeout(o.c);
	is_int(http_conn_state(o.c), HTTP_CONN_CLOSING, "conn: unfinished at the deadline: CLOSING");
	http_server_flush(s);
	ok(strstr(client_read(&o), "408 Request Timeout") != NULL && o.closed == 1,
	   "conn: with a 408, then closed");
	close(o.peer);

	open_conn(s, &o);
	clock_now += 1;
	http_conn_timeout(o.c);
	ok(http_conn_state(o.c) == HTTP_CONN_CLOSED && strcmp(client_read(&o), "") == 0,
	   "conn: an idle connection at its deadline is closed without a word");
	close(o.peer);

	open_conn(s, &o);
	client_send(&o, "GET / HTTP/1.1\r\nHost: x\r\n\n");
	http_conn_event(o.c, POLLIN);
	http_server_flush(s);
	ok(strstr(client_read(&o), "400 Bad Request") != NULL && o.closed == 1 && o.requests == 0,
	   "conn: a malformed head is 400 and closes; no handler runs");
	close(o.peer);

	open_conn(s, &o);
	client_send(&o, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n");
	http_conn_event(o.c, POLLIN);
	http_server_flush(s);
	ok(strstr(client_read(&o), "413") != NULL && o.closed == 1, "conn: a body over max_body is 413");
	close(o.peer);

	open_conn(s, &o);
	client_send(&o, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
	http_conn_event(o.c, POLLIN);
	ok(strstr(client_read(&o), "100 Continue") != NULL && o.requests == 0,
	   "conn: Expect: 100-continue is answered before the body");
	client_send(&o, "{}");
	http_conn_event(o.c, POLLIN);
	ok(o.requests == 1, "conn: then the request runs with its body");
	http_server_flush(s);
	client_read(&o);
	shutdown(o.peer, SHUT_WR);
	http_conn_event(o.c, POLLIN | POLLRDHUP);
	ok(http_conn_state(o.c) == HTTP_CONN_CLOSED, "conn: the client's EOF when idle closes it");
	close(o.peer);
	http_server_sweep(s);
	http_server_free(s);
}

static void
test_conn_hold(void)
{
	struct http_server *s = server();
	struct owned a, b;

	open_conn(s, &a);
	open_conn(s, &b);
	client_send(&a, GET("/a"));
	client_send(&b, GET("/b"));
	http_conn_event(a.c, POLLIN);
	http_conn_event(b.c, POLLIN);
	ok(http_conn_state(a.c) == HTTP_CONN_WRITING && http_conn_state(b.c) == HTTP_CONN_WRITING &&
	   b.requests == 1, "hold: two complete requests are both answered at once");
	http_server_flush(s);
	client_read(&a);
	client_read(&b);

	a.on_request = HOLD;
	client_send(&a, GET("/held"));
	http_conn_event(a.c, POLLIN);
	ok(http_conn_state(a.c) == HTTP_CONN_HELD && a.deadline == clock_now + 5,
	   "hold: a hold is HELD with the owner's deadline");
	client_send(&b, GET("/b2"));
	http_conn_event(b.c, POLLIN);
	ok(b.requests == 2, "hold: another request is answered meanwhile");
	http_server_flush(s);
	clock_now += 5;
	http_conn_timeout(a.c);
	ok(a.expired == 1 && http_conn_state(a.c) == HTTP_CONN_WRITING,
	   "hold: the hold's deadline asks the owner to answer");
	http_server_flush(s);
	ok(strstr(client_read(&a), "late") != NULL, "hold: and the late answer is written");

	a.on_request = ANSWER;
	client_send(&a, GET("/first"));
	http_conn_event(a.c, POLLIN);
	http_conn_retract(a.c);
	ok(http_conn_state(a.c) == HTTP_CONN_ANSWERING, "hold: a retracted answer is ANSWERING");
	http_conn_respond(a.c, 503, "text/plain", "no", 2, NULL);
	http_server_flush(s);
	{
		const char *got = client_read(&a);

		ok(strstr(got, "503") && !strstr(got, "/first"), "hold: only the second answer "
		   "goes out");
	}
	close(a.peer);
	close(b.peer);
	http_server_free(s);
	ok(a.closed == 1 && b.closed == 1, "hold: freeing the server closes its connections");
}

/* A handler that answers twice breaks the phase table: the process stops right there. */
static void
test_conn_illegal(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		struct http_server *s = server();
		struct owned o;

		if (!freopen("/dev/null", "w", stderr))
			_exit(2);
		open_conn(s, &o);
		o.on_request = TWICE;
		client_send(&o, GET("/"));
		http_conn_event(o.c, POLLIN);
		_exit(0);
	}
	ok(pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
	   "conn: a second answer to one request aborts (WRITING cannot become WRITING)");
}

int
main(void)
{
	guard_init();
	test_table();
	test_fields();
	test_connection();
	test_pipelined();
	test_limits();
	test_field_count();
	test_misc();
	test_query();
	test_format();
	test_response_table();
	test_response_fields();
	test_parse_uint();
	test_conn_exchange();
	test_conn_last();
	test_conn_deadlines();
	test_conn_hold();
	test_conn_illegal();
	return tap_done();
}
