/*
 * http.h - HTTP/1.1 heads (request and response parsers, the response-head writer), the query
 * reader, and the server side of client connections (struct http_conn): accepting them on the
 * listening socket, within a cap.
 *
 * The parsers are stateless and I/O-free, in the manner of picohttpparser: they read the
 * caller's buffer and fill a struct whose strings are views (pointer + length) into that
 * buffer, valid as long as the buffer is.
 *
 * Failures are HTTP statuses (enum http_status) so a malformed request maps straight to its
 * answer. Strict by design (RFC 9110, RFC 9112): CRLF line ends only (a bare LF is 400), no
 * obs-fold, no whitespace before a header's colon, targets of visible ASCII: origin-form, or
 * absolute-form "http://" host [ ":" port ] then the path (RFC 9112 3.2.2), served as that
 * path and query (an empty path as "/"), with no userinfo and a host (RFC 9110 4.2.1, 4.2.4);
 * other schemes, asterisk-form and authority-form are 400. HTTP/1.x only (1.2 and later are
 * served as 1.1, RFC 9110 2.5; other major versions 505). Host required from 1.1 on, one at
 * most, empty or a valid uri-host [ ":" port ] (RFC 9112 3.2, RFC 3986 3.2.2), whatever the
 * target's form: with an absolute-form target it is checked but not compared with the
 * target's authority, which wins (RFC 9112 3.2.2). One Content-Length (repeats must agree),
 * any Transfer-Encoding is 411 (bodies need a length), heads over HTTP_MAX_HEAD bytes or with
 * more than HTTP_MAX_HEADERS fields are 431.
 *
 * A connection reads and writes its socket but neither polls nor keeps time: its owner does
 * both, as the connection asks (struct http_callbacks), and calls back in. The listening
 * socket is one such connection (HTTP_CONN_LISTENING), polled and timed the same way.
 */
#ifndef TTQ_HTTP_H
#define TTQ_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_MAX_HEAD (16 * 1024) /* request line + headers: over it is 431 */
#define HTTP_MAX_HEADERS 64       /* more header fields is 431 */

enum http_status {
	HTTP_CONTINUE = 100,
	HTTP_OK = 200,
	HTTP_BAD_REQUEST = 400,
	HTTP_NOT_FOUND = 404,
	HTTP_METHOD_NOT_ALLOWED = 405,
	HTTP_REQUEST_TIMEOUT = 408,
	HTTP_CONFLICT = 409,
	HTTP_LENGTH_REQUIRED = 411,
	HTTP_PAYLOAD_TOO_LARGE = 413,
	HTTP_EXPECTATION_FAILED = 417,
	HTTP_UNPROCESSABLE_CONTENT = 422, /* an Idempotency-Key reused for another request */
	HTTP_HEADER_FIELDS_TOO_LARGE = 431,
	HTTP_INTERNAL_SERVER_ERROR = 500,
	HTTP_NOT_IMPLEMENTED = 501,
	HTTP_BAD_GATEWAY = 502, /* a malformed response head (http_parse_response) */
	HTTP_SERVICE_UNAVAILABLE = 503,
	HTTP_VERSION_NOT_SUPPORTED = 505,
};

/* Reason phrase for a status ("Not Found"); "Unknown" for codes not in the enum. */
const char *http_reason(int status);

struct http_header {
	const char *name; /* view, not NUL-terminated */
	size_t name_len;
	const char *value; /* view without surrounding whitespace */
	size_t value_len;
};

struct http_request {
	const char *method; /* view: the method token, e.g. "GET" */
	size_t method_len;
	const char *path; /* view: the target's path, up to (not including) '?'; never empty */
	size_t path_len;
	const char *query; /* view: after the first '?' (empty when none) */
	size_t query_len;
	int minor_version; /* 0 for HTTP/1.0, 1 for HTTP/1.1 and later 1.x */
	struct http_header headers[HTTP_MAX_HEADERS];
	size_t num_headers;
	long long content_length; /* -1 when the request has no Content-Length */
	bool keep_alive;          /* connection persists after this exchange (version + Connection) */
	bool expect_continue;     /* "Expect: 100-continue" was sent */
	const char *error;        /* static message when parsing failed, else NULL */
};

/*
 * Parse one request head at buf[0..len).
 * Returns the head's length in bytes (> 0, including the blank line) when it is complete,
 * 0 when more bytes are needed, or -status (-400, -411, -413, -417, -431, -505) when the request
 * is malformed; then req->error holds a static human message (-413: a Content-Length of more
 * than 18 digits). A head still incomplete at HTTP_MAX_HEAD bytes is -431. Reads nothing
 * outside buf[0..len). RFC 9112 sections 2-3, 5-6.
 */
int http_parse_request(const char *buf, size_t len, struct http_request *req);

