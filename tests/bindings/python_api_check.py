"""Checks the ctypes binding's error paths, cancellation and callback exceptions (binding_python
covers the transcript). Usage: python_api_check.py MODEL_DIR IMAGE (UOCR_LIBRARY set)."""
import os
import sys

sys.path.insert(0, os.path.join(os.environ["UOCR_SOURCE_DIR"], "samples", "python"))
import uocr  # noqa: E402

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
    check(model.info().layers == 2, "model info")
    expect_error(lambda: model.session(temperature=-1.0), uocr.E_INVALID_ARGUMENT, "bad temperature")
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
print("python binding API checks: %d failures" % len(failures))
sys.exit(1 if failures else 0)
