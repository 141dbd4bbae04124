/* The tools' logger (gn_log.c): a plugin line "NET/GDR : NAME set by environment to V" for a variable the tool set
 * itself (gn_log_tool_env) is rewritten "... set by <tool> to V", with V whole; a line the rewrite would not fit in
 * the logger's 2048-byte line is left as the plugin wrote it, never cut. Exit 0 when every check passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gn.h"

static int g_fail;

static void log_env_line(const char *value) {
  gn_logger(NCCL_LOG_INFO, NCCL_INIT, "t.c", 1, "NET/GDR : GDRNET_STATS_FILE set by environment to %s", value);
}

/* the captured text since the last call is exactly "<prefix>NCCL INFO <want>\n" */
static void expect_line(const char *what, const char *want) {
  char *cap = gn_log_captured();
  const char *at = cap != NULL ? strstr(cap, "NCCL INFO ") : NULL;
  size_t wl = strlen(want);
  if (at == NULL || strncmp(at + 10, want, wl) != 0 || strcmp(at + 10 + wl, "\n") != 0) {
    printf("FAIL: %s: captured \"%.120s...\" (%zu bytes), expected the line to end \"...%s\\n\"\n", what,
           cap != NULL ? cap : "(null)", cap != NULL ? strlen(cap) : 0, wl > 40 ? want + wl - 40 : want);
    g_fail = 1;
  } else {
    printf("ok: %s\n", what);
  }
  free(cap);
  gn_log_capture(1); /* clears the buffer */
}

int main(void) {
  static char value[2048], want[4096];
  gn_log_set_level(NCCL_LOG_WARN); /* captured, not printed */
  gn_log_capture(1);

  /* a variable nobody set: as the plugin wrote it */
  gn_logger(NCCL_LOG_INFO, NCCL_INIT, "t.c", 1, "NET/GDR : GDRNET_TRANSPORT set by environment to tcp");
  expect_line("a variable the tool did not set", "NET/GDR : GDRNET_TRANSPORT set by environment to tcp");

  /* a name as long as "environment", a shorter one and a longer one (V moves left, stays, moves right) */
  static const char *const tools[] = {"gdrnet-perf", "perf", "a-tool-with-a-long-name"};
  for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
    gn_log_tool_env("GDRNET_STATS_FILE", tools[i]);
    log_env_line("/tmp/stats/gdrnet-perf-stats-%p.prom");
    snprintf(want, sizeof want, "NET/GDR : GDRNET_STATS_FILE set by %s to /tmp/stats/gdrnet-perf-stats-%%p.prom",
             tools[i]);
    expect_line(tools[i], want);
  }

  /* the longest value whose rewrite still fits: rewritten whole */
  const char *tool = "a-tool-with-a-long-name";
  size_t head = strlen("NET/GDR : GDRNET_STATS_FILE set by  to ") + strlen(tool);
  size_t vl = 2047 - head;
  memset(value, 'v', vl);
  value[vl - 1] = 'E';
  value[vl] = '\0';
  log_env_line(value);
  snprintf(want, sizeof want, "NET/GDR : GDRNET_STATS_FILE set by %s to %s", tool, value);
  expect_line("a 2047-byte rewrite, whole", want);

  /* one byte more: the plugin's line fits, its rewrite would not: left as it is, V whole */
  value[vl - 1] = 'v';
  value[vl] = 'E';
  value[vl + 1] = '\0';
  log_env_line(value);
  snprintf(want, sizeof want, "NET/GDR : GDRNET_STATS_FILE set by environment to %s", value);
  expect_line("a rewrite that would not fit: the plugin's line, whole", want);

  /* no format: an empty message */
  gn_logger(NCCL_LOG_INFO, NCCL_INIT, "t.c", 1, NULL);
  expect_line("a NULL format", "");

  gn_log_capture(0);
  return g_fail;
}
