"""The channel between ``hvdcomm.runner.run``'s caller and its workers.

The caller serves the pickled call (function, args, kwargs) and collects
each rank's pickled outcome over TCP. Every connection starts with a mutual
challenge-response on the per-call secret (HMAC-SHA256 over both sides'
random nonces, with distinct labels for the two proofs, so neither side can
replay or reflect the other's proof), and every message after it carries an
HMAC-SHA256 under a per-connection session key over (direction, sequence
number, length, body). So:

* nothing is served to a peer that does not hold the secret, and a worker
  never unpickles bytes from a caller that does not hold it;
* nothing is unpickled before its MAC is verified, on either side;
* the server never sends a result out: results only travel worker -> caller.

Anyone who can reach the port can still connect, so the server is built to
outlast that (docs/python.md, "horovod.run"): one thread runs an event loop
(selectors) for every connection -- no thread per connection; a connection
that has not completed the handshake gets ``handshake_timeout`` seconds in
all, and at most ``max_pending`` of them are held at once (a newer one
replaces the oldest); running out of descriptors (EMFILE) drops the oldest
unauthenticated connection, or pauses accepting for a moment, and never
ends the loop; a message announcing ``MAX_MESSAGE`` bytes or more is refused
before anything is allocated, and a body is allocated as its bytes arrive.

Not provided: confidentiality on the wire (no encryption; the same model as
hvdrun's rendezvous store, docs/store.md). Traffic of an all-local job stays
on loopback.
"""
import collections
import errno
import hashlib
import hmac
import secrets
import selectors
import socket
import struct
import threading
import time

KEY_BYTES = 32
_NONCE = 32
_MAC = hashlib.sha256().digest_size
_LEN = struct.Struct("!Q")
# Server: the whole handshake of an unauthenticated connection must finish
# within this; client: each read of the handshake.
HANDSHAKE_TIMEOUT_S = 10.0
# A message stalled this long without a byte arriving is abandoned.
_IO_TIMEOUT_S = 300.0
# Messages must be smaller than this (an exclusive bound).
MAX_MESSAGE = 1 << 40
# Unauthenticated connections the server holds at once.
MAX_PENDING = 64
# Bodies are received in pieces of at most this many bytes, so an announced
# length allocates nothing until its bytes arrive.
_CHUNK = 1 << 20
# A client retries a connection lost before its handshake finished (the
# server dropped it to make room under a flood) until this many seconds.
_RETRY_S = 60.0


# What the server sends instead of its proof when the client's proof is
# wrong, so that the client fails at once instead of taking the closed
# connection for one dropped under a flood and trying again.
REFUSAL = b"hvdcomm.runner refused the proof"
assert len(REFUSAL) == _MAC


class AuthenticationError(ConnectionError):
    """The peer does not hold the secret, or a message failed its MAC."""


class MessageTooLargeError(ConnectionError):
    """A message announced MAX_MESSAGE bytes or more (or more than this
    process can hold)."""


def new_key():
    return secrets.token_bytes(KEY_BYTES)


def _mac(key, *parts):
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def check_length(n, limit=MAX_MESSAGE):
    """Raises MessageTooLargeError unless n < limit."""
    if n >= limit:
        raise MessageTooLargeError(f"a message of {n} bytes announced; messages must be smaller than {limit} bytes")
    return n


def _recv_exact(sock, n):
    """Exactly n bytes (a bytearray). Grows as bytes arrive: a peer's
    announced length allocates nothing by itself."""
    try:
        buf = bytearray(min(n, _CHUNK))
        view = memoryview(buf)
        got = 0
        while got < n:
            if got == len(buf):
                view.release()
                buf.extend(bytes(min(n - got, len(buf))))  # doubles, at most to n
                view = memoryview(buf)
            k = sock.recv_into(view[got:], len(buf) - got)
            if k == 0:
                raise ConnectionError(f"connection closed after {got} of {n} bytes")
            got += k
        view.release()
        return buf
    except MemoryError:
        raise MessageTooLargeError(f"out of memory receiving a message of {n} bytes") from None


