/*
 * uocr.h: the C ABI of uocr, an on-device runner for the Unlimited-OCR / DeepSeek-OCR models.
 *
 * This is the only header FFI users need (C, Rust, C#, Python ctypes, ...). It compiles as C99
 * and as C++; it exposes opaque handles, fixed-width POD structs, int32 status codes and one
 * callback type, and nothing else. See c_api/README.md for the full contract; the essentials:
 *
 *   uocr_model_params mp;   uocr_model_params_init(&mp);
 *   uocr_model * model = NULL;
 *   if (uocr_model_load("models/tiny", &mp, &model) != UOCR_OK) puts(uocr_last_error());
 *   uocr_session_params sp; uocr_session_params_init(&sp);
 *   sp.max_new_tokens = 512;
 *   uocr_session * s = NULL;
 *   uocr_session_create(model, &sp, &s);
 *   uocr_session_add_image_file(s, "page.png");
 *   uocr_run_summary sum;   uocr_run_summary_init(&sum);
 *   uocr_session_run(s, on_event, user_data, &sum);    (on_event may be NULL)
 *   size_t n = 0; uocr_session_text(s, NULL, 0, &n);   (then a buffer of n + 1 bytes)
 *   uocr_session_free(s); uocr_model_free(model);      (any order)
 *
 * Threading. A model is immutable once loaded: every uocr_model_* function and
 * uocr_session_create may be called on one model from many threads at once. A session is used
 * by one thread at a time ("thread-safe on distinct sessions"); a second, concurrent call on
 * the same session, or a call on a session from inside its own event callback, is refused with
 * UOCR_E_BUSY rather than corrupting it (best effort, not a licence to share sessions).
 * Each function below states which rule applies.
 *
 * Errors. Functions return uocr_status: UOCR_OK (0), a negative error, never an exception,
 * abort or exit. The message of the last status-returning call made by the calling thread is
 * uocr_last_error(); a session additionally keeps the message of the last call made on it,
 * uocr_session_last_error(). On failure, out-parameters are left untouched unless the function
 * says otherwise (handle-returning functions set *out to NULL).
 *
 * Versions. UOCR_API_VERSION grows by one whenever a function, constant or struct field is
 * added; nothing is ever removed, reordered or renumbered within one soname. Structs passed in
 * carry struct_size, so a program built against an older header (smaller structs) keeps
 * working with a newer library; uocr_model_params.api_version lets an older library refuse a
 * newer header with UOCR_E_VERSION_MISMATCH instead of misreading it. The uocr_*_init(p) of
 * this header are macros over uocr_*_init_sized(p, sizeof *p): the library writes no more than
 * the caller's struct holds, however new the library is (FFI bindings call the _sized functions
 * with their own struct size).
 *
 * Strings are UTF-8. Paths are UTF-8 on every platform.
 */
#ifndef UOCR_H
#define UOCR_H

#include <stddef.h>
#include <stdint.h>

/* ---- export macro ------------------------------------------------------------------------ */
/* UOCR_BUILD is defined while the library itself is compiled; UOCR_STATIC by users of a static
 * build. Everything not marked UOCR_API is hidden. */
#if defined(_WIN32) || defined(__CYGWIN__)
#  if defined(UOCR_STATIC)
#    define UOCR_API
#  elif defined(UOCR_BUILD)
#    define UOCR_API __declspec(dllexport)
#  else
#    define UOCR_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define UOCR_API __attribute__((visibility("default")))
#else
#  define UOCR_API
#endif

/* ---- versions ---------------------------------------------------------------------------- */
#define UOCR_VERSION_MAJOR 0
#define UOCR_VERSION_MINOR 1
#define UOCR_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch */
#define UOCR_VERSION_NUMBER (UOCR_VERSION_MAJOR * 10000 + UOCR_VERSION_MINOR * 100 + UOCR_VERSION_PATCH)
/* Incremented by every addition to this header; compared with uocr_api_version() at run time. */
#define UOCR_API_VERSION 14

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------------------------ */
/* 0 is success; negative values are errors. -1..-99 mirror uocr::Status of the C++ core one to
 * one; -100 and below exist only in the C ABI. Codes are never renumbered or reused. */
typedef int32_t uocr_status;

#define UOCR_OK 0
#define UOCR_E_INVALID_ARGUMENT (-1)  /* NULL pointer, bad size, value out of range */
#define UOCR_E_IO (-2)                /* a file could not be opened or read */
#define UOCR_E_INVALID_MODEL (-3)     /* the model folder is malformed or inconsistent */
#define UOCR_E_INVALID_IMAGE (-4)     /* the image bytes cannot be decoded, or are too large */
#define UOCR_E_UNSUPPORTED (-5)       /* valid, but not supported by this build or model */
#define UOCR_E_OUT_OF_MEMORY (-6)
#define UOCR_E_TOKENIZER (-7)
#define UOCR_E_CANCELLED (-8)         /* the event callback asked to stop (see uocr_session_run) */
#define UOCR_E_INTERNAL (-9)          /* a bug: please report the message */
#define UOCR_E_INVALID_HANDLE (-100)  /* not a live handle of the expected kind (freed, or garbage) */
#define UOCR_E_VERSION_MISMATCH (-101) /* the header the caller was built with is newer than the library */
#define UOCR_E_BUSY (-102)            /* the session is already in a call (callback re-entry, second thread) */
#define UOCR_E_BUFFER_TOO_SMALL (-103) /* the caller's buffer cannot hold the result; the size is reported */

