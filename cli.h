/*
 * cli.h - the command-line client: every subcommand of tt-device-queue except `serve`.
 *
 * The client speaks HTTP/1.1 to the daemon over one TCP socket, reads the answers' heads with
 * http.h's response parser and their JSON with json.h; it links no other module (the Makefile's
 * tests/bin/client-only proves it). Waits use the daemon's `wait=S` long-polls, never a busy
 * loop.
 */
#ifndef TTQ_CLI_H
#define TTQ_CLI_H

/*
 * Run the client with main's argv (argv[0] the program name). Returns the process exit
 * status: the job's status for run/result (a negative status -s becomes 128+s), 0 for other
 * successes, 1 when the server is unreachable or refused the request, 2 for usage errors,
 * 124 when --wait-timeout passed, 130 when interrupted while waiting.
 */
int cli_main(int argc, char **argv);

#endif
