"""Format layer: the record batch codec shared by disk, wire and clients."""

from lkstream.format.batch import BatchHeader, check_batch, check_producer_batch, parse_header
from lkstream.format.codec import Compression, Record, decode_batch, decode_batches, encode_batch

__all__ = [
    "BatchHeader",
    "Compression",
    "Record",
    "check_batch",
    "check_producer_batch",
    "decode_batch",
    "decode_batches",
    "encode_batch",
    "parse_header",
]
