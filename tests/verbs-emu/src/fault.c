/* verbs emulator: VEMU_FAULTS rules (docs/design.md section 3) and VEMU_TRACE.
 * Every rule is counted per process, nth from 1, and fires once. */
#include "vemu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { R_WC = 1, R_QP_FATAL, R_PEER_LOSS, R_PORT_DOWN, R_FAIL, R_NO_RECV_CREDIT, R_DEVICE_FATAL, R_LATE_CQE };

struct rule {
	int kind;
	unsigned ops;               /* wc: bit per IBV_WR_* opcode */
	uint64_t nth;
	uint64_t every;             /* wc, late_cqe, no_recv_credit: fires again every that many events after nth */
	uint64_t count;
	int status;                 /* wc */
	char call[32];              /* fail */
	int err;                    /* fail */
	uint64_t after_bytes;       /* peer_loss */
	char dev[64];               /* port_down */
	uint64_t after_ms, for_ms;
	uint64_t t_dead;            /* device_fatal: when it died (for_ms counts from there) */
	int has_for;
	int phase;                  /* port_down: 0 pending, 1 down, 2 done */
	char text[256];
};

#define MAX_RULES 32
static struct rule rules[MAX_RULES];
static int nrules;
static pthread_mutex_t fmu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t moved_bytes;
static int lost; /* peer_loss fired: read by every thread without fmu (__atomic) */

static int bad(const char *rule, const char *why)
{
	fprintf(stderr, "vemu: VEMU_FAULTS: malformed rule '%s': %s\n", rule, why);
	return -1;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!*s || *s == '-')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno)
		return -1;
	*out = v;
	return 0;
}

static int parse_errno(const char *s)
{
	static const struct { const char *n; int v; } t[] = {
		{ "EPERM", EPERM },     { "ENOENT", ENOENT },       { "EIO", EIO },
		{ "EBADF", EBADF },     { "EAGAIN", EAGAIN },       { "ENOMEM", ENOMEM },
		{ "EACCES", EACCES },   { "EFAULT", EFAULT },       { "EBUSY", EBUSY },
		{ "EEXIST", EEXIST },   { "ENODEV", ENODEV },       { "EINVAL", EINVAL },
		{ "ENFILE", ENFILE },   { "EMFILE", EMFILE },       { "ENOSPC", ENOSPC },
		{ "ENOSYS", ENOSYS },   { "EOPNOTSUPP", EOPNOTSUPP }, { "ENOTSUP", ENOTSUP },
		{ "ETIMEDOUT", ETIMEDOUT }, { "ECONNREFUSED", ECONNREFUSED }, { "EPROTONOSUPPORT", EPROTONOSUPPORT },
		{ "ENOBUFS", ENOBUFS }, { "EINTR", EINTR },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(s, t[i].n))
			return t[i].v;
	uint64_t v;
	if (!parse_u64(s, &v) && v > 0 && v < 4096)
		return (int)v;
	return 0;
}

static int parse_ops(const char *s, unsigned *ops)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", s);
	*ops = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save)) {
		if (!strcmp(t, "write"))
			*ops |= 1u << IBV_WR_RDMA_WRITE;
		else if (!strcmp(t, "write_imm"))
			*ops |= 1u << IBV_WR_RDMA_WRITE_WITH_IMM;
		else if (!strcmp(t, "read"))
			*ops |= 1u << IBV_WR_RDMA_READ;
		else if (!strcmp(t, "send"))
			*ops |= 1u << IBV_WR_SEND | 1u << IBV_WR_SEND_WITH_IMM;
		else if (!strcmp(t, "atomic"))
			*ops |= 1u << IBV_WR_ATOMIC_FETCH_AND_ADD | 1u << IBV_WR_ATOMIC_CMP_AND_SWP;
		else
			return -1;
	}
	return *ops ? 0 : -1;
}

static int parse_status(const char *s)
{
	if (!strcmp(s, "rem_access")) return IBV_WC_REM_ACCESS_ERR;
	if (!strcmp(s, "retry_exc")) return IBV_WC_RETRY_EXC_ERR;
	if (!strcmp(s, "rnr_retry_exc")) return IBV_WC_RNR_RETRY_EXC_ERR;
	if (!strcmp(s, "rem_op")) return IBV_WC_REM_OP_ERR;
	if (!strcmp(s, "loc_prot")) return IBV_WC_LOC_PROT_ERR;
	return 0;
}

