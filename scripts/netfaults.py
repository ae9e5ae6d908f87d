"""Network faults for `ankusa-sink forward --from`: run by scripts/netfaults.sh, which makes
the network namespace and the two veth links (source link, sink link) and removes them.

One case per run (`--case`). The forwarder runs inside the namespace; the source's broker
and the HTTP collector (the sink) sit on the host ends of the links. Hooks are published at
a steady rate from the host while a fault is applied, then healed; the run ends when every
published hook was delivered or dead-lettered, or after `--recover-limit` seconds past the
heal (then it fails: a hang or a loss). One JSON line of figures is printed at the end and
the exit status is 0 only when nothing was lost and the forwarder recovered.

Cases:
- `nats-source`: a partition (source link down) between the forwarder and a NATS
  JetStream server started for the run on the host end.
- `amqp-source`: the same against RabbitMQ, reached through a TCP relay on the host end
  (the RabbitMQ on 127.0.0.1 cannot be bound twice); the link going down is the fault.
- `kafka-source`: the same against a tansu (Kafka) started for the run on the host end
  (`--tansu`), advertising that address.
- `nats-sink`: NATS source, a partition between the forwarder and its HTTP sink.
- `latency`: NATS source; every byte to the NATS server and to the sink passes a relay that
  delays each chunk by `--delay-ms`, and `--stall-pct` % of new connections are held
  without a byte for `--stall-s` seconds (the first connection of each relay is spared).
- `nats-takeover`: a NATS source partition while a second forwarder of the same durable
  consumer runs on the host; with a partition longer than `--ack-wait-ms` it takes over.

Needs the interop venv (scripts/services/interop.sh: nats-py, pika, confluent-kafka) and
nats-server.
"""

import argparse
import asyncio
import base64
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RUN = uuid.uuid4().hex[:8]
# When each hook (by its `k`) was acknowledged by the broker, in publish order.
PUBLISHED_AT = []
# A hook first delivered this long after it was both published and reachable (the heal) was
# held somewhere: counted as "late".
LATE_S = 10


