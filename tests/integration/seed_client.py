"""A client built from the seed's appendix-A proto alone (run as a subprocess).

It must not import lkstream: the seed messages share the ``lkstream`` package
name with the real proto, and one process cannot load both into protobuf's
default descriptor pool. Usage: ``seed_client.py ADDRESS WORKDIR``; prints JSON.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import grpc
from grpc_tools import protoc

# Appendix A verbatim, plus the one message it uses but leaves out (FetchResponse),
# written the way a seed reader would: the fetched records.
SEED_PROTO = """
syntax = "proto3";
package lkstream;

message ProduceRequest {
  string topic = 1;
  bytes key = 2;
  repeated bytes values = 3;
}

message ProduceResponse {
  uint32 partition = 1;
  repeated uint64 offsets = 2;
}

message FetchRequest {
  string topic = 1;
  uint32 partition = 2;
  uint64 offset = 3;
  uint32 max_bytes = 4;
}

message Record {
  uint64 offset = 1;
  bytes key = 2;
  bytes value = 3;
  uint64 ts = 4;
}

message FetchResponse {
  repeated Record records = 1;
}

service Broker {
  rpc Produce(ProduceRequest) returns (ProduceResponse);
  rpc Fetch(FetchRequest) returns (FetchResponse);
  rpc Subscribe(FetchRequest) returns (stream Record);
}
"""


def main(address: str, workdir: str) -> None:
    out = Path(workdir)
    (out / "seed.proto").write_text(SEED_PROTO)
    code = protoc.main(
        ["protoc", f"-I{out}", f"--python_out={out}", f"--grpc_python_out={out}", str(out / "seed.proto")]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with {code}")
    sys.path.insert(0, str(out))
    pb = importlib.import_module("seed_pb2")
    pb_grpc = importlib.import_module("seed_pb2_grpc")
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        produced = stub.Produce(pb.ProduceRequest(topic="seed.ticks", key=b"AAPL", values=[b"p=1", b"p=2", b"p=3"]))
        fetched = stub.Fetch(pb.FetchRequest(topic="seed.ticks", partition=produced.partition, offset=0))
        stream = stub.Subscribe(pb.FetchRequest(topic="seed.ticks", partition=produced.partition, offset=1))
        streamed = [next(stream).offset for _ in range(2)]
        stream.cancel()
    print(
        json.dumps(
            {
                "partition": produced.partition,
                "offsets": list(produced.offsets),
                "fetched": [[r.offset, r.key.decode(), r.value.decode(), r.ts] for r in fetched.records],
                "streamed": streamed,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