static int parse_rule(char *text)
{
	struct rule r;
	memset(&r, 0, sizeof(r));
	snprintf(r.text, sizeof(r.text), "%s", text);
	char *save = NULL;
	char *kind = strtok_r(text, ":", &save);
	if (!kind)
		return bad(r.text, "empty");
	if (!strcmp(kind, "wc"))
		r.kind = R_WC;
	else if (!strcmp(kind, "qp_fatal"))
		r.kind = R_QP_FATAL;
	else if (!strcmp(kind, "peer_loss"))
		r.kind = R_PEER_LOSS;
	else if (!strcmp(kind, "port_down"))
		r.kind = R_PORT_DOWN;
	else if (!strcmp(kind, "fail"))
		r.kind = R_FAIL;
	else if (!strcmp(kind, "no_recv_credit"))
		r.kind = R_NO_RECV_CREDIT;
	else if (!strcmp(kind, "device_fatal"))
		r.kind = R_DEVICE_FATAL;
	else if (!strcmp(kind, "late_cqe"))
		r.kind = R_LATE_CQE;
	else
		return bad(r.text, "unknown kind (want wc, qp_fatal, peer_loss, port_down, device_fatal, fail, "
				   "no_recv_credit, late_cqe)");
	int have_nth = 0, have_op = 0, have_status = 0, have_call = 0, have_errno = 0, have_bytes = 0,
	    have_dev = 0, have_after = 0;
	for (char *kv = strtok_r(NULL, ":", &save); kv; kv = strtok_r(NULL, ":", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			return bad(r.text, "expected key=value");
		*eq = 0;
		const char *k = kv, *v = eq + 1;
		int ok = 0;
		if (!strcmp(k, "nth") && (r.kind == R_WC || r.kind == R_QP_FATAL || r.kind == R_FAIL ||
					  r.kind == R_NO_RECV_CREDIT || r.kind == R_LATE_CQE)) {
			ok = !parse_u64(v, &r.nth) && r.nth >= 1;
			if (!ok)
				return bad(r.text, "nth must be an integer >= 1");
			have_nth = 1;
		} else if (!strcmp(k, "every") &&
			   (r.kind == R_WC || r.kind == R_LATE_CQE || r.kind == R_NO_RECV_CREDIT)) {
			ok = !parse_u64(v, &r.every) && r.every >= 1;
			if (!ok)
				return bad(r.text, "every must be an integer >= 1");
		} else if (!strcmp(k, "op") && r.kind == R_WC) {
			if (parse_ops(v, &r.ops))
				return bad(r.text, "op must be write, write_imm, read, send or atomic");
			have_op = ok = 1;
		} else if (!strcmp(k, "status") && r.kind == R_WC) {
			r.status = parse_status(v);
			if (!r.status)
				return bad(r.text, "status must be rem_access, retry_exc, rnr_retry_exc, rem_op or loc_prot");
			have_status = ok = 1;
		} else if (!strcmp(k, "after_bytes") && (r.kind == R_PEER_LOSS || r.kind == R_DEVICE_FATAL)) {
			if (parse_u64(v, &r.after_bytes))
				return bad(r.text, "after_bytes must be an integer");
			have_bytes = ok = 1;
		} else if (!strcmp(k, "dev") && (r.kind == R_PORT_DOWN || r.kind == R_DEVICE_FATAL)) {
			if (!*v || strlen(v) >= sizeof(r.dev))
				return bad(r.text, "bad dev");
			snprintf(r.dev, sizeof(r.dev), "%s", v);
			have_dev = ok = 1;
		} else if (!strcmp(k, "after_ms") && (r.kind == R_PORT_DOWN || r.kind == R_DEVICE_FATAL)) {
			if (parse_u64(v, &r.after_ms))
				return bad(r.text, "after_ms must be an integer");
			have_after = ok = 1;
		} else if (!strcmp(k, "ms") && r.kind == R_LATE_CQE) {
			if (parse_u64(v, &r.for_ms) || r.for_ms < 1 || r.for_ms > 60000)
				return bad(r.text, "ms must be an integer from 1 to 60000");
			r.has_for = ok = 1;
		} else if (!strcmp(k, "for_ms") && (r.kind == R_PORT_DOWN || r.kind == R_DEVICE_FATAL)) {
			if (parse_u64(v, &r.for_ms))
				return bad(r.text, "for_ms must be an integer");
			r.has_for = ok = 1;
		} else if (!strcmp(k, "call") && r.kind == R_FAIL) {
			static const char *const calls[] = { "reg_mr", "reg_dmabuf_mr", "create_qp", "create_cq",
							     "modify_qp", "alloc_pd" };
			for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
				if (!strcmp(v, calls[i]))
					ok = 1;
			if (!ok)
				return bad(r.text,
					   "call must be reg_mr, reg_dmabuf_mr, create_qp, create_cq, modify_qp or alloc_pd");
			snprintf(r.call, sizeof(r.call), "%s", v);
			have_call = 1;
		} else if (!strcmp(k, "errno") && r.kind == R_FAIL) {
			r.err = parse_errno(v);
			if (!r.err)
				return bad(r.text, "errno must be a name like ENOMEM or a positive number");
			have_errno = ok = 1;
		}
		if (!ok)
			return bad(r.text, "unknown key for this rule kind");
	}
	switch (r.kind) {
	case R_WC:
		if (!have_op || !have_nth || !have_status)
			return bad(r.text, "wc needs op=, nth= and status=");
		break;
	case R_QP_FATAL:
	case R_NO_RECV_CREDIT:
	case R_LATE_CQE:
		if (!have_nth)
			return bad(r.text, "needs nth=");
		break;
	case R_PEER_LOSS:
		if (!have_bytes)
			return bad(r.text, "peer_loss needs after_bytes=");
		break;
	case R_PORT_DOWN:
		if (!have_dev || !have_after)
			return bad(r.text, "port_down needs dev= and after_ms=");
		break;
	case R_DEVICE_FATAL:
		if (!have_dev || have_after == have_bytes)
			return bad(r.text, "device_fatal needs dev= and one of after_ms= or after_bytes=");
		break;
	case R_FAIL:
		if (!have_call || !have_nth || !have_errno)
			return bad(r.text, "fail needs call=, nth= and errno=");
		break;
	}
	if (nrules == MAX_RULES)
		return bad(r.text, "too many rules");
	rules[nrules++] = r;
	return 0;
}

int vemu_faults_parse(const char *spec)
{
	nrules = 0;
	moved_bytes = 0;
	__atomic_store_n(&lost, 0, __ATOMIC_RELAXED);
	if (!spec || !*spec)
		return 0;
	char *buf = strdup(spec);
	if (!buf)
		return -1;
	char *save = NULL;
	int rc = 0;
	for (char *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
		while (*t == ' ')
			t++;
		if (!*t)
			continue;
		if (parse_rule(t)) {
			rc = -1;
			break;
		}
	}
	free(buf);
	if (rc)
		nrules = 0;
	return rc;
}

/* count one event for every rule of a kind matching pred; returns the first rule hitting its nth */
static struct rule *count_hit(int kind, const char *call, int op)
{
	struct rule *hit = NULL;
	pthread_mutex_lock(&fmu);
	for (int i = 0; i < nrules; i++) {
		struct rule *r = &rules[i];
		if (r->kind != kind)
			continue;
		if (call && strcmp(r->call, call))
			continue;
		if (kind == R_WC && !(op >= 0 && op < 32 && (r->ops & (1u << op))))
			continue;
		r->count++;
		int fires = r->count == r->nth || (r->every && r->count > r->nth && (r->count - r->nth) % r->every == 0);
		if (fires && !hit)
			hit = r;
	}
	pthread_mutex_unlock(&fmu);
	return hit;
}

int vemu_fault_call(const char *call)
{
	if (!nrules)
		return 0;
	struct rule *r = count_hit(R_FAIL, call, -1);
	if (r) {
		VTRACE("fault fail call=%s errno=%d (%s)\n", call, r->err, r->text);
		return r->err;
	}
	return 0;
}

int vemu_fault_wc(int op)
{
	if (!nrules)
		return 0;
	struct rule *r = count_hit(R_WC, NULL, op);
	return r ? r->status : 0;
}

int vemu_fault_qp_fatal(void)
{
	if (!nrules)
		return 0;
	return count_hit(R_QP_FATAL, NULL, -1) != NULL;
}

uint64_t vemu_fault_late_cqe(void)
{
	if (!nrules)
		return 0;
	struct rule *r = count_hit(R_LATE_CQE, NULL, -1);
	return r ? (r->has_for ? r->for_ms : 50) : 0;
}

int vemu_fault_no_recv_credit(void)
{
	if (!nrules)
		return 0;
	return count_hit(R_NO_RECV_CREDIT, NULL, -1) != NULL;
}

int vemu_fault_peer_lost(uint64_t add)
{
	if (!nrules)
		return 0;
	pthread_mutex_lock(&fmu);
	moved_bytes += add;
	for (int i = 0; i < nrules; i++)
		if (rules[i].kind == R_PEER_LOSS && moved_bytes >= rules[i].after_bytes &&
		    !__atomic_load_n(&lost, __ATOMIC_RELAXED)) {
			__atomic_store_n(&lost, 1, __ATOMIC_RELEASE);
		}
	pthread_mutex_unlock(&fmu);
	return __atomic_load_n(&lost, __ATOMIC_ACQUIRE);
}

int vemu_fault_is_lost(void)
{
	return __atomic_load_n(&lost, __ATOMIC_ACQUIRE);
}

void vemu_fault_port_timers(uint64_t now, uint64_t *next)
{
	*next = 0;
	for (int i = 0; i < nrules; i++) {
		struct rule *r = &rules[i];
		if ((r->kind != R_PORT_DOWN && r->kind != R_DEVICE_FATAL) || r->phase == 2)
			continue;
		struct vdev *d = NULL;
		for (int k = 0; k < g.ndev; k++)
			if (!strcmp(g.devs[k]->dev.name, r->dev))
				d = g.devs[k];
		if (!d) {
			r->phase = 2;
			continue;
		}
		uint64_t t_down = g.start_ns + r->after_ms * 1000000ull;
		uint64_t t_up = t_down + r->for_ms * 1000000ull;
		if (r->kind == R_DEVICE_FATAL) {
			int due;
			if (r->after_bytes) {
				pthread_mutex_lock(&fmu);
				due = moved_bytes >= r->after_bytes;
				pthread_mutex_unlock(&fmu);
			} else {
				due = now >= t_down;
				if (r->phase == 0 && !due && (!*next || t_down < *next))
					*next = t_down;
			}
			if (r->phase == 0 && !due)
				continue;
			if (r->phase == 0)
				r->t_dead = now;
			t_up = r->t_dead + r->for_ms * 1000000ull;
			if (r->phase == 0) {
				/* the device dies: the port goes down, every QP of it to ERR (its WRs flushed), DEVICE_FATAL
				 * on every context, and new QPs, CQs, MRs and QP changes through those contexts (and any
				 * opened while it is dead) fail with EIO from now on */
				r->phase = r->has_for ? 1 : 2;
				__atomic_store_n(&d->fatal, 1, __ATOMIC_RELEASE);
				vemu_set_port_state(d, IBV_PORT_DOWN);
				VTRACE("fault device_fatal dev=%s\n", d->dev.name);
				pthread_mutex_lock(&g.mu);
				for (struct vqp *q = g.qps; q; q = q->anext)
					if (q->ctx->dev == d)
						vemu_qp_to_err(q);
				for (struct vctx *c = g.ctxs; c; c = c->next)
					if (c->dev == d) {
						__atomic_store_n(&c->dead, 1, __ATOMIC_RELEASE);
						vemu_async_event(c, IBV_EVENT_DEVICE_FATAL, NULL, 0);
					}
				pthread_mutex_unlock(&g.mu);
			}
			if (r->phase == 1 && now >= t_up) {
				/* back (a driver reload, a reset NIC): contexts opened from now on work; the old ones stay
				 * dead, as a real device's old file descriptors do */
				r->phase = 2;
				__atomic_store_n(&d->fatal, 0, __ATOMIC_RELEASE);
				vemu_set_port_state(d, IBV_PORT_ACTIVE);
				VTRACE("fault device_fatal dev=%s back\n", d->dev.name);
				vemu_port_changed(d);
			}
			if (r->phase == 1 && (!*next || t_up < *next))
				*next = t_up;
			continue;
		}
		if (r->phase == 0 && now >= t_down) {
			r->phase = 1;
			vemu_set_port_state(d, IBV_PORT_DOWN);
			VTRACE("fault port_down dev=%s DOWN\n", d->dev.name);
			pthread_mutex_lock(&g.mu);
			for (struct vctx *c = g.ctxs; c; c = c->next)
				if (c->dev == d)
					vemu_async_event(c, IBV_EVENT_PORT_ERR, NULL, 1);
			pthread_mutex_unlock(&g.mu);
		}
		if (r->phase == 1 && r->has_for && now >= t_up) {
			r->phase = 2;
			vemu_set_port_state(d, IBV_PORT_ACTIVE);
			VTRACE("fault port_down dev=%s ACTIVE again\n", d->dev.name);
			pthread_mutex_lock(&g.mu);
			for (struct vctx *c = g.ctxs; c; c = c->next)
				if (c->dev == d)
					vemu_async_event(c, IBV_EVENT_PORT_ACTIVE, NULL, 1);
			pthread_mutex_unlock(&g.mu);
			vemu_port_changed(d);
		}
		if (r->phase == 1 && !r->has_for)
			r->phase = 2;
		uint64_t want = r->phase == 0 ? t_down : (r->phase == 1 ? t_up : 0);
		if (want && (!*next || want < *next))
			*next = want;
	}
}

void vemu_trace(const char *fmt, ...)
{
	if (!g.trace)
		return;
	va_list ap;
	pthread_mutex_lock(&g.trace_mu);
	fprintf(g.trace, "vemu pid=%d t=%llu ", (int)getpid(), (unsigned long long)vemu_now_ns());
	va_start(ap, fmt);
	vfprintf(g.trace, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&g.trace_mu);
}
