"""rw-node --metrics: /metrics in the Prometheus text format (checked with the parser of
python3-prometheus-client), /healthz and /readyz while the node serves and stops, and
what the endpoint refuses: other methods and bodies, heads past 8 KiB, clients slower
than its deadline, connections past its cap (while health still answers)."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import rackweave
import rwnode
from rwnode import run_ranks


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    """(status, body) of a GET; (None, reason) if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


class Node(rwnode.Node):
    """rw-node --open-jobs with --metrics on a free port."""

    def __init__(self, *options):
        self.metrics = f"127.0.0.1:{free_port()}"
        super().__init__("--open-jobs", "--metrics", self.metrics, *options)

    def url(self, path):
        return f"http://{self.metrics}{path}"


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    """The sample `name` (a family's sample name) with these labels."""
    for f in fams.values():
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name}{labels}")


def wait_ready(node):
    deadline = time.monotonic() + 20
    while True:
        status, body = get(node.url("/readyz"))
        if status == 200:
            return body
        assert time.monotonic() < deadline, f"never ready: {status} {body}"
        time.sleep(0.1)


def snapshot_after(node, t):
    """The families of the first snapshot the node began after monotonic time `t` (it
    refreshes once a second: rw_metrics_snapshot_age_seconds says how old one is)."""
    deadline = time.monotonic() + 10
    while True:
        fams = families(get(node.url("/metrics"))[1])
        if time.monotonic() - value(fams, "rw_metrics_snapshot_age_seconds") > t:
            return fams
        assert time.monotonic() < deadline, "no new snapshot in 10 s"
        time.sleep(0.1)


