/*
 * lkstream/format/_v2_put.h: writing the v2 batch format, shared by the C encoders
 * (_encode.c: batches from Python records; _columns.c: batches from Arrow columns).
 *
 * zigzag varints as Kafka's record fields use them, big-endian integers, and the
 * 61-byte batch header with the CRC left zero (the caller sets it after any compression).
 * Everything is static inline: each extension gets its own copy, no symbols are shared.
 */
#ifndef LKSTREAM_V2_PUT_H
#define LKSTREAM_V2_PUT_H

#include <Python.h>
#include <stdint.h>

/* -- varints ------------------------------------------------------------------------------------- */

static inline uint64_t zigzag(int64_t value) { return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); }

static inline Py_ssize_t varint_size(uint64_t zz) {
    Py_ssize_t size = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        size++;
    }
    return size;
}

static inline uint8_t *put_varint(uint8_t *out, uint64_t zz) {
    while (zz >= 0x80) {
        *out++ = (uint8_t)(zz | 0x80);
        zz >>= 7;
    }
    *out++ = (uint8_t)zz;
    return out;
}

static inline uint8_t *put_be(uint8_t *out, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (uint8_t)value;
        value >>= 8;
    }
    return out + bytes;
}

/* -- the batch header -------------------------------------------------------------------------------- */

static inline void put_header(uint8_t *buf, Py_ssize_t size, Py_ssize_t count, int64_t base_ts, int64_t max_ts) {
    uint8_t *p = buf;
    p = put_be(p, 0, 8);                                 /* baseOffset */
    p = put_be(p, (uint64_t)(size - 12), 4);             /* batchLength */
    p = put_be(p, (uint64_t)(int64_t)-1, 4);             /* partitionLeaderEpoch */
    *p++ = 2;                                            /* magic */
    p = put_be(p, 0, 4);                                 /* crc: the caller's */
    p = put_be(p, 0, 2);                                 /* attributes */
    p = put_be(p, (uint64_t)(count - 1), 4);             /* lastOffsetDelta */
    p = put_be(p, (uint64_t)base_ts, 8);                 /* baseTimestamp */
    p = put_be(p, (uint64_t)max_ts, 8);                  /* maxTimestamp */
    p = put_be(p, (uint64_t)(int64_t)-1, 8);             /* producerId */
    p = put_be(p, (uint64_t)(int64_t)-1, 2);             /* producerEpoch */
    p = put_be(p, (uint64_t)(int64_t)-1, 4);             /* baseSequence */
    put_be(p, (uint64_t)count, 4);                       /* recordsCount */
}

#endif /* LKSTREAM_V2_PUT_H */
