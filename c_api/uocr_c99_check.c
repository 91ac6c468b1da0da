/* Compiled as -std=c99 -Wall -Wextra -Werror -pedantic by c_api/meson.build: proves uocr.h is
 * plain C99, and pins the struct layouts as a C compiler sees them (uocr.cpp pins the same
 * numbers as C++ sees them, so the two languages agree). */
#include "uocr.h"

#include <stddef.h>

/* C99 has no _Static_assert: a negative array size fails the build. */
#define UOCR_C99_ASSERT(name, cond) typedef char uocr_c99_assert_##name[(cond) ? 1 : -1]

UOCR_C99_ASSERT(model_params_size, sizeof(uocr_model_params) == 16);
UOCR_C99_ASSERT(model_info_size, sizeof(uocr_model_info) == 40);
UOCR_C99_ASSERT(summary_size, sizeof(uocr_run_summary) == 168);
UOCR_C99_ASSERT(summary_decode_passes, offsetof(uocr_run_summary, decode_passes) == 144);
UOCR_C99_ASSERT(summary_precision, offsetof(uocr_run_summary, precision) == 136);
UOCR_C99_ASSERT(summary_text_len, offsetof(uocr_run_summary, text_len) == 104);
UOCR_C99_ASSERT(summary_peak_bytes, offsetof(uocr_run_summary, peak_bytes) == 128);
UOCR_C99_ASSERT(summary_min, UOCR_RUN_SUMMARY_MIN_SIZE == 112);
UOCR_C99_ASSERT(session_params_max_new_tokens, offsetof(uocr_session_params, max_new_tokens) == 8);
UOCR_C99_ASSERT(session_params_size, sizeof(void *) != 8 || sizeof(uocr_session_params) == 192);
UOCR_C99_ASSERT(session_params_draft, sizeof(void *) != 8 || offsetof(uocr_session_params, draft) == 180);
UOCR_C99_ASSERT(session_params_precision, sizeof(void *) != 8 || offsetof(uocr_session_params, precision) == 176);
UOCR_C99_ASSERT(session_params_max_image_bytes, sizeof(void *) != 8 || offsetof(uocr_session_params, max_image_bytes) == 152);
UOCR_C99_ASSERT(session_params_max_jpeg_scans, sizeof(void *) != 8 || offsetof(uocr_session_params, max_jpeg_scans) == 160);
UOCR_C99_ASSERT(session_params_time_budget, sizeof(void *) != 8 || offsetof(uocr_session_params, page_time_budget_seconds) == 168);
UOCR_C99_ASSERT(session_params_slide_kv, sizeof(void *) != 8 || offsetof(uocr_session_params, slide_kv) == 144);
UOCR_C99_ASSERT(session_params_cuda_graphs, sizeof(void *) != 8 || offsetof(uocr_session_params, cuda_graphs) == 136);
UOCR_C99_ASSERT(session_params_max_batch, sizeof(void *) != 8 || offsetof(uocr_session_params, max_batch) == 120);
UOCR_C99_ASSERT(session_params_gate_beam, sizeof(void *) != 8 || offsetof(uocr_session_params, reference_gate_beam) == 132);
UOCR_C99_ASSERT(session_params_pages_per_group, sizeof(void *) != 8 || offsetof(uocr_session_params, pages_per_group) == 72);
UOCR_C99_ASSERT(session_params_checkpoint_path, sizeof(void *) != 8 || offsetof(uocr_session_params, checkpoint_path) == 104);
UOCR_C99_ASSERT(session_params_min, sizeof(void *) != 8 || UOCR_SESSION_PARAMS_MIN_SIZE == 56);
UOCR_C99_ASSERT(event_size, sizeof(void *) != 8 || sizeof(uocr_event) == 72);
UOCR_C99_ASSERT(event_box_px, sizeof(void *) != 8 || offsetof(uocr_event, box_px) == 56);
UOCR_C99_ASSERT(status_width, sizeof(uocr_status) == 4);

static int32_t on_event(const uocr_event * event, void * user_data) {
    (void)user_data;
    return event->type == UOCR_EVENT_TOKEN ? 0 : 1;
}

/* Takes the address of every function, so each prototype is checked against its use. */
int uocr_c99_check(void);
int uocr_c99_check(void) {
    uocr_model_params mp;
    uocr_session_params sp;
    uocr_run_summary sum;
    uocr_model_info info;
    uocr_model * model = NULL;
    uocr_session * session = NULL;
    char buf[8];
    size_t len = 0;
    int32_t pages = 0;
    static const uint8_t rgb[3] = {0, 0, 0};
    uocr_event_callback cb = on_event;

    uocr_model_params_init(&mp);
    uocr_session_params_init(&sp);
    uocr_run_summary_init(&sum);
    uocr_model_info_init(&info);
    if (uocr_api_version() < UOCR_API_VERSION || uocr_version_number() != UOCR_VERSION_NUMBER) return 1;
    (void)uocr_version_string();
    (void)uocr_build_info();
    (void)uocr_status_string(UOCR_E_INVALID_HANDLE);
    (void)uocr_stop_reason_string(UOCR_STOP_EOS);
    (void)uocr_last_error();
    if (uocr_model_load("model", &mp, &model) != UOCR_OK) return 1;
    (void)uocr_model_get_info(model, &info);
    (void)uocr_session_create(model, &sp, &session);
    (void)uocr_session_add_image_file(session, "page.png");
    (void)uocr_session_add_image_encoded(session, rgb, sizeof rgb);
    (void)uocr_session_add_image_rgb(session, rgb, 1, 1, 0);
    (void)uocr_session_page_count(session, &pages);
    (void)uocr_session_run(session, cb, NULL, &sum);
    (void)uocr_session_text(session, buf, sizeof buf, &len);
    (void)uocr_session_last_error(session);
    (void)uocr_session_clear_pages(session);
    uocr_session_free(session);
    uocr_model_free(model);
    return 0;
}
