"""horovod.run's channel under attack (issue 29 item 3; docs/python.md,
"horovod.run"): anyone who can reach the caller's port may connect, and must
not be able to cost any rank its result. One server of hvdcomm.runner.channel
in this process (or a whole run() in a child), loopback only, bounded counts:

* idle connections: no thread each, at most MAX_PENDING held, each closed at
  its handshake deadline even while it trickles bytes;
* descriptor exhaustion (EMFILE under a low RLIMIT_NOFILE) does not end
  accepting;
* a run() whose rank 0 opens 1,100 idle connections under ulimit -n 1024
  still returns every result;
* a message announcing MAX_MESSAGE bytes (2**40) is refused cleanly on both
  sides: no MemoryError, no traceback, the server goes on;
* where the channel listens: loopback, the address that reaches the hosts,
  or every interface with the reason printed.

Environment: HVDRUN (the binary); PYTHONPATH has the built package."""
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import hvdcomm.runner as runner
from hvdcomm.runner import channel

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
HERE = os.path.dirname(os.path.abspath(__file__))


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def fetch(port, key):
    return channel.request("127.0.0.1", port, key, b"get", connect_timeout=5, retry_s=10)


class Attacker:
    """A child process holding ``count`` idle connections to ``port``
    (its own descriptor limit raised to fit them)."""

    def __init__(self, port, count):
        code = (
            "import resource, socket, sys\n"
            "s, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            f"resource.setrlimit(resource.RLIMIT_NOFILE, (min(h, {count} + 64) if h != resource.RLIM_INFINITY "
            f"else {count} + 64, h))\n"
            "held = []\n"
            f"for _ in range({count}):\n"
            f"    held.append(socket.create_connection(('127.0.0.1', {port}), timeout=10))\n"
            "print(len(held), flush=True)\n"
            "sys.stdin.read()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.opened = int(self.proc.stdout.readline() or 0)

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


class RunnerChannel(unittest.TestCase):
    def setUp(self):
        self.key = channel.new_key()
        self.fds = open_fds()

    def tearDown(self):
        deadline = time.monotonic() + 5
        while open_fds() > self.fds and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(open_fds(), self.fds, "descriptors left open")

    def test_idle_connections_take_no_thread_each(self):
        server = channel.Server(self.key, b"the call", "127.0.0.1")
        threads = threading.active_count()
        try:
            attacker = Attacker(server.port, 300)
            try:
                self.assertEqual(attacker.opened, 300)
                time.sleep(0.5)
                self.assertLessEqual(threading.active_count(), threads, "a thread per connection")
                self.assertLessEqual(open_fds() - self.fds, channel.MAX_PENDING + 6,  # + listener, selector, pipes
                                     "more idle connections held than MAX_PENDING")
                self.assertEqual(fetch(server.port, self.key), b"the call", "served during the flood")
            finally:
                attacker.stop()
        finally:
            server.close()

    def test_unauthenticated_connection_closed_at_its_deadline(self):
        # A peer trickling one byte of its hello every 0.3 s never lets a
        # per-read timeout fire; the deadline covers the whole handshake.
        server = channel.Server(self.key, b"the call", "127.0.0.1", handshake_timeout=1.5)
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                t0 = time.monotonic()
                s.recv(32)  # the nonce
                closed = None
                for _ in range(40):
                    try:
                        s.sendall(b"x")
                        s.settimeout(0.3)
                        if s.recv(1) == b"":
                            closed = time.monotonic() - t0
                            break
                    except socket.timeout:
                        continue
                    except OSError:
                        closed = time.monotonic() - t0
                        break
                self.assertIsNotNone(closed, "a trickling peer was never cut off")
                self.assertLess(closed, 4.0)
        finally:
            server.close()

    def test_descriptor_exhaustion_does_not_end_accepting(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # Room for this process's own descriptors and 100 connections, then
        # 300 connect: the server meets EMFILE while the kernel's backlog
        # still completes connections.
        limit = self.fds + 100
        server = channel.Server(self.key, b"the call", "127.0.0.1", max_pending=1000)
        attacker = None
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            attacker = Attacker(server.port, 300)
            self.assertEqual(attacker.opened, 300)
            deadline = time.monotonic() + 10
            while server.accept_errors == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertGreater(server.accept_errors, 0, "the test never reached EMFILE")
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            self.assertEqual(fetch(server.port, self.key), b"the call", "still accepting after EMFILE")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            if attacker:
                attacker.stop()
            server.close()

    def test_run_survives_a_flood_under_ulimit_1024(self):
        caller = ("import sys; sys.path.insert(0, %r)\n"
                  "import hvdcomm.runner as r, runner_fns\n"
                  "print('RESULT', r.run(runner_fns.flood_then_return, args=(1100,), num_proc=2), flush=True)\n"
                  % HERE)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < 1200:
            self.skipTest(f"the hard descriptor limit {hard} leaves no room for 1,100 connections")
        env = dict(os.environ, HVDCOMM_HVDRUN=HVDRUN)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", caller], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=80,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stdout[-3000:])
        self.assertIn("RESULT [(0, 1100), (1, 0)]", p.stdout)
        self.assertLess(took, 30, f"took {took:.1f} s")

    def test_oversized_message_refused_cleanly(self):
        hooked = []
        saved = threading.excepthook
        threading.excepthook = lambda args: hooked.append(args.exc_type)
        server = channel.Server(self.key, b"the call", "127.0.0.1")
        try:
            for announced in (channel.MAX_MESSAGE, channel.MAX_MESSAGE - 1, (1 << 64) - 1):
                with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                    channel.client_handshake(s, self.key)
                    s.sendall(channel._LEN.pack(announced))
                    s.settimeout(2)
                    try:
                        ended = s.recv(1) == b""
                    except socket.timeout:
                        ended = False  # waiting for the body: nothing allocated yet
                    except ConnectionError:
                        ended = True
                    self.assertEqual(ended, announced >= channel.MAX_MESSAGE, f"announced {announced}")
            time.sleep(0.3)
            self.assertEqual(hooked, [], "an exception escaped the server")
            self.assertEqual(server.snapshot()[1], 2, "two refusals counted")
            self.assertEqual(fetch(server.port, self.key), b"the call", "the server goes on")
        finally:
            threading.excepthook = saved
            server.close()
        # The client side: a server with the key announcing 2**40 bytes.
        with self.assertRaises(channel.MessageTooLargeError):
            channel.check_length(1 << 40)
        listener = socket.create_server(("127.0.0.1", 0))

        def drain(sock, quiet_s):
            # Read what the client sent until it pauses (or closes): closing
            # with unread bytes would reset the connection under the client.
            sock.settimeout(quiet_s)
            try:
                while sock.recv(1 << 16):
                    pass
            except (socket.timeout, ConnectionError):
                pass

        def fake_server():
            c, _ = listener.accept()
            with c:
                channel.server_handshake(c, self.key)
                drain(c, 0.5)  # the whole request, however it was split
                c.sendall(channel._LEN.pack(1 << 40))
                drain(c, 5)  # until the client gives up and closes

        t = threading.Thread(target=fake_server)
        t.start()
        try:
            with self.assertRaises(channel.MessageTooLargeError):
                channel.request("127.0.0.1", listener.getsockname()[1], self.key, b"get", retry_s=0)
        finally:
            t.join(10)
            listener.close()

    def test_wrong_key_fails_at_once(self):
        # The server answers a wrong proof with REFUSAL: the client does not
        # take the closed connection for one dropped under a flood.
        server = channel.Server(self.key, b"the call", "127.0.0.1")
        try:
            t0 = time.monotonic()
            with self.assertRaises(channel.AuthenticationError):
                channel.request("127.0.0.1", server.port, channel.new_key(), b"get")
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            server.close()

    def test_channel_address(self):
        routes = {"node1": "10.0.0.5", "node2": "10.0.0.5", "other": "192.168.1.2"}

        def route(host):
            if host not in routes:
                raise OSError(f"{host} does not resolve")
            return routes[host]

        def where(**kw):
            kw = {"hosts": None, "hostfile": None, "host_discovery_script": None, "network_interfaces": None, **kw}
            return runner._channel_address(route=route, **kw)

        self.assertEqual(where(), ("127.0.0.1", ""))
        self.assertEqual(where(hosts="localhost:2,127.0.0.2:1,[::1]:1"), ("127.0.0.1", ""))
        self.assertEqual(where(hosts="localhost:1,node1:2,node2:2"), ("10.0.0.5", ""))
        addr, why = where(hosts="node1:1,other:1")
        self.assertEqual(addr, "")
        self.assertIn("10.0.0.5, 192.168.1.2", why)
        addr, why = where(hosts="node1:1,nowhere:1")
        self.assertEqual(addr, "")
        self.assertIn("nowhere does not resolve", why)
        # A name hvdrun refuses is not resolved (no lookup leaves the machine).
        self.assertEqual(where(hosts="bad host:1,node1:1"), ("127.0.0.1", ""))
        addr, why = where(host_discovery_script="/bin/d.sh")
        self.assertEqual(addr, "")
        self.assertIn("discovery script", why)
        self.assertEqual(where(network_interfaces="no-such-nic0,lo"), ("127.0.0.1", ""))
        self.assertEqual(where(network_interfaces="no-such-nic0")[0], "")
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as f:
            f.write("# comment\nnode1 slots=2\n\nnode2:2  # more\n")
            f.flush()
            self.assertEqual(where(hostfile=f.name), ("10.0.0.5", ""))
        # The real route lookup of a loopback address stays on loopback.
        self.assertEqual(runner._route_source("127.0.0.1"), "127.0.0.1")

    def test_workers_use_the_address_the_channel_listens_on(self):
        # hvdrun gives the workers 127.0.0.1 for its store; the channel,
        # told network_interfaces="lo", listens on lo's address and says so
        # to the workers (ADDR_ENV): they reach it even where the two differ.
        bound = []
        real = channel.Server

        def recording(key, payload, bind_host, **kw):
            bound.append(bind_host)
            return real(key, payload, bind_host, **kw)

        channel.Server = recording
        try:
            out = runner.run(os.getpid, num_proc=2, network_interfaces="lo")
        finally:
            channel.Server = real
        self.assertEqual(bound, ["127.0.0.1"])
        self.assertEqual(len(out), 2)


if __name__ == "__main__":
    unittest.main()