/* ---- opaque handles ---------------------------------------------------------------------- */
typedef struct uocr_model uocr_model;     /* weights + tokenizer + config; immutable, shareable */
typedef struct uocr_session uocr_session; /* pages + one transcription at a time; one thread */
typedef struct uocr_engine uocr_engine;   /* (API 13) a model on one backend device; shareable */

/* ---- library information (all thread-safe, never fail) ------------------------------------- */

/* "MAJOR.MINOR.PATCH" of the library (static storage). */
UOCR_API const char * uocr_version_string(void);
/* UOCR_VERSION_NUMBER of the library. */
UOCR_API int32_t uocr_version_number(void);
/* UOCR_API_VERSION of the library: a caller built with a larger value uses things it lacks. */
UOCR_API int32_t uocr_api_version(void);
/* One line describing how the library was built: backend(s), OpenMP, compiler (static storage). */
UOCR_API const char * uocr_build_info(void);
/* A short English name for a status ("ok", "invalid argument", ...); "unknown status" for
 * values this library does not know. Static storage. */
UOCR_API const char * uocr_status_string(uocr_status status);
/* Detail of the last status-returning call made by the calling thread: "" after a success, a
 * message after a failure. Never NULL. Valid until the calling thread's next uocr_* call. */
UOCR_API const char * uocr_last_error(void);

/* ---- model --------------------------------------------------------------------------------- */

typedef struct uocr_model_params {
    uint32_t struct_size; /* sizeof(uocr_model_params), set by _init */
    uint32_t api_version; /* UOCR_API_VERSION of the caller's header, set by _init */
    uint32_t flags;       /* reserved, must be 0 */
    uint32_t reserved0;   /* must be 0 */
    /* append-only below this line */
} uocr_model_params;

/* Smallest struct_size any library accepts for uocr_model_params. */
#define UOCR_MODEL_PARAMS_MIN_SIZE ((uint32_t)sizeof(uocr_model_params))

/* Fills defaults into min(struct_size, sizeof(uocr_model_params)) bytes of `p` and sets its
 * struct_size to that count; api_version is the library's UOCR_API_VERSION, which the
 * header's uocr_model_params_init replaces by its own (thread-safe; NULL is ignored). */
UOCR_API void uocr_model_params_init_sized(uocr_model_params * p, uint32_t struct_size);
static inline void uocr_model_params_init_here_(uocr_model_params * p) {
    uocr_model_params_init_sized(p, (uint32_t)sizeof(*p));
    if (p) p->api_version = UOCR_API_VERSION; /* the caller's header, not the library's */
}
#define uocr_model_params_init(p) uocr_model_params_init_here_(p)
/* API 1-2 entry point kept for binaries built against those headers: fills the API-2 layout. */
UOCR_API void (uocr_model_params_init)(uocr_model_params * p);

/* Loads a model folder (config.json, tokenizer.json, *.safetensors). `params` may be NULL for
 * defaults. On success *out_model is a new handle owned by the caller (uocr_model_free); on
 * failure *out_model is set to NULL (when out_model is not NULL).
 * Errors: INVALID_ARGUMENT (NULL dir/out_model, bad struct_size, flags), VERSION_MISMATCH
 * (params->api_version newer than this library), IO, INVALID_MODEL, UNSUPPORTED, TOKENIZER,
 * OUT_OF_MEMORY. Thread-safe. */
UOCR_API uocr_status uocr_model_load(const char * dir, const uocr_model_params * params, uocr_model ** out_model);

/* Releases the caller's reference. Sessions created from the model keep it alive, so models and
 * sessions may be freed in any order. NULL is a no-op. Not thread-safe with other calls on the
 * same handle (the handle must not be in use by another thread when it is freed). */
UOCR_API void uocr_model_free(uocr_model * model);

typedef struct uocr_model_info {
    uint32_t struct_size;   /* set by the caller (uocr_model_info_init) */
    int32_t hidden_size;    /* decoder hidden size */
    int32_t layers;         /* decoder layers */
    int32_t vocab_size;
    int32_t sliding_window; /* R-SWA window from config.json; 0 when the config has none */
    int32_t image_size;     /* page view size in pixels (1024 for the released models) */
    int32_t max_positions;  /* context length */
    int32_t bos_id;
    int32_t eos_id;
    int32_t image_token_id;
    /* append-only below this line */
} uocr_model_info;

#define UOCR_MODEL_INFO_MIN_SIZE ((uint32_t)sizeof(uocr_model_info))

/* Fills defaults into min(struct_size, sizeof(uocr_model_info)) bytes of `info` and sets its
 * struct_size to that count (thread-safe; NULL is ignored). */
UOCR_API void uocr_model_info_init_sized(uocr_model_info * info, uint32_t struct_size);
#define uocr_model_info_init(info) uocr_model_info_init_sized((info), (uint32_t)sizeof(*(info)))
/* API 1-2 entry point kept for binaries built against those headers: fills the API-2 layout. */
UOCR_API void (uocr_model_info_init)(uocr_model_info * info);

