#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/seed-*.

The seeds are well-formed exchanges in each target's input encoding (the op bytes its fz_<name>.c reads), so that
fuzzing starts from the paths a real peer takes. Run it after changing a target's encoding or a wire format; the
files it writes are committed. Regression inputs (crash-*, leak-*, timeout-*, regress-*) kept next to the seeds are
never touched by it.

    tests/fuzz/make_seeds.py            # rewrite every seed
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# wire constants (plugin/sock.h, plugin/tcp/tcp.h, plugin/rdma/proto.h, plugin/rdma/rdma.h)
HANDLE_MAGIC, HELLO_MAGIC, ACK_MAGIC = 0x4E524447, 0x48524447, 0x41524447
TCP_PROTO_MAGIC, CHUNK_MAGIC = 0x50504354, 0x4B4E4843
RDMA_HS_MAGIC, RDMA_CTRL_MAGIC = 0x31524447, 0x43524447
BLOB_HS, BLOB_READY = 0x52444831, 0x52444852
TP_TCP, TP_RDMA = 1, 2
AF_INET, AF_INET6 = 2, 10
CTS, INLINE, ERR_SIZE, EAGER, GRANT, CREDIT, RTS, ERR_RECV = 1, 2, 3, 4, 5, 6, 7, 8


def tcp_proto(version=2, min_peer=1, features=1):
    return struct.pack('<IHHI20s', TCP_PROTO_MAGIC, version, min_peer, features, b'')


def handle(magic=HANDLE_MAGIC, version=1, transport=TP_TCP, caps=1, family=AF_INET, nstreams=2, nthreads=1,
           tp=None, state=b''):
    addr = struct.pack('<HHI16s', family, 0, 0, b'')
    tp = tcp_proto() if tp is None else tp
    h = struct.pack('<IHBBQ', magic, version, transport, caps, 0) + addr + struct.pack('<IHH', 0, nstreams, nthreads)
    h += tp + bytes(16) + state.ljust(32, b'\0')
    assert len(h) == 128
    return h


def hello(kind=0, stream=0, nstreams=2, tp=None, magic=HELLO_MAGIC, conn_id=7):
    tp = tcp_proto() if tp is None else tp
    return struct.pack('<IHBBQQHHI', magic, 1, TP_TCP, kind, 0, conn_id, stream, nstreams, 1) + tp


def ack(magic=ACK_MAGIC, status=0):
    return struct.pack('<IHHII', magic, 1, status, 1, 0)


def ctrl(t, aux, seq, size):
    return struct.pack('<IIQQ', t, aux, seq, size)


def chunk(length, seq, off, total, magic=CHUNK_MAGIC):
    return struct.pack('<IIQQQ', magic, length, seq, off, total)


# --- the op encodings of fz_tcp_recv.c / fz_tcp_send.c
def u16(v):
    return struct.pack('<H', v)


def u32(v):
    return struct.pack('<I', v)


def u64(v):
    return struct.pack('<Q', v)


def fsize(n):  # fuzz_size(): small (u16 % 8192) or large (u32 % 192K)
    return b'\x00' + u16(n) if n < 8192 else b'\x80' + u32(n)


def op_ctrl_msg(op, t, aux, seq, size, payload=b''):
    # op byte, type, aux (small form), seq (small form, % 48), size (fuzz_size form), payload length, payload
    assert aux < 256 and seq < 48 and len(payload) < 256
    return bytes([op, t, 0, aux, 0, seq, 0]) + fsize(size) + bytes([len(payload)]) + payload


def op_raw(op, data, stream=None):
    out = b''
    for k in range(0, len(data), 255):
        part = data[k:k + 255]
        out += bytes([op]) + (bytes([stream]) if stream is not None else b'') + bytes([len(part)]) + part
    return out