/* A response head as http_parse_response leaves it; strings are views into its buffer. */
struct http_response {
	int minor_version; /* HTTP/1.x */
	int status;        /* 100..599 */
	struct http_header headers[HTTP_MAX_HEADERS];
	size_t num_headers;
	long long content_length; /* -1 when the response has no Content-Length */
	bool keep_alive;          /* the server keeps the connection (version + Connection) */
	const char *error;        /* static message when parsing failed, else NULL */
};

/*
 * Parse one response head at buf[0..len), for a client: status line, header fields, the
 * blank line (RFC 9112 4-6), with the request parser's rules for fields and line ends.
 * Returns the head's length (> 0) when complete, 0 when more bytes are needed, or -502
 * (HTTP_BAD_GATEWAY, as an intermediary would answer) when malformed: not HTTP/1.x, a status
 * outside 100..599, any Transfer-Encoding (answers here always carry Content-Length), or a head
 * over HTTP_MAX_HEAD bytes; then res->error holds a static message. A 1xx head is returned like
 * any other (the caller skips it). Reads nothing outside buf[0..len).
 */
int http_parse_response(const char *buf, size_t len, struct http_response *res);

/*
 * Find the header `name` (case-insensitive, NUL-terminated) in a parsed request.
 * Returns the first match, or NULL.
 */
const struct http_header *http_header_get(const struct http_request *req, const char *name);

/*
 * A decimal number of 1 to 19 digits (so it cannot overflow) at s[0..n), at most max, into
 * *out: the numbers of HTTP (Content-Length, query parameters) and the client's options.
 * Returns 0, or -1 (*out untouched) when empty, longer, not all digits, or over max.
 */
int http_parse_uint(const char *s, size_t n, unsigned long long max, unsigned long long *out);

/*
 * Read query parameter `name` from a query view as a decimal non-negative integer <= max.
 * Returns 1 and sets *out when present and valid, 0 when absent, -1 when present but not a
 * plain decimal integer in 0..max (empty, sign, letters, percent-escapes, overflow) or when
 * the name appears more than once. Unknown parameters are ignored.
 */
int http_query_uint(const char *query, size_t query_len, const char *name, unsigned long long max,
		    unsigned long long *out);

/*
 * Write a response head into out[0..cap): status line, Content-Type (when not NULL),
 * Content-Length, "Cache-Control: no-store", "Connection: close" when !keep_alive (or
 * "Connection: keep-alive" for a kept HTTP/1.0 connection when minor_version is 0), then
 * `extra` verbatim (NULL or complete "Name: value\r\n" lines), then the blank line, and a NUL.
 * Returns the head's length (without the NUL), or 0 when head and NUL do not fit in cap.
 */
size_t http_format_head(char *out, size_t cap, int status, const char *content_type,
			size_t content_length, bool keep_alive, int minor_version, const char *extra);

/* ------------------------------------------------------------------------ connections */

#define HTTP_IDLE_TIMEOUT 10.0  /* s: an idle connection is closed, an unfinished request 408 */
#define HTTP_WRITE_TIMEOUT 10.0 /* s a client may read nothing of its answer before it is cut */
/* Connections accepted beyond max_conns only to be answered the busy 503 (http_conn_busy):
 * without them a client at the cap heard nothing until its own timeout. */
#define HTTP_BUSY_SLOTS 16

/*
 * A connection's phase. Every change goes through one transition function (http.c), which
 * aborts on a change its table does not allow.
 */
enum http_conn_state {
	HTTP_CONN_IDLE,      /* nothing buffered: closed after HTTP_IDLE_TIMEOUT */
	HTTP_CONN_READING,   /* a request partly here: 408 HTTP_IDLE_TIMEOUT after its first byte */
	HTTP_CONN_ANSWERING, /* complete: its handler runs (now, or at http_server_process) */
	HTTP_CONN_HELD,      /* a long-poll the owner answers later */
	HTTP_CONN_WRITING,   /* an answer is being written; then the next request */
	HTTP_CONN_CLOSING,   /* the last answer is being written; then closed */
	HTTP_CONN_CLOSED,    /* descriptor closed; freed at http_server_sweep */
	HTTP_CONN_LISTENING, /* the listening socket (http_server_listen): accepts connections */
};

struct http_server; /* the connections */
struct http_conn;   /* one client connection */

/*
 * What a server calls up into its owner. Each gets the connection concerned; its owner pointer
 * is http_conn_owner(c).
 */