def test_metrics_parse_and_follow_a_job():
    node = Node("--stats-interval-s", "1")
    try:
        assert wait_ready(node) == "ready\n"
        assert get(node.url("/healthz")) == (200, "ok\n")
        assert get(node.url("/nothing"))[0] == 404

        idle = families(get(node.url("/metrics"))[1])
        # Every family parses, is RackWeave's or the standard process_* one, and has the
        # type its name promises.
        for name, f in idle.items():
            assert name.startswith(("rw_", "process_")), name
        assert idle["process_resident_memory_bytes"].type == "gauge"
        assert idle["rw_shard_bytes_in"].type == "counter"  # rw_shard_bytes_in_total
        assert idle["rw_job_step_seconds"].type == "histogram"
        assert value(idle, "process_resident_memory_bytes") > 1 << 20
        assert value(idle, "process_threads") >= 2
        assert value(idle, "process_open_fds") >= 3
        assert value(idle, "process_max_fds") >= value(idle, "process_open_fds")
        assert idle["process_cpu_seconds"].type == "counter"  # process_cpu_seconds_total
        assert value(idle, "rw_node_info", role="rack-agg") == 1
        assert value(idle, "rw_cluster_nodes") == 1
        assert value(idle, "rw_metrics_missing_answers") == 0

        job, n, workers, steps = "metrics-job", 64 * 1024, 2, 5
        at_end = threading.Barrier(workers + 1, timeout=60)
        scraped = threading.Event()

        def rank(r):
            with rackweave.Worker(connect=node.address, job=job, rank=r, workers=workers,
                                  tensors={"w": n}, chunk_bytes=16384) as w:
                out = np.empty(n, np.float32)
                for step in range(steps):
                    w.push_pull("w", np.full(n, r + step, np.float32), out).result(timeout=60)
                at_end.wait()
                assert scraped.wait(timeout=60)

        runner = threading.Thread(target=run_ranks, args=(workers, rank))
        runner.start()
        try:
            at_end.wait()
            busy = snapshot_after(node, time.monotonic())
        finally:
            scraped.set()
            runner.join(timeout=90)
        assert not runner.is_alive()

        chunks = n * 4 // 16384
        assert value(busy, "rw_job_clock", rw_job=job) == steps
        # Not `job`: Prometheus sets that label to the scrape job's name, and with the
        # default honor_labels: false a target's own `job` would become `exported_job`.
        assert all("job" not in s.labels for f in busy.values() for s in f.samples)
        assert value(busy, "rw_job_ranks", rw_job=job) == workers
        assert value(busy, "rw_job_live_ranks", rw_job=job) == workers
        assert value(busy, "rw_job_waiting_ranks", rw_job=job) == 0
        # Step times: one per clock after the first, each in a bucket up to +Inf.
        assert value(busy, "rw_job_step_seconds_count", rw_job=job) == steps - 1
        assert value(busy, "rw_job_step_seconds_bucket", rw_job=job, le="+Inf") == steps - 1
        assert value(busy, "rw_job_step_seconds_sum", rw_job=job) > 0
        shards = [s for s in busy["rw_shard_chunks_summed"].samples]
        assert sum(s.value for s in shards) == workers * chunks * steps
        steps_done = sum(s.value for s in busy["rw_shard_optimizer_steps"].samples)
        assert steps_done == chunks * steps
        assert value(busy, "rw_job_bytes_in_total", rw_job=job) == workers * steps * n * 4
        tcp = [s for s in busy["rw_endpoint_connections"].samples
               if s.labels["endpoint"].startswith("tcp://")]
        assert tcp and tcp[0].value == workers
        assert value(busy, "rw_endpoint_frames_in_total",
                     endpoint=tcp[0].labels["endpoint"]) >= workers * chunks * steps
        # The periodic throughput line, every second here.
        line = re.compile(r"\[info\] throughput over 1 s: in [0-9.]+ MiB/s, out [0-9.]+ MiB/s, "
                          r"[0-9]+ chunk steps/s; [0-9]+ connections, [0-9]+ live jobs, RSS "
                          r"[0-9]+ MiB")
        deadline = time.monotonic() + 10
        while not line.search(node.text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert line.search(node.text()), node.text()
        # Every rw_ series the Grafana dashboard graphs is one the node serves.
        dashboard = os.path.join(os.path.dirname(__file__), "..", "..", "config", "grafana",
                                 "rackweave-nodes.json")
        exprs = [t["expr"] for p in json.load(open(dashboard))["panels"] for t in p["targets"]]
        # Metric names, not the label names in `by (...)` clauses (rw_job).
        metric_exprs = [re.sub(r"\bby \([^)]*\)", "", e) for e in exprs]
        graphed = {m for e in metric_exprs
                   for m in re.findall(r"\b(?:rw|process)_[a-z0-9_]+", e)}
        served = {s.name for f in busy.values() for s in f.samples}
        assert graphed and graphed <= served, graphed - served
        # Training jobs are grouped by rw_job: `job` is Prometheus's scrape job.
        assert not [e for e in exprs if re.search(r"\bby \([^)]*\bjob\b", e)]
    finally:
        rc = node.stop()
    assert rc == 0, node.text()
    # Stopped: nothing answers any more.
    assert get(node.url("/healthz"), timeout=2)[0] is None


def test_a_busy_or_malformed_metrics_address_is_refused():
    first = Node()
    try:
        wait_ready(first)
        busy = subprocess.run(
            [os.environ["RW_NODE"], "--listen", "127.0.0.1:0", "--no-pin", "--metrics",
             first.metrics], capture_output=True, text=True, timeout=30)
        assert busy.returncode == 1
        assert "cannot open the metrics port " + first.metrics in busy.stderr
        for bad in ["127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ":9"]:
            r = subprocess.run([os.environ["RW_NODE"], "--no-pin", "--metrics", bad],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 2, (bad, r.stderr)
            assert "--metrics wants HOST:PORT" in r.stderr
    finally:
        first.stop()


def metrics_port(node):
    return int(node.metrics.rsplit(":", 1)[1])


def connect(node):
    return socket.create_connection(("127.0.0.1", metrics_port(node)), timeout=5)


def read_reply(s, timeout=5):
    """(status, bytes, closed): what the server sent until it closed or `timeout` passed."""
    s.settimeout(timeout)
    data, closed = b"", False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    status = int(data[9:12]) if data.startswith(b"HTTP/1.") and len(data) >= 12 else None
    return status, data, closed


def timed_health(node):
    t0 = time.monotonic()
    status, _ = get(node.url("/healthz"), timeout=2)
    return status, time.monotonic() - t0


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_post_is_refused_on_its_head_and_its_body_never_read():
    node = Node()
    try:
        wait_ready(node)
        ten_mb = 10 << 20
        with connect(node) as s:
            s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % ten_mb)
            status, data, closed = read_reply(s, timeout=3)
            assert status == 405 and closed, data
            assert b"\r\nAllow: GET, HEAD\r\n" in data
            with pytest.raises(OSError):  # the server has gone: the body cannot all go
                s.settimeout(5)
                s.sendall(b"x" * ten_mb)
        # Ten POSTs pushing their bodies at once: the node does not take them in.
        before = rss_kib(node.proc.pid)

        def push():
            try:
                with connect(node) as s:
                    s.sendall(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % ten_mb
                              + b"x" * ten_mb)
            except OSError:
                pass

        pushers = [threading.Thread(target=push) for _ in range(10)]
        for t in pushers:
            t.start()
        for t in pushers:
            t.join(timeout=30)
        assert rss_kib(node.proc.pid) - before < 16 * 1024
        # A GET announcing a body, or chunked: 413.
        for field in (b"Content-Length: 5", b"Transfer-Encoding: chunked"):
            with connect(node) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\n" + field + b"\r\n\r\n")
                status, data, closed = read_reply(s, timeout=3)
                assert status == 413 and closed, data
        assert timed_health(node)[0] == 200
    finally:
        node.stop()


def test_a_header_line_of_1_mb_is_refused_431():
    node = Node()
    try:
        wait_ready(node)
        line = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20)
        with connect(node) as s:
            s.sendall(line[:16384])
            status, data, closed = read_reply(s, timeout=3)
            assert status == 431 and closed, data
            with pytest.raises(OSError):  # the rest, and 16 MB more, find no reader
                s.settimeout(5)
                s.sendall(line[16384:] + b"a" * (16 << 20))
        assert timed_health(node)[0] == 200
    finally:
        node.stop()


def test_tricklers_are_cut_at_the_deadline_while_health_answers_at_once():
    node = Node()
    try:
        wait_ready(node)
        deadline = 5.0  # the endpoint's, from accept to the answer written
        cut_after = [None, None]
        done = threading.Event()

        def trickle(i):
            with connect(node) as s:
                t0 = time.monotonic()
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"s" * 100:
                    if done.is_set():
                        return
                    try:
                        s.sendall(bytes([b]))
                        s.settimeout(0.5)  # one byte every 500 ms, unless cut meanwhile
                        s.recv(1)  # an answer (408) or the end: cut
                        cut_after[i] = time.monotonic() - t0
                        return
                    except socket.timeout:
                        continue
                    except OSError:
                        cut_after[i] = time.monotonic() - t0
                        return

        tricklers = [threading.Thread(target=trickle, args=(i,)) for i in range(2)]
        for t in tricklers:
            t.start()
        t0 = time.monotonic()
        latencies = []
        while time.monotonic() - t0 < deadline + 1.5:
            status, took = timed_health(node)
            if took >= 0.1:  # once more at once: a loaded machine may have paused us
                status, took = timed_health(node)
            assert status == 200
            latencies.append(took)
            time.sleep(0.1)
        done.set()
        for t in tricklers:
            t.join(timeout=10)
        assert max(latencies) < 0.1, latencies
        for c in cut_after:
            assert c is not None and deadline - 0.6 <= c <= deadline + 1.0, cut_after
    finally:
        node.stop()


def test_connections_past_the_cap_are_refused_while_health_answers():
    node = Node()
    held = []
    try:
        wait_ready(node)
        held = [connect(node) for _ in range(16)]  # one address's share, each silent
        time.sleep(0.3)
        with connect(node) as s:  # one past it: a scrape is told to come back
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            status, data, closed = read_reply(s, timeout=3)
            assert status == 503 and closed, data
        status, took = timed_health(node)
        assert status == 200 and took < 0.1, (status, took)
        # The reserve for health (8) taken too, and 50 more silent ones (72 idle
        # connections from one address once shut every /healthz probe out with 503): a
        # newcomer takes the place of the oldest silent connection, which is told 408.
        held += [connect(node) for _ in range(58)]
        time.sleep(0.3)
        for _ in range(10):
            status, took = timed_health(node)
            assert status == 200 and took < 0.1, (status, took)
        status, data, closed = read_reply(held[0], timeout=3)
        assert status == 408 and closed, data
    finally:
        for s in held:
            s.close()
        node.stop()


def test_scrapes_read_a_snapshot_refreshed_once_a_second():
    node = Node()
    try:
        wait_ready(node)
        first = families(get(node.url("/metrics"))[1])
        before = value(first, "rw_metrics_snapshot_refreshes_total")
        # Sixteen scrapers as fast as they can for 3 s.
        t0 = time.monotonic()
        ages, counts, bad = [], [0] * 16, []

        def scrape(i):
            while time.monotonic() - t0 < 3:
                status, body = get(node.url("/metrics"))
                if status != 200:
                    bad.append(status)
                    continue
                ages.append(value(families(body), "rw_metrics_snapshot_age_seconds"))
                counts[i] += 1

        scrapers = [threading.Thread(target=scrape, args=(i,)) for i in range(16)]
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join(timeout=30)
        took = time.monotonic() - t0
        after = value(families(get(node.url("/metrics"))[1]),
                      "rw_metrics_snapshot_refreshes_total")
        assert not bad, bad
        assert sum(counts) > 32
        # The node's actors were asked once a second, not once per scrape.
        assert after - before <= took + 2, (before, after, sum(counts))
        assert max(ages) <= 1.5, max(ages)
        assert timed_health(node)[0] == 200
    finally:
        node.stop()


def test_a_metrics_token_guards_metrics_and_leaves_health_open():
    tmp = tempfile.mkdtemp(prefix="rw-metrics-token-")
    path = os.path.join(tmp, "token")
    token = "a-metrics-token-0123456789abcdef"
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    node = Node("--metrics-token-file", path)
    try:
        wait_ready(node)

        def scrape(auth):
            req = urllib.request.Request(node.url("/metrics"))
            if auth is not None:
                req.add_header("Authorization", auth)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        status, body = scrape(None)
        assert status == 401 and "rw_job" not in body and "rw_node_info" not in body
        assert scrape("Bearer wrong-token-0123456789abcdef")[0] == 401
        assert scrape("Bearer " + token[:-1])[0] == 401
        status, body = scrape("Bearer " + token)
        assert status == 200 and "rw_node_info" in body
        assert get(node.url("/healthz")) == (200, "ok\n")
        assert get(node.url("/readyz")) == (200, "ready\n")
    finally:
        node.stop()
    # A token file others can read is refused, as the cluster secret's; and a token
    # without an endpoint to protect is a usage error.
    os.chmod(path, 0o644)
    r = subprocess.run([os.environ["RW_NODE"], "--listen", "127.0.0.1:0", "--no-pin",
                        "--metrics", "127.0.0.1:0", "--metrics-token-file", path],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "the metrics token file " + path + " is open to other users" in r.stderr
    r = subprocess.run([os.environ["RW_NODE"], "--no-pin", "--metrics-token-file", path],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "--metrics-token-file protects the --metrics endpoint" in r.stderr
    shutil.rmtree(tmp)
