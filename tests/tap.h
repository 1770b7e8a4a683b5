/*
 * tap.h - a tiny Test Anything Protocol helper for the unit-test binaries.
 *
 * Each check prints "ok N - name" or "not ok N - name" with the file and line of a failure;
 * tap_done() prints the plan "1..N" last and returns the exit status (0 only when every check
 * passed), so `prove` reads both the plan and the outcome.
 */
#ifndef TTQ_TAP_H
#define TTQ_TAP_H

#include <stdio.h>
#include <stdarg.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...)                                                                     \
	do {                                                                                       \
		long long g_ = (long long)(got), w_ = (long long)(want);                           \
		if (!tap_ok(g_ == w_, __FILE__, __LINE__, __VA_ARGS__))                            \
			printf("#   got %lld, want %lld\n", g_, w_);                                  \
	} while (0)
#define is_str(got, want, ...)                                                                     \
	do {                                                                                       \
		const char *g_ = (got), *w_ = (want);                                              \
		int same_ = (g_ && w_) ? strcmp(g_, w_) == 0 : g_ == w_;                           \
		if (!tap_ok(same_, __FILE__, __LINE__, __VA_ARGS__))                               \
			printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)",                    \
			       w_ ? w_ : "(null)");                                                \
	} while (0)

__attribute__((format(printf, 4, 5))) static int
tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	tap_n++;
	printf("%sok %d - ", cond ? "" : "not ", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		tap_failed++;
		printf("#   failed at %s:%d\n", file, line);
	}
	fflush(stdout);
	return cond;
}

static int
tap_done(void)
{
	printf("1..%d\n", tap_n);
	if (tap_failed)
		printf("# %d of %d checks failed\n", tap_failed, tap_n);
	return tap_failed ? 1 : 0;
}

#endif
