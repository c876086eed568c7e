"""Python's grpcio against SessionService's Unix socket, with no generated
code: raw method calls on hand-encoded protobuf bytes. Run by
tests/tests/suite/grpc_clients.rs; docs/grpc-clients.md shows the same setup.

Usage: python3 grpcio_session.py <runtime dir>
Prints one line per check; exits non-zero on the first failure.
"""

import sys

import grpc


def field(number: int, text: str) -> bytes:
    """One length-delimited protobuf field (wire type 2) holding UTF-8 text."""
    data = text.encode()
    assert len(data) < 128, "one-byte lengths only"
    return bytes([number << 3 | 2, len(data)]) + data


def first_string(message: bytes) -> str:
    """Field 1 of a message whose first field is a short string."""
    assert message[0] == 1 << 3 | 2, message[:8]
    return message[2 : 2 + message[1]].decode()


def main() -> None:
    socket = sys.argv[1] + "/session.sock"
    # The authority override is what makes grpcio work here: by default it
    # sends the socket path as the HTTP/2 :authority, which the server's HTTP/2
    # layer refuses (RST_STREAM PROTOCOL_ERROR).
    channel = grpc.insecure_channel(
        "unix:" + socket, options=[("grpc.default_authority", "localhost")]
    )
    grpc.channel_ready_future(channel).result(timeout=10)

    def method(name: str):
        # No serializers: requests and responses are raw bytes.
        return channel.unary_unary("/pedelec.v1.SessionService/" + name)

    created = method("CreateSession")(
        field(1, "https://py.example") + field(2, "codex"), timeout=10
    )
    session_id = first_string(created)
    assert session_id.startswith("thr_"), session_id
    print("created", session_id)

    listed = method("List")(field(1, "https://py.example"), timeout=10)
    assert session_id.encode() in listed, listed
    print("listed", session_id)

    try:
        method("Get")(field(1, "thr_nope") + field(2, "https://py.example"), timeout=10)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
        assert e.details().startswith("THREAD_NOT_FOUND: "), e.details()
        print("error", e.code().name, e.details())
    else:
        raise AssertionError("Get of an unknown thread succeeded")


if __name__ == "__main__":
    main()
