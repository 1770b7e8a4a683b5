/*
 * fuzz_http.c - libFuzzer target for http_parse_request and http_parse_response.
 *
 * Invariants checked on arbitrary bytes: the result is <= len; on success every view lies
 * inside the head, names are non-empty, values carry no CR/LF and no surrounding whitespace;
 * num_headers <= HTTP_MAX_HEADERS; an error always has a message. Prefixes at a few cut points
 * derived from the input must give 0, or the whole input's result (its length when k reaches
 * it, or the same error): the parser never decides on bytes it has not seen. The same bytes
 * parsed as a response head: the same bounds, a status in 100..599, failures only -502.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

static void
check_view(const char *v, size_t n, const char *buf, int r)
{
	CHECK(v != NULL);
	CHECK(v >= buf && n <= (size_t)r && v - buf <= r - (long)n);
}

static void
check_request(const char *buf, size_t len, int r, const struct http_request *req)
{
	size_t i;

	CHECK(r <= (long long)len);
	CHECK(req->num_headers <= HTTP_MAX_HEADERS);
	CHECK((r < 0) == (req->error != NULL));
	if (r <= 0)
		return;
	check_view(req->method, req->method_len, buf, r);
	check_view(req->path, req->path_len, buf, r);
	check_view(req->query, req->query_len, buf, r);
	CHECK(req->method_len > 0 && req->path_len > 0 && req->path[0] == '/');
	CHECK(req->minor_version == 0 || req->minor_version == 1);
	CHECK(req->content_length >= -1 && req->content_length < 1000000000000000000LL);
	CHECK(!req->expect_continue || req->minor_version == 1);
	for (i = 0; i < req->num_headers; i++) {
		const struct http_header *h = &req->headers[i];

		check_view(h->name, h->name_len, buf, r);
		check_view(h->value, h->value_len, buf, r);
		CHECK(h->name_len > 0);
		CHECK(!memchr(h->value, '\r', h->value_len) &&
		      !memchr(h->value, '\n', h->value_len));
		if (h->value_len)
			CHECK(h->value[0] != ' ' && h->value[h->value_len - 1] != ' ' &&
			      h->value[0] != '\t' && h->value[h->value_len - 1] != '\t');
	}
	if (req->num_headers > 0)
		CHECK(http_header_get(req, "host") || req->minor_version == 0);
}

/* A prefix of k bytes, copied to its own allocation so ASan sees any read past k. */
static void
check_prefix(const uint8_t *data, size_t k, int whole)
{
	struct http_request req;
	char *p = malloc(k ? k : 1);
	int r;

	CHECK(p != NULL);
	memcpy(p, data, k);
	r = http_parse_request(p, k, &req);
	check_request(p, k, r, &req);
	if (whole > 0 && (size_t)whole <= k)
		CHECK(r == whole);
	else
		CHECK(r == 0 || (whole < 0 && r == whole));
	free(p);
}

static void
check_response(const char *buf, size_t len, int r, const struct http_response *res)
{
	size_t i;

	CHECK(r <= (long long)len);
	CHECK(r >= 0 || r == -502);
	CHECK(res->num_headers <= HTTP_MAX_HEADERS);
	CHECK((r < 0) == (res->error != NULL));
	if (r <= 0)
		return;
	CHECK(res->status >= 100 && res->status <= 599);
	CHECK(res->content_length >= -1 && res->content_length < 1000000000000000000LL);
	for (i = 0; i < res->num_headers; i++) {
		check_view(res->headers[i].name, res->headers[i].name_len, buf, r);
		if (res->headers[i].value_len)
			check_view(res->headers[i].value, res->headers[i].value_len, buf, r);
	}
}

static void
check_response_prefix(const uint8_t *data, size_t k, int whole)
{
	struct http_response res;
	char *p = malloc(k ? k : 1);
	int r;

	CHECK(p != NULL);
	memcpy(p, data, k);
	r = http_parse_response(p, k, &res);
	check_response(p, k, r, &res);
	if (whole > 0 && (size_t)whole <= k)
		CHECK(r == whole);
	else
		CHECK(r == 0 || (whole < 0 && r == whole));
	free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_request req;
	const char *buf = (const char *)data;
	size_t cuts[5], i;
	int r;

	r = http_parse_request(buf, size, &req);
	check_request(buf, size, r, &req);
	if (size == 0)
		return 0;
	cuts[0] = size - 1;
	cuts[1] = size / 2;
	cuts[2] = data[0] % size;
	cuts[3] = r > 0 ? (size_t)r - 1 : (size * 7 + data[size - 1]) % size;
	cuts[4] = r > 0 ? (size_t)r : size / 3; /* the head alone parses to itself */
	for (i = 0; i < 5; i++)
		check_prefix(data, cuts[i], r);

	{
		struct http_response res;
		int rr = http_parse_response(buf, size, &res);

		check_response(buf, size, rr, &res);
		check_response_prefix(data, size - 1, rr);
		check_response_prefix(data, size / 2, rr);
		if (rr > 0)
			check_response_prefix(data, (size_t)rr, rr);
	}
	return 0;
}