class _Session:
    """Framed, MACed messages on an authenticated connection: ``seal`` and
    ``open`` for the server's event loop, ``send`` and ``recv`` on a
    blocking socket for the client."""

    def __init__(self, sock, key, nonce_s, nonce_c, server):
        self._sock = sock
        self._key = _mac(key, b"hvdcomm.runner session", nonce_s, nonce_c)
        self._out, self._in = (b"S", b"C") if server else (b"C", b"S")
        self._sent = 0
        self._received = 0

    def seal(self, body):
        header = _LEN.pack(len(body))
        tag = _mac(self._key, self._out, _LEN.pack(self._sent), header, body)
        self._sent += 1
        return header, tag

    def open(self, header, body, tag):
        if not hmac.compare_digest(tag, _mac(self._key, self._in, _LEN.pack(self._received), header, body)):
            raise AuthenticationError("message failed its MAC check")
        self._received += 1
        return body

    def send(self, body):
        header, tag = self.seal(body)
        self._sock.sendall(header)
        self._sock.sendall(body)
        self._sock.sendall(tag)

    def recv(self, limit=MAX_MESSAGE):
        header = _recv_exact(self._sock, _LEN.size)
        n = check_length(_LEN.unpack(header)[0], limit)
        body = _recv_exact(self._sock, n)
        return self.open(header, body, _recv_exact(self._sock, _MAC))


def server_handshake(sock, key):
    """Server side on a blocking socket (tests; the Server runs the same
    steps in its event loop): proves the secret and requires the client to
    prove it."""
    nonce_s = secrets.token_bytes(_NONCE)
    sock.sendall(nonce_s)
    hello = _recv_exact(sock, _NONCE + _MAC)
    try:
        nonce_c = _check_client_proof(key, nonce_s, hello)
    except AuthenticationError:
        sock.sendall(REFUSAL)
        raise
    sock.sendall(_server_proof(key, nonce_s, nonce_c))
    return _Session(sock, key, nonce_s, nonce_c, server=True)


def _check_client_proof(key, nonce_s, hello):
    nonce_c, proof = bytes(hello[:_NONCE]), bytes(hello[_NONCE:])
    if not hmac.compare_digest(proof, _mac(key, b"hvdcomm.runner client", nonce_s, nonce_c)):
        raise AuthenticationError("the client does not hold the secret")
    return nonce_c


def _server_proof(key, nonce_s, nonce_c):
    return _mac(key, b"hvdcomm.runner server", nonce_s, nonce_c)


def client_handshake(sock, key):
    """Client side: proves the secret and requires the server to prove it."""
    nonce_s = bytes(_recv_exact(sock, _NONCE))
    nonce_c = secrets.token_bytes(_NONCE)
    sock.sendall(nonce_c + _mac(key, b"hvdcomm.runner client", nonce_s, nonce_c))
    proof = bytes(_recv_exact(sock, _MAC))
    if proof == REFUSAL:
        raise AuthenticationError("the server refused this client's proof: the two do not hold the same secret")
    if not hmac.compare_digest(proof, _server_proof(key, nonce_s, nonce_c)):
        raise AuthenticationError("the server does not hold the secret")
    return _Session(sock, key, nonce_s, nonce_c, server=False)


def request(host, port, key, body, connect_timeout=30.0, retry_s=_RETRY_S):
    """One request on a fresh connection; returns the server's verified
    reply. A connection lost before the handshake finished (the server made
    room for newer ones under a flood) is tried again for up to ``retry_s``
    seconds; an AuthenticationError (a wrong proof either way, or the
    server's REFUSAL of ours) is not."""
    give_up = time.monotonic() + retry_s
    pause = 0.05
    while True:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                session = client_handshake(sock, key)
            except AuthenticationError:
                raise
            except (ConnectionError, socket.timeout):
                if time.monotonic() + pause >= give_up:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            sock.settimeout(_IO_TIMEOUT_S)
            session.send(body)
            return session.recv()
        finally:
            sock.close()


