"""ctypes binding of the uocr C ABI (c_api/uocr.h). Standard library only.

    import uocr
    with uocr.Model("models/tiny") as model, model.session(max_new_tokens=512) as s:
        s.add_image_file("page.png")            # or add_image_bytes(b"...png..."), add_image_rgb(...)
        summary = s.run(on_event=lambda e: print(e.text.decode(errors="replace"), end=""))
        print(s.text().decode())

    # A document of any length, pages handed over one at a time (a path, encoded bytes or
    # (rgb, width, height)), never all held:
    with uocr.Model("models/tiny") as model, model.session(pages_per_group=4) as s:
        summary = s.run_pages(n_pages, lambda index: "page-%d.png" % index, on_event=...)

The library is found through $UOCR_LIBRARY (a path to libuocr.so), else ctypes.util.find_library.
Errors raise uocr.Error with .status and the library's message. Text is returned as bytes (the
library's exact UTF-8; a transcript may even contain NUL bytes).
"""

import ctypes
import ctypes.util
import os

API_VERSION = 14  # UOCR_API_VERSION of the header this binding mirrors

OK = 0
E_INVALID_ARGUMENT = -1
E_IO = -2
E_INVALID_MODEL = -3
E_INVALID_IMAGE = -4
E_UNSUPPORTED = -5
E_OUT_OF_MEMORY = -6
E_TOKENIZER = -7
E_CANCELLED = -8
E_INTERNAL = -9
E_INVALID_HANDLE = -100
E_VERSION_MISMATCH = -101
E_BUSY = -102
E_BUFFER_TOO_SMALL = -103

IMAGE_MODE_BASE = 0
IMAGE_MODE_GUNDAM = 1

BACKEND_CPU = 0
BACKEND_VULKAN = 1
BACKEND_CUDA = 2

REFERENCE_DENSE = 0
REFERENCE_SPARSE = 1

POSITIONS_LIMIT = 0
POSITIONS_EXTRAPOLATE = 1
POSITIONS_GROUP = 2  # every page group at a G-page document's positions (API 6)

MODEL_DEFAULTS_USE = 0  # page-group fields left 0 take the model folder's uocr_decode.json (API 7)
MODEL_DEFAULTS_IGNORE = 1  # the library's defaults, whatever the folder says

SLIDE_KV_DEFAULT = 0  # the model folder's uocr_decode.json, else reuse (API 8)
SLIDE_KV_REUSE = 1  # a slide keeps the kept pages' and the window's KV as they are
SLIDE_KV_RECOMPUTE = 2  # a slide computes the held pages, prompt tail and window again

PRECISION_F32 = 0   # float32 products, the reference
PRECISION_BF16 = 1  # bf16 inputs, float32 sums (runs F32 where the backend or CPU has no bf16)

DRAFT_ON = 0   # verify the pages' draft texts where there are any (API 14)
DRAFT_OFF = 1  # one decoder pass per token

CUDA_GRAPHS_DEFAULT = 0  # on
CUDA_GRAPHS_ON = 1
CUDA_GRAPHS_OFF = 2

EVENT_TOKEN = 1
EVENT_PAGE = 2
EVENT_BLOCK = 3

STOP_EOS, STOP_MAX_TOKENS, STOP_CONTEXT_LIMIT, STOP_LOOP, STOP_CANCELLED, STOP_NO_TOKEN, STOP_TIME_BUDGET = range(7)


class ModelParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("api_version", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("reserved0", ctypes.c_uint32)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("hidden_size", ctypes.c_int32), ("layers", ctypes.c_int32),
                ("vocab_size", ctypes.c_int32), ("sliding_window", ctypes.c_int32), ("image_size", ctypes.c_int32),
                ("max_positions", ctypes.c_int32), ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32),
                ("image_token_id", ctypes.c_int32)]


class SessionParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("image_mode", ctypes.c_int32),
                ("max_new_tokens", ctypes.c_int64), ("prompt", ctypes.c_char_p), ("window", ctypes.c_int32),
                ("temperature", ctypes.c_float), ("top_p", ctypes.c_float), ("ngram_size", ctypes.c_int32),
                ("seed", ctypes.c_uint64), ("ngram_window", ctypes.c_int32), ("loop_guard", ctypes.c_int32),
                ("max_image_pixels", ctypes.c_uint64),
                # API version 2
                ("backend", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("pages_per_group", ctypes.c_int32), ("overlap_pages", ctypes.c_int32),
                ("page_fallback_tokens", ctypes.c_int32), ("reference_mode", ctypes.c_int32),
                ("reference_pages", ctypes.c_int32), ("reference_blocks", ctypes.c_int32),
                ("reference_block_tokens", ctypes.c_int32), ("positions", ctypes.c_int32),
                ("checkpoint_path", ctypes.c_char_p), ("checkpoint_every_tokens", ctypes.c_int32),
                ("resume", ctypes.c_int32),
                # API version 4
                ("max_batch", ctypes.c_int32), ("max_batch_wait_us", ctypes.c_int32),
                ("reference_gate_fan_out", ctypes.c_int32), ("reference_gate_beam", ctypes.c_int32),
                # API version 5
                ("cuda_graphs", ctypes.c_int32),
                # API version 7
                ("model_defaults", ctypes.c_int32),
                # API version 8
                ("slide_kv", ctypes.c_int32),
                # API version 9
                ("max_image_bytes", ctypes.c_uint64), ("max_jpeg_scans", ctypes.c_int32),
                # API version 10
                ("page_time_budget_seconds", ctypes.c_double),
                # API version 11
                ("precision", ctypes.c_int32),
                # API version 14
                ("draft", ctypes.c_int32), ("draft_max_tokens", ctypes.c_int32), ("reserved_api14", ctypes.c_int32)]


class EngineParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("backend", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("max_batch", ctypes.c_int32), ("max_batch_wait_us", ctypes.c_int32), ("cuda_graphs", ctypes.c_int32),
                ("precision", ctypes.c_int32), ("reserved0", ctypes.c_int32)]


class EngineInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("backend", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("precision", ctypes.c_int32), ("device", ctypes.c_char * 128), ("driver", ctypes.c_char * 64)]


