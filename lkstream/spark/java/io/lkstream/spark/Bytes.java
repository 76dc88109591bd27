package io.lkstream.spark;

/** Big-endian integers of a byte array, as every fixed-width field of the format is stored. */
final class Bytes {
  private Bytes() {}

  static short getShort(byte[] b, int at) {
    return (short) ((b[at] & 0xFF) << 8 | (b[at + 1] & 0xFF));
  }

  static int getInt(byte[] b, int at) {
    return (b[at] & 0xFF) << 24 | (b[at + 1] & 0xFF) << 16 | (b[at + 2] & 0xFF) << 8 | (b[at + 3] & 0xFF);
  }

  static long getLong(byte[] b, int at) {
    return (long) getInt(b, at) << 32 | (getInt(b, at + 4) & 0xFFFFFFFFL);
  }
}