/* Writes min(info->struct_size, sizeof(uocr_model_info)) bytes of information (struct_size
 * itself is kept). Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL info, struct_size below
 * UOCR_MODEL_INFO_MIN_SIZE). Thread-safe. */
UOCR_API uocr_status uocr_model_get_info(const uocr_model * model, uocr_model_info * info);

/* ---- session ------------------------------------------------------------------------------- */

#define UOCR_IMAGE_MODE_BASE 0   /* one 1024x1024 view per page */
#define UOCR_IMAGE_MODE_GUNDAM 1 /* global view + 640 px tiles (single page only) */

/* Compute backends (uocr_session_params.backend). One that is not built into the library, or a
 * device index that does not exist, makes uocr_session_create fail with UOCR_E_UNSUPPORTED and
 * a message naming the backend and the devices found. Never a silent fallback to the CPU. */
#define UOCR_BACKEND_CPU 0
#define UOCR_BACKEND_VULKAN 1
#define UOCR_BACKEND_CUDA 2

typedef struct uocr_session_params {
    uint32_t struct_size;    /* sizeof(uocr_session_params), set by _init */
    int32_t image_mode;      /* UOCR_IMAGE_MODE_*; default BASE. Several pages always use BASE */
    int64_t max_new_tokens;  /* 0: until EOS or the context limit; default 0 */
    const char * prompt;     /* NULL or "": upstream's prompt; else must contain one "<image>". Copied */
    int32_t window;          /* R-SWA window; -1: the model's (128 if none); 0: full attention */
    float temperature;       /* 0: greedy (default) */
    float top_p;             /* (0, 1]; default 1 */
    int32_t ngram_size;      /* no-repeat n-gram size; 0 disables; default 35 */
    uint64_t seed;           /* sampling seed; default 0 */
    int32_t ngram_window;    /* -1: 128 for one page, 1024 for several (default); else > 0 */
    int32_t loop_guard;      /* 1: stop degenerate loops (default); 0: off */
    /* ---- UOCR_SESSION_PARAMS_MIN_SIZE ends here: every caller provides the fields above ----
     * Fields below are optional: a caller with a shorter struct gets their defaults. Each one
     * uses 0 for "default", so a newer caller that leaves them zeroed works with this library. */
    uint64_t max_image_pixels; /* decode limit per page (width x height); 0: 100000000. See max_image_bytes */
    int32_t backend;           /* UOCR_BACKEND_*; 0: CPU (default). uocr_build_info() lists those built in */
    int32_t device_index;      /* the backend's device; 0: the first (Vulkan: the loader's device order) */
    /* Documents of any length (page groups and SR-SWA, see README.md). A document of at most
     * pages_per_group pages is decoded exactly as one-shot R-SWA. */
    int32_t pages_per_group;   /* pages whose KV is held at once, >= 2; 0: the model's (see model_defaults), else 4 */
    int32_t overlap_pages;     /* pages kept (KV reused) when the group slides, 1..G-1; 0: the model's, else G - 1 */
    int32_t page_fallback_tokens; /* slide after this many tokens without a "<PAGE>" marker; 0: 4096; -1: never */
    int32_t reference_mode;    /* UOCR_REFERENCE_DENSE (0, default) or UOCR_REFERENCE_SPARSE (SR-SWA) */
    int32_t reference_pages;   /* SR-SWA pages a step consults; 0: 4; -1: all */
    int32_t reference_blocks;  /* SR-SWA blocks a step attends to; 0: 64; -1: all */
    int32_t reference_block_tokens; /* SR-SWA visual tokens per block; 0: 16 */
    int32_t positions;         /* UOCR_POSITIONS_LIMIT (0, default: the model's), _EXTRAPOLATE or (API 6) _GROUP */
    /* Crash-safe resume (see uocr_session_run). */
    const char * checkpoint_path; /* NULL or "": no checkpoints; else the state is saved there. Copied */
    int32_t checkpoint_every_tokens; /* also every N generated tokens; 0: after the prefill and at page boundaries */
    int32_t resume;            /* 1: the next run continues from checkpoint_path; 0 (default): starts afresh */
    /* API 4: continuous batching (CPU, CUDA). Sessions of one model and backend device created
     * with the same two values and run in different threads have their decode steps computed
     * together, the weights read once per step for all of them; each gets the tokens it would
     * get alone (bit for bit on the CPU). */
    int32_t max_batch;         /* sessions per batched step; 0 or 1: off (default); UNSUPPORTED on Vulkan */
    int32_t max_batch_wait_us; /* longest a step waits for the other sessions' steps; 0: 1000; -1: no wait */
    /* API 4: the SR-SWA page gate, a tree over the pages searched from the top (README.md). */
    int32_t reference_gate_fan_out; /* pages per gate-tree node and nodes per node above; 0: 4; else >= 2 */
    int32_t reference_gate_beam;    /* gate nodes kept per tree level; 0: twice reference_pages */
    /* API 5: CUDA graphs (CUDA backend; the others ignore it). Decode steps replay captured
     * graphs, saving launch overhead; the logits are the same either way. */
    int32_t cuda_graphs;       /* UOCR_CUDA_GRAPHS_*; 0: default (on) */
    /* API 7: a model folder may suggest page-group settings (uocr_decode.json: pages_per_group,
     * overlap_pages, positions; c_api/README.md). With UOCR_MODEL_DEFAULTS_USE, pages_per_group,
     * overlap_pages and positions left 0 take its values (the overlap only with its group size);
     * a folder without the file changes nothing. */
    int32_t model_defaults;    /* UOCR_MODEL_DEFAULTS_*; 0: USE (default) */
    /* API 8: what a slide of the page group does with the KV it keeps (README.md): reuse it
     * (upstream's infinite decoding) or compute the group again as a fresh G-page document. */
    int32_t slide_kv;          /* UOCR_SLIDE_KV_*; 0: the model folder's (model_defaults), else REUSE */
    /* API 9: the rest of a page's decode budget. With max_image_pixels it is checked from the
     * image's header before any pixel is decoded (INVALID_IMAGE naming the limit); the defaults
     * fit an A3 page scanned at 600 dpi in any sample format. */
    uint64_t max_image_bytes;  /* width x height x channels x bytes per sample as the file stores them
                                * (16-bit: 2, HDR: 4), also the largest image file read; 0: 2^30 (1 GiB) */
    int32_t max_jpeg_scans;    /* scans of one JPEG (a progressive scan is a pass over the image); 0: 100 */
    /* API 10: the time a run may take per page of its document: decoding, encoding, prefill and
     * generation. A run of N pages stops once it has taken N times this, between two tokens or
     * while a page is prepared (a page callback's image decoded, a page encoded or prefilled),
     * with stop_reason UOCR_STOP_TIME_BUDGET (status OK): the text so far and the last checkpoint are kept, and a
     * resumed run gets the budget afresh. 0 (default): none; negative or not finite: INVALID_ARGUMENT. */
    double page_time_budget_seconds;
    /* API 11: the arithmetic of the vision encoder's and the prefill's large matrix products.
     * F32 is the reference; BF16 (CPU backend, CPUs with AVX-512 BF16) rounds their inputs to
     * bf16 and sums in float32, as upstream runs: faster than F32 where the CPU's float32 FMAs are
     * single-ported, slower where they are not (docs/PERFORMANCE.md).
     * Decode steps are F32 either way. Vulkan and CUDA run F32 whatever is asked; the session's
     * engine info reports what ran. Changes the tokens: a checkpoint resumes only with the
     * precision it ran in. A struct of API 10 or older runs F32. */
    int32_t precision;         /* UOCR_PRECISION_*; _init: F32 */
    /* API 14: draft decoding. A page's draft text (uocr_session_set_page_draft,
     * uocr_page_set_draft: an earlier OCR pass, a PDF's text layer, a previous revision) proposes
     * the next tokens and one decoder pass verifies several of them. The transcript is exactly
     * the one decoding without drafts writes, token for token; a draft only saves passes where
     * it is right. Greedy decoding (temperature 0) on the CPU and Vulkan backends (batched
     * sessions verify outside the batch); elsewhere it is off (uocr_run_summary's decode_passes
     * says what ran). */
    int32_t draft;             /* UOCR_DRAFT_*; 0: ON (was reserved_api11, which had to be 0) */
    int32_t draft_max_tokens;  /* the most tokens one pass verifies; 0: 16; else 1..256 */
    int32_t reserved_api14;    /* must be 0 */
    /* append-only below this line */
} uocr_session_params;

