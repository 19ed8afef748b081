/*
 * A stand-in for the agent's Kubernetes client (k8s-agent/kube_client.c) in the agent's fuzz
 * targets: every API answer comes from the fuzz input. The input is cut at NUL bytes into answers,
 * taken in order by agent_kube_request, agent_kube_read_by_patch and the watch streams
 * (agent_kube_easy); an answer that starts with three digits and a space has that HTTP status,
 * any other is a 200 with the whole answer as its body. When the answers run out a request gets
 * no response (code 0) and a watch cannot connect, so every pipeline ends.
 * Watch streams are real HTTP: a fake server thread answers libcurl with the status and body, so
 * watch.c splits and parses the stream as it would a server's.
 */
#ifndef FUZZ_FAKE_KUBE_H
#define FUZZ_FAKE_KUBE_H

#include <stddef.h>
#include <stdint.h>

/* Use data[0..size) as the answers, from the first. */
void fake_kube_load(const uint8_t *data, size_t size);
/* The next answer: its status and body (not NUL-terminated); 0, or -1 when none is left. */
int fake_kube_next(long *code, const char **body, size_t *len);
/* Answers served so far. */
int fake_kube_served(void);

#endif
