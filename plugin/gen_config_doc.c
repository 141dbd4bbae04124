/* Prints docs/configuration.md from the parameter table (params.def).
 *   build/plugin/gdrnet-gen-config-doc > docs/configuration.md */
#include <stdio.h>

#include "param.h"

int main(void) {
  if (gdr_params_markdown(stdout) != 0 || fflush(stdout) != 0) {
    perror("gdrnet-gen-config-doc");
    return 1;
  }
  return 0;
}
