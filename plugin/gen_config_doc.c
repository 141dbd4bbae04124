/* Prints docs/configuration.md from the parameter table (params.def).
 *   build/plugin/gdrnet-gen-config-doc > docs/configuration.md
 *   build/plugin/gdrnet-gen-config-doc --table      only the knob table (for the README) */
#include <stdio.h>
#include <string.h>

#include "param.h"

int main(int argc, char **argv) {
  int table = argc > 1 && strcmp(argv[1], "--table") == 0;
  if (argc > 2 || (argc == 2 && !table)) {
    fprintf(stderr, "usage: %s [--table]\n", argv[0]);
    return 2;
  }
  if ((table ? gdr_params_markdown_table(stdout) : gdr_params_markdown(stdout)) != 0 || fflush(stdout) != 0) {
    perror("gdrnet-gen-config-doc");
    return 1;
  }
  return 0;
}