def log(msg):
    print(f"[netfaults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Collector:
    """The HTTP sink: counts each hook (the `k` of its body) and when it arrived."""

    def __init__(self, host, port):
        self.lock = threading.Lock()
        self.arrivals = {}  # k -> [times]
        self.times = []
        coll = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(n)
                try:
                    k = json.loads(body)["k"]
                except (ValueError, KeyError, TypeError):
                    k = None
                now = time.monotonic()
                with coll.lock:
                    coll.arrivals.setdefault(k, []).append(now)
                    coll.times.append(now)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                # A client that gave up (its timeout, a stalled relay) resets: expected here.
                pass

        self.server = Server((host, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def snapshot(self):
        with self.lock:
            return {k: list(v) for k, v in self.arrivals.items()}, list(self.times)

    def close(self):
        self.server.shutdown()


class Relay:
    """A TCP relay: `delay` seconds added to each chunk each way; a fraction `stall_p` of new
    connections (after the first) forwards nothing for `stall_s` seconds first."""

    def __init__(self, listen_host, listen_port, target_host, target_port, delay=0.0,
                 stall_p=0.0, stall_s=0.0):
        self.args = (listen_host, listen_port)
        self.target = (target_host, target_port)
        self.delay, self.stall_p, self.stall_s = delay, stall_p, stall_s
        self.connections = 0
        self.stalled = 0
        self.server = None

    async def start(self):
        self.server = await asyncio.start_server(self._conn, *self.args)

    async def _pipe(self, r, w):
        try:
            while True:
                data = await r.read(65536)
                if not data:
                    break
                if self.delay:
                    await asyncio.sleep(self.delay)
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                w.close()
            except Exception:
                pass

    async def _conn(self, cr, cw):
        self.connections += 1
        # The first connection (the forwarder's start) is never stalled: a source that does
        # not answer at start ends the run (exit 2, docs/faults.md), a finding of its own.
        if self.stall_p and self.connections > 1 and random.random() < self.stall_p:
            self.stalled += 1
            await asyncio.sleep(self.stall_s)
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw))

    def close(self):
        if self.server:
            self.server.close()


def envelopes(binary, n):
    """`n` envelopes in the `gen` format, each body `{"k": i}` so the collector counts it."""
    out = subprocess.run([binary, "gen", "--count", str(n), "--size", "16"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    envs = []
    for i, line in enumerate(out):
        e = json.loads(line)
        body = json.dumps({"k": i}).encode()
        e["body_base64"] = base64.b64encode(body).decode()
        e["size"] = len(body)
        envs.append(json.dumps(e).encode())
    return envs


async def publish_nats(url, subject, envs, seconds):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    gap = seconds / max(len(envs), 1)
    for e in envs:
        await js.publish(subject, e)
        PUBLISHED_AT.append(time.monotonic())
        await asyncio.sleep(gap)
    await nc.close()


def publish_amqp(url, queue, envs, seconds):
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    gap = seconds / max(len(envs), 1)
    for e in envs:
        ch.basic_publish("", queue, e, pika.BasicProperties(delivery_mode=2))
        PUBLISHED_AT.append(time.monotonic())
        time.sleep(gap)
    conn.close()


async def quiet(_e):
    """nats-py's error callback: the probe for the server's start expects refusals."""


def publish_kafka(brokers, topic, envs, seconds):
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": brokers, "acks": "all"})
    gap = seconds / max(len(envs), 1)
    for e in envs:
        prod.produce(topic, e)
        if prod.flush(30) != 0:
            raise SystemExit("kafka: a publish was not acknowledged within 30 s")
        PUBLISHED_AT.append(time.monotonic())
        time.sleep(gap)


def ns_ip(ns, *args):
    subprocess.run(["ip", "netns", "exec", ns, "ip", *args], check=True)


def scrape(ns, addr):
    r = subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", "--max-time", "5",
                        f"http://{addr}/metrics"], capture_output=True, text=True)
    keep = []
    for line in r.stdout.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if any(w in name for w in ("_total", "_open", "_unacked", "_inflight")):
            try:
                if float(value) != 0:
                    keep.append(line)
            except ValueError:
                pass
    return keep


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--case", required=True,
                   choices=["nats-source", "amqp-source", "kafka-source", "nats-sink", "latency",
                            "nats-takeover"])
    p.add_argument("--bin", required=True)
    p.add_argument("--ns", required=True)
    p.add_argument("--src-host", required=True)
    p.add_argument("--sink-host", required=True)
    p.add_argument("--src-link", required=True, help="the source link's end inside the ns")
    p.add_argument("--sink-link", required=True, help="the sink link's end inside the ns")
    p.add_argument("--dir", required=True)
    p.add_argument("--hooks", type=int, default=600)
    p.add_argument("--publish-s", type=float, default=60)
    p.add_argument("--cut-at", type=float, default=15)
    p.add_argument("--cut-s", type=float, default=30)
    p.add_argument("--recover-limit", type=float, default=90)
    p.add_argument("--no-retry", action="store_true",
                   help="one attempt per hook (forward without --retry)")
    p.add_argument("--ack-wait-ms", type=int, default=0,
                   help="the NATS consumer's ack_wait (0: the source's default)")
    p.add_argument("--delay-ms", type=float, default=200)
    p.add_argument("--stall-pct", type=float, default=5)
    p.add_argument("--stall-s", type=float, default=60)
    p.add_argument("--tansu", help="the tansu binary (scripts/services/kafka.sh bin)")
    p.add_argument("--amqp-url", default=os.environ.get(
        "ANKUSA_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"))
    a = p.parse_args()

    base = 20000 + (os.getpid() % 20000)
    nats_port, coll_port, relay_port, metrics_port = base, base + 1, base + 2, base + 3
    relay2_port = base + 4
    procs, closers = [], []
    cleanup_queue = None
    summary = {"case": a.case, "hooks": a.hooks}
    try:
        # The sink: the collector on the host end of the sink link (behind a relay for
        # `latency`, the relay then on the link and the collector on loopback).
        if a.case == "latency":
            coll = Collector("127.0.0.1", coll_port)
            sink_relay = Relay(a.sink_host, relay2_port, "127.0.0.1", coll_port,
                               a.delay_ms / 1000, a.stall_pct / 100, a.stall_s)
            await sink_relay.start()
            closers.append(sink_relay.close)
            sink_url = f"http://{a.sink_host}:{relay2_port}/hooks"
        else:
            coll = Collector(a.sink_host, coll_port)
            sink_url = f"http://{a.sink_host}:{coll_port}/hooks"
        closers.append(coll.close)
        sink_toml = os.path.join(a.dir, "sink.toml")
        with open(sink_toml, "w") as f:
            f.write(f'type = "http"\nurl = "{sink_url}"\ntimeout_ms = 5000\n')

        src_toml = os.path.join(a.dir, "source.toml")
        envs = envelopes(a.bin, a.hooks)
        if a.case == "amqp-source":
            import pika

            queue = f"netfaults-{RUN}"
            conn = pika.BlockingConnection(pika.URLParameters(a.amqp_url))
            conn.channel().queue_declare(queue, durable=True)
            conn.close()
            relay = Relay(a.src_host, relay_port, "127.0.0.1", 5672)
            await relay.start()
            closers.append(relay.close)
            with open(src_toml, "w") as f:
                f.write(f'type = "amqp"\nurl = "amqp://guest:guest@{a.src_host}:{relay_port}/%2f"\n'
                        f'queue = "{queue}"\ndeclare = false\nprefetch = 64\n'
                        # The guest account over the test's own link, not a network.
                        'allow_insecure = true\n')

            def cleanup_queue():
                c = pika.BlockingConnection(pika.URLParameters(a.amqp_url))
                c.channel().queue_delete(queue)
                c.close()

            publisher = asyncio.to_thread(publish_amqp, a.amqp_url, queue, envs, a.publish_s)
        elif a.case == "kafka-source":
            from confluent_kafka.admin import AdminClient, NewTopic

            if not a.tansu:
                raise SystemExit("kafka-source needs --tansu")
            # A Kafka (tansu) of its own on the source link's host end, advertising that
            # address: a relay would hand the forwarder the loopback listener instead.
            brokers = f"{a.src_host}:{nats_port}"
            srv = subprocess.Popen([a.tansu, "broker", "--listener-url", f"tcp://{brokers}",
                                    "--advertised-listener-url", f"tcp://{brokers}",
                                    "--storage-engine", "memory://tansu/"],
                                   stdout=subprocess.DEVNULL,
                                   stderr=open(os.path.join(a.dir, "tansu.log"), "w"))
            procs.append(srv)
            topic = f"netfaults-{RUN}"
            admin = AdminClient({"bootstrap.servers": brokers})
            for _ in range(100):
                try:
                    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                        f.result(timeout=5)
                    break
                except Exception:
                    await asyncio.sleep(0.3)
            else:
                raise SystemExit("tansu did not start")
            with open(src_toml, "w") as f:
                f.write(f'type = "kafka"\nbrokers = ["{brokers}"]\ntopic = "{topic}"\n'
                        f'group = "netfaults-{RUN}"\nstart = "earliest"\n'
                        '[properties]\n"session.timeout.ms" = "10000"\n')
            publisher = asyncio.to_thread(publish_kafka, brokers, topic, envs, a.publish_s)
        else:
            import nats

            sd = os.path.join(a.dir, "js")
            srv = subprocess.Popen(["nats-server", "-js", "-a", a.src_host, "-p", str(nats_port),
                                    "-sd", sd], stdout=subprocess.DEVNULL,
                                   stderr=open(os.path.join(a.dir, "nats.log"), "w"))
            procs.append(srv)
            nats_url = f"nats://{a.src_host}:{nats_port}"
            for _ in range(50):
                try:
                    nc = await nats.connect(nats_url, connect_timeout=1, max_reconnect_attempts=0,
                                            error_cb=quiet, allow_reconnect=False)
                    break
                except Exception:
                    await asyncio.sleep(0.2)
            else:
                raise SystemExit("nats-server did not start")
            await nc.jetstream().add_stream(name="NETFAULTS", subjects=["netfaults.hooks"])
            await nc.close()
            fwd_url = nats_url
            if a.case == "latency":
                relay = Relay(a.src_host, relay_port, a.src_host, nats_port, a.delay_ms / 1000,
                              a.stall_pct / 100, a.stall_s)
                await relay.start()
                closers.append(relay.close)
                fwd_url = f"nats://{a.src_host}:{relay_port}"
            with open(src_toml, "w") as f:
                f.write(f'type = "nats"\nurl = "{fwd_url}"\nstream = "NETFAULTS"\n'
                        f'consumer = "netfaults-{RUN}"\n')
                if a.ack_wait_ms:
                    f.write(f"ack_wait_ms = {a.ack_wait_ms}\n")
            publisher = publish_nats(nats_url, "netfaults.hooks", envs, a.publish_s)

        dl = os.path.join(a.dir, "dead.jsonl")
        out = open(os.path.join(a.dir, "forward.out"), "w")
        err_path = os.path.join(a.dir, "forward.log")
        err = open(err_path, "w")
        metrics_addr = f"127.0.0.1:{metrics_port}"
        cmd = ["ip", "netns", "exec", a.ns, a.bin, "forward", "--from", src_toml, "--sink",
               sink_toml, "--dead-letter", dl, "--max-unacked", "256", "--metrics-addr",
               metrics_addr]
        # A shorter ack_wait needs a shorter attempt timeout (the source refuses one that
        # is not longer); the sink's own timeout (5 s) stays under both.
        timeout_flags = (["--attempt-timeout", str(max(1, a.ack_wait_ms // 2000))]
                         if a.ack_wait_ms else [])
        cmd += timeout_flags
        if not a.no_retry:
            cmd.append("--retry")
        summary["retry"] = not a.no_retry
        fwd = subprocess.Popen(cmd, stdout=out, stderr=err)
        procs.append(fwd)
        dls = [dl]
        fwd2 = None
        if a.case == "nats-takeover":
            # A second forwarder of the same durable consumer, on the host: it takes what the
            # partitioned one cannot ack once the consumer's ack_wait passes.
            src2 = os.path.join(a.dir, "source2.toml")
            with open(src_toml) as f, open(src2, "w") as g:
                g.write(f.read().replace(fwd_url, nats_url))
            dl2 = os.path.join(a.dir, "dead2.jsonl")
            dls.append(dl2)
            err2_path = os.path.join(a.dir, "forward2.log")
            fwd2 = subprocess.Popen([a.bin, "forward", "--from", src2, "--sink", sink_toml,
                                     "--dead-letter", dl2, "--max-unacked", "256", "--retry",
                                     *timeout_flags],
                                    stdout=subprocess.DEVNULL, stderr=open(err2_path, "w"))
            procs.append(fwd2)
        t0 = time.monotonic()
        pub = asyncio.ensure_future(publisher)
        link = a.sink_link if a.case == "nats-sink" else a.src_link
        cut = heal = None
        if a.case != "latency":
            await asyncio.sleep(a.cut_at)
            before, _ = coll.snapshot()
            ns_ip(a.ns, "link", "set", link, "down")
            cut = time.monotonic()
            log(f"{link} down at t={cut - t0:.1f}s ({len(before)} distinct delivered)")
            await asyncio.sleep(a.cut_s)
            ns_ip(a.ns, "link", "set", link, "up")
            heal = time.monotonic()
            log(f"{link} up at t={heal - t0:.1f}s")
        await pub
        published = time.monotonic()
        log(f"published {a.hooks} at t={published - t0:.1f}s")
        ref = heal if heal is not None else published
        deadline = ref + a.recover_limit
        wanted = set(range(a.hooks))
        drained = None
        dead = set()
        while time.monotonic() < deadline:
            got, _ = coll.snapshot()
            dead = set()
            for line in (x for d in dls if os.path.exists(d) for x in open(d)):
                try:
                    body = base64.b64decode(json.loads(line)["body_base64"])
                    dead.add(json.loads(body)["k"])
                except (ValueError, KeyError, TypeError):
                    pass
            if wanted <= (set(got) | dead):
                drained = time.monotonic()
                break
            if fwd.poll() is not None:
                log(f"forwarder exited with {fwd.returncode}")
                break
            await asyncio.sleep(0.2)
        summary["metrics"] = await asyncio.to_thread(scrape, a.ns, metrics_addr)
        got, times = coll.snapshot()
        delivered = wanted & set(got)
        missing = wanted - delivered - dead
        dups = sum(len(v) - 1 for k, v in got.items() if k in wanted)
        summary.update({
            "published": a.hooks,
            "delivered_distinct": len(delivered),
            "duplicates": dups,
            "dead_lettered": len(dead),
            "lost": len(missing),
            "requests": len(times),
        })
        if a.case == "latency":
            summary["relay_connections"] = relay.connections + sink_relay.connections
            summary["relay_stalled"] = relay.stalled + sink_relay.stalled
            summary["drained_after_publish_end_s"] = (
                round(drained - published, 1) if drained else None)
        else:
            during = [t for t in times if cut <= t < heal]
            after = [t for t in times if t >= heal]
            summary["cut_s"] = a.cut_s
            summary["delivered_during_cut"] = len(during)
            summary["first_delivery_after_heal_s"] = (
                round(min(after) - heal, 2) if after else None)
            summary["drained_after_heal_s"] = round(drained - heal, 1) if drained else None
            # Held past the heal: records a broker handed out into the cut, waiting for a
            # redelivery (NATS: the consumer's ack_wait).
            late = [k for k, v in got.items() if k in wanted and k < len(PUBLISHED_AT)
                    and min(v) - max(PUBLISHED_AT[k], heal) > LATE_S]
            summary["late_after_heal"] = len(late)
            if late:
                summary["late_first_delivery_after_heal_s"] = round(
                    min(min(got[k]) for k in late) - heal, 1)
        summary["recover_limit_s"] = a.recover_limit
        fwd.terminate()
        try:
            # Waited off the event loop: the relays run on it, and the forwarder's last
            # answers and acks still pass through them while it stops.
            await asyncio.to_thread(fwd.wait, 40)
        except subprocess.TimeoutExpired:
            fwd.kill()
            summary["stop"] = "killed: did not stop within 40 s of SIGTERM"
        summary["exit"] = fwd.returncode
        lines = open(err_path, errors="replace").read().splitlines()
        summary["forwarder_summary"] = [x for x in lines if x.startswith("delivered ")]
        if fwd2:
            fwd2.terminate()
            await asyncio.to_thread(fwd2.wait, 40)
            lines2 = open(err2_path, errors="replace").read().splitlines()
            summary["second_forwarder_summary"] = [x for x in lines2
                                                   if x.startswith("delivered ")]
        levels = {}
        kinds = {}
        summary["failed_outcome_lines"] = sum(1 for x in lines if x.startswith("FAILED "))
        for line in lines:
            m = re.search(r"\b(ERROR|WARN|INFO)\b", line)
            if m:
                levels[m.group(1)] = levels.get(m.group(1), 0) + 1
                if m.group(1) != "INFO":
                    # The message without its timestamp and hook ids: one sample per kind.
                    msg = re.sub(r"[0-9A-Z]{26}|\d+(\.\d+)?(ms|s)?", "#", line[m.end():])[:160]
                    kinds.setdefault(msg.strip(), 0)
                    kinds[msg.strip()] += 1
        summary["log_levels"] = levels
        summary["log_kinds"] = sorted(kinds.items(), key=lambda kv: -kv[1])[:8]
    finally:
        for c in closers:
            c()
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        if cleanup_queue:
            cleanup_queue()
    print(json.dumps(summary))
    ok = summary["lost"] == 0 and drained is not None
    if not ok:
        log(f"FAIL {a.case}: lost {summary['lost']}, drained {drained is not None}")
    return 0 if ok else 1


def stop(_sig, _frame):
    # SystemExit unwinds main(), whose `finally` stops the forwarders, the server and relays.
    sys.exit(143)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop)
    sys.exit(asyncio.run(main()))
