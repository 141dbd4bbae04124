/* libibverbs loader: dlopen + dlvsym at rdma-core's version nodes. See ibvwrap.h. */
#include "ibvwrap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gdr_ibv_api gdr_ibv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_why[512];
static char lib_name[256];

struct sym {
  const char *name;
  const char *version;
  void **slot;
  int required;
};

#define SYM(field, name, ver, req)                                                                                     \
  { name, ver, (void **)&gdr_ibv.field, req }

static void do_load(void) {
  const char *env = getenv("GDRNET_IBVERBS_LIB");
  const char *name = (env && env[0]) ? env : "libibverbs.so.1";
  snprintf(lib_name, sizeof(lib_name), "%s", name);

  /* RTLD_LOCAL: the verbs symbols must not leak into NCCL's namespace.  Never dlclosed: providers
   * register destructors and threads of their own. */
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(load_why, sizeof(load_why), "cannot load %s (%s)%s", name, e ? e : "unknown error",
             env ? "" : ": rdma-core (libibverbs1) is not installed; set GDRNET_IBVERBS_LIB to use another path");
    return;
  }

  struct sym syms[] = {
      SYM(get_device_list, "ibv_get_device_list", "IBVERBS_1.1", 1),
      SYM(free_device_list, "ibv_free_device_list", "IBVERBS_1.1", 1),
      SYM(get_device_name, "ibv_get_device_name", "IBVERBS_1.1", 1),
      SYM(open_device, "ibv_open_device", "IBVERBS_1.1", 1),
      SYM(close_device, "ibv_close_device", "IBVERBS_1.1", 1),
      SYM(get_async_event, "ibv_get_async_event", "IBVERBS_1.1", 1),
      SYM(ack_async_event, "ibv_ack_async_event", "IBVERBS_1.1", 1),
      SYM(query_device, "ibv_query_device", "IBVERBS_1.1", 1),
      SYM(query_port_compat, "ibv_query_port", "IBVERBS_1.1", 1),
      SYM(query_gid, "ibv_query_gid", "IBVERBS_1.1", 1),
      SYM(query_qp, "ibv_query_qp", "IBVERBS_1.1", 1),
      SYM(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1", 1),
      SYM(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1", 1),
      SYM(reg_mr, "ibv_reg_mr", "IBVERBS_1.1", 1),
      SYM(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1", 1),
      SYM(create_cq, "ibv_create_cq", "IBVERBS_1.1", 1),
      SYM(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1", 1),
      SYM(create_qp, "ibv_create_qp", "IBVERBS_1.1", 1),
      SYM(modify_qp, "ibv_modify_qp", "IBVERBS_1.1", 1),
      SYM(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1", 1),
      SYM(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1", 0),
      SYM(event_type_str, "ibv_event_type_str", "IBVERBS_1.1", 0),
      SYM(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8", 0),
      SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", 0),
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    dlerror();
    void *p = dlvsym(h, syms[i].name, syms[i].version);
    *syms[i].slot = p;
    if (p == NULL && syms[i].required) {
      snprintf(load_why, sizeof(load_why), "%s has no %s@%s: not a usable rdma-core libibverbs", name, syms[i].name,
               syms[i].version);
      memset(&gdr_ibv, 0, sizeof(gdr_ibv));
      /* keep h open: harmless, and dlclose of a half-initialised provider stack is not */
      return;
    }
  }
  load_rc = 0;
}

int gdr_ibv_load(char *why, size_t whylen) {
  pthread_once(&load_once, do_load);
  if (load_rc != 0 && why && whylen) snprintf(why, whylen, "%s", load_why);
  return load_rc;
}

const char *gdr_ibv_lib_name(void) {
  if (lib_name[0] == '\0') {
    const char *env = getenv("GDRNET_IBVERBS_LIB");
    return (env && env[0]) ? env : "libibverbs.so.1";
  }
  return lib_name;
}

/* Where rdma-core >= 47 keeps active_speed_ex: the 4-byte word right after port_cap_flags2 (what an
 * older struct ibv_port_attr ends with, padded to 4 bytes), whichever verbs.h this was built with. */
#define GDR_SPEED_EX_OFF ((offsetof(struct ibv_port_attr, port_cap_flags2) + sizeof(uint16_t) + 3) & ~(size_t)3)

int gdr_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, uint32_t *speed_ex) {
  memset(attr, 0, sizeof(*attr));
  if (speed_ex) *speed_ex = 0;
  /* verbs_get_ctx_op(), open-coded in ISO C: an extended context carries query_port with a size. */
  if (ctx->abi_compat == __VERBS_ABI_IS_EXTENDED) {
    struct verbs_context *vctx =
        (struct verbs_context *)(void *)((uint8_t *)ctx - offsetof(struct verbs_context, context));
    if (vctx->sz >= sizeof(*vctx) - offsetof(struct verbs_context, query_port) && vctx->query_port) {
      /* room for the fields newer libraries append (zeroed by them when they know fewer) */
      union {
        struct ibv_port_attr a;
        unsigned char raw[sizeof(struct ibv_port_attr) + 32];
      } big;
      memset(&big, 0, sizeof(big));
      int rc = vctx->query_port(ctx, port, &big.a, sizeof(big));
      if (rc == EINVAL) rc = vctx->query_port(ctx, port, &big.a, sizeof(big.a)); /* a size it refuses */
      if (rc == 0) {
        memcpy(attr, &big.a, sizeof(*attr));
        if (speed_ex) memcpy(speed_ex, big.raw + GDR_SPEED_EX_OFF, sizeof(*speed_ex));
      }
      return rc;
    }
  }
  /* the compat entry point fills the leading, historical part of the structure */
  return gdr_ibv.query_port_compat(ctx, port, attr);
}

const char *gdr_ibv_wc_status_str(enum ibv_wc_status status) {
  if (gdr_ibv.wc_status_str) {
    const char *s = gdr_ibv.wc_status_str(status);
    if (s) return s;
  }
  return "unknown status";
}

const char *gdr_ibv_event_str(enum ibv_event_type type) {
  if (gdr_ibv.event_type_str) {
    const char *s = gdr_ibv.event_type_str(type);
    if (s) return s;
  }
  return "unknown event";
}

const char *gdr_ibv_wc_opcode_str(enum ibv_wc_opcode op) {
  switch (op) {
  case IBV_WC_SEND: return "SEND";
  case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
  case IBV_WC_RDMA_READ: return "RDMA_READ";
  case IBV_WC_COMP_SWAP: return "COMP_SWAP";
  case IBV_WC_FETCH_ADD: return "FETCH_ADD";
  case IBV_WC_BIND_MW: return "BIND_MW";
  case IBV_WC_LOCAL_INV: return "LOCAL_INV";
  case IBV_WC_RECV: return "RECV";
  case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
  default: return "UNKNOWN";
  }
}
