/* Data patterns: byte at offset i of a message = byte (i % 8) of mix(seed + i / 8). */
#include <string.h>

#include "gn.h"

static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t gn_pattern_seed(uint64_t size, uint64_t iter, uint64_t salt) {
  return mix64(mix64(mix64(size) ^ iter) ^ salt);
}

static inline uint64_t word_at(uint64_t seed, size_t w) { return mix64(seed + (uint64_t)w * 0x632be59bd9b4e019ull); }

uint8_t gn_pattern_byte(uint64_t seed, size_t off) {
  uint64_t w = word_at(seed, off / 8);
  return (uint8_t)(w >> (8 * (off % 8)));
}

void gn_pattern_fill(void *buf, size_t len, uint64_t seed) {
  unsigned char *p = buf;
  size_t nw = len / 8;
  for (size_t w = 0; w < nw; w++) {
    uint64_t v = word_at(seed, w);
    memcpy(p + 8 * w, &v, 8); /* little-endian: byte k of v is at offset 8w+k */
  }
  for (size_t i = nw * 8; i < len; i++) p[i] = gn_pattern_byte(seed, i);
}

size_t gn_pattern_check(const void *buf, size_t len, uint64_t seed) {
  const unsigned char *p = buf;
  size_t nw = len / 8;
  for (size_t w = 0; w < nw; w++) {
    uint64_t v = word_at(seed, w), got;
    memcpy(&got, p + 8 * w, 8);
    if (got != v) {
      for (size_t k = 0; k < 8; k++)
        if (p[8 * w + k] != (uint8_t)(v >> (8 * k))) return 8 * w + k;
    }
  }
  for (size_t i = nw * 8; i < len; i++)
    if (p[i] != gn_pattern_byte(seed, i)) return i;
  return len;
}