#define UOCR_REFERENCE_DENSE 0  /* every step attends to the whole held reference (exact R-SWA) */
#define UOCR_REFERENCE_SPARSE 1 /* SR-SWA: a page gate + block selection per step (faster, approximate) */
#define UOCR_POSITIONS_LIMIT 0       /* refuse documents past the model's context length, as upstream */
#define UOCR_POSITIONS_EXTRAPOLATE 1 /* allow positions past it (up to 2^24; quality unmeasured there) */
/* API 6: every page group at the positions of a document of G pages (its pages, the prompt, the
 * text of its pages), re-based at each slide: bounded positions at any length, but not upstream's
 * one-shot numbering once the group slides (README.md). */
#define UOCR_POSITIONS_GROUP 2
#define UOCR_PRECISION_F32 0  /* (API 11) float32 products, the reference */
#define UOCR_PRECISION_BF16 1 /* (API 11) bf16 inputs, float32 sums (CPU backend) */
#define UOCR_MODEL_DEFAULTS_USE 0    /* fields left 0 take the model folder's uocr_decode.json */
#define UOCR_MODEL_DEFAULTS_IGNORE 1 /* the library's defaults (upstream's), whatever the folder says */
#define UOCR_SLIDE_KV_DEFAULT 0   /* API 8: the model folder's uocr_decode.json, else REUSE */
#define UOCR_SLIDE_KV_REUSE 1     /* kept pages' and window's KV as they are */
#define UOCR_SLIDE_KV_RECOMPUTE 2 /* held pages, prompt tail and window computed again at each slide */
#define UOCR_CUDA_GRAPHS_DEFAULT 0 /* on */
#define UOCR_CUDA_GRAPHS_ON 1
#define UOCR_CUDA_GRAPHS_OFF 2       /* every decode step launches its kernels one by one */
#define UOCR_DRAFT_ON 0  /* (API 14) verify the pages' draft texts where there are any */
#define UOCR_DRAFT_OFF 1 /* one decoder pass per token */