def rdma_addr(link=2, mtu=5, rkey=0x1234, lid=0):
    # struct gdr_rdma_addr: link layer, port, MTU, GID index, is_global, rsvd, LID, rkey, rsvd, GID
    return struct.pack('<BBBBBBHII16s', link, 1, mtu, 3, 1 if link == 2 else 0, 0, lid, rkey, 0, bytes(range(16)))


def rdma_hs(role, nqps=1, link=2, mtu=5, devname=b'mlx5_0', ndevs=1, version=2):
    # wire version 2: 480 bytes (proto.h struct gdr_rdma_hs)
    qpn = [0x100 + i if i < nqps else 0 for i in range(16)]
    psn = [0x1234 + i if i < nqps else 0 for i in range(16)]
    hs = struct.pack('<IHHIBBBBQQ', RDMA_HS_MAGIC, version, 480, 0, role, nqps, 0, ndevs, 1 << 30, 0x7f0000001000)
    hs += struct.pack('<16I', *qpn) + struct.pack('<16I', *psn)
    hs += b''.join(rdma_addr(link, mtu, 0x1234 + d, 5 if link == 1 else 0) if d < ndevs else bytes(32)
                   for d in range(8))
    hs += struct.pack('<64s', devname)
    assert len(hs) == 480
    return hs


def rdma_hs_v1(role, nqps=1):
    # wire version 1 (256 bytes): what an older plugin sends; refused by its version
    qpn = [0x100 + i if i < nqps else 0 for i in range(16)]
    hs = struct.pack('<IHHIBBBBBBBBHHI16s', RDMA_HS_MAGIC, 1, 256, 0, role, 2, 1, 5, nqps, 0, 3, 1, 0, 0, 0,
                     bytes(range(16)))
    hs += struct.pack('<16I', *qpn) + struct.pack('<16I', *([0] * 16))
    hs += struct.pack('<IQII64s', 0, 0x7f0000001000, 0x1234, 0, b'mlx5_0')
    assert len(hs) == 256
    return hs


def blob(t, payload):
    return struct.pack('<II', t, len(payload)) + payload


def rctrl(t, seq, a=0, b=0, magic=RDMA_CTRL_MAGIC, payload=b''):
    # header: magic, type (u16), payload length (u16), seq, a, b; then the payload
    return struct.pack('<IHHQQQ', magic, t, len(payload), seq, a, b) + payload


def rec_state(nqps=1, head=0, incomplete=0, ndevs=1):
    # wire version 2: 416 bytes (proto.h struct gdr_rdma_rec_state)
    qpn = [0x200 + i if i < nqps else 0 for i in range(16)]
    st = struct.pack('<BBHI16I16I', nqps, ndevs, 0, 0, *qpn, *([7] * 16))
    st += b''.join(rdma_addr(rkey=0x55 + d) if d < ndevs else bytes(32) for d in range(8))
    st += struct.pack('<QQII', 0x7f0000002000, head, incomplete, 0)
    assert len(st) == 416
    return st


GIN_MAGIC, GIN_MR_NONE = 0x47524447, 0xffffffff
GIN_REG, GIN_PUT, GIN_GET, GIN_GET_REPLY, GIN_FLUSH, GIN_FLUSH_ACK, GIN_QP, GIN_QP_READY, GIN_ABORT, GIN_MOVE = range(1, 11)
F_SIGNAL, F_INLINE, F_DATA, F_RECOVER = 1, 2, 4, 8


def gin_hdr(op, flags=0, mr=0, sig_mr=0, off=0, size=0, sig_off=0, sig_val=0, cookie=0, aux=0, aux_mr=0, rkey=0):
    # plugin/gin/gin_int.h struct gin_hdr: 72 bytes
    return struct.pack('<IHHIIQQQQQQII', GIN_MAGIC, op, flags, mr, sig_mr, off, size, sig_off, sig_val, cookie, aux,
                       aux_mr, rkey)


