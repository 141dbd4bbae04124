#!/usr/bin/env python3
"""Writes the synthetic VEMU_TRACE fixtures of test_vemu_trace_stats.py (kept in fixtures/; rerun only to change
them, then update the expected numbers in the test, which are worked out by hand from the timelines below).

fixtures/g2-synthetic.trace: one process (pid 100, like nccl-tests -g 2), two QP pairs and a flush QP.
  pair A: sender QP 0x10 -> receiver QP 0x20, 3 messages of 1,000,000 bytes, one receive outstanding at a time
  pair B: sender QP 0x21 -> receiver QP 0x11, 3 messages of 500,000 bytes, two receives outstanding at first
  flush QP 0x30 connected to itself (one READ)
fixtures/baseline-synthetic.trace: two processes (pid 200 sender QP 0x40, pid 201 receiver QP 0x50), one pair,
  2 messages of 1,000,000 bytes.
Times below are in us from T0; each CTS is (post, exec at the receiver, landed at the sender), each message is
(post, exec at the sender, header at the receiver, receiver completion).
"""
import os

T0 = 5_000_000_000  # ns
HERE = os.path.dirname(os.path.abspath(__file__))


def ns(us):
    return T0 + int(round(us * 1000))


def pair_lines(pid_s, pid_r, sq, rq, cts, msgs, nbytes, signal_first_cts=True):
    """(t_ns, pid, text) events of one QP pair; cts[i] and msgs[i] are matched in FIFO order."""
    out = []
    for i, (p, e, l) in enumerate(cts):
        sig = "SIGNALED" if (i == 0 and signal_first_cts) else "UNSIGNALED"
        out.append((ns(p) - 1, pid_r, "post qp=0x%x op=RECV wr_id=0x%x sge=0" % (rq, 0x200 + i)))
        out.append((ns(p), pid_r, "post qp=0x%x op=WRITE wr_id=0x%x len=32 sge=1 flags=%s|INLINE rkey=0x1111 "
                                  "raddr=0x7f0000001000" % (rq, 0x300 + i, sig)))
        out.append((ns(e), pid_r, "exec qp=0x%x op=WRITE wr_id=0x%x len=32 dest=0x%x psn=%d" % (rq, 0x300 + i, sq, i)))
        out.append((ns(l), pid_s, "exec target qp=0x%x op=WRITE len=32 rkey=0x1111 access=LOCAL_WRITE|REMOTE_WRITE" % sq))
        out.append((ns(l) + 300, pid_r, "ack qp=0x%x psn=%d wr_id=0x%x kind=ACK" % (rq, i, 0x300 + i)))
        if sig == "SIGNALED":  # a CTS write completion on the receiver QP: not a data completion
            out.append((ns(l) + 400, pid_r, "cqe qp=0x%x wr_id=0x%x status=success opcode=1 byte_len=32" % (rq, 0x300 + i)))
    for i, (p, e, a, d) in enumerate(msgs):
        out.append((ns(p), pid_s, "post qp=0x%x op=WRITE_IMM wr_id=0x%x len=%d sge=1 flags=SIGNALED rkey=0x2222 "
                                  "raddr=0x7f0000100000" % (sq, 0x100 + i, nbytes)))
        out.append((ns(e), pid_s, "exec qp=0x%x op=WRITE_IMM wr_id=0x%x len=%d dest=0x%x psn=%d" % (sq, 0x100 + i, nbytes, rq, i)))
        out.append((ns(a), pid_r, "exec target qp=0x%x op=WRITE_IMM len=%d rkey=0x2222 "
                                  "access=LOCAL_WRITE|REMOTE_WRITE|RELAXED_ORDERING" % (rq, nbytes)))
        out.append((ns(d), pid_r, "cqe qp=0x%x wr_id=0x%x status=success opcode=129 byte_len=%d" % (rq, 0x200 + i, nbytes)))
        out.append((ns(d) + 200, pid_s, "ack qp=0x%x psn=%d wr_id=0x%x kind=ACK" % (sq, i, 0x100 + i)))
        out.append((ns(d) + 500, pid_s, "cqe qp=0x%x wr_id=0x%x status=success opcode=1 byte_len=%d" % (sq, 0x100 + i, nbytes)))
    return out


