#!/usr/bin/env python3
"""A Tandem client in Python: one request, unary or streamed, over TLS or plaintext.

Needs Debian's python3-grpcio and python3-protobuf, and the message classes generated once:

    protoc -I proto --python_out=gen proto/tandem/v1/*.proto
    PYTHONPATH=gen python3 examples/python/tandem_client.py --address=localhost:7000 \
        --ca=ca.crt --api_key=KEY --stream "Write a haiku about routers."

The gateway's methods are called by name (grpc's generic API), so no gRPC stub generator is
needed: the service definitions only name the methods and their message types.
"""
import argparse
import sys

import grpc
from tandem.v1 import chat_pb2, common_pb2, gateway_pb2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("prompt")
    p.add_argument("--address", default="localhost:7000")
    p.add_argument("--ca", help="CA certificate of the gateway (PEM); plaintext when absent")
    p.add_argument("--api_key", default="", help="sent as 'authorization: Bearer KEY'")
    p.add_argument("--stream", action="store_true", help="GenerateStream instead of Generate")
    p.add_argument("--max_tokens", type=int, default=64)
    p.add_argument("--timeout", type=float, default=60, help="deadline in seconds")
    args = p.parse_args()

    if args.ca:
        with open(args.ca, "rb") as f:
            channel = grpc.secure_channel(args.address, grpc.ssl_channel_credentials(f.read()))
    else:
        channel = grpc.insecure_channel(args.address)
    metadata = [("authorization", "Bearer " + args.api_key)] if args.api_key else []
    request = gateway_pb2.GenerateRequest(
        messages=[chat_pb2.ChatMessage(role="user",
                                       content=[chat_pb2.ContentPart(text=args.prompt)])],
        sampling=common_pb2.SamplingParams(max_tokens=args.max_tokens))

    try:
        if args.stream:
            stream = channel.unary_stream("/tandem.v1.Gateway/GenerateStream",
                                          gateway_pb2.GenerateRequest.SerializeToString,
                                          gateway_pb2.GenerateStreamChunk.FromString)
            for chunk in stream(request, metadata=metadata, timeout=args.timeout):
                if chunk.HasField("route"):
                    print(f"[{chunk.route.model}: {chunk.route.reason}]", file=sys.stderr)
                print(chunk.text, end="", flush=True)
            print()
        else:
            generate = channel.unary_unary("/tandem.v1.Gateway/Generate",
                                           gateway_pb2.GenerateRequest.SerializeToString,
                                           gateway_pb2.GenerateResponse.FromString)
            answer = generate(request, metadata=metadata, timeout=args.timeout)
            print(f"[{answer.route.model}: {answer.route.reason}]", file=sys.stderr)
            print(answer.text)
    except grpc.RpcError as e:
        # RESOURCE_EXHAUSTED and UNAVAILABLE are retryable; retry-after-ms says when.
        retry = dict(e.trailing_metadata() or ()).get("retry-after-ms")
        print(f"{e.code().name}: {e.details()}" + (f" (retry after {retry} ms)" if retry else ""),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
