"""Format layer: the record batch codec shared by disk, wire and clients.

Pure functions over bytes (and their C twins). Imports nothing of ``lkstream`` but ``errors``.
"""

from lkstream.format.batch import BatchHeader, check_batch, parse_header
from lkstream.format.codec import Compression, Record, decode_batch, decode_batches, encode_batch
from lkstream.format.validate import Limits, validate_producer_batch

__all__ = [
    "BatchHeader",
    "Compression",
    "Limits",
    "Record",
    "check_batch",
    "decode_batch",
    "decode_batches",
    "encode_batch",
    "parse_header",
    "validate_producer_batch",
]