#define UOCR_SESSION_PARAMS_MIN_SIZE ((uint32_t)offsetof(uocr_session_params, max_image_pixels))

/* Fills defaults into min(struct_size, sizeof(uocr_session_params)) bytes of `p` and sets its
 * struct_size to that count (thread-safe; NULL is ignored). */
UOCR_API void uocr_session_params_init_sized(uocr_session_params * p, uint32_t struct_size);
#define uocr_session_params_init(p) uocr_session_params_init_sized((p), (uint32_t)sizeof(*(p)))
/* API 1-2 entry point kept for binaries built against those headers: fills the API-2 layout. */
UOCR_API void (uocr_session_params_init)(uocr_session_params * p);

/* Creates an empty session on `model` (which it keeps alive). `params` may be NULL for defaults;
 * otherwise min(struct_size, sizeof) bytes are read over the defaults. A struct_size below
 * UOCR_SESSION_PARAMS_MIN_SIZE is INVALID_ARGUMENT; bytes beyond this library's struct must be
 * zero (else UNSUPPORTED). On failure *out_session is set to NULL (when not NULL).
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT, UNSUPPORTED, OUT_OF_MEMORY.
 * Thread-safe (many threads may create sessions on one model concurrently). */
UOCR_API uocr_status uocr_session_create(const uocr_model * model, const uocr_session_params * params,
                                         uocr_session ** out_session);

/* ---- engines (API 13) ------------------------------------------------------------------------
 * An engine is a model opened on one backend device: the device, the weights uploaded to it, the
 * vision encoder there and, with max_batch > 1, the batcher that computes the decode steps of its
 * sessions together. Open one per device and create every session on it: they share all of that.
 * uocr_session_create opens engines itself, one per model handle and distinct backend, device,
 * max_batch, max_batch_wait_us, cuda_graphs and precision, kept until the model handle is freed
 * (how sessions of one model shared a device's weights before API 13). */

typedef struct uocr_engine_params {
    uint32_t struct_size;      /* sizeof(uocr_engine_params), set by _init */
    int32_t backend;           /* UOCR_BACKEND_*; 0: CPU (default) */
    int32_t device_index;      /* the backend's device; 0: the first */
    int32_t max_batch;         /* sessions per batched step; 0 or 1: off (default); UNSUPPORTED on Vulkan */
    int32_t max_batch_wait_us; /* longest a step waits for the other sessions' steps; 0: 1000; -1: no wait */
    int32_t cuda_graphs;       /* UOCR_CUDA_GRAPHS_*; 0: default (on) */
    int32_t precision;         /* UOCR_PRECISION_*; as uocr_session_params.precision */
    int32_t reserved0;         /* must be 0 */
    /* append-only below this line */
} uocr_engine_params;

#define UOCR_ENGINE_PARAMS_MIN_SIZE ((uint32_t)sizeof(uocr_engine_params))

/* Fills defaults into min(struct_size, sizeof(uocr_engine_params)) bytes of `p` and sets its
 * struct_size to that count (thread-safe; NULL is ignored). */
UOCR_API void uocr_engine_params_init_sized(uocr_engine_params * p, uint32_t struct_size);
#define uocr_engine_params_init(p) uocr_engine_params_init_sized((p), (uint32_t)sizeof(*(p)))

/* Opens `model` on the device `params` names (NULL: defaults, the CPU) and uploads what the
 * device needs. The engine keeps the model alive. On failure *out_engine is set to NULL (when not
 * NULL). Errors: INVALID_HANDLE, INVALID_ARGUMENT, UNSUPPORTED (a backend not built in, with the
 * ones that are; no such device, with the devices found; batching on Vulkan), OUT_OF_MEMORY.
 * Thread-safe. */
UOCR_API uocr_status uocr_engine_open(const uocr_model * model, const uocr_engine_params * params,
                                      uocr_engine ** out_engine);

/* Releases the caller's reference: the sessions created on the engine keep what they use, so
 * engines, sessions and models may be freed in any order. NULL is a no-op. Not thread-safe with
 * other calls on the same handle. */
UOCR_API void uocr_engine_free(uocr_engine * engine);

typedef struct uocr_engine_info {
    uint32_t struct_size;  /* set by the caller (uocr_engine_info_init) */
    int32_t backend;       /* UOCR_BACKEND_* */
    int32_t device_index;
    int32_t precision;     /* UOCR_PRECISION_* its large products compute in: BF16 only where it was
                            * asked for and the backend and CPU have it */
    char device[128];      /* the device's name (CPU: its model name), NUL-terminated, cut to fit */
    char driver[64];       /* the driver's version; "" without one (CPU) */
    /* append-only below this line */
} uocr_engine_info;

#define UOCR_ENGINE_INFO_MIN_SIZE ((uint32_t)sizeof(uocr_engine_info))

