/* ocr: transcribes page images with the uocr C ABI, streaming tokens to stderr.
 *
 *   ocr [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...
 *
 * Prints the transcript and a newline on stdout; progress (token stream, layout blocks, the
 * summary) goes to stderr unless -q. Exit status 0 on success, 1 on any error. Plain C99. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uocr.h"

typedef struct {
    int quiet;
    long tokens;
} progress;

static int32_t on_event(const uocr_event * e, void * user_data) {
    progress * p = (progress *)user_data;
    if (e->type == UOCR_EVENT_TOKEN) {
        ++p->tokens;
        if (!p->quiet) fwrite(e->text, 1, e->text_len, stderr);
    } else if (e->type == UOCR_EVENT_BLOCK && !p->quiet) {
        fprintf(stderr, "\n[page %d block %s: %d,%d,%d,%d px]\n", (int)e->page, e->label, (int)e->box_px[0],
                (int)e->box_px[1], (int)e->box_px[2], (int)e->box_px[3]);
    }
    return 0; /* non-zero would cancel the run */
}

static int fail(const char * what, uocr_status st, const char * detail) {
    fprintf(stderr, "ocr: %s: %s (%s)\n", what, detail, uocr_status_string(st));
    return 1;
}

int main(int argc, char ** argv) {
    uocr_model_params mp;
    uocr_session_params sp;
    uocr_run_summary sum;
    uocr_model * model = NULL;
    uocr_session * session = NULL;
    progress prog = {0, 0};
    char * text = NULL;
    size_t len = 0;
    uocr_status st;
    int i = 1, rc = 1;

    uocr_session_params_init(&sp);
    for (; i < argc && argv[i][0] == '-'; ++i) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) sp.max_new_tokens = atol(argv[++i]);
        else if (!strcmp(argv[i], "-q")) prog.quiet = 1;
        else break;
    }
    if (argc - i < 2) {
        fprintf(stderr, "usage: ocr [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...\n");
        return 2;
    }
    if (uocr_api_version() < UOCR_API_VERSION) {
        fprintf(stderr, "ocr: libuocr %s is older than the header this program was built with\n",
                uocr_version_string());
        return 1;
    }

    uocr_model_params_init(&mp);
    st = uocr_model_load(argv[i], &mp, &model);
    if (st != UOCR_OK) return fail("loading the model", st, uocr_last_error());
    st = uocr_session_create(model, &sp, &session);
    if (st != UOCR_OK) {
        fail("creating the session", st, uocr_last_error());
        goto done;
    }
    uocr_model_free(model); /* the session keeps the model alive */
    model = NULL;
    for (++i; i < argc; ++i) {
        st = uocr_session_add_image_file(session, argv[i]);
        if (st != UOCR_OK) {
            fail("adding a page", st, uocr_session_last_error(session));
            goto done;
        }
    }
    uocr_run_summary_init(&sum);
    st = uocr_session_run(session, on_event, &prog, &sum);
    if (!prog.quiet) fputc('\n', stderr);
    if (st != UOCR_OK) {
        fail("running", st, uocr_session_last_error(session));
        goto done;
    }
    if (prog.tokens != sum.generated_tokens) {
        fprintf(stderr, "ocr: %ld token events but %lld generated tokens\n", prog.tokens, (long long)sum.generated_tokens);
        goto done;
    }
    st = uocr_session_text(session, NULL, 0, &len);
    if (st != UOCR_OK || (text = (char *)malloc(len + 1)) == NULL) {
        fail("reading the transcript", st, uocr_session_last_error(session));
        goto done;
    }
    st = uocr_session_text(session, text, len + 1, &len);
    if (st != UOCR_OK) {
        fail("reading the transcript", st, uocr_session_last_error(session));
        goto done;
    }
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    if (!prog.quiet)
        fprintf(stderr, "%lld pages, %lld visual + %lld prompt tokens, %lld generated (stop: %s), "
                        "vision %.2f s, prefill %.2f s, decode %.2f s, peak KV %llu bytes\n",
                (long long)sum.pages, (long long)sum.visual_tokens, (long long)sum.prompt_tokens,
                (long long)sum.generated_tokens, uocr_stop_reason_string(sum.stop_reason), sum.vision_seconds,
                sum.prefill_seconds, sum.decode_seconds, (unsigned long long)sum.peak_kv_bytes);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(text);
    uocr_session_free(session);
    uocr_model_free(model);
    return rc;
}
