"""`uocr serve` tested with real clients: requests built exactly as Baidu's infer.py builds them,
the `openai` package as the vLLM recipe uses it, and raw HTTP for bad input, overload, timeouts,
disconnects, metrics and shutdown. Each server runs on 127.0.0.1 with the bundled demo model; its
transcripts must equal `uocr run --format raw` on the same pages.

Needs the PyPI packages `openai` and `requests` (.ci/run installs them); exits 77 (skipped)
without them. Environment: UOCR_CLI (the uocr binary), UOCR_SOURCE_DIR."""
import atexit
import base64
import concurrent.futures
import hashlib
import hmac
import http.server
import shutil
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

try:
    import openai
    import requests
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e} (pip install openai requests)")
    sys.exit(77)

CLI = os.environ["UOCR_CLI"]
SOURCE = os.environ["UOCR_SOURCE_DIR"]
MODEL = os.path.join(SOURCE, "models", "uocr-demo")
PAGES = [os.path.join(SOURCE, "samples", "data", f"demo-page{i}.png") for i in (1, 2, 3)]
PDF = os.path.join(SOURCE, "samples", "data", "demo-doc.pdf")

# What the tests and the processes they start write to temporary files (logs, data folders, the
# page folder of a server killed while it rendered a PDF page) goes to one folder, removed at exit.
# What --precision bf16 runs here: bf16 on a CPU with AVX-512 BF16, else f32.
with open("/proc/cpuinfo") as cpuinfo:
    BF16_RUNS = "bf16" if "avx512_bf16" in cpuinfo.read() else "f32"

SCRATCH = tempfile.mkdtemp(prefix="uocr-serve-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = SCRATCH
atexit.register(shutil.rmtree, SCRATCH, True)


def data_uri(path):
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    mime = "image/jpeg" if ext in ("jpg", "jpeg") else f"image/{ext}"
    with open(path, "rb") as f:
        return f"data:{mime};base64,{base64.b64encode(f.read()).decode()}"


def png_bytes(width, height, rows=None):
    """A PNG of the given size; `rows` (bytes of filtered scanlines) may be short: an image bomb's
    header claims a size its data does not hold."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    if rows is None:
        rows = b"".join(b"\x00" + b"\x80" * (3 * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def uocr_run(pages, *options, markdown=False):
    """`uocr run`'s transcript: raw (--format raw, its trailing newline removed), or the Markdown
    file `uocr run -o` writes; exit 3: cut at --max-tokens."""
    fmt = [] if markdown else ["--format", "raw"]
    out = subprocess.run([CLI, "run", "--model", MODEL, *fmt, *options, *pages], capture_output=True, timeout=600)
    assert out.returncode in (0, 3), out.stderr.decode()
    return out.stdout.decode() if markdown else out.stdout.decode()[:-1]


def thirty_page_pdf(folder):
    """The 3-page sample PDF ten times over (poppler's pdfunite)."""
    path = os.path.join(folder, "doc30.pdf")
    subprocess.run(["pdfunite"] + [PDF] * 10 + [path], check=True, timeout=120)
    return path


class Server:
    """`uocr serve --port 0` with the demo model; the port comes from its "listening" log line."""

    def __init__(self, *options, names="Unlimited-OCR,baidu/Unlimited-OCR", data_dir=None):
        self.log_path = tempfile.mktemp(prefix="uocr-serve-", suffix=".log")
        self.log = open(self.log_path, "a+b")
        self.own_data = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="uocr-serve-data-")
        self.proc = subprocess.Popen([CLI, "serve", "--model", MODEL, "--port", "0", "--served-model-name", names,
                                      "--data-dir", self.data_dir, *options], stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.time() + 60
        while self.port is None and time.time() < deadline and self.proc.poll() is None:
            for line in self.lines():
                if line.get("event") == "listening":
                    self.port = line["port"]
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            with open(self.log_path) as f:
                raise RuntimeError("uocr serve did not start: " + f.read())
        self.url = f"http://127.0.0.1:{self.port}"

    def lines(self):
        with open(self.log_path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]

    def stop(self, keep_data=False):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.own_data and not keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return self.proc.returncode

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def infer_py_payload(image_paths, text="document parsing.", mode="base", ngram_window=128, stream=True):
    """The body Baidu's infer.py (and its README's multi-page client) sends, field for field."""
    content = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": data_uri(p)}} for p in image_paths]
    payload = {"model": "Unlimited-OCR", "messages": [{"role": "user", "content": content}],
               "temperature": 0, "skip_special_tokens": False, "stream": stream,
               "images_config": {"image_mode": mode}}
    payload["custom_logit_processor"] = '{"callable": "gASVZgAAAAAAAACMF19fbWFpbl9fLlByb2Nlc3NvcpSTlC4="}'
    payload["custom_params"] = {"ngram_size": 35, "window_size": ngram_window}
    return payload


def infer_py_stream(url, payload, timeout=300):
    """infer.py's reply parsing: `data:` lines until [DONE], the deltas' content joined."""
    r = requests.post(f"{url}/v1/chat/completions", json=payload, stream=True, timeout=timeout)
    assert r.status_code == 200, (r.status_code, r.text)
    text, chunks = "", []
    for line in r.iter_lines():
        if not line:
            continue
        line = line.decode("utf-8")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        chunks.append(chunk)
        if chunk.get("choices"):
            text += chunk["choices"][0]["delta"].get("content") or ""
    return text, chunks


class RealClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_health_and_models(self):
        self.assertEqual(requests.get(f"{self.server.url}/health", timeout=10).status_code, 200)
        self.assertEqual(requests.get(f"{self.server.url}/healthz", timeout=10).status_code, 200)
        self.assertEqual(requests.get(f"{self.server.url}/readyz", timeout=10).status_code, 200)
        models = requests.get(f"{self.server.url}/v1/models", timeout=10).json()
        self.assertEqual(models["object"], "list")
        self.assertEqual([m["id"] for m in models["data"]], ["Unlimited-OCR", "baidu/Unlimited-OCR"])

    def test_infer_py_single_page_equals_uocr_run(self):
        text, chunks = infer_py_stream(self.server.url, infer_py_payload(PAGES[:1]))
        self.assertEqual(text, uocr_run(PAGES[:1], "--mode", "base"))
        self.assertTrue(text.strip())
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(chunks[0]["object"], "chat.completion.chunk")
        last = chunks[-1]
        self.assertEqual(last["choices"][0]["finish_reason"], "stop")
        self.assertGreater(last["usage"]["completion_tokens"], 0)
        self.assertEqual(len({c["id"] for c in chunks}), 1)

    def test_readme_multi_page_client_equals_uocr_run(self):
        payload = infer_py_payload(PAGES, text="Multi page parsing.", mode="base", ngram_window=1024)
        text, _ = infer_py_stream(self.server.url, payload)
        self.assertEqual(text, uocr_run(PAGES))
        self.assertEqual(text.count("<PAGE>"), uocr_run(PAGES).count("<PAGE>"))

    def test_vllm_recipe_openai_client_equals_uocr_run(self):
        client = openai.OpenAI(base_url=f"{self.server.url}/v1", api_key="EMPTY", timeout=3600)
        reply = client.chat.completions.create(
            model="baidu/Unlimited-OCR",
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "<image>document parsing."},
                {"type": "image_url", "image_url": {"url": data_uri(PAGES[1])}}]}],
            max_tokens=8192, temperature=0.0,
            extra_body={"skip_special_tokens": False, "vllm_xargs": {"ngram_size": 35, "window_size": 128}})
        self.assertEqual(reply.choices[0].message.content, uocr_run(PAGES[1:2]))
        self.assertEqual(reply.choices[0].finish_reason, "stop")
        self.assertGreater(reply.usage.completion_tokens, 0)
        self.assertEqual(reply.usage.total_tokens, reply.usage.prompt_tokens + reply.usage.completion_tokens)

    def test_openai_client_streams_and_max_tokens_gives_length(self):
        client = openai.OpenAI(base_url=f"{self.server.url}/v1", api_key="EMPTY", timeout=600)
        stream = client.chat.completions.create(
            model="Unlimited-OCR", stream=True, max_tokens=5, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": [{"type": "text", "text": "<image>document parsing."},
                                                   {"type": "image_url", "image_url": {"url": data_uri(PAGES[0])}}]}])
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, 5)
        self.assertEqual(text, uocr_run(PAGES[:1], "--max-tokens", "5"))

    def test_openai_client_sees_errors_as_exceptions(self):
        client = openai.OpenAI(base_url=f"{self.server.url}/v1", api_key="EMPTY", timeout=60, max_retries=0)
        with self.assertRaises(openai.NotFoundError):
            client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": data_uri(PAGES[0])}}]}])
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model="Unlimited-OCR", messages=[{"role": "user", "content": "no image here"}])
        self.assertIn("no image", str(e.exception))


class BadInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.keys = tempfile.mktemp(prefix="uocr-keys-")
        with open(cls.keys, "w") as f:
            f.write("# the service's keys\nsecret-key-1\n\nsecret-key-2\n")
        cls.server = Server("--api-keys-file", cls.keys, "--max-body-bytes", str(16 << 20))
        cls.auth = {"Authorization": "Bearer secret-key-2"}

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        os.unlink(cls.keys)
        with open(cls.server.log_path) as f:
            log = f.read()
        assert "secret-key" not in log, "an API key reached the log"

    def post(self, body, headers=None, raw=False):
        h = dict(self.auth, **(headers or {}))
        data = body if raw else json.dumps(body)
        return requests.post(f"{self.server.url}/v1/chat/completions", data=data, headers=h, timeout=60)

    def assert_error(self, r, status, text=None, param=None):
        self.assertEqual(r.status_code, status, r.text)
        err = r.json()["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        self.assertEqual(err["code"], status)
        if text:
            self.assertIn(text, err["message"])
        if param:
            self.assertEqual(err["param"], param)

    def message(self, *parts):
        return {"model": "Unlimited-OCR", "messages": [{"role": "user", "content": list(parts)}]}

    def image(self, uri):
        return {"type": "image_url", "image_url": {"url": uri}}

    def test_each_bad_request_gets_its_error_and_the_server_keeps_serving(self):
        self.assert_error(self.post(b"{not json", raw=True), 400, "not valid JSON")
        self.assert_error(self.post([1, 2]), 400, "JSON object")
        self.assert_error(self.post({"messages": "hello"}), 400, param="messages")
        self.assert_error(self.post(dict(self.message(self.image(data_uri(PAGES[0]))), temperature="hot")), 400, param="temperature")
        self.assert_error(self.post(dict(self.message(self.image(data_uri(PAGES[0]))), max_tokens=0)), 400, param="max_tokens")
        self.assert_error(self.post(dict(self.message(self.image(data_uri(PAGES[0]))), n=2)), 400, param="n")
        self.assert_error(self.post(dict(self.message(self.image(data_uri(PAGES[0]))), images_config={"image_mode": "huge"})), 400,
                          param="images_config.image_mode")
        self.assert_error(self.post(self.message({"type": "text", "text": "document parsing."})), 400, "no image")
        self.assert_error(self.post(self.message(self.image("data:text/plain;base64,aGVsbG8="))), 400, "not an image")
        self.assert_error(self.post(self.message(self.image("data:image/png;base64," + base64.b64encode(b"hello, not a png").decode()))),
                          400, "not a usable image")
        self.assert_error(self.post(self.message(self.image("data:image/png;base64,%%%%"))), 400, "base64")
        self.assert_error(self.post(self.message(self.image("https://intranet.example/secret.png"))), 400, "data: URI")
        bomb = png_bytes(60000, 60000, rows=b"\x00" * 1000)  # 140 bytes of file, 10.8 GB of pixels
        self.assert_error(self.post(self.message(self.image("data:image/png;base64," + base64.b64encode(bomb).decode()))), 400, "page 1")
        tiny = "data:image/png;base64," + base64.b64encode(png_bytes(8, 8)).decode()
        self.assert_error(self.post(self.message(*[self.image(tiny)] * 301)), 413, "300 pages")
        self.assert_error(self.post({"model": "Unlimited-OCR", "messages": [{"role": "system", "content": "x"}]}), 400, param="messages[0].role")
        # still serving
        r = self.post(self.message({"type": "text", "text": "document parsing."}, self.image(data_uri(PAGES[0]))))
        self.assertEqual(r.status_code, 200, r.text)
        self.assertEqual(r.json()["choices"][0]["message"]["content"], uocr_run(PAGES[:1]))

    def test_oversized_body_is_refused_from_its_headers(self):
        r = self.post(b"x" * (17 << 20), raw=True)
        self.assert_error(r, 413, "max_body_bytes")

    def test_keys(self):
        body = self.message(self.image(data_uri(PAGES[0])))
        self.assert_error(requests.post(f"{self.server.url}/v1/chat/completions", json=body, timeout=60), 401)
        self.assert_error(requests.post(f"{self.server.url}/v1/chat/completions", json=body, timeout=60,
                                        headers={"Authorization": "Bearer secret-key-3"}), 401)
        self.assert_error(requests.get(f"{self.server.url}/v1/models", timeout=60, headers={"Authorization": "secret-key-1"}), 401)
        self.assertEqual(requests.get(f"{self.server.url}/v1/models", timeout=60, headers={"Authorization": "Bearer secret-key-1"}).status_code, 200)
        self.assertEqual(requests.get(f"{self.server.url}/health", timeout=60).status_code, 200)  # probes need no key

    def test_malformed_http_gets_a_400_in_the_error_shape(self):
        multipart = {**self.auth, "Content-Type": "multipart/form-data; boundary=b"}
        self.assert_error(requests.post(f"{self.server.url}/v1/jobs", data=b"--b\r\nno part header\r\n", headers=multipart, timeout=60),
                          400, "could not be read as HTTP")
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=60) as s:
            s.sendall(b"NOT A REQUEST LINE\r\n\r\n")
            head, _, body = s.makefile("rb").read().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400 "), head)
        self.assertIn("could not be read as HTTP", json.loads(body)["error"]["message"])
        self.assert_error(requests.get(f"{self.server.url}/healthz", headers={"X-Padding": "x" * 20000}, timeout=60), 400, "could not be read")
        self.assert_error(requests.get(f"{self.server.url}/v1/jobs/" + "a" * 10000, headers=self.auth, timeout=60), 414, "URI is too long")

    def test_unknown_routes(self):
        self.assert_error(requests.get(f"{self.server.url}/v1/jobs/../../etc/passwd", headers=self.auth, timeout=60), 404)
        self.assert_error(requests.get(f"{self.server.url}/nothing", timeout=60), 404)

    def test_client_that_disconnects_mid_stream_cancels_its_work(self):
        payload = infer_py_payload(PAGES * 20, text="Multi page parsing.", ngram_window=1024)  # 60 pages: seconds of work
        payload["max_tokens"] = 100000
        r = requests.post(f"{self.server.url}/v1/chat/completions", json=payload, headers=self.auth, stream=True, timeout=60)
        self.assertEqual(r.status_code, 200)
        for line in r.iter_lines():
            if line.startswith(b"data:"):
                break  # the first chunk arrived: the document is running
        r.close()
        deadline = time.time() + 60
        ended = []
        while time.time() < deadline and not ended:
            ended = [l for l in self.server.lines() if l.get("event") == "request" and l.get("pages") == 60]
            time.sleep(0.1)
        self.assertEqual(len(ended), 1, "the cancelled document did not end")
        self.assertEqual(ended[0]["status"], 499)
        self.assertEqual(ended[0]["stop"], "cancelled")
        metrics = requests.get(f"{self.server.url}/metrics", timeout=60).text
        self.assertIn('uocr:num_requests_running{model_name="Unlimited-OCR"} 0', metrics)