UOCR_API void uocr_engine_info_init_sized(uocr_engine_info * info, uint32_t struct_size);
#define uocr_engine_info_init(info) uocr_engine_info_init_sized((info), (uint32_t)sizeof(*(info)))

/* Writes min(info->struct_size, sizeof(uocr_engine_info)) bytes (struct_size itself is kept).
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL info, struct_size below
 * UOCR_ENGINE_INFO_MIN_SIZE). Thread-safe. */
UOCR_API uocr_status uocr_engine_get_info(const uocr_engine * engine, uocr_engine_info * info);

/* As uocr_session_create, on `engine` (its model, its device): `params` as there, but their
 * backend, device_index, max_batch, max_batch_wait_us, cuda_graphs and precision are either all
 * left at their defaults (the engine's are used) or all the engine's; anything else is
 * INVALID_ARGUMENT naming both. Errors: those of uocr_session_create. Thread-safe. */
UOCR_API uocr_status uocr_session_create_on_engine(uocr_engine * engine, const uocr_session_params * params,
                                                   uocr_session ** out_session);

/* Frees a session. NULL is a no-op. Refused (and recorded in uocr_last_error) when called on a
 * session that is busy, e.g. from inside its own event callback. Not thread-safe on the same
 * session. Use after free is undefined behaviour; freed handles are detected and rejected with
 * UOCR_E_INVALID_HANDLE in the common cases (the address was not reused by a new handle). */
UOCR_API void uocr_session_free(uocr_session * session);

/* Message of the last call made on this session: "" after a success. Never NULL; valid until the
 * next call on the session. For an invalid handle, a static message saying so. A call refused
 * with UOCR_E_BUSY does not touch it (the message is in the refused thread's uocr_last_error).
 * Same thread rules as the session. */
UOCR_API const char * uocr_session_last_error(const uocr_session * session);

/* Adding pages. Each call decodes the image now (so an undecodable image is reported by the call
 * that adds it) and appends one page; on failure the session's pages are unchanged.
 * Errors: INVALID_HANDLE, BUSY, INVALID_ARGUMENT (NULL pointers, sizes, a stride larger than
 * any buffer), IO (a file that cannot be read: missing, or not a regular file, e.g. a directory,
 * FIFO or device), INVALID_IMAGE (cannot decode, or over max_image_pixels, max_image_bytes, which
 * also caps the file, or max_jpeg_scans), OUT_OF_MEMORY. Thread-safe on distinct sessions. */

/* A PNG/JPEG/BMP/GIF/TGA/PNM/PSD file; EXIF orientation is applied as upstream's PIL loader. */
UOCR_API uocr_status uocr_session_add_image_file(uocr_session * session, const char * path);
/* The same formats, held in memory by the caller (copied; `data` may be freed after the call). */
UOCR_API uocr_status uocr_session_add_image_encoded(uocr_session * session, const void * data, size_t size);
/* Interleaved 8-bit R,G,B rows; `stride` is the byte distance between rows (0: 3 * width).
 * Copied. */
UOCR_API uocr_status uocr_session_add_image_rgb(uocr_session * session, const uint8_t * rgb, int32_t width,
                                                int32_t height, size_t stride);
/* (API 14) The draft text of page `index` (0-based, of the pages added so far): UTF-8 text that
 * another reader gives for that page (see uocr_session_params.draft); `size` bytes, copied. A
 * second call replaces it; size 0 removes it. Errors: INVALID_HANDLE, BUSY, INVALID_ARGUMENT
 * (index not a page added, text NULL with size > 0). Thread-safe on distinct sessions. */
UOCR_API uocr_status uocr_session_set_page_draft(uocr_session * session, int32_t index, const char * text, size_t size);
/* Removes every page (and its draft). Errors: INVALID_HANDLE, BUSY. Thread-safe on distinct sessions. */
UOCR_API uocr_status uocr_session_clear_pages(uocr_session * session);
/* Number of pages added. Errors: INVALID_HANDLE, BUSY, INVALID_ARGUMENT (NULL out). */
UOCR_API uocr_status uocr_session_page_count(const uocr_session * session, int32_t * out_count);

/* ---- events -------------------------------------------------------------------------------- */

#define UOCR_EVENT_TOKEN 1 /* one generated token */
#define UOCR_EVENT_PAGE 2  /* the model began a new page ("<PAGE>" in multi-page output) */
#define UOCR_EVENT_BLOCK 3 /* a complete layout block "<|det|>label [x1, y1, x2, y2]<|/det|>" */

typedef struct uocr_event {
    uint32_t struct_size; /* sizeof(uocr_event) of the library: check before reading newer fields */
    int32_t type;         /* UOCR_EVENT_* */
    int32_t token_id;     /* TOKEN: the id; otherwise -1 */
    int32_t page;         /* PAGE and BLOCK: 0-based page index; TOKEN: 0 */
    const char * text;    /* TOKEN: the UTF-8 bytes this token completes (may be empty while a
                             character is split over tokens; may contain NUL bytes); else "".
                             Concatenated, the deltas are the untrimmed transcript, except for a
                             U+FFFD the end of the stream adds for a cut-off character */
    size_t text_len;      /* bytes at `text` (text[text_len] is a NUL) */
    const char * label;   /* BLOCK: the label (NUL-terminated); otherwise "" */
    int32_t box[4];       /* BLOCK: x1, y1, x2, y2 in the model's 0..999 coordinates */
    int32_t box_px[4];    /* BLOCK: the same box in the page image's pixels */
    /* append-only below this line */
} uocr_event;

