"""SMB2 requests on an authenticated session, built and read with `struct` in the caller's thread.

smbprotocol negotiates and authenticates (NTLM, SMB 3.1.1 pre-auth integrity, key derivation);
`take_over` then retires its receive thread and hands the socket, session id, next message id
and credit window to a `Wire`. Profiling showed smbprotocol's per-message `Structure` packing
and unpacking and the hand-off between its receive thread and the caller cost ~1 ms of CPU per
folder, more than smbd spends answering it; here a folder's compound costs a few struct calls.

- Framing: Direct TCP (4-byte big-endian length) around one SMB2 message or a compound chain.
- Credits: every request consumes its credit charge of message ids; answers grant credits back.
  `send` waits for answers while the window is too small.
- Signing (user sessions) and encryption (shares or sessions that demand it) use smbprotocol's
  own routines with the session's keys, so they match what it negotiated.
- Time: every socket wait gets what remains of the caller's deadline; past it `TimeoutError`.
  A closed or reset socket raises `ConnectionError`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

# Commands (MS-SMB2 2.2.1)
LOGOFF, TREE_CONNECT, CREATE, CLOSE, READ, WRITE, ECHO, QUERY_DIRECTORY = 2, 3, 5, 6, 8, 9, 13, 14
# Header flags
FLAG_ASYNC, FLAG_RELATED, FLAG_SIGNED = 0x2, 0x4, 0x8
STATUS_SUCCESS = 0
STATUS_PENDING = 0x00000103
STATUS_BUFFER_OVERFLOW = 0x80000005  # a pipe read with more data to come
STATUS_NO_MORE_FILES = 0x80000006
STATUS_END_OF_FILE = 0xC0000011
UNSOLICITED = 0xFFFFFFFFFFFFFFFF  # message id of oplock/lease breaks (none are asked for)

REQUEST_HEADER = struct.Struct("<4sHHIHHIIQIIQ16s")  # 64 bytes
# status, command, credits granted, flags, next command, message id
RESPONSE_HEADER = struct.Struct("<8xIHHIIQ")
PAYLOAD_PER_CREDIT = 65536
CREDIT_TARGET = 512  # ask for more credits while the window is below this
RECV_CHUNK = 1 << 18
NO_SIGNATURE = b"\x00" * 16

CREATE_REQUEST = struct.Struct("<HBBIQQIIIIIHHII")  # 56 bytes, name follows
QUERY_DIRECTORY_REQUEST = struct.Struct("<HBBI16sHHI")  # 32 bytes, pattern follows
CLOSE_REQUEST = struct.Struct("<HHI16s")  # 24 bytes
READ_REQUEST = struct.Struct("<HBBIQ16sIIIHHx")  # 49 bytes
WRITE_REQUEST = struct.Struct("<HHIQ16sIIHHI")  # 48 bytes, data follows
TREE_CONNECT_REQUEST = struct.Struct("<HHHH")  # 8 bytes, path follows
EMPTY_REQUEST = struct.Struct("<HH")  # LOGOFF, ECHO, TREE_DISCONNECT

# CREATE fields (MS-SMB2 2.2.13): read-only opens, shared with everyone.
IMPERSONATION = 2
SHARE_ALL = 0x7
FILE_OPEN = 1
RELATED_FILE_ID = b"\xff" * 16


class Message(NamedTuple):
    command: int
    body: bytes
    payload: int  # bytes sent or expected back, for the credit charge


class Reply(NamedTuple):
    status: int
    data: bytes  # the whole message, header included: answer offsets count from its start


# -- request bodies --------------------------------------------------------------------------


def create(name: bytes, access: int, options: int) -> Message:
    """Open `name` (UTF-16-LE; b'' is the share's root) with the access mask and options."""
    fixed = CREATE_REQUEST.pack(
        57,
        0,
        0,
        IMPERSONATION,
        0,
        0,
        access,
        0,
        SHARE_ALL,
        FILE_OPEN,
        options,
        120,
        len(name),
        0,
        0,
    )
    return Message(CREATE, fixed + (name or b"\x00\x00"), 1)


def query_directory(buffer_length: int, file_id: bytes = RELATED_FILE_ID) -> Message:
    """FileDirectoryInformation (class 1) for every name ('*')."""
    pattern = "*".encode("utf-16-le")
    fixed = QUERY_DIRECTORY_REQUEST.pack(33, 1, 0, 0, file_id, 96, len(pattern), buffer_length)
    return Message(QUERY_DIRECTORY, fixed + pattern, buffer_length)


def close(file_id: bytes = RELATED_FILE_ID) -> Message:
    return Message(CLOSE, CLOSE_REQUEST.pack(24, 0, 0, file_id), 1)


def read(offset: int, length: int, file_id: bytes = RELATED_FILE_ID) -> Message:
    return Message(
        READ, READ_REQUEST.pack(49, 0x50, 0, length, offset, file_id, 0, 0, 0, 0, 0), length
    )


def write(data: bytes, file_id: bytes) -> Message:
    fixed = WRITE_REQUEST.pack(49, 112, len(data), 0, file_id, 0, 0, 0, 0, 0)
    return Message(WRITE, fixed + data, len(data))


def tree_connect(unc: str) -> Message:
    path = unc.encode("utf-16-le")
    return Message(TREE_CONNECT, TREE_CONNECT_REQUEST.pack(9, 0, 72, len(path)) + path, 1)


def logoff() -> Message:
    return Message(LOGOFF, EMPTY_REQUEST.pack(4, 0), 1)


# -- answer fields ---------------------------------------------------------------------------


def file_id_of(create_reply: bytes) -> bytes:
    return create_reply[128:144]


def tree_id_of(reply: bytes) -> int:
    return struct.unpack_from("<I", reply, 36)[0]


def share_flags_of(tree_connect_reply: bytes) -> int:
    return struct.unpack_from("<I", tree_connect_reply, 68)[0]


def read_data(read_reply: bytes) -> bytes:
    offset = read_reply[66]
    return read_reply[offset : offset + struct.unpack_from("<I", read_reply, 68)[0]]


def query_buffer(query_reply: bytes) -> tuple[int, int]:
    """(offset, length) of a QUERY_DIRECTORY answer's entries within the message."""
    return struct.unpack_from("<HI", query_reply, 66)


# -- the wire --------------------------------------------------------------------------------


class Wire:
    """One SMB2 session's socket, owned by the calling thread. Not thread-safe."""

    def __init__(
        self,
        sock: socket.socket,
        session_id: int,
        next_message_id: int,
        window_high: int,
        multi_credit: bool,
        sign: Callable[[bytes, int, int, bool], bytes] | None,
        encrypt: Callable[[bytes], bytes] | None,
        decrypt: Callable[[bytes], bytes] | None,
    ) -> None:
        self._sock = sock
        self._session_id = session_id
        self._next_id = next_message_id
        self._high = window_high
        self.multi_credit = multi_credit
        self._sign = sign
        self._encrypt = encrypt
        self._decrypt = decrypt
        self._outgoing: list[bytes] = []
        self._incoming = bytearray()
        self._replies: dict[int, Reply] = {}
        self._outstanding: set[int] = set()
        self.async_ids: dict[int, int] = {}  # message id -> AsyncId of its interim answer

    def charge(self, payload: int) -> int:
        return (max(0, payload - 1) // PAYLOAD_PER_CREDIT) + 1 if self.multi_credit else 0

    def send(
        self, messages: list[Message], tree_id: int, deadline: float, encrypted: bool = False
    ) -> list[int]:
        """Queue one request (several: a related compound); returns their message ids.

        Requests go out with the next `flush` or wait for an answer."""
        charges = [self.charge(m.payload) for m in messages]
        need = sum(max(c, 1) for c in charges)
        while self._high - self._next_id < need:
            if not self._outstanding:
                raise ConnectionError(f"the server granted too few credits ({need} needed)")
            self._pump(deadline)
        top_up = max(0, min(64, CREDIT_TARGET - (self._high - self._next_id - need)))
        encrypted = encrypted and self._encrypt is not None
        sign = None if encrypted else self._sign  # encryption authenticates; no signature then
        parts, ids = [], []
        last = len(messages) - 1
        for i, (message, charge) in enumerate(zip(messages, charges, strict=True)):
            length = 64 + len(message.body)
            padding = 0 if i == last else -length % 8
            flags = FLAG_RELATED if i else 0
            if sign is not None:
                flags |= FLAG_SIGNED
            message_id = self._next_id
            self._next_id += max(charge, 1)
            header = REQUEST_HEADER.pack(
                b"\xfeSMB",
                64,
                charge,
                0,
                message.command,
                max(charge, 1) + (top_up if i == last else 0),
                flags,
                0 if i == last else length + padding,
                message_id,
                0,
                tree_id,
                self._session_id,
                NO_SIGNATURE,
            )
            raw = header + message.body + b"\x00" * padding
            if sign is not None:
                raw = raw[:48] + sign(raw, message_id, message.command, False) + raw[64:]
            parts.append(raw)
            ids.append(message_id)
            self._outstanding.add(message_id)
        payload = b"".join(parts)
        if encrypted:
            payload = self._encrypt(payload)
        self._outgoing.append(len(payload).to_bytes(4, "big") + payload)
        return ids

    def flush(self, deadline: float) -> None:
        if self._outgoing:
            data = b"".join(self._outgoing)
            self._outgoing.clear()
            self._sock.settimeout(_remaining(deadline))
            self._sock.sendall(data)

    def reply(self, message_id: int, deadline: float) -> Reply:
        """The final answer to a request (interim STATUS_PENDING answers are skipped)."""
        replies = self._replies
        while message_id not in replies:
            self._pump(deadline)
        return replies.pop(message_id)

    def answered(self, message_id: int) -> bool:
        """Whether the final answer to a request has been read (without waiting for it)."""
        return message_id in self._replies

    def fileno(self) -> int:
        """The socket's, for a caller's select loop; call `receive` when it is readable."""
        return self._sock.fileno()

    def receive(self, deadline: float) -> None:
        self._pump(deadline)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _pump(self, deadline: float) -> None:
        """Send what is queued, then take in what the server has sent (at least one read)."""
        self.flush(deadline)
        self._sock.settimeout(_remaining(deadline))
        data = self._sock.recv(RECV_CHUNK)
        if not data:
            raise ConnectionError("the server closed the connection")
        buffer = self._incoming
        buffer += data
        start = 0
        while len(buffer) - start >= 4:
            end = start + 4 + int.from_bytes(buffer[start : start + 4], "big")
            if end > len(buffer):
                break
            self._take(bytes(buffer[start + 4 : end]))
            start = end
        del buffer[:start]

    def _take(self, frame: bytes) -> None:
        """File the answers of one frame (a message or a compound chain) by message id."""
        if frame[:4] == b"\xfdSMB":
            if self._decrypt is None:
                raise ConnectionError("an encrypted answer on a session without keys")
            frame = self._decrypt(frame)
            verify = False  # decryption already authenticated it
        else:
            verify = self._sign is not None
        offset = 0
        while True:
            status, command, granted, flags, next_command, message_id = RESPONSE_HEADER.unpack_from(
                frame, offset
            )
            end = offset + next_command if next_command else len(frame)
            self._high += granted
            interim = status == STATUS_PENDING and flags & FLAG_ASYNC
            if interim:  # MS-SMB2 3.3.4.2: a CANCEL names an async request by this id
                self.async_ids[message_id] = struct.unpack_from("<Q", frame, offset + 32)[0]
            elif message_id != UNSOLICITED:
                self.async_ids.pop(message_id, None)
                message = frame[offset:end]
                if verify:
                    self._verify(message, message_id, command, flags)
                self._outstanding.discard(message_id)
                self._replies[message_id] = Reply(status, message)
            if not next_command:
                return
            offset = end

    def _verify(self, message: bytes, message_id: int, command: int, flags: int) -> None:
        assert self._sign is not None
        if not flags & FLAG_SIGNED or self._sign(message, message_id, command, True) != bytes(
            message[48:64]
        ):
            raise ConnectionError("an answer's signature does not verify")


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no answer in time")
    return remaining


# -- taking the session over from smbprotocol --------------------------------------------------


def prepare_handover(conn) -> Callable[[], None]:
    """Route smbprotocol's socket reads through a switch; call before the session is set up.

    Its receive thread is already inside one read when this runs; the session set-up's answers
    end that read, so every later read goes through the switch. Returns `request`, after which
    the thread reads one more message (the answer that `take_over`'s echo provokes) and then
    sees end-of-stream and ends, leaving the socket untouched."""
    transport = conn.transport
    original = transport.recv
    state = {"requested": False, "done": False}

    def recv(timeout: float) -> bytes:
        if state["done"]:
            return b""
        data = original(timeout)
        if state["requested"]:
            state["done"] = True
        return data

    def request() -> None:
        state["requested"] = True

    transport.recv = recv
    return request


def take_over(conn, session, request_handover: Callable[[], None], timeout_s: float) -> Wire:
    """Retire smbprotocol's receive thread and return a Wire over the session's socket."""
    from smbprotocol.connection import SMB2TransformHeader

    request_handover()
    # The echo's answer is the receive thread's last message; it also asks for credits.
    conn.echo(sid=session.session_id, timeout=max(1, int(timeout_s)), credit_request=CREDIT_TARGET)
    worker: threading.Thread | None = conn._t_worker
    if worker is not None:
        worker.join(timeout_s)
        if worker.is_alive():
            raise TimeoutError("smbprotocol's receive thread did not hand over")
    signing_key = session.signing_key if session.signing_required else None

    def sign(raw: bytes, message_id: int, command: int, response: bool) -> bytes:
        return conn._generate_signature(raw, signing_key, message_id, response, command)

    def encrypt(payload: bytes) -> bytes:
        return conn._encrypt(payload, session).pack()

    def decrypt(frame: bytes) -> bytes:
        header = SMB2TransformHeader()
        header.unpack(frame)
        return conn._decrypt(header)

    has_keys = session.encryption_key is not None
    return Wire(
        conn.transport._sock,
        session.session_id,
        conn.sequence_window["low"],
        conn.sequence_window["high"],
        bool(conn.supports_multi_credit),
        sign if signing_key and not session.encrypt_data else None,
        encrypt if has_keys else None,
        decrypt if has_keys else None,
    )
