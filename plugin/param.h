/* Environment knobs: parsed once from params.def's table, cached, read through cheap accessors.
 *
 *   if (gdr_params_load() != ncclSuccess) -> init fails (every bad value has been WARNed:
 *                                            knob, bad value, accepted values)
 *   int nqps = (int)gdr_param_int(GDR_PARAM_QPS_PER_CONN);
 *   const char *hca = gdr_param_str(GDR_PARAM_HCA);              "" when unset
 *   if (gdr_param_int(GDR_PARAM_TRANSPORT) == GDR_TRANSPORT_TCP) ...
 *
 * Resolution per knob: GDRNET_<ID> if set (non-empty), else its NCCL alias if set and valid, else the default.
 * Loading is thread-safe and happens once; accessors load on first use (using defaults if loading failed).
 * Unknown GDRNET_* variables in the environment are WARNed with the closest known knob (GDRNET_TEST_* are left
 * to the test harnesses and not reported). */
#ifndef GDRNET_PARAM_H
#define GDRNET_PARAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gdrnet/net_v8.h"

enum gdr_param_id {
#define GDR_PARAM(ID, KIND, DEF, MIN, MAX, AUTOV, CHOICES, ALIAS, DOC) GDR_PARAM_##ID,
#include "params.def"
#undef GDR_PARAM
  GDR_PARAM_COUNT
};

enum gdr_param_kind { GDR_PK_INT, GDR_PK_AUTOINT, GDR_PK_SIZE, GDR_PK_AUTOSIZE, GDR_PK_ENUM, GDR_PK_STR };
enum gdr_param_source { GDR_PSRC_DEFAULT, GDR_PSRC_ENV, GDR_PSRC_ALIAS };

/* Values of the ENUM knobs (the index of the choice in params.def). */
enum { GDR_TRANSPORT_AUTO = 0, GDR_TRANSPORT_RDMA = 1, GDR_TRANSPORT_TCP = 2 };
enum { GDR_SOCKET_FAMILY_AUTO = 0, GDR_SOCKET_FAMILY_INET = 1, GDR_SOCKET_FAMILY_INET6 = 2 };
enum { GDR_IB_ADDR_FAMILY_INET = 0, GDR_IB_ADDR_FAMILY_INET6 = 1 };
/* GDR_PARAM_IB_MTU: 0 = auto, 1..5 = IBV_MTU_256..IBV_MTU_4096 (the ibv_mtu enum values). */
#define GDR_PARAM_AUTO (-1) /* what AUTOINT and AUTOSIZE knobs with AUTO = -1 read as when "auto" */

struct gdr_param_info {
  const char *name; /* "GDRNET_QPS_PER_CONN" */
  enum gdr_param_kind kind;
  const char *def;     /* default as text */
  int64_t min, max;    /* INT, AUTOINT, SIZE, AUTOSIZE */
  int64_t autov;       /* AUTOINT, AUTOSIZE: value of "auto" */
  const char *choices; /* ENUM: "a|b|c" */
  const char *alias;   /* NCCL_... or NULL */
  const char *doc;
};

/* Parses the environment (once). ncclInvalidUsage if any GDRNET_ value is bad (all of them are WARNed). */
ncclResult_t gdr_params_load(void);
/* Forgets the cached values so that the next load re-reads the environment (tests; re-init after unload). */
void gdr_params_reset(void);

int64_t gdr_param_int(enum gdr_param_id id);     /* INT/AUTOINT/SIZE/AUTOSIZE value, ENUM index */
const char *gdr_param_str(enum gdr_param_id id); /* STR text ("" unset), ENUM choice name, numbers as given */
enum gdr_param_source gdr_param_source(enum gdr_param_id id);
const struct gdr_param_info *gdr_param_info(enum gdr_param_id id);
/* Finds a knob by its GDRNET_ name; GDR_PARAM_COUNT if unknown. */
enum gdr_param_id gdr_param_lookup(const char *name);

/* Parses one value for a knob without touching the cache. On failure returns ncclInvalidUsage and writes into why
 * a sentence naming the accepted values. */
ncclResult_t gdr_param_parse(const struct gdr_param_info *p, const char *text, int64_t *value, char *why,
                             size_t whylen);
/* 1 if name is a GDRNET_ variable of the project's tools, tests or CI (GDRNET_PLUGIN, GDRNET_TEST_*...): not a knob,
 * never reported as unknown. */
int gdr_param_reserved(const char *name);
/* Where the knobs are documented, for hints: the installed docs/configuration.md if it is there, else the
 * repository's (a source build), else a sentence naming both. */
const char *gdr_param_config_doc(void);
/* The known knob closest (edit distance) to name, or NULL if nothing is reasonably close. */
const char *gdr_param_suggest(const char *name);
/* "accepted values" text of a knob, e.g. "an integer in 1..16" or "one of auto, rdma, tcp". */
void gdr_param_accepted(const struct gdr_param_info *p, char *buf, size_t len);
/* Writes docs/configuration.md's text. Returns 0, or -1 on a write error. */
int gdr_params_markdown(FILE *f);
/* Just the knob table (header row included), every knob in params.def order. */
int gdr_params_markdown_table(FILE *f);
/* The knob table of the knobs in names (a NULL-terminated list, in that order; NULL: every knob). Returns -1 on a
 * write error or a name that is not a knob (said on stderr), so a list cannot outlive a renamed knob. */
int gdr_params_markdown_table_of(FILE *f, const char *const *names);

/* Knobs that several parts of the plugin read (core, sock.c, rdma/, tcp/, gin/): one resolver each, so that a
 * value and the words that name it in a log line are written once. */
/* GDRNET_FALLBACK: 1 when a connection whose RDMA part cannot be recovered (or set up) may move to TCP, and a GIN
 * peer whose one-sided QP cannot be recovered may move to the message path. */
int gdr_fallback_allowed(void);
/* Why there is no fallback when the knob forbids it: "GDRNET_FALLBACK=0". */
const char *gdr_fallback_off_reason(void);
/* GDRNET_CONNECT_TIMEOUT_MS: the bound on one connect/accept handshake, in ms, and in ns for a deadline. */
int64_t gdr_connect_timeout_ms(void);
uint64_t gdr_connect_timeout_ns(void);
/* GDRNET_RECOVERY_TIMEOUT_MS: the bound on one connection's recovery (or its move to TCP), in ms and ns. */
int64_t gdr_recovery_timeout_ms(void);
uint64_t gdr_recovery_timeout_ns(void);
/* GDRNET_RECOVERY_ATTEMPTS: recoveries in place of one fault episode before the connection gives up; 0: none. */
int gdr_recovery_attempts(void);
/* Why there is no recovery when the knob forbids it: "GDRNET_RECOVERY_ATTEMPTS=0". */
const char *gdr_recovery_off_reason(void);
/* The name the user set a knob by: its NCCL alias when the value came from there, else GDRNET_<ID>. */
const char *gdr_param_set_name(enum gdr_param_id id);

#endif /* GDRNET_PARAM_H */