/* Called on the thread running uocr_session_run. The event and its strings are valid only during
 * the call. Return 0 to continue, non-zero to cancel the run. The callback must not call any
 * function on the same session (those calls return UOCR_E_BUSY); other sessions and the model
 * may be used. It must not throw/unwind/longjmp through the library. */
typedef int32_t (*uocr_event_callback)(const uocr_event * event, void * user_data);

/* ---- running -------------------------------------------------------------------------------- */

#define UOCR_STOP_EOS 0           /* the model ended the transcript */
#define UOCR_STOP_MAX_TOKENS 1    /* max_new_tokens reached */
#define UOCR_STOP_CONTEXT_LIMIT 2 /* the model's context length reached */
#define UOCR_STOP_LOOP 3          /* the loop guard stopped a degenerate repetition */
#define UOCR_STOP_CANCELLED 4     /* the event callback returned non-zero */
#define UOCR_STOP_NO_TOKEN 5      /* every token was banned (n-gram rule) */
#define UOCR_STOP_TIME_BUDGET 6   /* (API 10) page_time_budget_seconds ran out */

/* Static name of a UOCR_STOP_* value ("eos", "max_tokens", ...); "unknown" otherwise. */
UOCR_API const char * uocr_stop_reason_string(int32_t stop_reason);

typedef struct uocr_run_summary {
    uint32_t struct_size;        /* set by the caller (uocr_run_summary_init) */
    int32_t stop_reason;         /* UOCR_STOP_* */
    int32_t empty;               /* 1 when the transcript is empty after trimming, else 0 */
    int32_t reserved0;
    int64_t pages;
    int64_t visual_tokens;
    int64_t prompt_tokens;       /* visual tokens included */
    int64_t generated_tokens;    /* EOS not counted */
    double vision_seconds;
    double prefill_seconds;
    double decode_seconds;
    uint64_t reference_kv_bytes; /* keys/values of the prompt, held for the whole run */
    uint64_t window_kv_bytes;    /* keys/values of generated tokens held at the end */
    uint64_t kv_allocated_bytes; /* storage reserved for both */
    uint64_t peak_kv_bytes;      /* largest reference + window seen during the run */
    uint64_t text_len;           /* bytes of the transcript (uocr_session_text) */
    /* ---- UOCR_RUN_SUMMARY_MIN_SIZE ends here; a caller with a shorter struct gets the fields above ----
     * API 3: working memory besides the KV cache (vision and decoder workspaces; on Vulkan/CUDA
     * the device buffers allocated for activations), as the engines count their own buffers. */
    uint64_t scratch_bytes;      /* held at the end of the run */
    uint64_t peak_scratch_bytes; /* largest held during the run */
    uint64_t peak_bytes;         /* largest kv_allocated_bytes + scratch_bytes at one moment of the run */
    /* API 12: the arithmetic the run's large products computed in: BF16 only where it was asked
     * for and the backend and CPU have it, else F32. */
    int32_t precision;           /* UOCR_PRECISION_* */
    int32_t reserved_api12;
    /* API 14: draft decoding (uocr_session_params.draft). Without drafts there is one pass per
     * generated token fed back to the decoder: generated_tokens, one less when the run stopped
     * at a limit before feeding its last token (max_new_tokens, time budget, cancel), and after
     * a resume only those since the checkpoint. */
    int64_t decode_passes;       /* decoder passes of the generation: steps and draft verifications */
    int64_t drafted_tokens;      /* tokens the drafts proposed */
    int64_t accepted_tokens;     /* proposed tokens that were the tokens decoded */
    /* append-only below this line */
} uocr_run_summary;

#define UOCR_RUN_SUMMARY_MIN_SIZE ((uint32_t)offsetof(uocr_run_summary, scratch_bytes))

/* Fills defaults into min(struct_size, sizeof(uocr_run_summary)) bytes of `summary` and sets its
 * struct_size to that count (thread-safe; NULL is ignored). */
UOCR_API void uocr_run_summary_init_sized(uocr_run_summary * summary, uint32_t struct_size);
#define uocr_run_summary_init(summary) uocr_run_summary_init_sized((summary), (uint32_t)sizeof(*(summary)))
/* API 1-2 entry point kept for binaries built against those headers: fills the API-2 layout. */
UOCR_API void (uocr_run_summary_init)(uocr_run_summary * summary);