# What a connection's protocol (a generator) yields to the event loop: an
# int (receive that many bytes), bytes-like objects in a tuple (send them),
# or _AUTHENTICATED.
_AUTHENTICATED = object()


class _Conn:
    __slots__ = ("sock", "proto", "want", "inbuf", "got", "out", "deadline", "authenticated")

    def __init__(self, sock, proto, deadline):
        self.sock = sock
        self.proto = proto
        self.want = 0
        self.inbuf = None
        self.got = 0
        self.out = collections.deque()
        self.deadline = deadline
        self.authenticated = False


class Server:
    """Serves ``payload`` to ``get`` requests and stores ``put <rank>\\n<record>``
    requests, in arrival order, in ``records`` as (rank, record bytes).
    Connections that fail the handshake or a MAC, or announce a message of
    MAX_MESSAGE bytes or more, are closed and counted in ``rejected``; they
    change nothing. ``dropped`` counts unauthenticated connections closed
    for their deadline or to make room, ``accept_errors`` failed accepts
    (EMFILE and the like). One thread; see the module's docstring."""

    def __init__(self, key, payload, bind_host, handshake_timeout=HANDSHAKE_TIMEOUT_S, max_pending=MAX_PENDING):
        self._key = key
        self._payload = payload
        self._handshake_timeout = handshake_timeout
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self.records = []
        self.rejected = 0
        self.dropped = 0
        self.accept_errors = 0
        self._stop = threading.Event()
        if bind_host == "":
            if socket.has_dualstack_ipv6():
                self._sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
            else:
                self._sock = socket.create_server(("0.0.0.0", 0))
        else:
            family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
            self._sock = socket.create_server((bind_host, 0), family=family, backlog=128)
        self.port = self._sock.getsockname()[1]
        self._sock.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ, None)
        self._listening = True
        self._resume_at = 0.0
        self._conns = {}  # fd -> _Conn
        self._pending = collections.OrderedDict()  # fd -> _Conn, unauthenticated, oldest first
        self._thread = threading.Thread(target=self._loop, name="hvdcomm.runner.server", daemon=True)
        self._thread.start()

    # --- the event loop -------------------------------------------------
    def _loop(self):
        while not self._stop.is_set():
            now = time.monotonic()
            timeout = 0.2
            if not self._listening:
                timeout = min(timeout, max(0.0, self._resume_at - now))
            for c in self._conns.values():
                timeout = min(timeout, max(0.0, c.deadline - now))
            for key, mask in self._sel.select(timeout):
                if key.data is None:
                    self._accept()
                elif self._conns.get(key.fd) is key.data:  # not closed earlier in this round
                    self._io(key.data, mask)
            now = time.monotonic()
            for c in [c for c in self._conns.values() if c.deadline <= now]:
                if not c.authenticated:
                    with self._lock:
                        self.dropped += 1
                self._close(c)
            if not self._listening and now >= self._resume_at:
                self._sel.register(self._sock, selectors.EVENT_READ, None)
                self._listening = True

    def _accept(self):
        for _ in range(64):  # then the other connections get their turn
            try:
                conn, _ = self._sock.accept()
            except BlockingIOError:
                return
            except OSError as e:
                with self._lock:
                    self.accept_errors += 1
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._pending:
                        self._drop_oldest()  # frees a descriptor for the one waiting
                        continue
                    # Nothing of ours to free: leave the backlog waiting a moment.
                    self._sel.unregister(self._sock)
                    self._listening = False
                    self._resume_at = time.monotonic() + 0.1
                    return
                continue  # ECONNABORTED and the like: that one connection
            if len(self._pending) >= self._max_pending:
                self._drop_oldest()
            conn.setblocking(False)
            c = _Conn(conn, self._protocol(), time.monotonic() + self._handshake_timeout)
            self._conns[conn.fileno()] = c
            self._pending[conn.fileno()] = c
            self._sel.register(conn, selectors.EVENT_READ, c)
            self._advance(c, None)

    def _drop_oldest(self):
        _, c = self._pending.popitem(last=False)
        with self._lock:
            self.dropped += 1
        self._close(c)

    def _close(self, c):
        fd = c.sock.fileno()
        self._conns.pop(fd, None)
        self._pending.pop(fd, None)
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.proto.close()

    def _advance(self, c, value):
        """Runs c's protocol to its next wait for bytes (in or out)."""
        try:
            while True:
                op = c.proto.send(value)
                value = None
                if op is _AUTHENTICATED:
                    c.authenticated = True
                    self._pending.pop(c.sock.fileno(), None)
                    c.deadline = time.monotonic() + _IO_TIMEOUT_S
                    continue
                if isinstance(op, int):
                    c.want, c.got = op, 0
                    c.inbuf = bytearray(min(op, _CHUNK))
                    if op == 0:
                        value = c.inbuf
                        continue
                    self._sel.modify(c.sock, selectors.EVENT_READ, c)
                    return
                c.out.extend(memoryview(b).cast("B") for b in op if len(b))
                if not c.out:
                    continue
                self._sel.modify(c.sock, selectors.EVENT_WRITE, c)
                return
        except StopIteration:
            self._close(c)
        except Exception:  # noqa: BLE001 -- refused: a wrong secret, a bad MAC, a malformed request, too large
            with self._lock:
                self.rejected += 1
            self._close(c)

    def _io(self, c, mask):
        try:
            if mask & selectors.EVENT_WRITE and c.out:
                n = c.sock.send(c.out[0])
                c.out[0] = c.out[0][n:]
                if not len(c.out[0]):
                    c.out.popleft()
                if c.authenticated:
                    c.deadline = time.monotonic() + _IO_TIMEOUT_S
                if not c.out:
                    self._advance(c, None)
            elif mask & selectors.EVENT_READ:
                if c.got == len(c.inbuf):
                    c.inbuf.extend(bytes(min(c.want - c.got, len(c.inbuf))))
                with memoryview(c.inbuf) as view:
                    k = c.sock.recv_into(view[c.got:], len(c.inbuf) - c.got)
                if k == 0:
                    self._close(c)  # the peer went away
                    return
                c.got += k
                if c.authenticated:
                    c.deadline = time.monotonic() + _IO_TIMEOUT_S
                if c.got == c.want:
                    data, c.inbuf = c.inbuf, None
                    self._advance(c, data)
        except (BlockingIOError, InterruptedError):
            pass
        except MemoryError:
            with self._lock:
                self.rejected += 1
            self._close(c)
        except OSError:
            self._close(c)

    def _protocol(self):
        """One connection, as the steps of server_handshake and one request."""
        nonce_s = secrets.token_bytes(_NONCE)
        yield (nonce_s,)
        hello = yield _NONCE + _MAC
        try:
            nonce_c = _check_client_proof(self._key, nonce_s, hello)
        except AuthenticationError:
            yield (REFUSAL,)
            raise
        yield (_server_proof(self._key, nonce_s, nonce_c),)
        yield _AUTHENTICATED
        session = _Session(None, self._key, nonce_s, nonce_c, server=True)
        header = bytes((yield _LEN.size))
        n = check_length(_LEN.unpack(header)[0])
        body = yield n
        tag = bytes((yield _MAC))
        body = session.open(header, body, tag)
        reply = self._handle(body)
        head, tag = session.seal(reply)
        yield (head, reply, tag)

    def _handle(self, body):
        if body == b"get":
            return self._payload
        if body.startswith(b"put "):
            head, sep, record = bytes(body).partition(b"\n")
            rank = int(head[4:])  # ValueError when malformed
            if not sep or rank < 0:
                raise ValueError("malformed put")
            with self._lock:
                self.records.append((rank, record))
            return b"ok"
        raise ValueError("unknown request")

    def close(self):
        self._stop.set()
        self._thread.join()
        for c in list(self._conns.values()):
            self._close(c)
        self._sel.close()
        self._sock.close()

    def snapshot(self):
        with self._lock:
            return list(self.records), self.rejected

    def open_connections(self):
        """(unauthenticated, all) connections held now (for tests)."""
        return len(self._pending), len(self._conns)
