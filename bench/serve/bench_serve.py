"""`uocr serve` measured against `uocr run` on the same pages, in one run (docs/SERVING.md).

    python3 bench/serve/bench_serve.py [--model DIR] [--pages N] [--max-tokens N] [--jobs 10,100,300]

1. `uocr run` on N single pages one after another (the anchor): pages/s, tokens/s.
2. The same N pages as N chat completions (streamed, as infer.py sends them) at concurrency 1, 4
   and 16: pages/s, tokens/s, time to first token p50/p95, the server's peak RSS.
3. Document jobs of 10, 100 and 300 pages (the sample PDF repeated): seconds, pages/s, peak RSS.
4. Overload: with every worker busy and the queue full, a burst of 80 requests from curl
   processes: how fast the 503s come.
Needs `requests` (PyPI) and poppler-utils; prints a Markdown table per part.
"""
import argparse
import base64
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [os.path.join(ROOT, "samples", "data", f"demo-page{i}.png") for i in (1, 2, 3)]
PDF = os.path.join(ROOT, "samples", "data", "demo-doc.pdf")


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))


class PeakRss:
    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss(self.pid))
            time.sleep(0.05)

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.peak


def start_server(cli, model, data, *options):
    log = open(os.path.join(data, "serve.log"), "w+")
    proc = subprocess.Popen([cli, "serve", "--model", model, "--port", "0", "--data-dir", data, "--served-model-name", "m", *options],
                            stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        log.seek(0)
        for line in log:
            if '"listening"' in line:
                return proc, f"http://127.0.0.1:{json.loads(line)['port']}"
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


def stop_server(proc):
    proc.terminate()
    proc.wait(timeout=120)


def chat(url, page, max_tokens):
    with open(page, "rb") as f:
        uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    body = {"model": "m", "stream": True, "temperature": 0, "images_config": {"image_mode": "base"},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "document parsing."},
                                                      {"type": "image_url", "image_url": {"url": uri}}]}]}
    if max_tokens:
        body["max_tokens"] = max_tokens
    t0 = time.time()
    first, tokens = None, 0
    with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and first is None:
                first = time.time() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return first or 0.0, tokens


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "tools", "uocr"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "uocr-demo"))
    ap.add_argument("--pages", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=0)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--jobs", default="10,100,300")
    ap.add_argument("--burst", action="store_true", default=True)
    ap.add_argument("--no-burst", dest="burst", action="store_false")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="uocr-bench-serve-")
    pages = [PAGES[i % 3] for i in range(args.pages)]
    try:
        # 1. the anchor: uocr run, one page after another
        limit = ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
        t0, tokens = time.time(), 0
        for p in pages:
            out = subprocess.run([args.cli, "run", "--model", args.model, "--mode", "base", "--stats", "json", *limit, p],
                                 capture_output=True, timeout=3600)
            tokens += json.loads(out.stderr.decode().strip().splitlines()[-1 if out.returncode == 0 else -2])["generated_tokens"]
        seconds = time.time() - t0
        print(f"| how | pages | seconds | pages/s | tokens/s | TTFT p50 | TTFT p95 | peak RSS |")
        print(f"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        print(f"| uocr run, one after another | {len(pages)} | {seconds:.1f} | {len(pages) / seconds:.2f} | {tokens / seconds:.1f} | | | |")
        sys.stdout.flush()

        # 2. the service at several concurrencies
        for c in [int(x) for x in args.concurrency.split(",")]:
            proc, url = start_server(args.cli, args.model, work, "--max-concurrency", str(c), "--queue-max-size", str(len(pages)))
            peak = PeakRss(proc.pid)
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(c) as pool:
                results = list(pool.map(lambda p: chat(url, p, args.max_tokens), pages))
            seconds = time.time() - t0
            most = peak.done()
            stop_server(proc)
            ttft = [r[0] for r in results]
            tokens = sum(r[1] for r in results)
            print(f"| uocr serve, concurrency {c} | {len(pages)} | {seconds:.1f} | {len(pages) / seconds:.2f} | {tokens / seconds:.1f} | "
                  f"{percentile(ttft, 0.5):.2f} s | {percentile(ttft, 0.95):.2f} s | {most / 2**20:.0f} MiB |")
            sys.stdout.flush()

        # 3. document jobs of growing length
        sizes = [int(x) for x in args.jobs.split(",") if x]
        if sizes:
            print("\n| job pages | seconds | pages/s | peak RSS | state |")
            print("| ---: | ---: | ---: | ---: | --- |")
        for n in sizes:
            pdf = os.path.join(work, f"doc{n}.pdf")
            copies = (n + 2) // 3
            subprocess.run(["pdfunite"] + [PDF] * copies + [pdf], check=True)
            proc, url = start_server(args.cli, args.model, work)
            peak = PeakRss(proc.pid)
            t0 = time.time()
            with open(pdf, "rb") as f:
                job = requests.post(f"{url}/v1/jobs", files={"file": f}, data={"pages": f"1-{n}"}, timeout=600).json()
            while job["state"] in ("queued", "running"):
                job = requests.get(f"{url}/v1/jobs/{job['id']}", params={"wait": 60}, timeout=120).json()
            seconds = time.time() - t0
            most = peak.done()
            stop_server(proc)
            print(f"| {n} | {seconds:.1f} | {n / seconds:.2f} | {most / 2**20:.0f} MiB | {job['state']} |")
            sys.stdout.flush()

        # 4. refusals under overload
        if args.burst:
            proc, url = start_server(args.cli, args.model, work, "--max-concurrency", "16", "--queue-max-size", "8")
            body = os.path.join(work, "burst.json")
            with open(body, "w") as f:
                content = [{"type": "text", "text": "Multi page parsing."}]
                for p in PAGES * 4:
                    with open(p, "rb") as img:
                        content.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(img.read()).decode()}})
                json.dump({"model": "m", "messages": [{"role": "user", "content": content}], "images_config": {"image_mode": "base"}}, f)
            curls = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "-H", "Content-Type: application/json",
                                       "--data-binary", "@" + body, f"{url}/v1/chat/completions"], stdout=subprocess.PIPE) for _ in range(80)]
            results = [c.communicate()[0].decode().split() for c in curls]
            stop_server(proc)
            refused = [float(t) for code, t in results if code == "503"]
            print(f"\nburst of 80 (16 running, 8 waiting): {len(results) - len(refused)} accepted, {len(refused)} refused with 503; "
                  f"refusal latency p50 {percentile(refused, 0.5) * 1000:.0f} ms, p99 {percentile(refused, 0.99) * 1000:.0f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
