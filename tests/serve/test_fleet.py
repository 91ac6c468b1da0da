"""A uocr fleet on one machine (docs/SCALING.md): a real redis-server (append-only file on) and
`uocr serve --queue` API nodes with `uocr worker`s, all on 127.0.0.1, started here and stopped at
the end. Every result must equal `uocr run -o` on the same pages, whatever happened on the way:
workers killed (SIGKILL) or paused past their lease (SIGSTOP), drained (SIGTERM), Redis restarted,
a job that kills every worker that takes it. Storage is file:// and, when PyPI's moto server is
installed, s3:// against it.

Needs redis-server (Debian redis-server) and the PyPI package `requests`; exits 77 (skipped)
without them. Environment: UOCR_CLI, UOCR_SOURCE_DIR."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import requests
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e} (pip install requests)")
    sys.exit(77)
if shutil.which("redis-server") is None:
    print("skipped: no redis-server (apt install redis-server)")
    sys.exit(77)

from test_serve import CLI, MODEL, PAGES, PDF, Server, thirty_page_pdf, uocr_run, wait_job, wait_until  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1 with its append-only file (fsync at every write) in a folder of
    its own; restart() stops it (SHUTDOWN: the file is complete) and starts it again on the same
    port and folder."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="uocr-redis-")
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder,
                                      "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.try_ping(), seconds=20)

    def try_ping(self):
        try:
            return self.command("PING") == "PONG"
        except OSError:
            return False

    def command(self, *args):
        """One command over RESP; the reply as Python values (errors raise)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in (str(x).encode() for x in args))
            s.sendall(out)
            f = s.makefile("rb")

            def read():
                line = f.readline()
                kind, rest = line[:1], line[1:-2]
                if kind == b"+":
                    return rest.decode()
                if kind == b"-":
                    raise RuntimeError(rest.decode())
                if kind == b":":
                    return int(rest)
                if kind == b"$":
                    n = int(rest)
                    if n < 0:
                        return None
                    data = f.read(n + 2)[:-2]
                    return data.decode(errors="replace")
                if kind == b"*":
                    n = int(rest)
                    return None if n < 0 else [read() for _ in range(n)]
                raise RuntimeError(f"bad reply {line!r}")
            return read()

    def job(self, job_id):
        flat = self.command("HGETALL", f"uocr:job:{job_id}") or []
        return dict(zip(flat[::2], flat[1::2]))

    def restart(self):
        try:
            self.command("SHUTDOWN")
        except (OSError, RuntimeError):
            pass
        self.proc.wait(timeout=30)
        self.start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"


