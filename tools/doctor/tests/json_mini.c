/* json_mini.c - see json_mini.h */
#include "json_mini.h"

#include <stdlib.h>
#include <string.h>

struct ps {
  const char *s;
  size_t i;
  int depth;
};

static void ws(struct ps *p) {
  while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r') p->i++;
}

static struct jv *newv(enum jt t) {
  struct jv *v = calloc(1, sizeof *v);
  if (v) v->t = t;
  return v;
}

static int push(struct jv *v, struct jv *kid, char *key) {
  struct jv **nk = realloc(v->kids, (v->n + 1) * sizeof *nk);
  if (!nk) return -1;
  v->kids = nk;
  if (v->t == J_OBJ) {
    char **nkeys = realloc(v->keys, (v->n + 1) * sizeof *nkeys);
    if (!nkeys) return -1;
    v->keys = nkeys;
    v->keys[v->n] = key;
  }
  v->kids[v->n++] = kid;
  return 0;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    int h = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (h < 0) return -1;
    v = v * 16 + (unsigned)h;
  }
  *out = v;
  return 0;
}

static char *pstring(struct ps *p) {
  if (p->s[p->i] != '"') return NULL;
  p->i++;
  size_t cap = 64, n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  for (;;) {
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\0' || c < 0x20) goto bad;
    if (n + 8 >= cap) {
      cap *= 2;
      char *no = realloc(out, cap);
      if (!no) goto bad;
      out = no;
    }
    p->i++;
    if (c == '"') break;
    if (c != '\\') {
      out[n++] = (char)c;
      continue;
    }
    char e = p->s[p->i++];
    switch (e) {
    case '"': out[n++] = '"'; break;
    case '\\': out[n++] = '\\'; break;
    case '/': out[n++] = '/'; break;
    case 'b': out[n++] = '\b'; break;
    case 'f': out[n++] = '\f'; break;
    case 'n': out[n++] = '\n'; break;
    case 'r': out[n++] = '\r'; break;
    case 't': out[n++] = '\t'; break;
    case 'u': {
      unsigned u;
      if (hex4(p->s + p->i, &u) < 0) goto bad;
      p->i += 4;
      if (u < 0x80) {
        out[n++] = (char)u;
      } else if (u < 0x800) {
        out[n++] = (char)(0xc0 | (u >> 6));
        out[n++] = (char)(0x80 | (u & 0x3f));
      } else {
        out[n++] = (char)(0xe0 | (u >> 12));
        out[n++] = (char)(0x80 | ((u >> 6) & 0x3f));
        out[n++] = (char)(0x80 | (u & 0x3f));
      }
      break;
    }
    default: goto bad;
    }
  }
  out[n] = '\0';
  return out;
bad:
  free(out);
  return NULL;
}

static struct jv *pvalue(struct ps *p);

static struct jv *pcontainer(struct ps *p, int obj) {
  struct jv *v = newv(obj ? J_OBJ : J_ARR);
  if (!v || ++p->depth > 64) goto bad;
  p->i++;
  ws(p);
  if (p->s[p->i] == (obj ? '}' : ']')) {
    p->i++;
    p->depth--;
    return v;
  }
  for (;;) {
    char *key = NULL;
    ws(p);
    if (obj) {
      key = pstring(p);
      if (!key) goto bad;
      ws(p);
      if (p->s[p->i] != ':') {
        free(key);
        goto bad;
      }
      p->i++;
    }
    struct jv *kid = pvalue(p);
    if (!kid || push(v, kid, key) < 0) {
      free(key);
      json_free(kid);
      goto bad;
    }
    ws(p);
    char c = p->s[p->i];
    if (c == ',') {
      p->i++;
      continue;
    }
    if (c == (obj ? '}' : ']')) {
      p->i++;
      p->depth--;
      return v;
    }
    goto bad;
  }
bad:
  json_free(v);
  return NULL;
}

static struct jv *pvalue(struct ps *p) {
  ws(p);
  char c = p->s[p->i];
  if (c == '{' || c == '[') return pcontainer(p, c == '{');
  if (c == '"') {
    struct jv *v = newv(J_STR);
    if (v && !(v->str = pstring(p))) {
      free(v);
      return NULL;
    }
    return v;
  }
  if (strncmp(p->s + p->i, "null", 4) == 0) {
    p->i += 4;
    return newv(J_NULL);
  }
  if (strncmp(p->s + p->i, "true", 4) == 0 || strncmp(p->s + p->i, "false", 5) == 0) {
    struct jv *v = newv(J_BOOL);
    if (v) v->b = c == 't';
    p->i += c == 't' ? 4 : 5;
    return v;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    char *end;
    double d = strtod(p->s + p->i, &end);
    if (end == p->s + p->i) return NULL;
    p->i = (size_t)(end - p->s);
    struct jv *v = newv(J_NUM);
    if (v) v->num = d;
    return v;
  }
  return NULL;
}

struct jv *json_parse(const char *text, size_t *err) {
  struct ps p = {text, 0, 0};
  struct jv *v = pvalue(&p);
  if (v) {
    ws(&p);
    if (text[p.i] != '\0') {
      json_free(v);
      v = NULL;
    }
  }
  if (!v && err) *err = p.i;
  return v;
}

void json_free(struct jv *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    json_free(v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->str);
  free(v);
}

const struct jv *json_get(const struct jv *obj, const char *key) {
  if (!obj || obj->t != J_OBJ) return NULL;
  for (size_t i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return obj->kids[i];
  return NULL;
}

const char *json_str(const struct jv *v) { return v && v->t == J_STR ? v->str : NULL; }