def gin_qpinfo(qpn=0x123, psn=0x4567, mtu=5, link=2):
    # rdma_os.c struct qpinfo: 56 bytes
    return struct.pack('<IIHBBI16sQQII', qpn, psn, 0, mtu, link, 0x99, bytes(range(16)), 0x7f0000001000,
                       0x7f0000002000, 0x98, 0)


def gin_msg(peer, msg):
    return bytes([peer]) + u16(len(msg)) + msg


def fb_sent(seq, n, placed, sizes):
    return struct.pack('<QBBHI8Q', seq, n, placed, 0, 0, *(sizes + [0] * (8 - len(sizes))))


def seeds():
    s = {}
    pattern = bytes((i * 7 + 3) & 0xff for i in range(600))
    # handle: 128 bytes + options (bit 0 the real nonce, bit 1 the real TCP protocol data)
    s['handle'] = {
        'tcp-v2': handle() + b'\x03',
        'tcp-v1': handle(tp=bytes(32)) + b'\x01',
        'tcp-8streams': handle(nstreams=8, nthreads=4) + b'\x01',
        'ipv6': handle(family=AF_INET6) + b'\x03',
        'rdma': handle(transport=TP_RDMA) + b'\x03',
        'bad-family': handle(family=1) + b'\x03',
        'bad-magic': handle(magic=0x12345678) + b'\x03',
        'future-proto': handle(tp=tcp_proto(version=9, min_peer=5)) + b'\x01',
    }
    # hello: mode byte (bit 0: connector side), then per connection: flags, length, bytes
    def conn(data, flags=0):
        return bytes([flags, len(data)]) + data
    s['hello'] = {
        'listener-full-v2': b'\x00\x02' + conn(hello(0, 0), 2) + conn(hello(1, 1), 2) + conn(hello(1, 2), 2),
        'listener-v1': b'\x00\x00' + conn(hello(0, 0, tp=bytes(32)), 2),
        'listener-wrong-nonce': b'\x00\x00' + conn(hello(0, 0)),
        'listener-short': b'\x00\x00' + conn(hello(0, 0)[:20], 2),
        'listener-silent': b'\x00\x00' + conn(hello(0, 0)[:30], 2 | 8),
        'listener-bad-stream': b'\x00\x00' + conn(hello(1, 9, nstreams=2), 2),
        'connector-ok': b'\x01' + bytes([0, 16]) + ack() + bytes([0, 16]) + ack(),
        'connector-bad-status': b'\x01' + bytes([0, 16]) + ack(status=1) + bytes([0, 16]) + ack(),
        'connector-short': b'\x01' + bytes([4, 10]) + ack()[:10] + bytes([0, 16]) + ack(),
    }
    s['tcp_proto'] = {
        'current': tcp_proto(),
        'v1-zeros': bytes(32),
        'future': tcp_proto(version=7, min_peer=3, features=3),
        'bad-magic': struct.pack('<IHHI20s', 0x11223344, 2, 1, 1, b''),
    }
    # tcp_recv: flags (bit 0 eager sender), then ops 0 irecv, 1 raw ctrl, 2 ctrl msg, 3 raw data, 4 chunk, 5 test,
    # 6 drain
    def irecv(n):
        return b'\x00\x01' + fsize(n)  # one buffer
    def irecv_group(sizes):
        return b'\x00\x00' + bytes([len(sizes) - 1]) + b''.join(fsize(n) for n in sizes)
    def op_chunk(stream, length, seq, off, total, payload=b''):
        return bytes([4, stream, 0, 0]) + u16(length) + bytes([seq, 0]) + u16(off) + bytes([0]) + fsize(total) + \
            bytes([len(payload)]) + payload
    s['tcp_recv'] = {
        'eager-posted': b'\x01' + irecv(100) + op_ctrl_msg(2, EAGER, 0, 0, 100, pattern[:100]) + b'\x05\x06\x05',
        'eager-bounced': b'\x01' + op_ctrl_msg(2, EAGER, 0, 0, 50, pattern[:50]) + irecv(64) + b'\x05',
        'eager-too-big': b'\x01' + irecv(10) + op_ctrl_msg(2, EAGER, 0, 0, 100, pattern[:100]) + b'\x05\x06',
        'inline-v1': b'\x00' + irecv(300) + b'\x06' + op_ctrl_msg(2, INLINE, 0, 0, 300, pattern[:200]) +
        op_raw(1, pattern[200:300]) + b'\x05',
        'rts-then-cts': b'\x01' + op_ctrl_msg(2, RTS, 0, 0, 20000) + irecv(20000) + b'\x06' +
        op_chunk(0, 200, 0, 0, 20000, pattern[:200]) + b'\x05',
        'chunked': b'\x00' + irecv(9000) + b'\x06' + op_chunk(0, 255, 0, 0, 510, pattern[:255]) +
        op_chunk(1, 255, 0, 255, 510, pattern[:255]) + b'\x05' + irecv(510) + b'\x05',
        'err-size': b'\x00' + irecv(9000) + op_ctrl_msg(2, ERR_SIZE, 0, 0, 12000) + b'\x05',
        'garbage-type': b'\x01' + irecv(16) + op_ctrl_msg(2, 9, 0, 0, 0) + b'\x05',
        'group-eager': b'\x01' + irecv_group([100, 200, 50]) + b'\x06' + op_ctrl_msg(2, EAGER, 1, 1, 150, pattern[:150]) +
        op_ctrl_msg(2, EAGER, 0, 0, 80, pattern[:80]) + op_ctrl_msg(2, EAGER, 2, 2, 10, pattern[:10]) + b'\x05',
    }
    # tcp_send: flags (bit 0 eager receiver), then ops 0 isend, 1 raw ctrl, 2 ctrl msg, 3 test, 4 drain
    def isend(n):
        return b'\x00' + fsize(n)
    s['tcp_send'] = {
        'grant-eager': b'\x01' + op_ctrl_msg(2, GRANT, 4, 2, 4096) + isend(100) + b'\x03\x04' + isend(4000) + b'\x03',
        'cts-inline': b'\x00' + op_ctrl_msg(2, CTS, 0, 0, 300) + isend(300) + b'\x03\x04',
        'cts-chunked': b'\x00' + op_ctrl_msg(2, CTS, 0, 0, 100000) + isend(100000) + b'\x04\x03\x04\x03',
        'credit': b'\x01' + op_ctrl_msg(2, GRANT, 2, 2, 4096) + isend(10) + isend(10) + b'\x03' +
        op_ctrl_msg(2, CREDIT, 0, 0, 2) + isend(10) + b'\x03',
        'err-recv': b'\x01' + op_ctrl_msg(2, GRANT, 4, 2, 4096) + isend(200) + op_ctrl_msg(2, ERR_RECV, 100, 0, 200) +
        b'\x03' + isend(5) + b'\x03',
        'cts-too-small': b'\x00' + op_ctrl_msg(2, CTS, 0, 0, 10) + isend(300) + b'\x03',
        'cts-group': b'\x01' + op_ctrl_msg(2, GRANT, 4, 3, 4096) +
        op_ctrl_msg(2, 9, 2, 0, 32, struct.pack('<QII', 5000, 0, 0) + struct.pack('<QII', 9000, 1, 0)) +
        isend(5000) + b'\x03\x04' + isend(8000) + b'\x03\x04',
    }
    # rdma_hs: flags (bit 0: the receiver's handshake), then the stream
    s['rdma_hs'] = {
        'sender-then-ready': b'\x00' + blob(BLOB_HS, rdma_hs(1, nqps=4)) + blob(BLOB_READY, u32(BLOB_READY)),
        'receiver': b'\x01' + blob(BLOB_HS, rdma_hs(2, nqps=1, link=1)),
        'short-blob': b'\x00' + blob(BLOB_HS, rdma_hs(1)[:100]),
        'wrong-type': b'\x00' + blob(BLOB_READY, rdma_hs(1)),
        'too-long': b'\x00' + struct.pack('<II', BLOB_HS, 500) + rdma_hs(1) + bytes(20),
        'bad-qps': b'\x00' + blob(BLOB_HS, rdma_hs(1, nqps=17)),
        'fused-sender': b'\x00' + blob(BLOB_HS, rdma_hs(1, nqps=4, ndevs=2, devname=b'mlx5_0+mlx5_1')) +
        blob(BLOB_READY, u32(BLOB_READY)),
        'older-peer-v1': b'\x00' + blob(BLOB_HS, rdma_hs_v1(1)),
        'newer-peer-v3': b'\x01' + blob(BLOB_HS, rdma_hs(2, version=3)),
    }
    # rdma_ctrl: flags (bit 0 send comm, bit 1 posted receives, bits 2-3 their round), then records
    REC_REQ, REC_STATE, REC_GO, REC_FAIL, FB_REQ, FB_RSTATE, FB_SSTATE = 3, 4, 5, 6, 7, 8, 9
    BACK_OFFER, BACK_READY, BACK_NOT_YET, BACK_SWITCH = 10, 11, 12, 13
    BACK_AT, BACK_FINAL = 14, 15

    def back_tags(pairs):  # struct gdr_rdma_back_tag[]: int32 tag, uint32 rsvd, uint64 count
        return b''.join(struct.pack('<iIQ', t, 0, n) for t, n in pairs)
    s['rdma_ctrl'] = {
        'size-err': b'\x02' + rctrl(1, 5, 1000, 10),
        'rec-req-from-old-peer': b'\x01' + rctrl(REC_REQ, 1),
        # a = whose own buffers get new keys (1 the sender's, 2 the receiver's; other bits ignored)
        'rec-req-rekey': b'\x01' + rctrl(REC_REQ, 1, 1),
        'rec-state-rekey': b'\x00' + rctrl(REC_STATE, 2, 0xff, payload=rec_state(1)),
        'records-rec-state-rekey': b'\x10\x00\x01' + rctrl(REC_STATE, 1, 3)[:32] + rec_state(1, head=3, incomplete=1),
        'rec-fail-text': b'\x02' + rctrl(REC_FAIL, 1, 2, payload=b'gave up: port down'),
        'fb-req-from-old-peer': b'\x00' + rctrl(FB_REQ, 1, payload=b'port down'),
        'back-offer': b'\x01' + rctrl(BACK_OFFER, 1, payload=rec_state(2)),
        'back-switch-from-old-peer': b'\x01' + rctrl(BACK_SWITCH, 1, payload=back_tags([(1, 728), (2, 727)])),
        'records-back-at': b'\x11\x00' + rctrl(BACK_AT, 1)[:32] + back_tags([(1, 729), (2, 727), (-1, 3)]),
        'records-back-final-dup': b'\x10\x00' + rctrl(BACK_FINAL, 1)[:32] + back_tags([(1, 729), (1, 730)]),
        'records-rec-state': b'\x10\x00\x01' + rctrl(REC_STATE, 1)[:32] + rec_state(2, head=3, incomplete=1),
        'records-fb-sstate': b'\x11\x00' + rctrl(FB_SSTATE, 1)[:32] + fb_sent(4, 2, 1, [100]) + fb_sent(5, 1, 0, []) +
        fb_sent(6, 1, 1, [(3 << 30) + 7]),
        'records-rec-state-fused': b'\x10\x03' + rctrl(REC_STATE, 1)[:32] + rec_state(4, ndevs=2),
        'records-bad-sstate': b'\x11\x00' + rctrl(FB_SSTATE, 1)[:32] + fb_sent(4, 9, 1, [100]),
        'size-err-stale': b'\x06' + rctrl(1, 5, 1000, 10) + rctrl(1, 37, 1000, 10),
        'bye': b'\x00' + rctrl(2, 3),
        'garbage': b'\x02' + rctrl(1, 1, magic=0xdeadbeef),
        'unknown-type': b'\x03' + rctrl(77, 0) + rctrl(2, 0),
        'partial': b'\x02' + rctrl(1, 2, 3, 4)[:20],
    }
    # rdma_cts: flags (bits 0-1 QPs - 1, bit 2 split), then ops 0 CTS entry, 1 raw FIFO, 2 isend, 3 test,
    # 4 failed completion, 5 control record
    def cts_entry(size, tag=0, nreqs=1, r=0, f=0):
        # f=0: current slot, addr = 0x20000000 + (u16 << 12), size (u64) % twice the largest isend, rkey default,
        # seq = head + 1
        return bytes([0, f, r]) + u16(1) + u64(size) + bytes([tag, nreqs - 1])
    def isend_op(size, tag=0):
        return bytes([2, 1]) + u64(size) + bytes([tag]) if size >= 4096 else bytes([2, 0]) + u16(size) + bytes([tag])
    s['rdma_cts'] = {
        'single': b'\x00' + cts_entry(100000) + isend_op(5000) + b'\x03' + cts_entry(64) + isend_op(64) + b'\x03',
        'grouped': b'\x00' + cts_entry(4096, 0, 3, 0) + cts_entry(4096, 1, 3, 1) + cts_entry(4096, 2, 3, 2) +
        isend_op(100, 2) + isend_op(4000, 0) + isend_op(0, 1) + b'\x03',
        'split4': b'\x07' + cts_entry(1 << 20) + isend_op(300000) + b'\x03\x03',
        'too-big': b'\x00' + cts_entry(10) + isend_op(100) + b'\x03',
        'failed-wc': b'\x01' + cts_entry(1000) + isend_op(1000) + b'\x04\x00\x05' + b'\x03',
        'size-err-ctrl': b'\x00' + b'\x05\x20' + rctrl(1, 0, 10, 5),
        # 3 GiB + 5 bytes in one isend: WRs of at most 1 GiB, the size in the sizes row (the imm cannot say it)
        'large-row': b'\x00' + cts_entry((3 << 30) + 64) + isend_op((3 << 30) + 5) + b'\x03\x03',
        # WRs of at most 64 KiB (flags bit 3): 1 MB in 16 pieces, split over 2 QPs
        'pieces': b'\x0d' + cts_entry(1 << 20) + isend_op(1000000) + b'\x03\x03\x03',
    }
    # rdma_imm: flags (bits 0-1 QPs - 1, bit 2 split), then ops 0 irecv, 1 receive completion, 2 sizes row,
    # 3 test, 4 control record
    def irecv_op(caps):
        if len(caps) == 1:
            return bytes([0, 1, 0]) + u16(caps[0])
        return bytes([0, 0, len(caps) - 1]) + b''.join(bytes([0]) + u16(c) for c in caps)
    s['rdma_imm'] = {
        'single': b'\x00' + irecv_op([1000]) + bytes([1, 2, 0]) + u32(500) + b'\x03',
        'single-too-big': b'\x00' + irecv_op([100]) + bytes([1, 2, 0]) + u32(500) + b'\x03',
        'grouped': b'\x00' + irecv_op([100, 200, 300]) + bytes([2, 0]) + struct.pack('<8q', 50, 200, 0, 0, 0, 0, 0, 0) +
        bytes([1, 4, 0]) + b'\x03',
        'grouped-bad-size': b'\x00' + irecv_op([100, 200]) + bytes([2, 0]) + struct.pack('<8q', 500, -1, 0, 0, 0, 0, 0, 0) +
        bytes([1, 4, 0]) + b'\x03',
        # one buffer of 4 GiB, its 3 GiB + 5 sent bytes in the sizes row, announced by a group imm
        'single-row': b'\x00' + bytes([0, 1, 2]) + u64(4 << 30) + bytes([2, 0]) +
        struct.pack('<8q', (3 << 30) + 5, 0, 0, 0, 0, 0, 0, 0) + bytes([1, 4, 0]) + b'\x03',
        'split2': b'\x05' + irecv_op([4096]) + bytes([1, 2, 0]) + u32(2048) + bytes([1, 2, 0]) + u32(2048) + b'\x03',
        'error-wc': b'\x00' + irecv_op([64]) + bytes([1, 8, 0]) + u32(10) + bytes([5]) + b'\x03',
        'size-err-ctrl': b'\x00' + irecv_op([64]) + b'\x04\x20' + rctrl(1, 0, 100, 64) + b'\x03',
    }
    # gin_msg: flags (bits 0-1: the next window id is 2 + them), then messages {peer & 1, u16 length, the bytes}
    s['gin_msg'] = {
        'reg': b'\x00' + gin_msg(1, gin_hdr(GIN_REG, mr=2, size=4096, aux=0x10000)) +
        gin_msg(1, gin_hdr(GIN_REG, mr=0, size=256, aux=0x20000, rkey=9)) + gin_msg(0, gin_hdr(GIN_REG, mr=1, size=64)),
        'reg-ahead': b'\x00' + b''.join(gin_msg(1, gin_hdr(GIN_REG, mr=2 + k, size=64)) for k in range(12)),
        'put-inline': b'\x00' + gin_msg(1, gin_hdr(GIN_PUT, F_INLINE, mr=0, off=10, size=16) + pattern[:16]),
        'put-data-signal': b'\x00' + gin_msg(1, gin_hdr(GIN_PUT, F_DATA | F_SIGNAL, mr=0, size=200, sig_mr=1,
                                                         sig_off=8, sig_val=3)),
        'put-signal-only': b'\x00' + gin_msg(0, gin_hdr(GIN_PUT, F_SIGNAL, mr=GIN_MR_NONE, sig_mr=1, sig_off=56,
                                                         sig_val=1)),
        'get': b'\x00' + gin_msg(1, gin_hdr(GIN_GET, mr=0, off=16, size=100, aux_mr=1, aux=0, cookie=77)) +
        gin_msg(1, gin_hdr(GIN_GET, mr=1, size=0, cookie=78)),
        'get-reply': b'\x00' + gin_msg(1, gin_hdr(GIN_GET_REPLY, F_DATA, mr=0, off=0, size=64, cookie=1 << 32)) +
        gin_msg(0, gin_hdr(GIN_GET_REPLY, cookie=1 << 32 | 2)),
        'flush': b'\x00' + gin_msg(1, gin_hdr(GIN_FLUSH, cookie=5)) +
        gin_msg(1, gin_hdr(GIN_FLUSH_ACK, cookie=1 << 32 | 1)),
        'qp': b'\x00' + gin_msg(1, gin_hdr(GIN_QP, F_INLINE, size=56) + gin_qpinfo()) +
        gin_msg(1, gin_hdr(GIN_QP_READY)) + gin_msg(1, gin_hdr(GIN_MOVE, aux=3)),
        'qp-recover': b'\x00' + gin_msg(1, gin_hdr(GIN_QP, F_INLINE | F_RECOVER, size=56, cookie=1, aux=2) +
                                         gin_qpinfo(mtu=3, link=1)),
        'abort': b'\x00' + gin_msg(1, gin_hdr(GIN_ABORT)),
    }
    return s


def main():
    for target, files in seeds().items():
        d = os.path.join(HERE, 'corpus', target)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.startswith('seed-'):
                os.remove(os.path.join(d, f))
        for name, data in files.items():
            with open(os.path.join(d, 'seed-' + name), 'wb') as fh:
                fh.write(data)
        print('%-10s %d seeds' % (target, len(files)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
