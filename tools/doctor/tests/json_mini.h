/* json_mini.h - a strict little JSON parser for the tests (RFC 8259 subset: everything but
 * surrogate-pair validation). Parses into a tree; rejects trailing garbage. */
#ifndef GDRNET_JSON_MINI_H
#define GDRNET_JSON_MINI_H

#include <stddef.h>

enum jt { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
  enum jt t;
  int b;
  double num;
  char *str;        /* J_STR */
  struct jv **kids; /* J_ARR elements, J_OBJ values */
  char **keys;      /* J_OBJ */
  size_t n;
};

/* Returns NULL on a syntax error (err gets the offset). */
struct jv *json_parse(const char *text, size_t *err);
void json_free(struct jv *v);
const struct jv *json_get(const struct jv *obj, const char *key);
const char *json_str(const struct jv *v); /* NULL unless a string */

#endif