def setup(pid, qp, dest):
    t = T0 - 1_000_000 + qp * 1000
    return [(t, pid, "qp create qp=0x%x dev=vemu0 max_send_wr=512 max_recv_wr=64 max_inline=256 sq_sig_all=0" % qp),
            (t + 1, pid, "qp state qp=0x%x 0->1 dest=0x0 timeout=0 retry_cnt=0 rnr_retry=0 min_rnr_timer=0 access=0x2" % qp),
            (t + 2, pid, "qp state qp=0x%x 1->2 dest=0x%x timeout=0 retry_cnt=0 rnr_retry=0 min_rnr_timer=12 access=0x2" % (qp, dest)),
            (t + 3, pid, "qp state qp=0x%x 2->3 dest=0x%x timeout=20 retry_cnt=7 rnr_retry=7 min_rnr_timer=12 access=0x2" % (qp, dest))]


def write(name, events):
    events.sort(key=lambda x: x[0])
    with open(os.path.join(HERE, "fixtures", name), "w") as f:
        for t, pid, text in events:
            f.write("vemu pid=%d t=%d %s\n" % (pid, t, text))


def main():
    ev = [(T0 - 2_000_000, 100, "mr reg call=reg_mr key=0x1111 addr=0x7f0000001000 len=4096 iova=0x7f0000001000 "
                                "access=LOCAL_WRITE|REMOTE_WRITE mem=host")]
    for qp, dest in ((0x10, 0x20), (0x20, 0x10), (0x11, 0x21), (0x21, 0x11), (0x30, 0x30)):
        ev += setup(100, qp, dest)
    # pair A: b = 5, 4, 6; d = 5, 6 (the last completion has no CTS after it); a = 3, 3, 5; c = 12, 9, 12
    ev += pair_lines(100, 100, 0x10, 0x20,
                     cts=[(0, 1, 3), (25, 26, 28), (47, 49, 52)],
                     msgs=[(8, 10, 13, 20), (32, 33, 35, 41), (58, 60, 63, 70)], nbytes=1_000_000)
    # pair B: two receives outstanding; b = 5, 5, 5; a = 3, 3, 3; c = 21, 24, 6; d = 5 (completion 30 -> CTS 35;
    # completion 34 has no CTS of its own after it: CTS 35 answers completion 30, one CTS per completion)
    ev += pair_lines(100, 100, 0x21, 0x11,
                     cts=[(1, 2, 4), (2, 3, 5), (35, 36, 38)],
                     msgs=[(9, 11, 14, 30), (10, 12, 16, 34), (43, 44, 46, 49)], nbytes=500_000)
    # the flush QP: a READ on a QP connected to itself
    ev += [(ns(71), 100, "post qp=0x30 op=READ wr_id=0x9 len=1 sge=1 flags=SIGNALED rkey=0x3333 raddr=0x7f0000200000"),
           (ns(71.5), 100, "exec qp=0x30 op=READ wr_id=0x9 len=1 dest=0x30 psn=0"),
           (ns(72), 100, "exec target qp=0x30 op=READ len=1 rkey=0x3333 access=LOCAL_WRITE|REMOTE_READ"),
           (ns(72.5), 100, "ack qp=0x30 psn=0 wr_id=0x9 kind=READ_RESP len=1"),
           (ns(73), 100, "cqe qp=0x30 wr_id=0x9 status=success opcode=2 byte_len=1")]
    write("g2-synthetic.trace", ev)
    ev = []
    for pid, qp, dest in ((200, 0x40, 0x50), (201, 0x50, 0x40)):
        ev += setup(pid, qp, dest)
    # b = 2.5, 2.5; d = 2; a = 2, 2; c = 5.5, 5.5
    ev += pair_lines(200, 201, 0x40, 0x50, cts=[(0, 1, 2), (12, 13, 14)],
                     msgs=[(4.5, 5, 6, 10), (16.5, 17, 18, 22)], nbytes=1_000_000)
    write("baseline-synthetic.trace", ev)


if __name__ == "__main__":
    main()