/* Transcribes the pages added so far (each run starts afresh; pages stay for the next run).
 * `callback` may be NULL; `summary` may be NULL, else min(struct_size, sizeof) bytes are written
 * (struct_size below UOCR_RUN_SUMMARY_MIN_SIZE is INVALID_ARGUMENT, checked before running).
 * Returns UOCR_OK when the run ended by itself (EOS, max tokens, context limit, loop guard, no
 * token: see summary->stop_reason). When the callback returns non-zero, the run stops after that
 * event and returns UOCR_E_CANCELLED; the summary (stop_reason UOCR_STOP_CANCELLED) and the
 * partial transcript are still filled in, and the session stays usable. On any other error the
 * summary is untouched and the session's transcript is empty.
 * Errors: INVALID_HANDLE, BUSY, INVALID_ARGUMENT (no pages, bad summary size, bad prompt),
 * INVALID_MODEL (the weights produced NaN or +inf logits, naming the generated token),
 * UNSUPPORTED, OUT_OF_MEMORY, CANCELLED. Thread-safe on distinct sessions; runs on the calling
 * thread (the callback too).
 *
 * Checkpoints (checkpoint_path set): the run saves its state there after the prefill, at every
 * page boundary and every checkpoint_every_tokens tokens, atomically (a crash leaves the last
 * complete checkpoint). With resume = 1 the run continues from it instead: the events after the
 * checkpoint are exactly those an uninterrupted run would have sent, and uocr_session_text holds
 * the text generated since the checkpoint (the caller keeps what came before, e.g. in its output
 * file cut back to the bytes it had written when the checkpoint was taken). The checkpoint names
 * the model, the parameters and the pages (for page callbacks only their count): a mismatch is
 * INVALID_ARGUMENT, a damaged or missing file IO, each with a message saying what differs. The
 * file is left in place when the run ends; delete it when done. */
UOCR_API uocr_status uocr_session_run(uocr_session * session, uocr_event_callback callback, void * user_data,
                                      uocr_run_summary * summary);

/* ---- pages handed over one at a time --------------------------------------------------------- */

/* A page being handed over, valid only inside the uocr_page_callback that received it. */
typedef struct uocr_page uocr_page;

/* Asked for page `index` (0, 1, ... in order, each once) when the session needs it, on the thread
 * running uocr_session_run_pages. Set the page with one uocr_page_set_* call and return 0;
 * return non-zero to abort the run (it fails with UOCR_E_CANCELLED). The same rules as for
 * uocr_event_callback apply (no calls on the session, no unwinding). */
typedef int32_t (*uocr_page_callback)(int64_t index, uocr_page * page, void * user_data);

/* Set the page from a file, encoded bytes or raw RGB rows, exactly as the uocr_session_add_image_*
 * functions do (same formats, decode limit, errors). The data is decoded or copied before the call
 * returns. A second call replaces the page. Errors: INVALID_HANDLE (not a live page: outside its
 * callback), INVALID_ARGUMENT, IO, INVALID_IMAGE, OUT_OF_MEMORY; the run then fails with the same
 * status unless a later call sets the page. CANCELLED: the run's page_time_budget_seconds ran out
 * before or while the file or bytes were decoded; the run then stops with UOCR_STOP_TIME_BUDGET. */
UOCR_API uocr_status uocr_page_set_file(uocr_page * page, const char * path);
UOCR_API uocr_status uocr_page_set_encoded(uocr_page * page, const void * data, size_t size);
UOCR_API uocr_status uocr_page_set_rgb(uocr_page * page, const uint8_t * rgb, int32_t width, int32_t height,
                                       size_t stride);
/* (API 14) The page's draft text, as uocr_session_set_page_draft (copied; size 0: none). The
 * session keeps the drafts of the few pages it reads around the current one only.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (text NULL with size > 0), OUT_OF_MEMORY. */
UOCR_API uocr_status uocr_page_set_draft(uocr_page * page, const char * text, size_t size);

/* Transcribes a document of `page_count` pages (1 to INT32_MAX: events number pages in int32_t)
 * that `pages` hands over one at a time, never all at once: with page groups only pages_per_group
 * pages are held, so a book of any length runs in constant memory. The pages added with
 * uocr_session_add_image_* are not used (nor changed). Otherwise exactly uocr_session_run: events,
 * summary, text, checkpoints, errors (plus those of the page callback above; INVALID_ARGUMENT for
 * a NULL `pages`, a count out of range, or, before the first token, more pages than the
 * positions allow). Thread-safe on distinct sessions. */
UOCR_API uocr_status uocr_session_run_pages(uocr_session * session, int64_t page_count, uocr_page_callback pages,
                                            void * pages_user_data, uocr_event_callback callback, void * user_data,
                                            uocr_run_summary * summary);

/* The transcript of the last run (whitespace-trimmed as upstream does; "" before any run). Sets
 * *out_len (may be NULL) to its length in bytes, without the terminating NUL. With buf == NULL
 * and capacity == 0 it only reports the length (UOCR_OK). Otherwise copies the text and a NUL
 * when capacity >= length + 1 (UOCR_OK), else returns UOCR_E_BUFFER_TOO_SMALL and leaves buf
 * untouched. The text may contain NUL bytes: use the length.
 * Errors: INVALID_HANDLE, BUSY, INVALID_ARGUMENT (buf NULL with capacity > 0),
 * BUFFER_TOO_SMALL. Thread-safe on distinct sessions. */
UOCR_API uocr_status uocr_session_text(const uocr_session * session, char * buf, size_t capacity, size_t * out_len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* UOCR_H */
