package io.lkstream.spark;

/** A range cannot be read: a corrupt batch (with file and byte position) or records retention deleted. */
public final class LogReadException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  LogReadException(String message) {
    super(message);
  }

  static LogReadException corrupt(String path, long position, String reason) {
    return new LogReadException("corrupt record batch in " + path + " at byte " + position + ": " + reason);
  }

  /** The words of the Python source's DataLossError (lkstream/spark/source.py, data_loss_message). */
  static LogReadException dataLoss(String topic, int partition, long start, long available) {
    String what = "records of " + topic + "[" + partition + "] from offset " + start;
    if (available > start) {
      return new LogReadException(
          "DataLossError: " + what + " to " + (available - 1) + " are no longer available (retention deleted them; "
              + "the log now starts at " + available + "). Set failOnDataLoss=false to skip them");
    }
    return new LogReadException("DataLossError: " + what + " are no longer available");
  }
}
