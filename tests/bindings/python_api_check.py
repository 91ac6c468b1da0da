"""Checks the ctypes binding's error paths, cancellation and callback exceptions (binding_python
covers the transcript), and pages handed over one at a time (run_pages) with checkpoints.
Usage: PYTHONPATH=bindings/python UOCR_LIBRARY=BUILD/c_api/libuocr.so python_api_check.py MODEL_DIR IMAGE"""
import os
import sys
import tempfile

import uocr

model_dir, image = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


def expect_error(fn, status, what):
    try:
        fn()
    except uocr.Error as e:
        check(e.status == status, "%s: status %d, expected %d (%s)" % (what, e.status, status, e))
        return e
    check(False, "%s: no error raised" % what)


check(uocr.version().count(".") == 2, "version string")
expect_error(lambda: uocr.Model("/nonexistent/uocr-model"), uocr.E_IO, "missing model folder")
with uocr.Model(model_dir) as model:
    check(model.info().layers == 3, "model info")
    expect_error(lambda: model.session(temperature=-1.0), uocr.E_INVALID_ARGUMENT, "bad temperature")
    # API 4 fields reach the library (which checks them).
    expect_error(lambda: model.session(reference_gate_fan_out=1), uocr.E_INVALID_ARGUMENT, "bad gate fan-out")
    expect_error(lambda: model.session(max_batch=-1), uocr.E_INVALID_ARGUMENT, "bad max_batch")
    # API 5: out-of-range cuda_graphs is refused by name; off runs (the CPU ignores it).
    e = expect_error(lambda: model.session(cuda_graphs=3), uocr.E_INVALID_ARGUMENT, "bad cuda_graphs")
    check(e is not None and "cuda_graphs" in e.message, "cuda_graphs message")
    for graphs in (uocr.CUDA_GRAPHS_OFF, False):
        with model.session(max_new_tokens=4, cuda_graphs=graphs) as s:
            s.add_image_file(image)
            check(s.run().generated_tokens > 0, "cuda_graphs %r runs" % (graphs,))
    # API 7: model_defaults reaches the library (out of range refused by name; False runs).
    e = expect_error(lambda: model.session(model_defaults=2), uocr.E_INVALID_ARGUMENT, "bad model_defaults")
    check(e is not None and "model_defaults" in e.message, "model_defaults message")
    with model.session(max_new_tokens=4, model_defaults=False) as s:
        s.add_image_file(image)
        check(s.run().generated_tokens > 0, "model_defaults False runs")
    # API 8: slide_kv reaches the library (out of range refused by name; recompute runs).
    e = expect_error(lambda: model.session(slide_kv=3), uocr.E_INVALID_ARGUMENT, "bad slide_kv")
    check(e is not None and "slide_kv" in e.message, "slide_kv message")
    with model.session(max_new_tokens=4, slide_kv=uocr.SLIDE_KV_RECOMPUTE) as s:
        s.add_image_file(image)
        check(s.run().generated_tokens > 0, "slide_kv recompute runs")
    # API 9: the decode budget reaches the library (a page over max_image_bytes is refused, naming it).
    expect_error(lambda: model.session(max_jpeg_scans=-1), uocr.E_INVALID_ARGUMENT, "bad max_jpeg_scans")
    # API 10: the time budget per page, spent before the page is ready, stops the run before its first token.
    expect_error(lambda: model.session(page_time_budget_seconds=-1.0), uocr.E_INVALID_ARGUMENT, "bad page_time_budget_seconds")
    with model.session(max_new_tokens=8, page_time_budget_seconds=1e-9) as s:
        s.add_image_file(image)
        summary = s.run()
        check(summary.stop_reason == uocr.STOP_TIME_BUDGET and summary.generated_tokens == 0, "time budget stops the run")
        check(uocr.stop_reason_name(summary.stop_reason) == "time_budget", "time budget's stop reason name")
    # API 11/12: f32 by default, bf16 on request; the summary says which ran (f32 also where the
    # CPU has no bf16 dot products).
    expect_error(lambda: model.session(precision=2), uocr.E_INVALID_ARGUMENT, "bad precision")
    check(uocr.SessionParams.precision.offset == 176 and uocr.RunSummary.precision.offset == 136, "precision field offsets")
    with model.session(max_new_tokens=2, precision=uocr.PRECISION_BF16) as s:
        s.add_image_file(image)
        check(s.run().precision in (uocr.PRECISION_BF16, uocr.PRECISION_F32), "bf16 precision reported")
    with model.session(max_new_tokens=2) as s:
        s.add_image_file(image)
        check(s.run().precision == uocr.PRECISION_F32, "f32 by default")
    # API 13: an engine; its sessions run as the model's do, and refuse another engine choice.
    check(uocr.EngineParams.reserved0.offset == 28 and uocr.EngineInfo.driver.offset == 144, "engine field offsets")
    expect_error(lambda: uocr.Engine(model, backend=9), uocr.E_INVALID_ARGUMENT, "bad engine backend")
    expect_error(lambda: uocr.Engine(model, backend=uocr.BACKEND_VULKAN, max_batch=2), uocr.E_UNSUPPORTED,
                 "batching on Vulkan")
    with uocr.Engine(model, max_batch=2) as engine:
        info = engine.info()
        check(info.backend == uocr.BACKEND_CPU and info.device and info.precision == uocr.PRECISION_F32, "engine info")
        e = expect_error(lambda: engine.session(max_batch=3), uocr.E_INVALID_ARGUMENT, "another engine's batching")
        check(e is not None and "its engine runs" in e.message, "engine mismatch message")
        texts = []
        for on in (engine, model):
            with on.session(max_new_tokens=6) as s:
                s.add_image_file(image)
                s.run()
                texts.append(s.text())
        check(texts[0] and texts[0] == texts[1], "a session on an engine reads as one on the model")
    with model.session(max_new_tokens=4, max_image_bytes=1000) as s:
        e = expect_error(lambda: s.add_image_file(image), uocr.E_INVALID_IMAGE, "page over max_image_bytes")
        check(e is not None and "max_image_bytes" in e.message, "max_image_bytes message")
    with model.session(max_new_tokens=8) as s:
        e = expect_error(lambda: s.add_image_bytes(b"not an image"), uocr.E_INVALID_IMAGE, "undecodable bytes")
        check(e is not None and "cannot decode" in e.message, "decode message")
        expect_error(lambda: s.add_image_file("/nonexistent/page.png"), uocr.E_IO, "missing image file")
        expect_error(lambda: s.run(), uocr.E_INVALID_ARGUMENT, "run without pages")
        s.add_image_rgb(bytes(3 * 4 * 2), 4, 2)
        check(s.page_count() == 1, "page count")
        s.clear_pages()
        s.add_image_file(image)

        seen = []
        try:
            s.run(lambda ev: ev.type == uocr.EVENT_TOKEN and seen.append(ev.token_id) is None and len(seen) >= 3)
            check(False, "cancel: no exception")
        except uocr.Cancelled as c:
            check(c.status == uocr.E_CANCELLED, "cancel status")
            check(c.summary.stop_reason == uocr.STOP_CANCELLED, "cancel stop reason")
            check(c.summary.generated_tokens == 3 and len(seen) == 3, "cancel after 3 tokens")
            check(len(s.text()) == c.summary.text_len, "partial text length")
            m = c.summary
            check(m.scratch_bytes > 0 and m.peak_scratch_bytes >= m.scratch_bytes, "scratch bytes (API 3)")
            check(m.peak_bytes >= m.peak_kv_bytes + m.peak_scratch_bytes, "peak bytes (API 3)")

        class Boom(Exception):
            pass

        def explode(ev):
            raise Boom()

        try:
            s.run(explode)
            check(False, "callback exception not propagated")
        except Boom:
            pass
        summary = s.run()  # still usable, no callback
        check(summary.generated_tokens <= 8 and summary.pages == 1, "run after failures")
    s.close()  # second close is a no-op

    # Pages handed over one at a time: the same tokens as the same pages added up front, whether a
    # page comes as a path, encoded bytes or raw RGB.
    def tokens_of(run):
        ids = []
        run(lambda ev: ev.type == uocr.EVENT_TOKEN and ids.append(ev.token_id) and False)
        return ids

    with open(image, "rb") as f:
        png = f.read()
    rgb = bytes((7 * i) % 251 for i in range(3 * 64 * 48))
    with model.session(max_new_tokens=6) as s:
        s.add_image_file(image)
        s.add_image_rgb(rgb, 64, 48)
        s.add_image_bytes(png)
        up_front = tokens_of(s.run)
        sources = [image, (rgb, 64, 48), png]
        asked = []

        def get_page(index):
            asked.append(index)
            return sources[index]

        handed = tokens_of(lambda cb: s.run_pages(3, get_page, cb))
        check(handed == up_front and len(handed) == 6, "run_pages tokens %r vs %r" % (handed, up_front))
        check(asked == [0, 1, 2], "pages asked once each, in order: %r" % asked)
        check(s.page_count() == 3, "run_pages leaves the added pages alone")
        expect_error(lambda: s.run_pages(0, get_page), uocr.E_INVALID_ARGUMENT, "run_pages with no pages")
        expect_error(lambda: s.run_pages(2, lambda i: b"not an image"), uocr.E_INVALID_IMAGE, "undecodable page")

        class Missing(Exception):
            pass

        def failing(index):
            raise Missing()

        try:
            s.run_pages(2, failing)
            check(False, "page callback exception not propagated")
        except Missing:
            pass

    # API 14: page drafts. The transcript is the same with a draft (here the run's own text) and
    # without; the summary counts the passes; bad drafts and values are refused.
    check(uocr.SessionParams.draft.offset == 180 and uocr.RunSummary.decode_passes.offset == 144, "draft field offsets")
    expect_error(lambda: model.session(draft=2), uocr.E_INVALID_ARGUMENT, "bad draft")
    e = expect_error(lambda: model.session(draft_max_tokens=300), uocr.E_INVALID_ARGUMENT, "bad draft_max_tokens")
    check(e is not None and "draft_max_tokens" in str(e), "the draft_max_tokens message names it")
    with model.session(max_new_tokens=12, draft=False) as s:
        s.add_image_file(image)
        plain = s.run()
        plain_text = s.text()
        # a pass per token fed back: the last one is not, when max_new_tokens stops the run
        check(plain.decode_passes == plain.generated_tokens - 1 and plain.drafted_tokens == 0, "no draft: a pass per token")
    with model.session(max_new_tokens=12) as s:
        s.add_image_file(image)
        s.set_page_draft(0, plain_text)
        drafted = s.run()
        check(s.text() == plain_text, "a draft leaves the transcript as it is")
        check(drafted.decode_passes <= drafted.generated_tokens, "passes with a draft")
        expect_error(lambda: s.set_page_draft(1, "x"), uocr.E_INVALID_ARGUMENT, "draft of a page not added")
        s.run_pages(1, lambda i: image, get_draft=lambda i: plain_text)
        check(s.text() == plain_text, "run_pages with get_draft: the same transcript")

    # Page groups that slide, with a checkpoint: cancelled, then resumed from it.
    ckpt = os.path.join(tempfile.mkdtemp(prefix="uocr_py_"), "run.ckpt")
    params = dict(max_new_tokens=24, pages_per_group=2, page_fallback_tokens=5)
    with model.session(**params) as s:
        full = tokens_of(lambda cb: s.run_pages(3, get_page, cb))
    with model.session(checkpoint_path=ckpt, checkpoint_every_tokens=4, **params) as s:
        seen = []
        try:
            s.run_pages(3, get_page, lambda ev: ev.type == uocr.EVENT_TOKEN and seen.append(ev.token_id) is None
                        and len(seen) >= 14)
            check(False, "checkpointed run: no cancel")
        except uocr.Cancelled:
            pass
        check(seen == full[:14], "checkpointed run follows the same tokens")
    with model.session(checkpoint_path=ckpt, checkpoint_every_tokens=4, resume=True, **params) as s:
        rest = tokens_of(lambda cb: s.run_pages(3, get_page, cb))
        check(rest == full[12:], "resumed from token 12: %r vs %r" % (rest, full[12:]))
    with model.session(checkpoint_path=ckpt, resume=True, max_new_tokens=24, pages_per_group=3) as s:
        e = expect_error(lambda: s.run_pages(3, get_page), uocr.E_INVALID_ARGUMENT, "checkpoint of other parameters")
        check(e is not None and "other parameters" in e.message, "mismatch message")
    os.remove(ckpt)
    os.rmdir(os.path.dirname(ckpt))
print("python binding API checks: %d failures" % len(failures))
sys.exit(1 if failures else 0)