class Worker:
    """`uocr worker` with the demo model, named `name`, decoding with `threads` threads (the 2 cores
    of a CI machine are shared by several workers); ready once its "listening" line is logged."""

    def __init__(self, redis, storage, name, *options, threads=1):
        self.name = name
        self.log_path = tempfile.mktemp(prefix=f"uocr-worker-{name}-", suffix=".log")
        self.log = open(self.log_path, "a+b")
        self.data_dir = tempfile.mkdtemp(prefix="uocr-worker-data-")
        self.proc = subprocess.Popen([CLI, "worker", "--model", MODEL, "--queue", redis.url, "--storage", storage, "--port", "0",
                                      "--worker-name", name, "--data-dir", self.data_dir, "--max-concurrency", "1", *options],
                                     stdout=subprocess.DEVNULL, stderr=self.log,
                                     env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        self.port = wait_until(lambda: next((l["port"] for l in self.lines() if l.get("event") == "listening"), None)
                               or (self.proc.poll() is not None and -1), seconds=60)
        if self.port == -1:
            raise RuntimeError("uocr worker did not start: " + open(self.log_path).read())
        self.url = f"http://127.0.0.1:{self.port}"

    def lines(self):
        with open(self.log_path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]

    def events(self, name):
        return [l for l in self.lines() if l.get("event") == name]

    def metric(self, name):
        total = 0.0
        for line in requests.get(f"{self.url}/metrics", timeout=30).text.splitlines():
            if line.startswith(name + "{"):
                total += float(line.split()[-1])
        return total

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return self.proc.returncode


class Fleet(unittest.TestCase):
    """One Redis, one storage folder, one API node per test; workers as each test needs."""

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="uocr-fleet-")
        cls.pdf30 = thirty_page_pdf(cls.folder)
        cls.expected = {cls.pdf30: uocr_run([cls.pdf30], markdown=True), PDF: uocr_run([PDF], markdown=True)}
        for page in PAGES:
            cls.expected[page] = uocr_run([page], markdown=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def setUp(self):
        self.redis = RedisServer()
        self.storage_dir = tempfile.mkdtemp(prefix="uocr-fleet-store-")
        self.storage = "file://" + self.storage_dir
        self.workers = []
        self.api = None

    def tearDown(self):
        for w in self.workers:
            w.stop()
        if self.api:
            self.api.stop()
        self.redis.stop()
        shutil.rmtree(self.storage_dir, ignore_errors=True)

    def start_api(self, *options):
        self.api = Server("--queue", self.redis.url, "--storage", self.storage, "--max-concurrency", "1", *options)
        return self.api

    def start_worker(self, name, *options):
        w = Worker(self.redis, self.storage, name, "--checkpoint-every-tokens", "64", *options)
        self.workers.append(w)
        return w

    def submit(self, path):
        mime = "application/pdf" if path.endswith(".pdf") else "image/png"
        with open(path, "rb") as f:
            r = requests.post(f"{self.api.url}/v1/jobs", files={"file": (os.path.basename(path), f, mime)}, timeout=120)
        self.assertEqual(r.status_code, 202, r.text)
        return r.json()["id"]

    def result(self, job_id):
        r = requests.get(f"{self.api.url}/v1/jobs/{job_id}/result", timeout=60)
        self.assertEqual(r.status_code, 200, r.text)
        return r.text

    def assert_succeeded_with(self, job_id, path, seconds=300):
        job = wait_job(self.api.url, job_id, seconds=seconds)
        self.assertEqual(job["state"], "succeeded", job)
        self.assertEqual(self.result(job_id), self.expected[path], f"job {job_id} on {os.path.basename(path)}")
        return job

    def owner_with_pages(self, job_id, pages):
        """The worker holding the job once it has `pages` pages done."""
        def held():
            h = self.redis.job(job_id)
            done = json.loads(h.get("progress", "{}")).get("pages_done", 0)
            return next((w for w in self.workers if w.name == h.get("owner") and done >= pages), None)
        return wait_until(held, seconds=120, step=0.05)

    def test_twenty_jobs_on_three_workers_equal_uocr_run(self):
        self.start_api()
        for i in range(3):
            self.start_worker(f"w{i}")
        docs = [self.pdf30] * 2 + [PDF] * 6 + [PAGES[i % 3] for i in range(12)]
        self.redis.command("CONFIG", "RESETSTAT")
        started = time.time()
        ids = [(self.submit(path), path) for path in docs]
        for job_id, path in ids:
            self.assert_succeeded_with(job_id, path)
        seconds = time.time() - started
        stats = [l.split(":", 1) for l in self.redis.command("INFO", "commandstats").splitlines() if l.startswith("cmdstat_")]
        calls = {name[8:]: int(v.split(",")[0].split("=")[1]) for name, v in stats}
        polls = calls.get("xreadgroup", 0)
        print(f"\nRedis commands: {sum(calls.values())} in {seconds:.0f} s, of them {polls} XREADGROUP polls; "
              f"{(sum(calls.values()) - polls) / 20:.0f} others per job: {calls}", file=sys.stderr)
        taken = {w.name: w.metric("uocr:fleet_jobs_taken_total") for w in self.workers}
        self.assertEqual(sum(taken.values()), 20, taken)
        self.assertTrue(all(v > 0 for v in taken.values()), taken)
        print(f"\n20 jobs, {sum(30 if p == self.pdf30 else 3 if p == PDF else 1 for p in docs)} pages, 3 workers: "
              f"{seconds:.1f} s; taken {taken}", file=sys.stderr)
        # Ended jobs left nothing in the streams, and nothing was dead-lettered.
        for stream in ("uocr:jobs:short", "uocr:jobs:long"):
            self.assertEqual(self.redis.command("XLEN", stream), 0)
        self.assertEqual(self.redis.command("XLEN", "uocr:jobs:dead"), 0)

    def test_killed_worker_job_resumes_elsewhere_byte_identically(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"k{i}", "--lease-seconds", "3")
        job_id = self.submit(self.pdf30)
        victim = self.owner_with_pages(job_id, 8)
        victim.proc.kill()
        killed = time.time()
        self.assert_succeeded_with(job_id, self.pdf30)
        survivor = next(w for w in self.workers if w is not victim)
        resumed = survivor.events("job_resumed")
        self.assertEqual(len(resumed), 1, survivor.lines())
        self.assertEqual(survivor.metric("uocr:fleet_jobs_reclaimed_total"), 1)
        self.assertEqual(survivor.metric("uocr:fleet_jobs_resumed_total"), 1)
        taken = next(l for l in survivor.events("job_taken") if l["id"] == job_id)
        lag = time.mktime(time.strptime(taken["ts"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone + float(taken["ts"][19:-1] or 0) - killed
        print(f"\nmigration: taken {lag:.1f} s after the kill (lease 3 s); checkpoint at token "
              f"{resumed[0]['checkpoint_tokens']}, {resumed[0]['recomputed_tokens']} tokens recomputed", file=sys.stderr)
        self.assertLessEqual(resumed[0]["recomputed_tokens"], 64 + 8)  # a checkpoint every 64 tokens, shared every 250 ms

    def test_damaged_checkpoint_is_refused_and_the_job_starts_over(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"c{i}", "--lease-seconds", "3")
        job_id = self.submit(self.pdf30)
        victim = self.owner_with_pages(job_id, 4)
        victim.proc.kill()
        path = os.path.join(self.storage_dir, self.redis.job(job_id)["checkpoint"])
        with open(path, "r+b") as f:  # one byte of the payload flipped: the header's checksum no longer matches
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        self.assert_succeeded_with(job_id, self.pdf30)
        survivor = next(w for w in self.workers if w is not victim)
        self.assertIn("checksum", survivor.events("checkpoint_unusable")[0]["reason"])
        self.assertEqual(survivor.metric("uocr:fleet_jobs_resumed_total"), 0)

    def test_checkpoint_of_another_precision_is_not_resumed_the_job_starts_over(self):
        self.start_api()
        victim = self.start_worker("p0", "--lease-seconds", "3")
        job_id = self.submit(self.pdf30)
        self.assertIs(self.owner_with_pages(job_id, 4), victim)
        survivor = self.start_worker("p1", "--lease-seconds", "3", "--precision", "bf16")
        victim.proc.kill()
        job = wait_job(self.api.url, job_id)
        self.assertEqual(job["state"], "succeeded", job)
        self.assertEqual(self.result(job_id), uocr_run([self.pdf30], "--precision", "bf16", markdown=True))
        if survivor.events("worker_ready")[0]["precision"] == "f32":  # a CPU without bf16 dot products runs f32
            self.assertEqual(survivor.metric("uocr:fleet_jobs_resumed_total"), 1)
            return
        reason = survivor.events("checkpoint_unusable")[0]["reason"]
        self.assertIn("other parameters", reason)
        self.assertIn("precision=bf16", reason)
        self.assertEqual(survivor.metric("uocr:fleet_jobs_resumed_total"), 0)

    def test_paused_worker_is_fenced_off_when_it_comes_back(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"s{i}", "--lease-seconds", "2")
        job_id = self.submit(self.pdf30)
        paused = self.owner_with_pages(job_id, 3)
        paused.signal(signal.SIGSTOP)
        other = next(w for w in self.workers if w is not paused)
        self.assert_succeeded_with(job_id, self.pdf30)
        stored = self.result(job_id)
        hash_before = self.redis.job(job_id)
        paused.signal(signal.SIGCONT)
        wait_until(lambda: paused.events("lease_lost"), seconds=30)
        time.sleep(1)
        self.assertGreaterEqual(paused.metric("uocr:fleet_fenced_writes_total") + paused.metric("uocr:fleet_lease_renew_failures_total"), 1)
        self.assertEqual(self.result(job_id), stored)
        after = self.redis.job(job_id)
        for field in ("state", "progress", "result", "checkpoint", "generation"):
            self.assertEqual(after.get(field), hash_before.get(field), field)
        self.assertEqual(other.metric("uocr:fleet_jobs_reclaimed_total"), 1)
        self.assertEqual(paused.metric("uocr:fleet_jobs_finished_total"), 0)

    def test_drained_worker_hands_its_job_over_at_once(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"d{i}", "--lease-seconds", "60")
        job_id = self.submit(self.pdf30)
        drained = self.owner_with_pages(job_id, 5)
        drained.signal(signal.SIGTERM)
        self.assertEqual(drained.proc.wait(timeout=60), 0)
        exited = time.time()
        other = next(w for w in self.workers if w is not drained)
        wait_until(lambda: [l for l in other.events("job_taken") if l["id"] == job_id], seconds=15)  # not the 60 s lease
        self.assertLess(time.time() - exited, 15)
        self.assert_succeeded_with(job_id, self.pdf30, seconds=300)
        self.assertEqual(len(drained.events("job_released")), 1)
        resumed = other.events("job_resumed")
        # Released right after a checkpoint: the token its cancel came with is the only one decoded again.
        self.assertLessEqual(resumed[0]["recomputed_tokens"], 1)

    def test_redis_restart_loses_no_job_and_does_none_twice(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"r{i}", "--lease-seconds", "5")
        ids = [(self.submit(path), path) for path in [self.pdf30, PDF, PDF, PAGES[0], PAGES[1], PAGES[2]]]
        self.owner_with_pages(ids[0][0], 4)
        self.redis.restart()
        for job_id, path in ids:
            self.assert_succeeded_with(job_id, path)
        finished = sum(w.metric("uocr:fleet_jobs_finished_total") for w in self.workers)
        self.assertEqual(finished, len(ids), "a job was ended twice")
        self.assertEqual(self.redis.command("XLEN", "uocr:jobs:dead"), 0)

    def test_job_that_kills_every_worker_ends_in_the_dead_letter_stream(self):
        self.start_api()
        for i in range(2):
            self.start_worker(f"x{i}", "--lease-seconds", "2", "--max-deliveries", "2")
        job_id = self.submit(self.pdf30)
        for attempt in range(2):
            victim = self.owner_with_pages(job_id, 1)
            victim.proc.kill()
            self.workers.remove(victim)
            victim.stop()
            self.start_worker(f"x{attempt + 2}", "--lease-seconds", "2", "--max-deliveries", "2")
        job = wait_job(self.api.url, job_id, seconds=60)
        self.assertEqual(job["state"], "failed")
        self.assertEqual(job["error"]["code"], 500)
        self.assertIn("taken 2 times", job["error"]["message"])
        self.assertIn("stopped renewing its lease", job["error"]["message"])
        dead = self.redis.command("XRANGE", "uocr:jobs:dead", "-", "+")
        self.assertEqual(len(dead), 1)
        fields = dict(zip(dead[0][1][::2], dead[0][1][1::2]))
        self.assertEqual(fields["job"], job_id)
        self.assertIn("taken 2 times", fields["error"])
        r = requests.get(f"{self.api.url}/v1/jobs/{job_id}/result", timeout=30)
        self.assertEqual(r.status_code, 409)

    def test_api_node_answers_every_job_call_from_the_fleet(self):
        self.start_api()
        job_id = self.submit(PDF)  # no worker yet: it waits in Redis
        other_api = Server("--queue", self.redis.url, "--storage", self.storage, "--result-ttl-seconds", "3")
        try:
            job = requests.get(f"{other_api.url}/v1/jobs/{job_id}", timeout=30).json()
            self.assertEqual((job["state"], job["pages_total"]), ("queued", 3))
            png = requests.get(f"{other_api.url}/v1/jobs/{job_id}/pages/1/image", timeout=60)
            self.assertEqual(png.headers["Content-Type"], "image/png")
            self.assertTrue(png.content.startswith(b"\x89PNG"))
            self.assertEqual(requests.get(f"{other_api.url}/v1/jobs/{job_id}/result", timeout=30).status_code, 409)
            self.start_worker("a0")
            events = requests.get(f"{other_api.url}/v1/jobs/{job_id}/events", stream=True, timeout=300)
            text, name = "", None
            for line in events.iter_lines():
                line = line.decode()
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: ") and name == "text":
                    text += json.loads(line[6:])["text"]
                elif line.startswith("data: ") and name == "end":
                    break
            events.close()
            self.assertEqual(text, self.expected[PDF])
            self.assert_succeeded_with(job_id, PDF)
            # A queued job cancelled from either node ends at once, and no worker decodes it.
            self.workers[0].stop()
            self.workers.clear()
            queued = self.submit(PAGES[0])
            gone = requests.delete(f"{other_api.url}/v1/jobs/{queued}", timeout=30).json()
            self.assertEqual(gone["state"], "cancelled")
            self.assertTrue(os.path.isdir(os.path.join(self.storage_dir, "jobs", queued)))
            # Its TTL (3 s on the node that ended it) passes: hash and files go.
            wait_until(lambda: requests.get(f"{self.api.url}/v1/jobs/{queued}", timeout=30).status_code == 404, seconds=30)
            wait_until(lambda: not os.path.exists(os.path.join(self.storage_dir, "jobs", queued)), seconds=10)
            self.assertEqual(requests.get(f"{self.api.url}/v1/jobs/job-0000000000000000deadbeef", timeout=30).status_code, 404)
        finally:
            other_api.stop()

    def test_s3_storage_against_a_local_stand_in(self):
        moto = shutil.which("moto_server")
        if moto is None:
            self.skipTest("no moto_server (pip install 'moto[server]')")
        port = free_port()
        server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")}
        try:
            wait_until(lambda: self.http_ok(f"http://127.0.0.1:{port}/"), seconds=30)
            os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                              AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_REGION="us-east-1")
            self.assertEqual(requests.put(f"http://127.0.0.1:{port}/uocr-fleet", timeout=30).status_code, 200)
            self.storage = "s3://uocr-fleet/test"
            self.start_api()
            self.start_worker("s3w0", "--lease-seconds", "3")
            self.start_worker("s3w1", "--lease-seconds", "3")
            ids = [(self.submit(path), path) for path in [self.pdf30, PDF, PAGES[2]]]
            victim = self.owner_with_pages(ids[0][0], 5)
            victim.proc.kill()
            for job_id, path in ids:
                self.assert_succeeded_with(job_id, path)
            listing = requests.get(f"http://127.0.0.1:{port}/uocr-fleet?list-type=2&prefix=test/jobs/", timeout=30).text
            self.assertIn("result-g", listing)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            server.terminate()
            server.wait(timeout=30)

    @staticmethod
    def http_ok(url):
        try:
            return requests.get(url, timeout=2).status_code < 500
        except requests.RequestException:
            return False


if __name__ == "__main__":
    unittest.main(verbosity=2)