struct http_callbacks {
	/*
	 * A complete request: answer it (http_conn_respond) or hold it (http_conn_hold) before
	 * returning. req's views and body[0..body_len) live until the callback returns.
	 */
	void (*request)(struct http_conn *c, const struct http_request *req, const char *body,
			size_t body_len);
	/* The deadline of a hold passed: answer it now. */
	void (*hold_expired)(struct http_conn *c);
	/*
	 * What c waits for, whenever it may have changed: poll events (POLLIN, POLLOUT,
	 * POLLRDHUP) on its descriptor, and a monotonic deadline in seconds (0: none) at which to
	 * call http_conn_timeout.
	 */
	void (*watch)(struct http_conn *c, short events, double deadline);
	/*
	 * c is closed: drop its watch and deadline and forget it. Its descriptor is closed right
	 * after; c stays valid (in state HTTP_CONN_CLOSED) until http_server_sweep, and its owner
	 * pointer is not used again.
	 */
	void (*closed)(struct http_conn *c);
	/*
	 * c was accepted, or is the listener (http_server_listen), on descriptor fd: return its
	 * owner's pointer, which `watch` then tells what to poll fd for, or NULL when out of
	 * memory (c is then dropped unseen).
	 */
	void *(*opened)(struct http_conn *c, int fd);
	/* A line for the daemon's log: why accepting pauses (at most once a minute). */
	void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct http_server_config {
	size_t max_body;  /* bytes of a request body; a longer Content-Length is 413 and closes */
	const double *now; /* the owner's monotonic clock in seconds, current for this turn */
	/* Connections served; HTTP_BUSY_SLOTS more are accepted to be answered the busy 503
	 * naming the setting max_conns_name, and further ones wait in the listen backlog. */
	long long max_conns;
	const char *max_conns_name;
};

/*
 * A server with no connections. Copies cfg and cb. Returns NULL when out of memory.
 * Free with http_server_free.
 */
struct http_server *http_server_new(const struct http_server_config *cfg,
				    const struct http_callbacks *cb);

/* Close every connection (calling `closed` for each) and free the server. NULL is allowed. */
void http_server_free(struct http_server *s);

/*
 * Take over the connected, non-blocking socket fd, its owner's pointer `owner`: it is IDLE
 * and `watch` is called for it before this returns. Returns NULL when out of memory (fd is
 * then still the caller's).
 */
struct http_conn *http_conn_new(struct http_server *s, int fd, void *owner);

/*
 * Accept connections on the listening, non-blocking socket fd from now on (`opened` and `watch`
 * are called for it before this returns), or, with fd -1, close the one accepted on so far.
 * Out of descriptors or memory, accepting pauses a moment, the backlog waiting meanwhile.
 * Returns 0, or -1 when out of memory.
 */
int http_server_listen(struct http_server *s, int fd);

/* The owner's pointer given to http_conn_new, and the connection's phase now. */
void *http_conn_owner(const struct http_conn *c);
enum http_conn_state http_conn_state(const struct http_conn *c);

/*
 * The poll events revents came for c's descriptor: read, answer, queue writes, or close; on
 * the listener, accept. c is a struct http_conn, untyped so that this and http_conn_timeout
 * are the owner's poll and timer callbacks themselves.
 */
void http_conn_event(void *c, short revents);

/* c's deadline passed (its watch's): a 408, a close, a hold's end, or the listener's pause. */
void http_conn_timeout(void *c);

/*
 * Answer the request c is ANSWERING, or its hold: a head (http_format_head, with Connection:
 * close once the request or the server wants it) and body[0..len), copied. The answer is
 * written by http_server_flush. Ignored on a CLOSED connection; closes c when out of memory.
 */
void http_conn_respond(struct http_conn *c, int status, const char *content_type,
		       const void *body, size_t len, const char *extra);

/*
 * http_conn_respond with the JSON error {"error": the message fmt makes (up to 1023 bytes)}:
 * every error answer, the owner's and those found here. Closes c when out of memory.
 */
void http_conn_error(struct http_conn *c, int status, const char *extra, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Make the answer c gives next (to the request it is ANSWERING, or its hold) the busy 503 (the
 * owner's, with Retry-After: the request was not handled): its last, the head saying
 * Connection: close and c closed once it is written, whatever the request asked, so a client
 * pausing before it asks again holds no connection meanwhile; and count it (http_server_busy).
 * Call before answering (http_conn_error, http_conn_respond). Returns c.
 */
struct http_conn *http_conn_busy(struct http_conn *c);

/*
 * Hold the request c is ANSWERING: its answer comes later from the owner (http_conn_respond),
 * or `hold_expired` is called at monotonic time `until`.
 */
void http_conn_hold(struct http_conn *c, double until);

/*
 * Take back the answer given to c's request, not yet written (answers are written only by
 * http_server_flush): c is ANSWERING again, and the owner answers anew. Ignored when CLOSED.
 */
void http_conn_retract(struct http_conn *c);

/* Run the requests that became ready (pipelined after an answer was written): answer them. */
void http_server_process(struct http_server *s);

/* Whether requests wait for http_server_process: the owner's loop must not sleep. */
bool http_server_ready(const struct http_server *s);

/* Write every queued answer as far as each socket takes it now. */
void http_server_flush(struct http_server *s);

/* Free the connections closed since the last sweep. Call when no callback is running. */
void http_server_sweep(struct http_server *s);

/* Connections open now (not CLOSED, not the listener). */
long long http_server_connections(const struct http_server *s);

/* Busy 503s since the start: http_conn_busy's and those of connections over max_conns. */
long long http_server_busy(const struct http_server *s);

#endif
