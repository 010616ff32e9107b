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

Not provided: confidentiality on the wire (no encryption; the same model as
hvdrun's rendezvous store, docs/store.md). Traffic of an all-local job stays
on loopback.
"""
import hashlib
import hmac
import secrets
import socket
import struct
import threading

KEY_BYTES = 32
_NONCE = 32
_MAC = hashlib.sha256().digest_size
_LEN = struct.Struct("!Q")
# Before the peer proved the secret nothing larger than the handshake is read.
_HANDSHAKE_TIMEOUT_S = 30.0
# A message stalled this long without a byte arriving is abandoned.
_IO_TIMEOUT_S = 300.0
_MAX_MESSAGE = 1 << 40


class AuthenticationError(ConnectionError):
    """The peer does not hold the secret, or a message failed its MAC."""


def new_key():
    return secrets.token_bytes(KEY_BYTES)


def _mac(key, *parts):
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def _recv_exact(sock, n):
    """Exactly n bytes (a bytearray: a large body is not copied again)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return buf


class _Session:
    """Framed, MACed messages on an authenticated socket."""

    def __init__(self, sock, key, nonce_s, nonce_c, server):
        self._sock = sock
        self._key = _mac(key, b"hvdcomm.runner session", nonce_s, nonce_c)
        self._out, self._in = (b"S", b"C") if server else (b"C", b"S")
        self._sent = 0
        self._received = 0

    def send(self, body):
        header = _LEN.pack(len(body))
        tag = _mac(self._key, self._out, _LEN.pack(self._sent), header, body)
        self._sent += 1
        self._sock.sendall(header)
        self._sock.sendall(body)
        self._sock.sendall(tag)

    def recv(self, limit=_MAX_MESSAGE):
        header = _recv_exact(self._sock, _LEN.size)
        (n,) = _LEN.unpack(header)
        if n > limit:
            raise AuthenticationError(f"message of {n} bytes exceeds the limit of {limit}")
        body = _recv_exact(self._sock, n)
        tag = _recv_exact(self._sock, _MAC)
        if not hmac.compare_digest(tag, _mac(self._key, self._in, _LEN.pack(self._received), header, body)):
            raise AuthenticationError("message failed its MAC check")
        self._received += 1
        return body


def server_handshake(sock, key):
    """Server side: proves the secret and requires the client to prove it."""
    nonce_s = secrets.token_bytes(_NONCE)
    sock.sendall(nonce_s)
    hello = _recv_exact(sock, _NONCE + _MAC)
    nonce_c, proof = hello[:_NONCE], hello[_NONCE:]
    if not hmac.compare_digest(proof, _mac(key, b"hvdcomm.runner client", nonce_s, nonce_c)):
        raise AuthenticationError("the client does not hold the secret")
    sock.sendall(_mac(key, b"hvdcomm.runner server", nonce_s, nonce_c))
    return _Session(sock, key, nonce_s, nonce_c, server=True)


def client_handshake(sock, key):
    """Client side: proves the secret and requires the server to prove it."""
    nonce_s = _recv_exact(sock, _NONCE)
    nonce_c = secrets.token_bytes(_NONCE)
    sock.sendall(nonce_c + _mac(key, b"hvdcomm.runner client", nonce_s, nonce_c))
    proof = _recv_exact(sock, _MAC)
    if not hmac.compare_digest(proof, _mac(key, b"hvdcomm.runner server", nonce_s, nonce_c)):
        raise AuthenticationError("the server does not hold the secret")
    return _Session(sock, key, nonce_s, nonce_c, server=False)


def request(host, port, key, body, connect_timeout=30.0):
    """One request on a fresh connection; returns the server's verified reply."""
    sock = socket.create_connection((host, port), timeout=connect_timeout)
    try:
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        session = client_handshake(sock, key)
        sock.settimeout(_IO_TIMEOUT_S)
        session.send(body)
        return session.recv()
    finally:
        sock.close()


class Server:
    """Serves ``payload`` to ``get`` requests and stores ``put <rank>\\n<record>``
    requests, in arrival order, in ``records`` as (rank, record bytes).
    Connections that fail the handshake or a MAC are closed and counted in
    ``rejected``; they change nothing."""

    def __init__(self, key, payload, bind_host):
        self._key = key
        self._payload = payload
        self._lock = threading.Lock()
        self.records = []
        self.rejected = 0
        self._stop = threading.Event()
        if bind_host == "":
            if socket.has_dualstack_ipv6():
                self._sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
            else:
                self._sock = socket.create_server(("0.0.0.0", 0))
        else:
            self._sock = socket.create_server((bind_host, 0))
        self.port = self._sock.getsockname()[1]
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, name="hvdcomm.runner.server", daemon=True)
        self._thread.start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(_HANDSHAKE_TIMEOUT_S)
            session = server_handshake(conn, self._key)
            conn.settimeout(_IO_TIMEOUT_S)
            body = session.recv()
            if body == b"get":
                session.send(self._payload)
            elif body.startswith(b"put "):
                head, sep, record = body.partition(b"\n")
                rank = int(head[4:])
                if not sep or rank < 0:
                    raise ValueError("malformed put")
                with self._lock:
                    self.records.append((rank, record))
                session.send(b"ok")
            else:
                raise ValueError("unknown request")
        except (AuthenticationError, ValueError):
            with self._lock:
                self.rejected += 1
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()

    def snapshot(self):
        with self._lock:
            return list(self.records), self.rejected
