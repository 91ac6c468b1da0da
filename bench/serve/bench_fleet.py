"""A uocr fleet on this machine measured against `uocr run` on the same pages, in one run
(docs/SCALING.md).

    UOCR_CLI=build/tools/uocr UOCR_SOURCE_DIR=. python3 bench/serve/bench_fleet.py [--workers 1,2,3] [--threads N]

1. `uocr run` on the job set's documents one after another (the anchor): pages/s.
2. The same set (2 x 30 pages, 6 x 3 pages, 12 single pages: 20 jobs, 90 pages) through one API
   node and 1, 2, 3 workers (each OMP_NUM_THREADS=N, max_concurrency 1): seconds, pages/s,
   Redis commands per job.
3. A migration: a worker SIGKILLed on page 8 of a 30-page job, lease 3 s, a checkpoint every 64
   tokens: seconds from the kill until the other worker took the job, tokens decoded again,
   seconds the job took against an uninterrupted one.
Uses the fleet test's helpers (tests/serve/test_fleet.py): redis-server, requests, poppler-utils.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "serve"))
from test_fleet import RedisServer, Worker  # noqa: E402
from test_serve import CLI, MODEL, PAGES, PDF, Server, thirty_page_pdf, wait_job, wait_until  # noqa: E402

import requests  # noqa: E402


def submit(api, path):
    mime = "application/pdf" if path.endswith(".pdf") else "image/png"
    with open(path, "rb") as f:
        r = requests.post(f"{api.url}/v1/jobs", files={"file": (os.path.basename(path), f, mime)}, timeout=120)
    r.raise_for_status()
    return r.json()["id"]


def redis_calls(redis):
    stats = [l.split(":", 1) for l in redis.command("INFO", "commandstats").splitlines() if l.startswith("cmdstat_")]
    return {name[8:]: int(v.split(",")[0].split("=")[1]) for name, v in stats}


@contextlib.contextmanager
def fleet(workers, threads, *worker_options):
    """Redis, a storage folder, one API node and `workers` workers; all stopped at the end."""
    redis = RedisServer()
    store = tempfile.mkdtemp(prefix="uocr-bench-store-")
    api, ws = None, []
    try:
        api = Server("--queue", redis.url, "--storage", "file://" + store, "--max-concurrency", "1")
        ws = [Worker(redis, "file://" + store, f"b{i}", *worker_options, threads=threads) for i in range(workers)]
        yield redis, api, ws
    finally:
        for w in ws:
            w.stop()
        if api:
            api.stop()
        redis.stop()
        shutil.rmtree(store, ignore_errors=True)


def fleet_run(docs, workers, threads):
    with fleet(workers, threads) as (redis, api, _):
        redis.command("CONFIG", "RESETSTAT")
        t0 = time.time()
        ids = [submit(api, d) for d in docs]
        for i in ids:
            assert wait_job(api.url, i, seconds=1800)["state"] == "succeeded"
        seconds = time.time() - t0
        calls = redis_calls(redis)
        return seconds, sum(calls.values()) - calls.get("xreadgroup", 0) - calls.get("config|resetstat", 0), calls.get("xreadgroup", 0)


def migration(pdf30, threads):
    with fleet(2, threads, "--lease-seconds", "3", "--checkpoint-every-tokens", "64") as (redis, api, ws):
        t0 = time.time()
        plain = submit(api, pdf30)
        wait_job(api.url, plain, seconds=1800)
        uninterrupted = time.time() - t0
        t0 = time.time()
        job = submit(api, pdf30)

        def owner():
            h = redis.job(job)
            done = json.loads(h.get("progress", "{}")).get("pages_done", 0)
            return next((w for w in ws if w.name == h.get("owner") and done >= 8), None)
        victim = wait_until(owner, seconds=600, step=0.05)
        victim.proc.kill()
        killed = time.time()
        survivor = next(w for w in ws if w is not victim)
        wait_until(lambda: [l for l in survivor.events("job_taken") if l["id"] == job], seconds=600, step=0.05)
        taken_after = time.time() - killed
        assert wait_job(api.url, job, seconds=1800)["state"] == "succeeded"
        interrupted = time.time() - t0
        resumed = [l for l in survivor.events("job_resumed") if l["id"] == job][0]
        return uninterrupted, interrupted, taken_after, resumed["recomputed_tokens"], resumed["checkpoint_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each worker")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="uocr-bench-fleet-")
    try:
        pdf30 = thirty_page_pdf(folder)
        docs = [pdf30] * 2 + [PDF] * 6 + [PAGES[i % 3] for i in range(12)]
        pages = 2 * 30 + 6 * 3 + 12
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        t0 = time.time()
        for d in docs:
            subprocess.run([CLI, "run", "--model", MODEL, "-o", os.path.join(folder, "out.md"), d], check=True, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        anchor = time.time() - t0
        print(f"| setup ({os.cpu_count()} cores, {args.threads} thread(s) per process) | seconds | pages/s | vs uocr run | Redis commands per job (besides XREADGROUP polls) |")
        print("| --- | --- | --- | --- | --- |")
        print(f"| uocr run, the 20 documents one after another | {anchor:.1f} | {pages / anchor:.2f} | 1.00 | - |")
        for n in [int(x) for x in args.workers.split(",")]:
            seconds, calls, polls = fleet_run(docs, n, args.threads)
            print(f"| 1 API node + {n} worker(s), 20 jobs | {seconds:.1f} | {pages / seconds:.2f} | {anchor / seconds:.2f} | "
                  f"{calls / 20:.0f} ({polls} polls) |", flush=True)
        plain, hit, lag, recomputed, at = migration(pdf30, args.threads)
        print(f"\nmigration (30 pages, lease 3 s, checkpoint every 64 tokens, kill on page 8): taken {lag:.1f} s after the kill; "
              f"resumed at token {at}, {recomputed} tokens decoded again; job {hit:.1f} s vs {plain:.1f} s uninterrupted")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