class EventStruct(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("type", ctypes.c_int32), ("token_id", ctypes.c_int32),
                ("page", ctypes.c_int32), ("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t),
                ("label", ctypes.c_char_p), ("box", ctypes.c_int32 * 4), ("box_px", ctypes.c_int32 * 4)]


class RunSummary(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("stop_reason", ctypes.c_int32), ("empty", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("pages", ctypes.c_int64), ("visual_tokens", ctypes.c_int64),
                ("prompt_tokens", ctypes.c_int64), ("generated_tokens", ctypes.c_int64),
                ("vision_seconds", ctypes.c_double), ("prefill_seconds", ctypes.c_double),
                ("decode_seconds", ctypes.c_double), ("reference_kv_bytes", ctypes.c_uint64),
                ("window_kv_bytes", ctypes.c_uint64), ("kv_allocated_bytes", ctypes.c_uint64),
                ("peak_kv_bytes", ctypes.c_uint64), ("text_len", ctypes.c_uint64),
                ("scratch_bytes", ctypes.c_uint64), ("peak_scratch_bytes", ctypes.c_uint64),
                ("peak_bytes", ctypes.c_uint64),
                # API version 12
                ("precision", ctypes.c_int32), ("reserved_api12", ctypes.c_int32),
                # API version 14
                ("decode_passes", ctypes.c_int64), ("drafted_tokens", ctypes.c_int64), ("accepted_tokens", ctypes.c_int64)]


EVENT_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(EventStruct), ctypes.c_void_p)
PAGE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


class Event:
    """One streamed event, copied out of the library's struct (valid after the callback)."""

    __slots__ = ("type", "token_id", "page", "text", "label", "box", "box_px")

    def __init__(self, e):
        self.type = e.type
        self.token_id = e.token_id
        self.page = e.page
        self.text = ctypes.string_at(e.text, e.text_len) if e.text_len else b""
        self.label = e.label or b""
        self.box = tuple(e.box)
        self.box_px = tuple(e.box_px)


class Error(Exception):
    def __init__(self, status, message):
        super().__init__("%s (%s)" % (message, _lib.uocr_status_string(status).decode()))
        self.status = status
        self.message = message


class Cancelled(Error):
    """The event callback stopped the run; .summary and the session's text are the partial result."""

    def __init__(self, status, message, summary):
        super().__init__(status, message)
        self.summary = summary


def _load_library():
    path = os.environ.get("UOCR_LIBRARY") or ctypes.util.find_library("uocr")
    if not path:
        raise OSError("libuocr not found: set UOCR_LIBRARY to the path of libuocr.so")
    lib = ctypes.CDLL(path)
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    sigs = {
        "uocr_version_string": (ctypes.c_char_p, []),
        "uocr_api_version": (ctypes.c_int32, []),
        "uocr_build_info": (ctypes.c_char_p, []),
        "uocr_status_string": (ctypes.c_char_p, [ctypes.c_int32]),
        "uocr_stop_reason_string": (ctypes.c_char_p, [ctypes.c_int32]),
        "uocr_last_error": (ctypes.c_char_p, []),
        "uocr_model_params_init_sized": (None, [P(ModelParams), ctypes.c_uint32]),
        "uocr_model_load": (ctypes.c_int32, [ctypes.c_char_p, P(ModelParams), P(vp)]),
        "uocr_model_free": (None, [vp]),
        "uocr_model_info_init_sized": (None, [P(ModelInfo), ctypes.c_uint32]),
        "uocr_model_get_info": (ctypes.c_int32, [vp, P(ModelInfo)]),
        "uocr_session_params_init_sized": (None, [P(SessionParams), ctypes.c_uint32]),
        "uocr_session_create": (ctypes.c_int32, [vp, P(SessionParams), P(vp)]),
        "uocr_engine_params_init_sized": (None, [P(EngineParams), ctypes.c_uint32]),
        "uocr_engine_open": (ctypes.c_int32, [vp, P(EngineParams), P(vp)]),
        "uocr_engine_free": (None, [vp]),
        "uocr_engine_info_init_sized": (None, [P(EngineInfo), ctypes.c_uint32]),
        "uocr_engine_get_info": (ctypes.c_int32, [vp, P(EngineInfo)]),
        "uocr_session_create_on_engine": (ctypes.c_int32, [vp, P(SessionParams), P(vp)]),
        "uocr_session_free": (None, [vp]),
        "uocr_session_last_error": (ctypes.c_char_p, [vp]),
        "uocr_session_add_image_file": (ctypes.c_int32, [vp, ctypes.c_char_p]),
        "uocr_session_add_image_encoded": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "uocr_session_add_image_rgb": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                                        ctypes.c_size_t]),
        "uocr_session_clear_pages": (ctypes.c_int32, [vp]),
        "uocr_session_page_count": (ctypes.c_int32, [vp, P(ctypes.c_int32)]),
        "uocr_run_summary_init_sized": (None, [P(RunSummary), ctypes.c_uint32]),
        "uocr_session_run": (ctypes.c_int32, [vp, EVENT_CALLBACK, vp, P(RunSummary)]),
        "uocr_session_text": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]),
        "uocr_page_set_file": (ctypes.c_int32, [vp, ctypes.c_char_p]),
        "uocr_page_set_draft": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "uocr_session_set_page_draft": (ctypes.c_int32, [vp, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]),
        "uocr_page_set_encoded": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "uocr_page_set_rgb": (ctypes.c_int32, [vp, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_size_t]),
        "uocr_session_run_pages": (ctypes.c_int32, [vp, ctypes.c_int64, PAGE_CALLBACK, vp, EVENT_CALLBACK, vp,
                                                    P(RunSummary)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    if lib.uocr_api_version() < API_VERSION:
        raise OSError("libuocr %s implements API version %d; this binding needs %d"
                      % (lib.uocr_version_string().decode(), lib.uocr_api_version(), API_VERSION))
    return lib


_lib = _load_library()


def version():
    return _lib.uocr_version_string().decode()


def build_info():
    return _lib.uocr_build_info().decode()


def _init(init_sized, struct):
    """Defaults from the library into `struct`, never more bytes than this binding's layout holds."""
    init_sized(ctypes.byref(struct), ctypes.sizeof(struct))
    if isinstance(struct, ModelParams):
        struct.api_version = API_VERSION  # the layout this binding was written against


def _check(status, message_fn):
    if status != OK:
        raise Error(status, message_fn().decode(errors="replace"))


def _path(p):
    return os.fsencode(p) if not isinstance(p, bytes) else p


def _rgb(rgb, width, height, stride, what):
    """The pixels as bytes, refused (ValueError) when shorter than height rows of width pixels."""
    rgb = bytes(rgb)
    need = (stride or 3 * width) * (height - 1) + 3 * width if height > 0 and width > 0 else 0
    if len(rgb) < need:
        raise ValueError("%srgb buffer has %d bytes, needs %d" % (what, len(rgb), need))
    return rgb


def _sealed(fn, raised):
    """fn as a C callback: an exception it raises is kept in `raised` and reported to C as 1, so
    that nothing unwinds through C."""
    def call(*args):
        try:
            return fn(*args)
        except BaseException as exc:
            raised.append(exc)
            return 1
    return call


class _Handle:
    """A library handle freed by close(), on garbage collection, or at the end of a with block."""

    _free = None  # the uocr_*_free function

    def __init__(self):
        self._h = ctypes.c_void_p()

    def close(self):
        if self._h.value:
            type(self)._free(self._h)
            self._h = ctypes.c_void_p()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Handle):
    """A loaded model folder; immutable, may be shared by threads and sessions."""

    _free = _lib.uocr_model_free

    def __init__(self, directory):
        super().__init__()
        params = ModelParams()
        _init(_lib.uocr_model_params_init_sized, params)
        handle = ctypes.c_void_p()
        _check(_lib.uocr_model_load(_path(directory), ctypes.byref(params), ctypes.byref(handle)),
               _lib.uocr_last_error)
        self._h = handle

    def info(self):
        info = ModelInfo()
        _init(_lib.uocr_model_info_init_sized, info)
        _check(_lib.uocr_model_get_info(self._h, ctypes.byref(info)), _lib.uocr_last_error)
        return info

    def session(self, **params):
        return Session(self, **params)


def _set_fields(struct, kw, what):
    """The keyword parameters into `struct`'s fields of the same name; bools as the header says."""
    for key, value in kw.items():
        if key not in dict(type(struct)._fields_) or key in ("struct_size", "reserved0", "reserved_api14"):
            raise TypeError("unknown %s parameter %r" % (what, key))
        if key in ("prompt", "checkpoint_path") and isinstance(value, str):
            value = os.fsencode(value) if key == "checkpoint_path" else value.encode()
        if key in ("loop_guard", "resume"):
            value = 1 if value else 0
        if key == "draft" and isinstance(value, bool):  # False is OFF, not 0 (the default, on)
            value = DRAFT_ON if value else DRAFT_OFF
        if key == "model_defaults" and isinstance(value, bool):
            value = MODEL_DEFAULTS_USE if value else MODEL_DEFAULTS_IGNORE
        if key == "cuda_graphs" and isinstance(value, bool):  # False is OFF, not 0 (the default, on)
            value = CUDA_GRAPHS_ON if value else CUDA_GRAPHS_OFF
        setattr(struct, key, value)


class Engine(_Handle):
    """A model opened on one backend device (API 13): the device, the weights uploaded to it and,
    with max_batch > 1, the batcher of its sessions' decode steps. Sessions made by session() share
    all of it; may be shared by threads.

    Keyword parameters are the fields of uocr_engine_params: backend, device_index, max_batch,
    max_batch_wait_us, cuda_graphs (a CUDA_GRAPHS_* value or a bool) and precision.
    """

    _free = _lib.uocr_engine_free

    def __init__(self, model, **kw):
        super().__init__()
        params = EngineParams()
        _init(_lib.uocr_engine_params_init_sized, params)
        _set_fields(params, kw, "engine")
        handle = ctypes.c_void_p()
        _check(_lib.uocr_engine_open(model._h, ctypes.byref(params), ctypes.byref(handle)), _lib.uocr_last_error)
        self._h = handle
        self._model = model

    def info(self):
        info = EngineInfo()
        _init(_lib.uocr_engine_info_init_sized, info)
        _check(_lib.uocr_engine_get_info(self._h, ctypes.byref(info)), _lib.uocr_last_error)
        return info

    def session(self, **params):
        return Session(self, **params)


class Session(_Handle):
    """Pages plus one transcription at a time; use from one thread at a time. Made on a Model (the
    session's engine fields choose the device) or on an Engine (they are left out, or the engine's).

    Keyword parameters are the fields of uocr_session_params (max_new_tokens, prompt, window,
    temperature, top_p, seed, ngram_size, ngram_window, loop_guard, image_mode, max_image_pixels,
    backend, device_index, pages_per_group, overlap_pages, page_fallback_tokens, reference_mode,
    reference_pages, reference_blocks, reference_block_tokens, positions, checkpoint_path,
    checkpoint_every_tokens, resume, max_batch, max_batch_wait_us, reference_gate_fan_out,
    reference_gate_beam, cuda_graphs, model_defaults, slide_kv, max_image_bytes, max_jpeg_scans, page_time_budget_seconds,
    precision, draft, draft_max_tokens). draft takes a DRAFT_* value or a bool; cuda_graphs a CUDA_GRAPHS_* value or a
    bool (True: on, False: off); model_defaults a MODEL_DEFAULTS_* value or a bool (True: use);
    slide_kv a SLIDE_KV_* value.
    """

    _free = _lib.uocr_session_free

    def __init__(self, model, **kw):
        super().__init__()
        params = SessionParams()
        _init(_lib.uocr_session_params_init_sized, params)
        _set_fields(params, kw, "session")
        handle = ctypes.c_void_p()
        create = _lib.uocr_session_create_on_engine if isinstance(model, Engine) else _lib.uocr_session_create
        _check(create(model._h, ctypes.byref(params), ctypes.byref(handle)), _lib.uocr_last_error)
        self._h = handle
        self._model = model  # not required by the library (it keeps its own reference); tidy lifetime

    def _check(self, status):
        _check(status, lambda: _lib.uocr_session_last_error(self._h))

    def add_image_file(self, path):
        self._check(_lib.uocr_session_add_image_file(self._h, _path(path)))

    def add_image_bytes(self, data):
        data = bytes(data)
        self._check(_lib.uocr_session_add_image_encoded(self._h, data, len(data)))

    def add_image_rgb(self, rgb, width, height, stride=0):
        rgb = _rgb(rgb, width, height, stride, "")
        self._check(_lib.uocr_session_add_image_rgb(self._h, rgb, width, height, stride))

    def set_page_draft(self, index, text):
        """Page `index`'s draft text (str or UTF-8 bytes; "" removes it): what another reader gives
        for that page. Decoding verifies it as a draft: the same transcript, fewer decoder passes
        where it is right (the run's summary: decode_passes, drafted_tokens, accepted_tokens)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        self._check(_lib.uocr_session_set_page_draft(self._h, index, data, len(data)))

    def clear_pages(self):
        self._check(_lib.uocr_session_clear_pages(self._h))

    def page_count(self):
        n = ctypes.c_int32()
        self._check(_lib.uocr_session_page_count(self._h, ctypes.byref(n)))
        return n.value

    def run(self, on_event=None):
        """Runs the pages. on_event(Event) returning True cancels (raises Cancelled).

        An exception raised by on_event cancels the run and is re-raised here."""
        return self._run(lambda callback, summary: _lib.uocr_session_run(self._h, callback, None, summary), on_event, [])

    def run_pages(self, page_count, get_page, on_event=None, get_draft=None):
        """Runs a document of page_count pages that get_page(index) hands over one at a time, when
        the session needs it: a path (str or os.PathLike), encoded image bytes, or a tuple
        (rgb_bytes, width, height[, stride]). get_draft(index), when given, returns the page's draft
        text (str, bytes or None; see set_page_draft). Pages added with add_image_* are not used.
        Events, cancellation and errors as run(); an exception raised by get_page or get_draft is
        re-raised here."""
        raised = []

        def set_page(index, page, _user):
            draft = get_draft(index) if get_draft else None
            if draft:
                draft = draft.encode() if isinstance(draft, str) else bytes(draft)
                _lib.uocr_page_set_draft(page, draft, len(draft))
            data = get_page(index)
            if isinstance(data, (bytes, bytearray, memoryview)):
                data = bytes(data)
                _lib.uocr_page_set_encoded(page, data, len(data))
            elif isinstance(data, tuple):
                width, height = data[1], data[2]
                stride = data[3] if len(data) > 3 else 0
                rgb = _rgb(data[0], width, height, stride, "page %d: " % index)
                _lib.uocr_page_set_rgb(page, rgb, width, height, stride)
            else:
                _lib.uocr_page_set_file(page, _path(data))
            return 0  # a page that failed to decode makes the run fail with its status and message

        pages = PAGE_CALLBACK(_sealed(set_page, raised))
        return self._run(lambda callback, summary: _lib.uocr_session_run_pages(
            self._h, page_count, pages, None, callback, None, summary), on_event, raised)

    def _run(self, start, on_event, raised):
        def forward(event_ptr, _user):
            return 1 if on_event(Event(event_ptr.contents)) else 0

        callback = EVENT_CALLBACK(_sealed(forward, raised)) if on_event else EVENT_CALLBACK()
        summary = RunSummary()
        _init(_lib.uocr_run_summary_init_sized, summary)
        status = start(callback, ctypes.byref(summary))
        if raised:
            raise raised[0]
        if status == E_CANCELLED:
            raise Cancelled(status, _lib.uocr_session_last_error(self._h).decode(errors="replace"), summary)
        self._check(status)
        return summary

    def text(self):
        """The last run's transcript as bytes (exact UTF-8)."""
        n = ctypes.c_size_t()
        self._check(_lib.uocr_session_text(self._h, None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        self._check(_lib.uocr_session_text(self._h, buf, n.value + 1, ctypes.byref(n)))
        return buf.raw[: n.value]


def stop_reason_name(stop_reason):
    return _lib.uocr_stop_reason_string(stop_reason).decode()