class Limits(unittest.TestCase):
    def test_overload_is_refused_fast_with_retry_after_and_every_accepted_request_is_right(self):
        server = Server("--max-concurrency", "1", "--queue-max-size", "2", "--long-document-pages", "100")
        try:
            payload = infer_py_payload(PAGES * 4, text="Multi page parsing.", ngram_window=1024, stream=False)
            expected = uocr_run(PAGES * 4)
            body = json.dumps(payload)
            barrier = threading.Barrier(20)

            def one(_):
                barrier.wait(timeout=60)
                t = time.time()
                r = requests.post(f"{server.url}/v1/chat/completions", data=body, timeout=600,
                                  headers={"Content-Type": "application/json"})
                return r, time.time() - t

            with concurrent.futures.ThreadPoolExecutor(20) as pool:
                results = list(pool.map(one, range(20)))
            ok = [r for r, _ in results if r.status_code == 200]
            refused = [(r, s) for r, s in results if r.status_code == 503]
            self.assertEqual(len(ok) + len(refused), 20, [r.status_code for r, _ in results])
            self.assertGreaterEqual(len(ok), 1)
            self.assertGreaterEqual(len(refused), 10)
            for r in ok:
                self.assertEqual(r.json()["choices"][0]["message"]["content"], expected)
            for r, seconds in refused:
                self.assertGreaterEqual(int(r.headers["Retry-After"]), 1)
                self.assertEqual(r.json()["error"]["code"], 503)
            p99 = sorted(s for _, s in refused)[int(0.99 * (len(refused) - 1))]
            print(f"overload: {len(ok)} accepted, {len(refused)} refused, refusal p99 {p99 * 1000:.1f} ms", file=sys.stderr)
            self.assertLess(p99, 5.0)
            metrics = requests.get(f"{server.url}/metrics", timeout=60).text
            self.assertIn(f'uocr:errors_total{{model_name="Unlimited-OCR",code="503"}} {len(refused)}', metrics)
            self.assertIn(f'uocr:request_success_total{{model_name="Unlimited-OCR",finished_reason="stop"}} {len(ok)}', metrics)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_timeout_stops_the_work(self):
        server = Server("--request-timeout-seconds", "0.001")
        try:
            r = requests.post(f"{server.url}/v1/chat/completions", json=infer_py_payload(PAGES[:1], stream=False), timeout=60)
            self.assertEqual(r.status_code, 504, r.text)
            self.assertEqual(r.json()["error"]["type"], "timeout")
            text, chunks = None, []
            r = requests.post(f"{server.url}/v1/chat/completions", json=infer_py_payload(PAGES[:1]), stream=True, timeout=60)
            self.assertEqual(r.status_code, 200)
            events = [json.loads(l[5:]) for l in r.iter_lines() if l.startswith(b"data:") and l != b"data: [DONE]"]
            self.assertEqual(events[-1]["error"]["code"], 504)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_rate_limit_per_client(self):
        server = Server("--rate-limit-per-minute", "2")
        try:
            body = infer_py_payload(PAGES[:1], stream=False)
            for _ in range(2):
                self.assertEqual(requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60).status_code, 200)
            r = requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
            self.assertEqual(r.status_code, 429, r.text)
            self.assertEqual(r.json()["error"]["type"], "rate_limit_error")
            self.assertGreaterEqual(int(r.headers["Retry-After"]), 1)
            self.assertEqual(requests.get(f"{server.url}/v1/models", timeout=60).status_code, 200)  # reading is not limited
        finally:
            self.assertEqual(server.stop(), 0)

    def test_metrics_and_sigterm(self):
        server = Server()
        try:
            infer_py_stream(server.url, infer_py_payload(PAGES[:1]))
            metrics = requests.get(f"{server.url}/metrics", timeout=60).text
            for name in ("uocr:num_requests_running", 'uocr:num_requests_waiting{model_name="Unlimited-OCR",pool="long"}',
                         "uocr:time_to_first_token_seconds_bucket", "uocr:e2e_request_latency_seconds_count",
                         "uocr:page_latency_seconds_sum", "uocr:visual_cache_bytes", "uocr:process_cpu_seconds",
                         "uocr:process_resident_memory_bytes", 'uocr:pages_total{model_name="Unlimited-OCR"} 1'):
                self.assertIn(name, metrics)
            tokens = [l for l in metrics.splitlines() if l.startswith("uocr:generation_tokens_total")]
            self.assertGreater(float(tokens[0].split()[-1]), 0)
        finally:
            self.assertEqual(server.stop(), 0)
        events = [l["event"] for l in server.lines()]
        self.assertEqual(events[:3], ["weights_loaded", "workspace_ready", "listening"])
        self.assertEqual(events[-2:], ["shutting_down", "stopped"])
        self.assertIn("request", events)

    def test_decode_limits_from_the_config_file_refuse_a_larger_page_and_bad_ones_are_refused_at_start(self):
        folder = tempfile.mkdtemp(prefix="uocr-serve-limits-")
        try:
            config = os.path.join(folder, "serve.json")
            with open(config, "w") as f:
                json.dump({"max_image_pixels": 10000}, f)  # a sample page has 1.4 Mpixel
            server = Server("--config", config)
            try:
                r = requests.post(f"{server.url}/v1/chat/completions", json=infer_py_payload(PAGES[:1], stream=False), timeout=60)
                self.assertEqual(r.status_code, 400, r.text)
                self.assertIn("page 1 is not a usable image", r.json()["error"]["message"])
                self.assertIn("max-image-pixels", r.json()["error"]["message"])
                with open(PAGES[0], "rb") as f:
                    r = requests.post(f"{server.url}/v1/jobs", files={"file": ("page.png", f, "image/png")}, timeout=60)
                self.assertEqual(r.status_code, 400, r.text)
                self.assertIn("max-image-pixels", r.json()["error"]["message"])
                small = "data:image/png;base64," + base64.b64encode(png_bytes(64, 48)).decode()
                r = requests.post(f"{server.url}/v1/chat/completions", timeout=60, json={
                    "model": "Unlimited-OCR", "max_tokens": 4,
                    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": small}}]}]})
                self.assertEqual(r.status_code, 200, r.text)
            finally:
                self.assertEqual(server.stop(), 0)
            for bad, said in ((["--max-image-bytes", "0"], b"must be positive"), (["--max-jpeg-scans", "many"], b"--max-jpeg-scans")):
                run = subprocess.run([CLI, "serve", "--model", MODEL, "--port", "0", "--data-dir", folder, *bad],
                                     capture_output=True, timeout=60)
                self.assertNotEqual(run.returncode, 0)
                self.assertIn(said, run.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def test_precision_from_the_config_file_and_a_bad_one_refused_at_start(self):
        folder = tempfile.mkdtemp(prefix="uocr-serve-config-")
        try:
            config = os.path.join(folder, "serve.json")
            with open(config, "w") as f:
                json.dump({"precision": "bf16"}, f)
            server = Server("--config", config)
            try:
                text, _ = infer_py_stream(server.url, infer_py_payload(PAGES[:1]))
                self.assertEqual(text, uocr_run(PAGES[:1], "--mode", "base", "--precision", "bf16"))
            finally:
                self.assertEqual(server.stop(), 0)
            ready = [l for l in server.lines() if l["event"] == "workspace_ready"]
            self.assertEqual(ready[0]["precision"], BF16_RUNS)
            bad = subprocess.run([CLI, "serve", "--model", MODEL, "--port", "0", "--data-dir", folder, "--precision", "fp8"],
                                 capture_output=True, timeout=60)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn(b"precision must be bf16 or f32, got 'fp8'", bad.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def wait_job(url, job_id, seconds=300, headers=None):
    """GET /v1/jobs/{id}?wait=... until the job ends (bounded)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        job = requests.get(f"{url}/v1/jobs/{job_id}", params={"wait": 30}, headers=headers, timeout=60).json()
        if job["state"] not in ("queued", "running"):
            return job
    raise AssertionError(f"job {job_id} did not end in {seconds} s")


def wait_until(predicate, seconds=60, step=0.1):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out waiting")


def metric(url, name):
    """The value of an unlabelled-but-for-model_name series of /metrics."""
    lines = [l for l in requests.get(f"{url}/metrics", timeout=60).text.splitlines() if l.startswith(name + "{")]
    return float(lines[0].split()[-1])


def assert_idle(test, server):
    """Within 10 s (the worker's own bookkeeping after the job's end): nothing decoding and no KV
    held by admitted documents; then the CPU quiet for 2 s."""
    wait_until(lambda: metric(server.url, "uocr:num_requests_running") == 0, seconds=10)
    test.assertEqual(metric(server.url, "uocr:visual_cache_bytes"), 0)
    before = metric(server.url, "uocr:process_cpu_seconds")
    time.sleep(2)
    test.assertLess(metric(server.url, "uocr:process_cpu_seconds") - before, 0.5, "the server kept working")


class Jobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="uocr-jobs-")
        cls.pdf30 = thirty_page_pdf(cls.folder)
        cls.expected30 = uocr_run([cls.pdf30], markdown=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def submit_pdf(self, server, path, **fields):
        with open(path, "rb") as f:
            r = requests.post(f"{server.url}/v1/jobs", files={"file": ("doc.pdf", f, "application/pdf")},
                              data={k: str(v) for k, v in fields.items()}, timeout=120)
        self.assertEqual(r.status_code, 202, r.text)
        self.assertEqual(r.headers["Location"], "/v1/jobs/" + r.json()["id"])
        return r.json()

    def test_thirty_page_pdf_polled_to_the_end_equals_uocr_run_and_events_carry_it(self):
        server = Server()
        try:
            job = self.submit_pdf(server, self.pdf30)
            self.assertEqual(job["pages_total"], 30)
            events = requests.get(f"{server.url}/v1/jobs/{job['id']}/events", stream=True, timeout=600)
            text, pages_seen, kinds = "", [], []
            name = None
            for line in events.iter_lines():
                line = line.decode()
                if line.startswith("event: "):
                    name = line[7:]
                    kinds.append(name)
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if name == "text":
                        text += data["text"]
                    elif name == "page":
                        pages_seen.append(data["pages_done"])
                    elif name == "end":
                        break
            events.close()
            self.assertEqual(kinds[0], "status")
            self.assertEqual(kinds[-1], "end")
            self.assertEqual(pages_seen, sorted(pages_seen))
            self.assertEqual(pages_seen[-1], 30)
            done = wait_job(server.url, job["id"])
            self.assertEqual(done["state"], "succeeded")
            self.assertEqual(done["pages_done"], 30)
            self.assertEqual([p["state"] for p in done["pages"]], ["done"] * 30)
            self.assertTrue(all(p["seconds"] > 0 for p in done["pages"]))
            result = requests.get(f"{server.url}/v1/jobs/{job['id']}/result", timeout=60)
            self.assertEqual(result.text, self.expected30)
            self.assertEqual(text, self.expected30)
            pages = requests.get(f"{server.url}/v1/jobs/{job['id']}/result", params={"format": "json"}, timeout=60).json()
            self.assertEqual(len(pages["pages"]), 30)
            self.assertEqual(pages["finish_reason"], "stop")
            self.assertEqual(pages["pages"][1]["markdown"], self.expected30.split("\n<PAGE>\n")[1])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_pdf_text_layer_drafts_the_job_and_changes_nothing(self):
        text_pdf = os.path.join(SOURCE, "samples", "data", "demo-doc-text.pdf")
        expected = uocr_run([text_pdf], "--draft", "off", markdown=True)
        server = Server()
        try:
            job = self.submit_pdf(server, text_pdf)
            self.assertEqual(wait_job(server.url, job["id"])["state"], "succeeded")
            self.assertEqual(requests.get(f"{server.url}/v1/jobs/{job['id']}/result", timeout=60).text, expected)
            # vLLM's speculative-decoding counters: passes that verified the text layer, its tokens.
            # The job reads as ended a moment before its counters are added (accepted last), so
            # wait for them (bounded) before reading the others.
            accepted = wait_until(lambda: metric(server.url, "uocr:spec_decode_num_accepted_tokens_total"), seconds=10)
            drafted = metric(server.url, "uocr:spec_decode_num_draft_tokens_total")
            self.assertGreater(metric(server.url, "uocr:spec_decode_num_drafts_total"), 0)
            self.assertGreater(accepted, 0)
            self.assertLessEqual(accepted, drafted)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_killed_server_resumes_the_job_byte_identically(self):
        data = tempfile.mkdtemp(prefix="uocr-serve-data-")
        try:
            server = Server("--checkpoint-every-tokens", "16", data_dir=data)
            job = self.submit_pdf(server, self.pdf30)
            wait_until(lambda: requests.get(f"{server.url}/v1/jobs/{job['id']}", timeout=60).json()["pages_done"] >= 4)
            server.kill()  # SIGKILL mid-job
            self.assertTrue(os.path.exists(os.path.join(data, "jobs", job["id"], "checkpoint")))
            again = Server(data_dir=data)
            try:
                done = wait_job(again.url, job["id"])
                self.assertEqual(done["state"], "succeeded")
                result = requests.get(f"{again.url}/v1/jobs/{job['id']}/result", timeout=60).text
                self.assertEqual(result, self.expected30)
                self.assertIn("job_resumed", [l["event"] for l in again.lines()])
                self.assertFalse(os.path.exists(os.path.join(data, "jobs", job["id"], "checkpoint")))
            finally:
                self.assertEqual(again.stop(), 0)
        finally:
            shutil.rmtree(data, ignore_errors=True)

    def test_restart_with_another_precision_starts_the_job_over(self):
        data = tempfile.mkdtemp(prefix="uocr-serve-data-")
        try:
            server = Server("--checkpoint-every-tokens", "16", data_dir=data)
            job = self.submit_pdf(server, self.pdf30)
            wait_until(lambda: requests.get(f"{server.url}/v1/jobs/{job['id']}", timeout=60).json()["pages_done"] >= 2)
            server.kill()
            again = Server("--precision", "bf16", data_dir=data)
            try:
                done = wait_job(again.url, job["id"])
                self.assertEqual(done["state"], "succeeded")
                self.assertEqual(requests.get(f"{again.url}/v1/jobs/{job['id']}/result", timeout=60).text,
                                 uocr_run([self.pdf30], "--precision", "bf16", markdown=True))
                resumed = next(l for l in again.lines() if l["event"] == "job_resumed")
                if BF16_RUNS == "f32":
                    self.assertTrue(resumed["checkpoint"])  # a CPU without bf16 dot products runs f32 both times
                else:
                    self.assertFalse(resumed["checkpoint"])
                    reason = next(l for l in again.lines() if l["event"] == "checkpoint_unusable")["reason"]
                    self.assertIn("other parameters", reason)
            finally:
                self.assertEqual(again.stop(), 0)
        finally:
            shutil.rmtree(data, ignore_errors=True)

    def test_sigterm_keeps_the_running_job_for_the_next_start(self):
        data = tempfile.mkdtemp(prefix="uocr-serve-data-")
        try:
            server = Server(data_dir=data)
            job = self.submit_pdf(server, self.pdf30)
            wait_until(lambda: requests.get(f"{server.url}/v1/jobs/{job['id']}", timeout=60).json()["pages_done"] >= 2)
            self.assertEqual(server.stop(), 0)
            again = Server(data_dir=data)
            try:
                self.assertEqual(wait_job(again.url, job["id"])["state"], "succeeded")
                self.assertEqual(requests.get(f"{again.url}/v1/jobs/{job['id']}/result", timeout=60).text, self.expected30)
            finally:
                self.assertEqual(again.stop(), 0)
        finally:
            shutil.rmtree(data, ignore_errors=True)

    def test_cancel_stops_the_work(self):
        server = Server()
        try:
            job = self.submit_pdf(server, self.pdf30)
            wait_until(lambda: requests.get(f"{server.url}/v1/jobs/{job['id']}", timeout=60).json()["state"] == "running")
            self.assertEqual(requests.get(f"{server.url}/v1/jobs/{job['id']}/result", timeout=60).status_code, 409)
            t = time.time()
            cancelled = requests.delete(f"{server.url}/v1/jobs/{job['id']}", timeout=60).json()
            self.assertEqual(cancelled["state"], "cancelled")
            self.assertLess(cancelled["pages_done"], 30)
            self.assertLess(time.time() - t, 10)
            assert_idle(self, server)
            partial = requests.get(f"{server.url}/v1/jobs/{job['id']}/result", timeout=60)
            self.assertEqual(partial.headers["X-Job-State"], "cancelled")
            self.assertTrue(self.expected30.startswith(partial.text[:-1]))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_timeout_ends_the_job_as_timed_out(self):
        server = Server("--request-timeout-seconds", "0.05")
        try:
            job = self.submit_pdf(server, self.pdf30)
            self.assertEqual(wait_job(server.url, job["id"])["state"], "timed_out")
            assert_idle(self, server)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_json_images_page_range_callback_and_ttl(self):
        secret = "a-callback-secret-of-some-length"
        secret_file = os.path.join(self.folder, "secret")
        with open(secret_file, "w") as f:
            f.write(secret + "\n")
        received = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.headers["X-UOCR-Signature"], body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        server = Server("--callback-secret-file", secret_file, "--result-ttl-seconds", "2")
        try:
            body = {"files": [data_uri(p) for p in PAGES], "options": {"pages": "2-3", "window_size": 1024},
                    "callback_url": f"http://127.0.0.1:{receiver.server_address[1]}/done"}
            r = requests.post(f"{server.url}/v1/jobs", json=body, timeout=60)
            self.assertEqual(r.status_code, 202, r.text)
            job = r.json()
            self.assertEqual(job["pages_total"], 2)
            done = wait_job(server.url, job["id"])
            self.assertEqual(done["state"], "succeeded")
            self.assertEqual(requests.get(f"{server.url}/v1/jobs/{job['id']}/result", timeout=60).text,
                             uocr_run(PAGES[1:], markdown=True))
            wait_until(lambda: received, seconds=30)
            signature, payload = received[0]
            self.assertEqual(signature, "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest())
            self.assertEqual(json.loads(payload)["id"], job["id"])
            self.assertEqual(json.loads(payload)["state"], "succeeded")
            # the TTL: the job and its folder go
            wait_until(lambda: requests.get(f"{server.url}/v1/jobs/{job['id']}", timeout=60).status_code == 404, seconds=30)
            # the janitor drops the job from the index, then deletes its folder: wait for both
            folder = os.path.join(server.data_dir, "jobs", job["id"])
            wait_until(lambda: not os.path.exists(folder), seconds=30)
            self.assertFalse(os.path.exists(folder))
        finally:
            self.assertEqual(server.stop(), 0)
            receiver.shutdown()

    def test_bad_jobs(self):
        server = Server()
        try:
            post = lambda **kw: requests.post(f"{server.url}/v1/jobs", timeout=60, **kw)
            def error(r, status, text):
                self.assertEqual(r.status_code, status, r.text)
                self.assertIn(text, r.json()["error"]["message"])
            error(post(data=b"{]"), 400, "valid JSON")
            error(post(json={"options": {}}), 400, "no file")
            error(post(json={"files": ["data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 garbage").decode()]}), 400, "pdf")
            error(post(json={"files": [data_uri(PAGES[0])], "options": {"dpi": 5}}), 400, "dpi")
            error(post(json={"files": [data_uri(PAGES[0])], "options": {"colour": 1}}), 400, "unknown option")
            error(post(json={"files": [data_uri(PAGES[0])], "pages": "2-3"}), 400, "beyond")
            error(post(json={"files": [data_uri(PAGES[0])], "callback_url": "http://127.0.0.1:1/x"}), 400, "callback secret")
            error(post(json={"files": [data_uri(PAGES[0]), data_uri(PAGES[1])], "mode": "gundam"}), 400, "gundam")
            with open(PDF, "rb") as f:
                error(post(files={"file": ("x.pdf", f)}, data={"pages": "abc"}), 400, "integer")
            error(requests.get(f"{server.url}/v1/jobs/job-0000000000000000000000ff", timeout=60), 404, "no job")
            error(requests.get(f"{server.url}/v1/jobs/..%2F..%2Fetc", timeout=60), 404, "")
            error(requests.delete(f"{server.url}/v1/jobs/%2e%2e", timeout=60), 404, "")
            error(requests.get(f"{server.url}/v1/jobs/job-zz/result", timeout=60), 404, "no job")
            self.assertEqual(os.listdir(os.path.join(server.data_dir, "jobs")), [], "a refused job left files")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_page_limit_refuses_a_job_before_storing_or_counting_all_of_it(self):
        server = Server("--max-pages-per-request", "4")
        try:
            post = lambda files, **options: requests.post(f"{server.url}/v1/jobs", files=files, data=options, timeout=60)
            def refused(r, text):
                self.assertEqual(r.status_code, 413, r.text)
                self.assertEqual(r.json()["error"]["code"], 413)
                self.assertIn(text, r.json()["error"]["message"])
            with open(PDF, "rb") as f:
                pdf = f.read()
            with open(PAGES[0], "rb") as f:
                png = f.read()
            # more files than pages a job may read: refused before anything is stored
            refused(post([("file", (f"p{i}.png", png)) for i in range(5)]), "the job has 5 files, more than max_pages_per_request (4)")
            # a range longer than the limit: refused before the files are counted
            refused(post([("file", ("a.pdf", pdf))], pages="1-5"), "the job has 5 pages")
            # to the document's end: counting stops at the file that passes the limit (3 + 3 pages)
            refused(post([("file", (f"{i}.pdf", pdf)) for i in range(3)]), "the job has at least 6 pages, more than max_pages_per_request (4)")
            refused(post([("file", (f"{i}.pdf", pdf)) for i in range(2)], first_page="2"), "the job has 5 pages, more than")
            self.assertEqual(os.listdir(os.path.join(server.data_dir, "jobs")), [], "a refused job left files")
            # four pages of two three-page PDFs fit
            r = post([("file", (f"{i}.pdf", pdf)) for i in range(2)], pages="2-5")
            self.assertEqual(r.status_code, 202, r.text)
            done = wait_job(server.url, r.json()["id"])
            self.assertEqual((done["state"], done["pages_total"], done["pages_done"]), ("succeeded", 4, 4))
        finally:
            self.assertEqual(server.stop(), 0)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Load(unittest.TestCase):
    def test_sixteen_concurrent_a_burst_of_ten_queues_and_a_soak(self):
        server = Server("--max-concurrency", "16", "--queue-max-size", "8")
        try:
            one = infer_py_payload(PAGES[:1])
            expected_one = uocr_run(PAGES[:1], "--mode", "base")
            # 16 at once, streamed (infer.py) and not (the vLLM recipe's way)
            def request(i):
                if i % 2:
                    return infer_py_stream(server.url, one)[0]
                r = requests.post(f"{server.url}/v1/chat/completions", json=dict(one, stream=False), timeout=600)
                self.assertEqual(r.status_code, 200, r.text)
                return r.json()["choices"][0]["message"]["content"]
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                self.assertEqual(list(pool.map(request, range(16))), [expected_one] * 16)

            # a burst of 10 x queue_max_size twelve-page documents (long enough that the queues
            # fill), sent by 80 curl processes at once: their timings are the server's, not a
            # Python client's
            body = os.path.join(server.data_dir, "burst.json")
            with open(body, "w") as f:
                json.dump(infer_py_payload(PAGES * 4, text="Multi page parsing.", ngram_window=1024, stream=False), f)
            expected_doc = uocr_run(PAGES * 4)
            peak = [0]
            stop = threading.Event()
            def sample():
                while not stop.is_set():
                    peak[0] = max(peak[0], rss_bytes(server.proc.pid))
                    time.sleep(0.05)
            sampler = threading.Thread(target=sample)
            sampler.start()
            outputs = [os.path.join(server.data_dir, f"burst-{i}.out") for i in range(80)]
            curls = [subprocess.Popen(["curl", "-s", "-o", out, "-D", out + ".headers", "-w", "%{http_code} %{time_total}",
                                       "-H", "Content-Type: application/json", "--data-binary", "@" + body,
                                       "--max-time", "600", f"{server.url}/v1/chat/completions"], stdout=subprocess.PIPE)
                     for out in outputs]
            results = [c.communicate(timeout=660)[0].decode().split() for c in curls]
            stop.set()
            sampler.join()
            codes = [r[0] for r in results]
            self.assertEqual(codes.count("200") + codes.count("503"), 80, sorted(set(codes)))
            refused = sorted(float(r[1]) for r in results if r[0] == "503")
            for (code, _), out in zip(results, outputs):
                with open(out) as f:
                    answer = json.load(f)
                if code == "200":
                    self.assertEqual(answer["choices"][0]["message"]["content"], expected_doc)
                    continue
                self.assertEqual(answer["error"]["code"], 503)
                with open(out + ".headers") as f:
                    retry = [l.split(":")[1] for l in f if l.lower().startswith("retry-after:")]
                self.assertGreaterEqual(int(retry[0]), 1)
            self.assertGreaterEqual(len(refused), 40)  # running 16 and waiting 8, with some ending while others arrive
            p99 = refused[int(0.99 * (len(refused) - 1))]
            print(f"\nburst of 80: {codes.count('200')} accepted, {len(refused)} refused in p50 {refused[len(refused) // 2] * 1000:.0f} ms, "
                  f"p99 {p99 * 1000:.0f} ms; peak RSS {peak[0] / 2**20:.0f} MiB", file=sys.stderr)
            self.assertLess(p99, 2.0)
            self.assertLess(peak[0], 2 << 30)

            # soak: 4 clients for a while; RSS must not keep growing
            samples, end = [], time.time() + float(os.environ.get("UOCR_SOAK_SECONDS", "60"))
            def client(i):
                n = 0
                while time.time() < end:
                    self.assertEqual(request(i), expected_one)
                    n += 1
                return n
            with concurrent.futures.ThreadPoolExecutor(5) as pool:
                counts = [pool.submit(client, i) for i in range(4)]
                while time.time() < end:
                    samples.append(rss_bytes(server.proc.pid))
                    time.sleep(1)
                total = sum(c.result() for c in counts)
            third = max(1, len(samples) // 3)
            first, last = max(samples[:third]), max(samples[-third:])
            print(f"soak: {total} requests, RSS first third {first / 2**20:.1f} MiB, last third {last / 2**20:.1f} MiB", file=sys.stderr)
            self.assertLess(last, first * 1.05 + (8 << 20), "RSS grew during the soak")
        finally:
            self.assertEqual(server.stop(), 0)


def browser():
    """Headless Chromium driven by Selenium (Debian chromium + chromium-driver), or None."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


class Browser(unittest.TestCase):
    def test_web_page_transcribes_the_sample_pdf(self):
        driver = browser()
        if driver is None:
            self.skipTest("needs selenium (PyPI) and chromium + chromium-driver (Debian)")
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
        keys = tempfile.mktemp(prefix="uocr-keys-")
        with open(keys, "w") as f:
            f.write("browser-key\n")
        server = Server("--api-keys-file", keys)
        try:
            driver.get(server.url + "/")
            self.assertEqual(driver.title, "uocr")
            driver.find_element(By.ID, "key").send_keys("browser-key")
            driver.find_element(By.ID, "files").send_keys(PDF)
            driver.find_element(By.ID, "start").click()
            wait = WebDriverWait(driver, 120, poll_frequency=0.2)
            wait.until(lambda d: d.find_element(By.ID, "state").text == "succeeded")
            wait.until(lambda d: d.find_element(By.ID, "download").is_displayed())
            panes = driver.find_elements(By.CSS_SELECTOR, "#pages .markdown")
            self.assertEqual(len(panes), 3)
            expected = uocr_run([PDF], markdown=True).split("\n<PAGE>\n")
            self.assertEqual(panes[0].text.strip(), expected[0].replace("<PAGE>\n", "").strip())
            headings = [h.text for h in panes[1].find_elements(By.TAG_NAME, "h1")]
            self.assertEqual(headings, [l[2:] for l in expected[1].splitlines() if l.startswith("# ")])
            self.assertEqual(driver.find_element(By.ID, "counts").text.split(" / ")[0], "3")
            wait.until(lambda d: all(d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)
                                     for img in d.find_elements(By.CSS_SELECTOR, "#pages img")))
            self.assertEqual(driver.find_element(By.ID, "error").text, "")
        finally:
            driver.quit()
            self.assertEqual(server.stop(), 0)
            os.unlink(keys)


if __name__ == "__main__":
    unittest.main(verbosity=2)
